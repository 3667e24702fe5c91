// Opens a store with a disk tier in the directory given, Puts four values
// with a plan, reads them back from RAM, closes, reopens and reads them from
// disk: what a C++ user does first. Prints "ok" and exits 0 when every value
// comes back as it was put.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "opt4store/read_sink.h"
#include "opt4store/store.h"

namespace {

int Fail(const char* what, const opt4store::Status& s) {
  std::fprintf(stderr, "%s: %s\n", what, s.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  const std::string path = std::string(argv[1]) + "/store";
  opt4store::StoreOptions options;
  options.dataset_size = 4;
  options.ram = uint64_t{1} << 20;
  options.disk = uint64_t{8} << 20;
  options.create_if_missing = true;
  for (int run = 0; run < 2; ++run) {
    std::unique_ptr<opt4store::Store> store;
    opt4store::Status s = opt4store::Store::Open(options, path, &store);
    if (!s.ok()) return Fail("open", s);
    for (opt4store::ItemId id = 0; id < 4; ++id) {
      const std::string payload(1000 + id, static_cast<char>('a' + id));
      if (run == 0 && !(s = store->Put(opt4store::kNoPosition, id, "meta", payload)).ok()) {
        return Fail("put", s);
      }
      opt4store::StringSink sink;
      opt4store::GetSource source;
      if (!(s = store->Get(opt4store::kNoPosition, id, &sink, &source)).ok()) {
        return Fail("get", s);
      }
      if (sink.meta != "meta" || sink.payload != payload) {
        std::fprintf(stderr, "run %d: item %u came back different\n", run, id);
        return 1;
      }
      // Without a plan nothing is prefetched: after the reopen, the disk.
      const auto expected = run == 0 ? opt4store::GetSource::kRam : opt4store::GetSource::kDisk;
      if (source != expected) {
        std::fprintf(stderr, "run %d: item %u from source %d\n", run, id,
                     static_cast<int>(source));
        return 1;
      }
    }
    if (!(s = store->Close()).ok()) return Fail("close", s);
  }
  std::printf("ok\n");
  return 0;
}
