// store_test_util.h: helpers shared by the Store's tests (store_test.cc,
// store_multiprocess_test.cc):
//   - sample values that are a pure function of the id, so that any process
//     can tell a right value from a wrong one without a copy;
//   - a scratch store directory with its own shared-memory prefix, which
//     removes the /dev/shm objects a killed owner leaves behind;
//   - a plain reader loop (Get; on NotFound, Put) that tallies what came
//     back instead of asserting, so that forked children can use it;
//   - a brute-force Belady MIN with bypass, independent of the engine.
//
// Header-only. Nothing here asserts (no Catch2): forked children use it too.
#ifndef OPT4STORE_TESTS_STORE_TEST_UTIL_H_
#define OPT4STORE_TESTS_STORE_TEST_UTIL_H_

#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "disk_test_util.h"
#include "opt4store/plan.h"
#include "opt4store/read_sink.h"
#include "opt4store/status.h"
#include "opt4store/store.h"
#include "test_util.h"

namespace opt4store_test {

using opt4store::GetSource;
using opt4store::ItemId;
using opt4store::Status;
using opt4store::Store;

// ---------------------------------------------------------------- values

// Payload sizes of a test: min_bytes + (a hash of the id) % (span + 1).
struct ValueShape {
  uint64_t min_bytes = 1024;
  uint64_t span = 0;  // 0: every payload is min_bytes (uniform sizes)
};

inline uint64_t HashId(ItemId id, uint64_t salt) {
  uint64_t state = (uint64_t{id} + 1) * 0xD1B54A32D192ED03ull ^ salt;
  return SplitMix64(&state);
}

inline std::string SampleMeta(ItemId id) {
  // Variable length, so that a value of another id differs in size too.
  return "sample=" + std::to_string(id) +
         ";dtype=uint8;tag=" + std::to_string(HashId(id, 7) % 1000);
}

inline std::string SamplePayload(ItemId id, const ValueShape& shape) {
  const uint64_t n = shape.min_bytes + (shape.span == 0 ? 0 : HashId(id, 11) % (shape.span + 1));
  return NoiseBytes(n, HashId(id, 13));
}

inline bool IsSample(ItemId id, const ValueShape& shape, const std::string& meta,
                     const std::string& payload) {
  return meta == SampleMeta(id) && payload == SamplePayload(id, shape);
}

// ---------------------------------------------------------------- plans

// Every id of a plan, in order.
inline Status PlanIds(const opt4store::PlanSpec& spec, std::vector<ItemId>* ids) {
  std::unique_ptr<opt4store::PlanSource> source;
  OPT4STORE_RETURN_IF_ERROR(opt4store::OpenPlanSource(spec, &source));
  ids->clear();
  std::vector<ItemId> chunk(4096);
  for (;;) {
    size_t n = 0;
    OPT4STORE_RETURN_IF_ERROR(source->Read(chunk.data(), chunk.size(), &n));
    if (n == 0) return Status::OK();
    ids->insert(ids->end(), chunk.begin(), chunk.begin() + static_cast<long>(n));
  }
}

inline opt4store::PlanSpec ShufflePlan(uint64_t n, uint64_t epochs, uint64_t seed) {
  opt4store::PlanSpec p;
  p.kind = opt4store::SamplerKind::kShuffle;
  p.dataset_size = n;
  p.epochs = epochs;
  p.seed = seed;
  return p;
}

// A store whose disk tier leaves an item out (Belady's bypass): RAM for one
// item, a disk budget of 1 MiB for two values of kBypassValue (300 KiB,
// uncompressed), and the plan kBypassIds. Item 3, read at 3 and 4, is kept
// by RAM for 4 and left out by the disk tier (nothing it holds is read
// later than never-from-disk); item 1 is evicted for item 2.
inline const std::vector<ItemId> kBypassIds{0, 1, 2, 3, 3, 0, 2, 1, 1};
inline constexpr uint64_t kBypassValueBytes = 300 * 1024;
inline opt4store::StoreOptions BypassOptions(const std::string& shm_prefix) {
  opt4store::StoreOptions o;
  o.shm_prefix = shm_prefix;
  o.dataset_size = 4;
  o.ram_items = 1;
  o.disk = 1024 * 1024;
  o.compression = opt4store::StoreOptions::Compression::kNone;
  opt4store::PlanSpec plan;
  plan.kind = opt4store::SamplerKind::kExplicit;
  plan.dataset_size = 4;
  plan.ids = std::make_shared<const std::vector<ItemId>>(kBypassIds);
  o.plan = plan;
  return o;
}

// The positions that worker w of `workers` reads when batch b of `batch`
// positions goes to worker b % workers (a DataLoader's assignment).
inline std::vector<uint64_t> WorkerPositions(uint64_t total, uint64_t batch, uint64_t workers,
                                             uint64_t w) {
  std::vector<uint64_t> out;
  for (uint64_t p = 0; p < total; ++p) {
    if ((p / batch) % workers == w) out.push_back(p);
  }
  return out;
}

// ---------------------------------------------------------------- Belady

// Hits of Belady's MIN with bypass and a capacity in items, by brute force:
// each next use found by scanning forward, each victim by scanning the
// residents. A miss is bypassed when the id is never read again, or when
// the cache is full and no resident is needed later than it.
inline uint64_t BruteForceBeladyHits(const std::vector<ItemId>& seq, uint64_t capacity) {
  const uint64_t never = seq.size();
  auto next_use = [&](uint64_t t) {
    for (uint64_t u = t + 1; u < seq.size(); ++u) {
      if (seq[u] == seq[t]) return u;
    }
    return never;
  };
  std::vector<ItemId> resident;
  std::vector<uint64_t> resident_next;  // parallel to resident
  uint64_t hits = 0;
  for (uint64_t t = 0; t < seq.size(); ++t) {
    const uint64_t nt = next_use(t);
    size_t at = resident.size();
    for (size_t i = 0; i < resident.size(); ++i) {
      if (resident[i] == seq[t]) at = i;
    }
    if (at < resident.size()) {
      ++hits;
      resident_next[at] = nt;
      continue;
    }
    if (nt == never || capacity == 0) continue;
    if (resident.size() < capacity) {
      resident.push_back(seq[t]);
      resident_next.push_back(nt);
      continue;
    }
    size_t victim = 0;
    for (size_t i = 1; i < resident.size(); ++i) {
      if (resident_next[i] > resident_next[victim]) victim = i;
    }
    if (resident_next[victim] <= nt) continue;  // bypass
    resident[victim] = seq[t];
    resident_next[victim] = nt;
  }
  return hits;
}

// ---------------------------------------------------------------- readers

// What a reader saw. Plain data: children send it through a pipe.
struct ReadTally {
  uint64_t reads = 0;
  uint64_t misses = 0;  // NotFound, then Put
  uint64_t ram = 0;     // OK with GetSource::kRam
  uint64_t disk = 0;    // OK with GetSource::kDisk
  uint64_t wrong = 0;   // OK with bytes that are not the id's value
  uint64_t errors = 0;  // any other status, a Put that failed, a bad source
  int64_t first_wrong_position = -1;
  char error[240] = {0};

  void Add(const ReadTally& o) {
    reads += o.reads;
    misses += o.misses;
    ram += o.ram;
    disk += o.disk;
    wrong += o.wrong;
    errors += o.errors;
    if (first_wrong_position < 0) first_wrong_position = o.first_wrong_position;
    if (error[0] == 0) std::snprintf(error, sizeof error, "%s", o.error);
  }
  std::string ToString() const {
    return "reads " + std::to_string(reads) + ", misses " + std::to_string(misses) + ", ram " +
           std::to_string(ram) + ", disk " + std::to_string(disk) + ", wrong " +
           std::to_string(wrong) + " (first at position " + std::to_string(first_wrong_position) +
           "), errors " + std::to_string(errors) + (error[0] ? std::string(": ") + error : "");
  }
};

inline void NoteError(ReadTally* t, const std::string& what) {
  ++t->errors;
  if (t->error[0] == 0) std::snprintf(t->error, sizeof t->error, "%s", what.c_str());
}

// One read as a DataLoader worker does it: Get(position, id); on NotFound,
// load from the "source" (which takes load_us microseconds, as a decode
// would) and Put. `id` may differ from the plan's (drift).
inline void ReadOne(Store* store, uint64_t position, ItemId id, const ValueShape& shape,
                    ReadTally* t, uint32_t load_us = 0) {
  opt4store::StringSink sink;
  GetSource source = GetSource::kRam;
  const Status s = store->Get(position, id, &sink, &source);
  ++t->reads;
  if (s.IsNotFound()) {
    ++t->misses;
    if (source != GetSource::kMiss) NoteError(t, "NotFound with a source other than kMiss");
    if (load_us > 0) usleep(load_us);
    const Status p = store->Put(position, id, SampleMeta(id), SamplePayload(id, shape));
    if (!p.ok()) NoteError(t, "Put(" + std::to_string(position) + "): " + p.ToString());
    return;
  }
  if (!s.ok()) {
    NoteError(t,
              "Get(" + std::to_string(position) + ", " + std::to_string(id) + "): " + s.ToString());
    return;
  }
  if (source == GetSource::kRam) {
    ++t->ram;
  } else if (source == GetSource::kDisk) {
    ++t->disk;
  } else {
    NoteError(t, "OK with GetSource::kMiss");
  }
  if (!IsSample(id, shape, sink.meta, sink.payload)) {
    ++t->wrong;
    if (t->first_wrong_position < 0) t->first_wrong_position = static_cast<int64_t>(position);
  }
}

// Reads the given positions of `plan` in order.
inline ReadTally ReadPositions(Store* store, const std::vector<ItemId>& plan,
                               const std::vector<uint64_t>& positions, const ValueShape& shape,
                               uint32_t load_us = 0) {
  ReadTally t;
  for (uint64_t p : positions) ReadOne(store, p, plan[p], shape, &t, load_us);
  return t;
}

// Reads positions [begin, end) of `plan` in order.
inline ReadTally ReadRange(Store* store, const std::vector<ItemId>& plan, uint64_t begin,
                           uint64_t end, const ValueShape& shape, uint32_t load_us = 0) {
  ReadTally t;
  for (uint64_t p = begin; p < end; ++p) ReadOne(store, p, plan[p], shape, &t, load_us);
  return t;
}

// ---------------------------------------------------------------- scratch

// A store directory under a fresh TempDir, and a shared-memory prefix of its
// own. On destruction, removes what is left in /dev/shm under the prefix
// (an owner killed with SIGKILL cannot unlink its segments).
class ScratchStore {
 public:
  ScratchStore() {
    static std::atomic<int> counter{0};
    prefix_ = "o4st" + std::to_string(getpid()) + "x" + std::to_string(counter++);
    path_ = dir_.File("store");
  }
  ~ScratchStore() { RemoveShmLeftovers(); }
  ScratchStore(const ScratchStore&) = delete;
  ScratchStore& operator=(const ScratchStore&) = delete;

  const std::string& path() const { return path_; }
  const std::string& prefix() const { return prefix_; }
  const std::string& dir() const { return dir_.path(); }

  // The /dev/shm objects whose names start with the prefix.
  std::vector<std::string> ShmObjects() const {
    std::vector<std::string> out;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator("/dev/shm", ec)) {
      const std::string name = e.path().filename().string();
      if (name.compare(0, prefix_.size(), prefix_) == 0) out.push_back(name);
    }
    return out;
  }
  void RemoveShmLeftovers() const {
    for (const std::string& name : ShmObjects()) {
      std::error_code ec;
      std::filesystem::remove("/dev/shm/" + name, ec);
    }
  }

 private:
  TempDir dir_;
  std::string path_;
  std::string prefix_;
};

// Collects StoreOptions::info_log lines; safe from any thread.
class LogCollector {
 public:
  std::function<void(const std::string&)> Sink() {
    return [this](const std::string& line) {
      std::lock_guard<std::mutex> l(mu_);
      lines_.push_back(line);
    };
  }
  std::vector<std::string> lines() const {
    std::lock_guard<std::mutex> l(mu_);
    return lines_;
  }
  std::string Joined() const {
    std::string all;
    for (const std::string& s : lines()) all += "[" + s + "] ";
    return all;
  }

 private:
  mutable std::mutex mu_;
  std::vector<std::string> lines_;
};

// Every size a message states, in bytes: "123", "123 bytes", "1.50 MiB",
// "2 GiB", "64KiB" ... (a number, then an optional binary or decimal unit).
inline std::vector<double> SizesInText(const std::string& text) {
  std::vector<double> out;
  size_t i = 0;
  while (i < text.size()) {
    if (!std::isdigit(static_cast<unsigned char>(text[i])) ||
        (i > 0 && (std::isalnum(static_cast<unsigned char>(text[i - 1])) || text[i - 1] == '.'))) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < text.size() &&
           (std::isdigit(static_cast<unsigned char>(text[j])) || text[j] == '.')) {
      ++j;
    }
    double v = std::strtod(text.substr(i, j - i).c_str(), nullptr);
    size_t k = j;
    while (k < text.size() && text[k] == ' ') ++k;
    std::string unit;
    while (k < text.size() && std::isalpha(static_cast<unsigned char>(text[k]))) unit += text[k++];
    unit = Lower(unit);
    double scale = 1;
    if (unit == "kib" || unit == "k" || unit == "kb") scale = 1024.0;
    if (unit == "mib" || unit == "m" || unit == "mb") scale = 1024.0 * 1024;
    if (unit == "gib" || unit == "g" || unit == "gb") scale = 1024.0 * 1024 * 1024;
    out.push_back(v * scale);
    i = j;
  }
  return out;
}

}  // namespace opt4store_test

#endif  // OPT4STORE_TESTS_STORE_TEST_UTIL_H_
