// The file layer: the POSIX Env (O_DIRECT, io_uring queues, the LOCK file)
// and the FaultInjectionEnv's rules (ENOSPC after N bytes, EIO on the k-th
// read of a file, short reads), on both File and ReadQueue paths.
#include "engine/base/fault_injection_env.h"

#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "test_util.h"
#include "engine/base/env.h"

namespace opt4store {
namespace {

using opt4store_test::TempDir;

std::string Noise(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

Status WriteAll(File* f, uint64_t offset, const std::string& data) {
  const std::string_view part(data);
  return f->Write(offset, &part, 1);
}

// A 4 KiB-aligned buffer for O_DIRECT.
struct Aligned {
  explicit Aligned(size_t n) {
    REQUIRE(posix_memalign(&p, 4096, n) == 0);
  }
  ~Aligned() { std::free(p); }
  char* data() const { return static_cast<char*>(p); }
  void* p = nullptr;
};

// Reads [offset, offset + length) of each file through a queue, keeping it
// full, and returns what each request reported.
std::vector<std::string> ReadThroughQueue(Env* env, bool io_uring,
                                          const std::vector<File*>& files,
                                          const std::vector<std::pair<uint64_t, size_t>>& ranges,
                                          std::vector<Status>* statuses, unsigned depth = 4) {
  std::unique_ptr<ReadQueue> q;
  ReadQueueOptions qo;
  qo.depth = depth;
  qo.io_uring = io_uring;
  REQUIRE(env->NewReadQueue(qo, &q).ok());
  const size_t n = ranges.size();
  std::vector<ReadRequest> reqs(n);
  std::vector<std::unique_ptr<Aligned>> bufs;
  std::vector<std::string> out(n);
  statuses->assign(n, Status::OK());
  size_t next = 0, done = 0;
  while (done < n) {
    while (next < n && q->in_flight() < q->depth()) {
      bufs.emplace_back(new Aligned(ranges[next].second + 4096));
      reqs[next].file = files[next % files.size()];
      reqs[next].offset = ranges[next].first;
      reqs[next].length = ranges[next].second;
      reqs[next].scratch = bufs.back()->data();
      reqs[next].context = reinterpret_cast<void*>(next);
      q->Submit(&reqs[next]);
      ++next;
    }
    ReadRequest* r = q->WaitOne();
    REQUIRE(r != nullptr);
    const size_t i = reinterpret_cast<size_t>(r->context);
    (*statuses)[i] = r->status;
    out[i].assign(r->scratch, r->result);
    ++done;
  }
  CHECK(q->WaitOne() == nullptr);
  return out;
}

}  // namespace

TEST_CASE("env: files write, read, truncate, sync and list", "[env]") {
  TempDir dir;
  Env* env = Env::Default();
  std::unique_ptr<File> f;
  REQUIRE(env->OpenFile(dir.File("a.seg"), FileOptions(), &f).ok());
  const std::string data = Noise(10000, 1);
  const std::string_view parts[3] = {std::string_view(data).substr(0, 10),
                                     std::string_view(data).substr(10, 0),
                                     std::string_view(data).substr(10)};
  REQUIRE(f->Write(0, parts, 3).ok());
  uint64_t size = 0;
  REQUIRE(f->Size(&size).ok());
  CHECK(size == data.size());
  std::string back(data.size() + 100, '\0');
  size_t got = 0;
  REQUIRE(f->Read(0, back.size(), back.data(), &got).ok());
  CHECK(got == data.size());  // short only at the end of the file
  CHECK(back.substr(0, got) == data);
  REQUIRE(f->Sync().ok());
  REQUIRE(f->Truncate(100).ok());
  REQUIRE(env->GetFileSize(dir.File("a.seg"), &size).ok());
  CHECK(size == 100);
  REQUIRE(env->RenameFile(dir.File("a.seg"), dir.File("b.seg")).ok());
  std::vector<std::string> names;
  REQUIRE(env->GetChildren(dir.path(), &names).ok());
  CHECK(names == std::vector<std::string>{"b.seg"});
  REQUIRE(env->SyncDir(dir.path()).ok());
  REQUIRE(env->DeleteFile(dir.File("b.seg")).ok());
  CHECK(env->DeleteFile(dir.File("b.seg")).IsNotFound());
  CHECK(env->GetFileSize(dir.File("b.seg"), &size).IsNotFound());
}

TEST_CASE("env: aligned reads use O_DIRECT and return the written bytes", "[env]") {
  TempDir dir;  // /tmp: a disk file system here
  Env* env = Env::Default();
  std::unique_ptr<File> f;
  FileOptions fo;
  fo.direct_reads = true;
  REQUIRE(env->OpenFile(dir.File("d.seg"), fo, &f).ok());
  const std::string data = Noise(3 * 4096 + 100, 2);  // does not end on a block
  REQUIRE(WriteAll(f.get(), 0, data).ok());
  CHECK(f->direct_reads());
  Aligned buf(5 * 4096);
  size_t got = 0;
  REQUIRE(f->Read(4096, 4 * 4096, buf.data(), &got).ok());  // aligned, past the end
  CHECK(got == data.size() - 4096);
  CHECK(std::string(buf.data(), got) == data.substr(4096));
  REQUIRE(f->Read(10, 50, buf.data(), &got).ok());  // unaligned: page cache
  CHECK(std::string(buf.data(), got) == data.substr(10, 50));
}

// tmpfs refused O_DIRECT before Linux 6.6; either way the reads must work.
TEST_CASE("env: on tmpfs (O_DIRECT refused on older kernels) reads still work", "[env]") {
  if (!opt4store_test::FileExists("/dev/shm")) return;
  const std::string path = "/dev/shm/opt4store_env_test_" + std::to_string(getpid());
  Env* env = Env::Default();
  {
    std::unique_ptr<File> f;
    FileOptions fo;
    fo.direct_reads = true;
    REQUIRE(env->OpenFile(path, fo, &f).ok());
    const std::string data = Noise(8192, 3);
    REQUIRE(WriteAll(f.get(), 0, data).ok());
    Aligned buf(8192);
    size_t got = 0;
    REQUIRE(f->Read(0, 8192, buf.data(), &got).ok());
    CHECK(std::string(buf.data(), got) == data);
    std::vector<Status> st;
    auto out = ReadThroughQueue(env, true, {f.get()}, {{0, 8192}, {4096, 4096}}, &st);
    CHECK(st[0].ok());
    CHECK(out[0] == data);
    CHECK(out[1] == data.substr(4096));
  }
  REQUIRE(env->DeleteFile(path).ok());
}

TEST_CASE("env: read queues return every request's bytes, with io_uring and with pread", "[env]") {
  TempDir dir;
  Env* env = Env::Default();
  const std::string a = Noise(1 << 20, 4), b = Noise(300000, 5);
  std::unique_ptr<File> fa, fb;
  FileOptions fo;
  fo.direct_reads = true;
  REQUIRE(env->OpenFile(dir.File("a"), fo, &fa).ok());
  REQUIRE(env->OpenFile(dir.File("b"), fo, &fb).ok());
  REQUIRE(WriteAll(fa.get(), 0, a).ok());
  REQUIRE(WriteAll(fb.get(), 0, b).ok());
  std::mt19937 rng(6);
  std::vector<std::pair<uint64_t, size_t>> ranges;
  for (int i = 0; i < 64; ++i) {
    const bool aligned = i % 2 == 0;
    const std::string& src = i % 2 ? b : a;  // files alternate a, b
    uint64_t off = rng() % (src.size() - 1);
    size_t len = 1 + rng() % 70000;
    if (aligned) {
      off &= ~uint64_t{4095};
      len = (len + 4095) & ~size_t{4095};
    }
    ranges.emplace_back(off, len);
  }
  for (bool ring : {true, false}) {
    std::vector<Status> st;
    auto out = ReadThroughQueue(env, ring, {fa.get(), fb.get()}, ranges, &st, 8);
    for (size_t i = 0; i < ranges.size(); ++i) {
      const std::string& src = i % 2 ? b : a;
      INFO("ring " << ring << " request " << i);
      REQUIRE(st[i].ok());
      CHECK(out[i] == src.substr(ranges[i].first, ranges[i].second));  // short at EOF only
    }
  }
  std::unique_ptr<ReadQueue> q;
  ReadQueueOptions qo;
  REQUIRE(env->NewReadQueue(qo, &q).ok());
  CHECK(q->uses_io_uring());  // this machine's kernel has io_uring
  qo.io_uring = false;
  REQUIRE(env->NewReadQueue(qo, &q).ok());
  CHECK_FALSE(q->uses_io_uring());
  qo.depth = 0;
  CHECK(env->NewReadQueue(qo, &q).IsInvalidArgument());
}

TEST_CASE("env: the LOCK file admits one holder and names it", "[env]") {
  TempDir dir;
  Env* env = Env::Default();
  std::unique_ptr<FileLock> first, second;
  REQUIRE(env->LockFile(dir.File("LOCK"), &first).ok());
  const Status s = env->LockFile(dir.File("LOCK"), &second);
  REQUIRE(s.IsBusy());
  CHECK(s.message().find(dir.File("LOCK")) != std::string::npos);
  CHECK(opt4store_test::NamesNumber(s.message(), static_cast<uint64_t>(getpid()),
                                    {dir.path()}));
  first.reset();
  REQUIRE(env->LockFile(dir.File("LOCK"), &second).ok());
}

TEST_CASE("fault injection: ENOSPC after N bytes leaves the prefix and fails", "[fault]") {
  TempDir dir;
  FaultInjectionEnv env;
  std::unique_ptr<File> f;
  REQUIRE(env.OpenFile(dir.File("x.seg"), FileOptions(), &f).ok());
  const int rule = env.Inject(Fault::NoSpaceAfter(150));
  REQUIRE(WriteAll(f.get(), 0, std::string(100, 'a')).ok());
  const Status s = WriteAll(f.get(), 100, std::string(100, 'b'));
  CHECK(s.IsNoSpace());
  uint64_t size = 0;
  REQUIRE(f->Size(&size).ok());
  CHECK(size == 150);  // the write that crossed the mark wrote up to it
  CHECK(WriteAll(f.get(), 150, "c").IsNoSpace());  // and the disk stays full
  CHECK(env.fired(rule) == 2);
  env.Clear();
  REQUIRE(WriteAll(f.get(), 150, "c").ok());
  CHECK(env.bytes_written() == 151);
}

TEST_CASE("fault injection: EIO on the k-th read of one file only", "[fault]") {
  TempDir dir;
  FaultInjectionEnv env;
  std::unique_ptr<File> a, b;
  REQUIRE(env.OpenFile(dir.File("a.seg"), FileOptions(), &a).ok());
  REQUIRE(env.OpenFile(dir.File("b.seg"), FileOptions(), &b).ok());
  REQUIRE(WriteAll(a.get(), 0, "aaaa").ok());
  REQUIRE(WriteAll(b.get(), 0, "bbbb").ok());
  const int rule = env.Inject(Fault::ReadError(EIO).OnFile("b.seg").Skip(2).Times(1));
  char buf[4];
  size_t got;
  for (int i = 0; i < 5; ++i) CHECK(a->Read(0, 4, buf, &got).ok());
  CHECK(b->Read(0, 4, buf, &got).ok());
  CHECK(b->Read(0, 4, buf, &got).ok());
  const Status s = b->Read(0, 4, buf, &got);  // the third read of b
  CHECK(s.IsIOError());
  CHECK(s.message().find("b.seg") != std::string::npos);
  CHECK(b->Read(0, 4, buf, &got).ok());  // spent
  CHECK(env.fired(rule) == 1);
}

TEST_CASE("fault injection: write, sync and truncate errors", "[fault]") {
  TempDir dir;
  FaultInjectionEnv env;
  std::unique_ptr<File> f;
  REQUIRE(env.OpenFile(dir.File("x"), FileOptions(), &f).ok());
  env.Inject(Fault::WriteError(EIO).Times(1));
  CHECK(WriteAll(f.get(), 0, "x").IsIOError());
  CHECK(WriteAll(f.get(), 0, "x").ok());
  env.Inject(Fault::SyncError().Times(1));
  CHECK(f->Sync().IsIOError());
  CHECK(f->Sync().ok());
  env.Inject(Fault::TruncateError(EIO).Times(1));
  CHECK(f->Truncate(0).IsIOError());
  CHECK(f->Truncate(0).ok());
}

TEST_CASE("fault injection: a hook runs at the matching operation, which then proceeds",
          "[fault]") {
  TempDir dir;
  FaultInjectionEnv env;
  std::unique_ptr<File> a, b;
  REQUIRE(env.OpenFile(dir.File("a.seg"), FileOptions(), &a).ok());
  REQUIRE(env.OpenFile(dir.File("b.log"), FileOptions(), &b).ok());
  int calls = 0;
  std::string seen;
  const int rule = env.Inject(Fault::Call(Fault::Op::kWrite, [&] {
                                ++calls;
                                // The hook may use the Env itself: no lock is held.
                                char c = 0;
                                size_t got = 0;
                                if (a->Read(0, 1, &c, &got).ok() && got == 1) seen += c;
                              })
                                  .OnFile(".seg")
                                  .Skip(1)
                                  .Times(1));
  CHECK(WriteAll(a.get(), 0, "x").ok());  // skipped
  CHECK(WriteAll(b.get(), 0, "y").ok());  // another file
  CHECK(calls == 0);
  CHECK(WriteAll(a.get(), 1, "z").ok());  // fires, then writes
  CHECK(calls == 1);
  CHECK(seen == "x");
  CHECK(WriteAll(a.get(), 2, "w").ok());  // spent
  CHECK(calls == 1);
  CHECK(env.fired(rule) == 1);
  CHECK(env.bytes_written() == 4);
  char buf[3] = {};
  size_t got = 0;
  REQUIRE(a->Read(0, 3, buf, &got).ok());
  CHECK(std::string(buf, got) == "xzw");
}

TEST_CASE("fault injection: short reads; ReadFully completes them", "[fault]") {
  TempDir dir;
  FaultInjectionEnv env;
  std::unique_ptr<File> f;
  REQUIRE(env.OpenFile(dir.File("x"), FileOptions(), &f).ok());
  const std::string data = Noise(10000, 7);
  REQUIRE(WriteAll(f.get(), 0, data).ok());
  env.Inject(Fault::ShortRead(999));
  std::string buf(10000, '\0');
  size_t got = 0;
  REQUIRE(f->Read(0, buf.size(), buf.data(), &got).ok());
  CHECK(got == 999);
  REQUIRE(ReadFully(f.get(), 0, buf.size(), buf.data(), &got).ok());
  CHECK(got == data.size());
  CHECK(buf == data);
}

TEST_CASE("fault injection: batched reads are shortened and failed too", "[fault]") {
  TempDir dir;
  FaultInjectionEnv env;
  std::unique_ptr<File> f;
  FileOptions fo;
  fo.direct_reads = true;
  REQUIRE(env.OpenFile(dir.File("x.seg"), fo, &f).ok());
  const std::string data = Noise(64 * 4096, 8);
  REQUIRE(WriteAll(f.get(), 0, data).ok());
  std::vector<std::pair<uint64_t, size_t>> ranges;
  for (int i = 0; i < 16; ++i) ranges.emplace_back(i * 4096 * 4, 4 * 4096);
  for (bool ring : {true, false}) {
    env.Clear();
    const int shorts = env.Inject(Fault::ShortRead(1000).Skip(3).Times(2));
    const int eio = env.Inject(Fault::ReadError(EIO).Skip(10).Times(1));
    std::vector<Status> st;
    auto out = ReadThroughQueue(&env, ring, {f.get()}, ranges, &st);
    int short_count = 0, error_count = 0;
    for (size_t i = 0; i < ranges.size(); ++i) {
      INFO("ring " << ring << " request " << i);
      if (!st[i].ok()) {
        CHECK(st[i].IsIOError());
        ++error_count;
        continue;
      }
      const std::string want = data.substr(ranges[i].first, ranges[i].second);
      if (out[i].size() < want.size()) {
        CHECK(out[i].size() == 1000);
        CHECK(out[i] == want.substr(0, 1000));  // a prefix, never wrong bytes
        ++short_count;
      } else {
        CHECK(out[i] == want);
      }
    }
    CHECK(short_count == 2);
    CHECK(error_count == 1);
    CHECK(env.fired(shorts) == 2);
    CHECK(env.fired(eio) == 1);
  }
}

}  // namespace opt4store
