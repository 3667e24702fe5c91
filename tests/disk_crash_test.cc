// kill -9 at random moments: a child process puts deterministic values
// (content = a function of id and version) with periodic Flush() and
// Compact(), reporting what each Flush made durable through a pipe; the
// parent kills it with SIGKILL after a random delay (or the child's
// FaultInjectionEnv kills it at an exact write), reopens the store and
// checks: the open succeeds, every id reported flushed is there with at
// least the flushed version, and no read returns wrong bytes.
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "disk_test_util.h"
#include "fork_child.h"
#include "test_util.h"
#include "tiers/disk_tier.h"
#include "engine/base/fault_injection_env.h"

namespace opt4store {
namespace {

using opt4store_test::TempDir;
using opt4store_test::TestMeta;
using opt4store_test::TestPayload;

constexpr ItemId kIdsPerRound = 100000;  // round r puts new ids from r * kIdsPerRound
constexpr ItemId kMaxNewIdsPerRound = 3000;

// Three kinds of rounds, in turn:
//   kTimed       SyncMode kOnFlush; the parent kills the child at a random
//                moment (in open/recovery, put, flush or compaction).
//   kFastTimed   SyncMode kNone and larger values, so that the kill lands
//                inside a put more often.
//   kExact       the child dies (SIGKILL, from its FaultInjectionEnv) at an
//                exact point: right after the k-th segment write (its index
//                batch is lost: the tail scan must re-index it) or inside a
//                segment write at byte N (a torn tail to cut off); puts and
//                compaction copies both count.
// With kill -9 the page cache survives, so what Flush() returned for is
// there in every mode.
enum class Kind { kTimed, kFastTimed, kExact };
Kind KindOf(int round) { return static_cast<Kind>(round % 3); }
size_t MaxPayload(ItemId id) {
  return KindOf(static_cast<int>(id / kIdsPerRound)) == Kind::kFastTimed ? 48000 : 16000;
}

DiskTierOptions CrashOptions(int round) {
  DiskTierOptions o;
  o.budget_bytes = 1ull << 30;  // no evictions: every flushed id must stay
  // Many segments, frequent roll-overs (fewer in fast rounds: sealing a
  // segment syncs it).
  o.segment_bytes = KindOf(round) == Kind::kFastTimed ? 4 << 20 : 256 << 10;
  o.sync = KindOf(round) == Kind::kFastTimed ? DiskTierOptions::SyncMode::kNone
                                             : DiskTierOptions::SyncMode::kOnFlush;
  o.compact_below_live_ratio = 0.9;  // so that Compact() has work
  return o;
}

// What the child reports after each Flush: the (id, version) pairs put
// since the previous report. 8 bytes each, written in chunks of at most
// PIPE_BUF bytes, so that every write() is atomic.
struct Flushed {
  uint32_t id;
  uint32_t version;
};

// The child: runs until killed. Exit codes: 2 open failed, 3 put failed,
// 4 flush failed, 5 compact failed, 6 pipe failed.
[[noreturn]] void RunChild(const std::string& dir, int round, uint64_t crash_point, int fd) {
  FaultInjectionEnv env;
  DiskTierOptions options = CrashOptions(round);
  options.env = &env;
  std::unique_ptr<DiskTier> tier;
  if (!DiskTier::Open(options, dir, &tier).ok()) _exit(2);
  if (KindOf(round) == Kind::kExact) {
    env.Inject(round % 2 ? Fault::CrashAfterWrite().OnFile(".seg").Skip(crash_point)
                         : Fault::CrashAt(crash_point * 1000).OnFile(".seg"));
  }
  std::mt19937 rng(1000 + round);
  std::vector<Flushed> pending;
  const ItemId first = static_cast<ItemId>(round) * kIdsPerRound;
  auto put = [&](ItemId id, uint32_t version) {
    if (!tier->Put(id, TestMeta(id, version), TestPayload(id, version, MaxPayload(id))).ok()) {
      _exit(3);
    }
    pending.push_back({id, version});
  };
  for (uint32_t i = 0;; ++i) {
    if (i < kMaxNewIdsPerRound) put(first + i, 0);
    if (rng() % 5 == 0 || i >= kMaxNewIdsPerRound) {
      // Overwrite an older id (of any earlier round) with version 1.
      const int r = static_cast<int>(rng() % (round + 1));
      const ItemId span = r == round ? std::min(i, kMaxNewIdsPerRound - 1) + 1 : 200;
      const ItemId old = static_cast<ItemId>(r) * kIdsPerRound + rng() % span;
      if (r == round || tier->Contains(old)) put(old, 1);
    }
    if (i % 16 == 15) {
      if (!tier->Flush().ok()) _exit(4);
      for (size_t at = 0; at < pending.size(); at += 512) {
        const size_t n = std::min<size_t>(512, pending.size() - at);
        const ssize_t bytes = static_cast<ssize_t>(n * sizeof(Flushed));
        if (write(fd, &pending[at], bytes) != bytes) _exit(6);
      }
      pending.clear();
    }
    if (i % 64 == 63 && !tier->Compact().ok()) _exit(5);
  }
}

// Value checks: version 0 or 1 of id, exactly.
bool RightValue(ItemId id, const std::string& meta, const std::string& payload, uint32_t* v) {
  *v = meta == TestMeta(id, 1) ? 1 : 0;
  return meta == TestMeta(id, *v) && payload == TestPayload(id, *v, MaxPayload(id));
}

// Reads what arrives in the pipe within timeout_ms, and then what is already there.
void Drain(int fd, std::string* buffer, int timeout_ms) {
  pollfd p{fd, POLLIN, 0};
  while (poll(&p, 1, timeout_ms) > 0) {
    char buf[65536];
    const ssize_t n = read(fd, buf, sizeof buf);
    if (n <= 0) return;  // EOF: the child is gone
    buffer->append(buf, static_cast<size_t>(n));
    timeout_ms = 0;
  }
}

}  // namespace

TEST_CASE("disk crash: kill -9 at random moments loses nothing flushed, returns no wrong bytes",
          "[disk][crash]") {
  TempDir dir;
  std::mt19937 rng(20240607);
  int rounds_died_exactly = 0;
  std::map<ItemId, uint32_t> flushed;  // id -> highest version known durable
  int rounds_killed_while_running = 0;
  uint64_t recovered = 0, truncated = 0;  // what recovery had to do, over all rounds
  constexpr int kRounds = 12;
  // Every round's child is forked here, before this process has opened the
  // tier (a reopen leaves RocksDB's threads behind: fork_child.h), and
  // starts when its round begins. Its loop never ends by itself; it dies
  // with this process.
  std::vector<opt4store_test::WaitingChild> children;
  std::vector<uint64_t> crash_points;
  std::vector<int> delays_ms;
  for (int round = 0; round < kRounds; ++round) {
    const uint64_t crash_point = 20 + rng() % 400;  // kExact: the write, or KB written
    crash_points.push_back(crash_point);
    children.push_back(opt4store_test::ForkWaitingChild(
        [&, round, crash_point](int fd, const std::string&) {
          RunChild(dir.path(), round, crash_point, fd);
        }));
    // Random moment: sometimes during the child's open (recovery), mostly
    // in the put / flush / compact loop. kExact rounds die by themselves.
    const Kind kind = KindOf(round);
    delays_ms.push_back(kind == Kind::kExact    ? 20000
                        : kind == Kind::kTimed ? 20 + static_cast<int>(rng() % 600)
                                               : 20 + static_cast<int>(rng() % 250));
  }
  for (int round = 0; round < kRounds; ++round) {
    const Kind kind = KindOf(round);
    const uint64_t crash_point = crash_points[round];
    const int delay_ms = delays_ms[round];
    opt4store_test::WaitingChild& c = children[round];
    REQUIRE(opt4store_test::Go(&c));
    const pid_t child = c.pid;
    std::string reports;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(delay_ms);
    int wstatus = 0;
    bool died = false;
    for (auto now = std::chrono::steady_clock::now(); now < deadline && !died;
         now = std::chrono::steady_clock::now()) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now).count();
      Drain(c.fd, &reports, static_cast<int>(std::clamp<long long>(left, 1, 50)));
      died = waitpid(child, &wstatus, WNOHANG) == child;
    }
    if (!died) {
      REQUIRE(kill(child, SIGKILL) == 0);
      REQUIRE(waitpid(child, &wstatus, 0) == child);
    } else {
      ++rounds_died_exactly;
    }
    Drain(c.fd, &reports, 1000);
    close(c.fd);
    INFO("round " << round << ", killed after " << delay_ms << " ms, crash point "
                  << crash_point);
    CHECK(died == (kind == Kind::kExact));
    // The child must have been killed, not have died of an error.
    REQUIRE(WIFSIGNALED(wstatus));
    REQUIRE(WTERMSIG(wstatus) == SIGKILL);
    REQUIRE(reports.size() % sizeof(Flushed) == 0);
    const size_t n = reports.size() / sizeof(Flushed);
    if (n > 0) ++rounds_killed_while_running;
    for (size_t i = 0; i < n; ++i) {
      Flushed f;
      std::memcpy(&f, reports.data() + i * sizeof(Flushed), sizeof f);
      uint32_t& v = flushed[f.id];
      v = std::max(v, f.version);
    }

    // Reopen: it must succeed and recover.
    std::unique_ptr<DiskTier> tier;
    const Status s = DiskTier::Open(CrashOptions(0), dir.path(), &tier);
    INFO(s.ToString());
    REQUIRE(s.ok());

    const DiskTierStats st = tier->GetStats();
    recovered += st.recovered_records;
    truncated += st.truncated_bytes;

    // Every flushed id is there, at least at the flushed version.
    for (const auto& [id, version] : flushed) {
      std::string meta, payload;
      const Status g = tier->Get(id, &meta, &payload);
      INFO("id " << id << " flushed at version " << version << ": " << g.ToString());
      REQUIRE(g.ok());
      uint32_t got = 0;
      REQUIRE(RightValue(id, meta, payload, &got));
      REQUIRE(got >= version);
    }
    // Every id that is there, flushed or not, reads back right: the ids of
    // this round and the previous one (all rounds at the end).
    std::vector<ItemId> ids;
    for (int r = round + 1 == kRounds ? 0 : std::max(0, round - 1); r <= round; ++r) {
      for (ItemId i = 0; i < kMaxNewIdsPerRound; ++i) {
        const ItemId id = static_cast<ItemId>(r) * kIdsPerRound + i;
        if (tier->Contains(id)) ids.push_back(id);
      }
    }
    std::vector<std::string> metas(ids.size()), payloads(ids.size());
    std::vector<Status> statuses(ids.size());
    tier->MultiGet(ids.data(), ids.size(), metas.data(), payloads.data(), statuses.data());
    for (size_t i = 0; i < ids.size(); ++i) {
      INFO("id " << ids[i] << ": " << statuses[i].ToString());
      REQUIRE(statuses[i].ok());  // kill -9 tears no indexed record
      uint32_t v = 0;
      REQUIRE(RightValue(ids[i], metas[i], payloads[i], &v));
    }
    VerifyReport report;
    REQUIRE(tier->Verify(&report).ok());
    CHECK(st.evictions == 0);
    REQUIRE(tier->Close().ok());
  }
  // Most rounds ran long enough to flush something, and the exact crashes
  // left torn tails for recovery to cut (a crash inside a write can only
  // miss if it falls exactly on a record boundary).
  INFO("recovered " << recovered << " tail records, truncated " << truncated << " bytes");
  CHECK(rounds_killed_while_running >= kRounds / 2);
  CHECK(rounds_died_exactly == kRounds / 3);
  CHECK(flushed.size() > 100);
  CHECK(truncated > 0);
}

}  // namespace opt4store
