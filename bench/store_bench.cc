// store_bench: the Store's prefetch against a reader that consumes at disk
// speed, and the RAM the Store spends per dataset id.
//
// The requirements it measures (bench/STORE.md):
//   "With the disk tier holding the whole dataset and prefetch on, a reader
//    consuming at disk speed waits at most 5% of the time."
//   "Metadata per item: report the RAM bytes per item for index and policy
//    state (CacheLib's flash index costs 12 B per item)."
//
// Method.
//   0. Where. A fresh directory under --dir (default /var/tmp; if that is an
//      in-memory file system, checked with statfs, the directory of this
//      binary). The file system type is printed; tmpfs is warned about,
//      since it has no device to wait for.
//   1. Fill. A Store with dataset_size N, a RAM budget of --ram-fraction of
//      the data (default 10%) and a disk tier large enough for all of it;
//      every item (--items N, default 4000, of --item-kib KiB, default 150:
//      random bytes, so LZ4's probe skips them) is Put with kNoPosition.
//      Without a plan the RAM tier keeps the first items that fit: those
//      serve to time a plain RAM hit (step 1b). Close() syncs the segments;
//      then posix_fadvise(DONTNEED) drops their pages from the page cache
//      (the disk tier reads with O_DIRECT anyway).
//   1b. RAM-hit cost. Get(kNoPosition, id) on the resident items, 7 shuffled
//      passes, each Get timed: the median is the copy cost of a hit (150 KiB
//      into a reused buffer), which is not waiting.
//   2. Disk speed, measured again in each repetition:
//        on demand  the store opened disk_only, every item read once with
//                   Get in shuffled order (one read in flight): items/s and
//                   bytes/s over the sum of the Get times. This is the
//                   "disk speed" the reader consumes at (1x).
//        QD 32      DiskTier::MultiGet on the same directory, all ids in
//                   shuffled order, in batches of 1024 (the device's
//                   throughput through the tier) and of 32 (what one
//                   prefetch batch of the planner asks for at a time).
//   3. The reader. The store reopened as owner, same RAM budget, default
//      staging, a shuffle plan over N (--epochs, default 1) and
//      prefetch_depth D. One thread reads the plan in order:
//      Get(pos, id, sink); then it "consumes" the sample for
//      T = item_bytes / speed by spinning on the clock (a training step
//      that takes exactly the time the disk needs to deliver a sample),
//      checking the bytes (a checksum per item, within T) on the way.
//        W     wall time of the whole pass (Open excluded)
//        wait  sum of Get times - reads x (RAM-hit median of step 1b)
//        share wait / W  (the goal: <= 5% at 1x, default depth 512)
//      Rows: D in --depths (default 1, 64, 512, 2048; 1 is prefetch
//      effectively off) x speed 0.5x, 1x, 2x of the on-demand speed, and 1x
//      of the QD-32 throughput (the stricter reading of "disk speed").
//      Two diagnostics of the default row (depth 512, 1x): "sleep", the
//      consumer sleeps to its deadline instead of spinning (it then leaves
//      its core to others), and "catchup" (also at 1x QD 32), the consumer
//      keeps an absolute schedule, so that steps that ran late because the
//      reader lost its CPU are made up by the next ones: the plain spin
//      then consumes slower than nominal ("eff x"), catchup does not.
//      Per row also: where the Gets were served (GetSource) and how many
//      took over 100 us; Stats() prefetched, waits and wait_ns; "dup",
//      items prefetched but read from disk anyway (one epoch); the reader
//      thread's run-queue delay (/proc/thread-self/schedstat: runnable
//      without a CPU), its off-CPU gaps inside the spin (seen on the clock,
//      no system call), the rest of its time off CPU (asleep, or its vCPU
//      taken by the host), its voluntary (slept, inside Gets) and
//      involuntary (preempted) context switches; the CPU of the process's
//      other threads (planner, io_uring) and of other processes on the
//      machine, from /proc/stat.
//   --reps R (default 3) repeats steps 2 and 3, alternating the row order;
//   the summary gives the median and range of each row.
//   4. RAM per id. Stats().ram_bytes_per_item and disk_index_bytes_per_item
//      after the fill, and the resident set: a child process (this binary
//      re-executed with --rss-child) opens an empty store (RAM 2 MiB with
//      1 MiB of staging inside, queue 1 MiB, disk tier on) with N ids and reads RssAnon,
//      RssShmem and RssFile before and after Open; (growth at --rss-ids,
//      default 1,000,000) minus (growth at 1,000), over the difference in ids,
//      is the per-id cost. Once without a plan and once with a 2-epoch
//      shuffle plan (the policy's and the next-use stream's tables).
//
// Every Get's bytes are checked (a checksum per item). The figures and the
// reasons behind them: bench/STORE.md.
//
// Exit status: 1 on wrong bytes or a failed read, 2 with --enforce-goals
// when the default row (depth 512, 1x on-demand speed) waits more than 5%
// (median over the repetitions), 3 on a store error.
// Longer than 600 lines because: one benchmark program (one options struct,
// one JSON writer) whose scenarios share the store setup and run in one
// process, so that their ratios come from the same run.
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/statfs.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "bench_common.h"
#include "opt4store/plan.h"
#include "opt4store/read_sink.h"
#include "opt4store/status.h"
#include "opt4store/store.h"
#include "tiers/disk_tier.h"

namespace opt4store {
namespace {

using bench::Fmt;

constexpr double kGoalWaitShare = 0.05;
constexpr uint64_t kDefaultDepth = 512;
constexpr int kHitPasses = 7;

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

double ThreadCpuSeconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// The calling thread's time spent runnable but waiting for a CPU, in ns
// (the second field of /proc/thread-self/schedstat); -1 when unavailable.
int64_t RunDelayNs() {
  std::ifstream in("/proc/thread-self/schedstat");
  int64_t on_cpu = 0, delay = -1;
  if (!(in >> on_cpu >> delay)) return -1;
  return delay;
}

// The whole machine's CPU time from /proc/stat, in seconds: busy (user,
// nice, system, irq, softirq) and steal (taken by the hypervisor).
struct MachineCpu {
  double busy = 0, steal = 0;
};
MachineCpu ReadMachineCpu() {
  MachineCpu m;
  std::ifstream in("/proc/stat");
  std::string cpu;
  double user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;
  in >> cpu >> user >> nice >> system >> idle >> iowait >> irq >> softirq >> steal;
  const double tick = static_cast<double>(sysconf(_SC_CLK_TCK));
  m.busy = (user + nice + system + irq + softirq) / tick;
  m.steal = steal / tick;
  return m;
}

[[noreturn]] void Die(const Status& s, const std::string& what) {
  std::fprintf(stderr, "store_bench: %s: %s\n", what.c_str(), s.ToString().c_str());
  std::exit(3);
}

void Log(const std::string& message) { std::printf("  [store] %s\n", message.c_str()); }

uint64_t NextRandom(uint64_t* state) {  // SplitMix64
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Random bytes, a function of the id: LZ4 cannot shrink them.
void MakePayload(ItemId id, size_t bytes, std::string* out) {
  out->resize(bytes);
  uint64_t state = id * 0x2545F4914F6CDD1Dull + 11;
  size_t i = 0;
  for (; i + 8 <= bytes; i += 8) {
    const uint64_t v = NextRandom(&state);
    std::memcpy(&(*out)[i], &v, 8);
  }
  for (; i < bytes; ++i) (*out)[i] = static_cast<char>(NextRandom(&state));
}

std::string MetaOf(ItemId id) { return "store_bench id=" + std::to_string(id); }

// A checksum over every byte, four independent lanes (about 10 us for
// 150 KiB), so that the consumer can check each sample within its T.
uint64_t Checksum(const char* p, size_t n) {
  uint64_t h[4] = {n, 0x9E3779B97F4A7C15ull, 0xBF58476D1CE4E5B9ull, 0x94D049BB133111EBull};
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    for (int k = 0; k < 4; ++k) {
      uint64_t w;
      std::memcpy(&w, p + i + 8 * k, 8);
      h[k] = (h[k] ^ w) * 0x100000001B3ull;
    }
  }
  for (; i < n; ++i) h[0] = (h[0] ^ static_cast<unsigned char>(p[i])) * 0x100000001B3ull;
  return h[0] ^ (h[1] << 1) ^ (h[2] << 2) ^ (h[3] << 3);
}

// A reused destination, as a loader that recycles a pinned buffer.
class BufferSink : public ReadSink {
 public:
  explicit BufferSink(size_t payload_capacity) : meta_(256, '\0'), payload_(payload_capacity, 1) {}
  Status Prepare(uint64_t meta_size, uint64_t payload_size, void** meta_dst,
                 void** payload_dst) override {
    if (meta_.size() < meta_size) meta_.resize(meta_size);
    if (payload_.size() < payload_size) payload_.resize(payload_size);
    meta_size_ = meta_size;
    payload_size_ = payload_size;
    *meta_dst = meta_.data();
    *payload_dst = payload_.data();
    return Status::OK();
  }
  std::string_view meta() const { return {meta_.data(), meta_size_}; }
  std::string_view payload() const { return {payload_.data(), payload_size_}; }

 private:
  std::string meta_, payload_;
  size_t meta_size_ = 0, payload_size_ = 0;
};

struct Expected {
  size_t item_bytes = 0;
  std::vector<uint64_t> sums;  // Checksum of each id's payload
  bool Check(ItemId id, std::string_view meta, std::string_view payload) const {
    return payload.size() == item_bytes && meta == MetaOf(id) &&
           Checksum(payload.data(), payload.size()) == sums[id];
  }
};

// ---------------------------------------------------------------- places

std::string FsTypeName(const std::string& path, bool* in_memory) {
  struct statfs s;
  *in_memory = false;
  if (statfs(path.c_str(), &s) != 0) return "unknown (statfs failed)";
  switch (static_cast<uint64_t>(s.f_type)) {
    case 0x01021994:
      *in_memory = true;
      return "tmpfs";
    case 0x858458f6:
      *in_memory = true;
      return "ramfs";
    case 0xEF53:
      return "ext2/3/4";
    case 0x58465342:
      return "xfs";
    case 0x9123683E:
      return "btrfs";
    case 0x794C7630:
      return "overlayfs";
    default:
      return Fmt("f_type 0x%llx", static_cast<unsigned long long>(s.f_type));
  }
}

std::string SelfExe() {
  std::error_code ec;
  auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string() : p.string();
}

// Drops the page cache of the store's segment files; returns files dropped.
int DropSegmentCache(const std::string& store_dir) {
  int n = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(store_dir + "/segments", ec)) {
    const int fd = open(e.path().c_str(), O_RDONLY);
    if (fd < 0) continue;
    if (fdatasync(fd) == 0 && posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) == 0) ++n;
    close(fd);
  }
  return n;
}

// ---------------------------------------------------------------- setup

struct Setup {
  std::string path;  // the store
  uint64_t items = 0;
  size_t item_bytes = 0;
  uint64_t ram_bytes = 0;
  uint64_t disk_bytes = 0;
  uint64_t epochs = 1;
};

StoreOptions BaseOptions(const Setup& setup) {
  StoreOptions o;
  // The policy's RAM is --ram, with 64 MiB of prefetch staging on top (inside
  // ram= since staging became part of it), as bench/STORE.md measured it.
  o.ram = setup.ram_bytes + (uint64_t{64} << 20);
  o.staging = uint64_t{64} << 20;
  o.disk = setup.disk_bytes;
  o.info_log = Log;
  o.shm_prefix = "opt4store-store-bench";
  return o;
}

// ---------------------------------------------------------------- step 2

struct DiskSpeed {
  double ondemand_bytes_per_s = 0;
  double ondemand_items_per_s = 0;
  double ondemand_median_us = 0;
  double ondemand_p99_us = 0;
  double qd32_bytes_per_s = 0;        // MultiGet, batches of 1024
  double qd32_batch32_bytes_per_s = 0;  // MultiGet, batches of 32
  uint64_t wrong = 0, errors = 0;
};

DiskSpeed MeasureDisk(const Setup& setup, const Expected& expected, uint32_t seed) {
  DiskSpeed d;
  std::vector<ItemId> order(setup.items);
  std::iota(order.begin(), order.end(), 0);
  std::mt19937 rng(seed);

  // On demand: the store's own read path, one Get at a time.
  {
    StoreOptions o = BaseOptions(setup);
    o.disk_only = true;
    o.create_if_missing = false;
    std::unique_ptr<Store> store;
    Status s = Store::Open(o, setup.path, &store);
    if (!s.ok()) Die(s, "open disk_only");
    std::shuffle(order.begin(), order.end(), rng);
    BufferSink sink(setup.item_bytes);
    std::vector<double> us(order.size());
    int64_t total_ns = 0;
    for (size_t i = 0; i < order.size(); ++i) {
      GetSource src = GetSource::kMiss;
      const int64_t t0 = NowNs();
      s = store->Get(kNoPosition, order[i], &sink, &src);
      const int64_t dt = NowNs() - t0;
      total_ns += dt;
      us[i] = dt / 1e3;
      if (!s.ok() || src != GetSource::kDisk) {
        ++d.errors;
      } else if (!expected.Check(order[i], sink.meta(), sink.payload())) {
        ++d.wrong;
      }
    }
    s = store->Close();
    if (!s.ok()) Die(s, "close disk_only");
    d.ondemand_items_per_s = order.size() / (total_ns / 1e9);
    d.ondemand_bytes_per_s = d.ondemand_items_per_s * setup.item_bytes;
    d.ondemand_median_us = bench::Median(us);
    std::sort(us.begin(), us.end());
    d.ondemand_p99_us = us[std::min(us.size() - 1, us.size() * 99 / 100)];
  }

  // QD 32: the disk tier's batched reads over the same files.
  {
    DiskTierOptions o;
    o.budget_bytes = setup.disk_bytes;
    o.expected_ids = static_cast<uint32_t>(setup.items);
    std::unique_ptr<DiskTier> tier;
    Status s = DiskTier::Open(o, setup.path, &tier);
    if (!s.ok()) Die(s, "open disk tier");
    for (size_t batch : {size_t{1024}, size_t{32}}) {
      std::shuffle(order.begin(), order.end(), rng);
      uint64_t bytes = 0;
      const int64_t t0 = NowNs();
      for (size_t at = 0; at < order.size(); at += batch) {
        const size_t n = std::min(batch, order.size() - at);
        const ItemId* ids = order.data() + at;
        tier->MultiGet(ids, n,
                       [&](size_t i, const Status& st, std::string_view meta,
                           std::string_view payload) {
                         // A cheap check here (size, meta): the full checksum
                         // would cost more CPU than the prefetcher's copy.
                         if (!st.ok()) {
                           ++d.errors;
                         } else if (payload.size() != setup.item_bytes ||
                                    meta != MetaOf(ids[i])) {
                           ++d.wrong;
                         }
                         bytes += payload.size();
                       });
      }
      const double secs = (NowNs() - t0) / 1e9;
      (batch == 1024 ? d.qd32_bytes_per_s : d.qd32_batch32_bytes_per_s) = bytes / secs;
    }
    s = tier->Close();
    if (!s.ok()) Die(s, "close disk tier");
  }
  return d;
}

// ---------------------------------------------------------------- step 3

// A row of the table. variant "" is the measure: after each Get the reader
// spins until T has passed since the Get returned. Two diagnostics:
//   "sleep"    the consumer sleeps to that deadline instead of spinning,
//              which leaves its core to the planner and to other processes;
//   "catchup"  the consumer keeps an absolute schedule: a step that ended
//              late (the reader lost its CPU) shortens the next ones, so the
//              reader consumes at exactly the nominal speed on average even
//              on a loaded machine, where the plain spin falls behind it.
struct RowKey {
  uint64_t depth = 0;
  std::string basis;  // "on-demand" or "qd32"
  double mult = 1;
  std::string variant;
  bool operator<(const RowKey& o) const {
    if (variant != o.variant) return variant < o.variant;
    if (depth != o.depth) return depth < o.depth;
    if (basis != o.basis) return basis < o.basis;
    return mult < o.mult;
  }
  std::string Name() const {
    return Fmt("depth %4" PRIu64 " %3.1fx %-9s%s", depth, mult, basis.c_str(),
               variant.empty() ? "" : (" " + variant).c_str());
  }
};

// A clock step this long inside the spin means the reader was off its CPU
// (preempted, or its vCPU descheduled by the host); a loop turn is ~30 ns.
constexpr int64_t kGapNs = 2000;

struct RunResult {
  RowKey key;
  int rep = 0;
  double speed_bytes_per_s = 0;  // what the consumer consumes at
  double t_us = 0;               // T per sample
  uint64_t reads = 0;
  double wall_s = 0;
  double get_s = 0;     // sum of Get times
  double wait_s = 0;    // get_s - reads x hit
  double wait_share = 0;
  double wait_ram_s = 0, wait_disk_s = 0;  // wait split by where the Get was served
  uint64_t n_ram = 0, n_disk = 0, n_miss = 0;
  uint64_t slow_ram = 0, slow_disk = 0;  // Gets over 100 us
  double ram_get_median_us = 0;  // in-run Gets served from RAM
  double first_get_ms = 0;
  uint64_t overruns = 0;  // checking a sample took longer than T
  double consume_late_s = 0;  // consume steps that took longer than T, by how much
  double effective_mult = 0;  // reads x T / (W - Get time): the speed really consumed at
  uint64_t wasted_prefetch = 0;  // prefetched, yet not read from RAM (1 epoch: read from disk)
  uint64_t wrong = 0, errors = 0;
  // Where the reader thread's time went (the spinning consumer only):
  //   W = reader CPU + run-queue delay + asleep (+ time the host took its
  //   vCPU while it ran, which the guest counts as neither).
  // It sleeps only inside Gets (the store's lock, I/O, an item being
  // filled); the spin sees its own off-CPU gaps without a system call.
  double reader_cpu_s = 0, others_cpu_s = 0, run_delay_s = -1;
  double asleep_s = 0;      // W - reader CPU - run-queue delay: asleep, or its vCPU stolen
  // The reader thread's context switches: voluntary ones happen only inside
  // Gets (it slept: the store's mutex, an item's fill, I/O), involuntary
  // ones anywhere (preempted).
  int64_t voluntary_switches = 0, involuntary_switches = 0;
  double spin_gaps_s = 0;   // off-CPU inside the consumer's spin
  double machine_other_cores = 0;  // busy CPU of other processes, in cores
  double machine_steal_cores = 0;  // taken by the hypervisor, in cores
  StoreStats stats;
};

RunResult RunReader(const Setup& setup, const Expected& expected, const RowKey& key,
                    double speed_bytes_per_s, double hit_ns, uint64_t seed, int rep) {
  const bool sleep_consume = key.variant == "sleep";
  const bool catch_up = key.variant == "catchup";
  RunResult r;
  r.key = key;
  r.rep = rep;
  r.speed_bytes_per_s = speed_bytes_per_s;
  const int64_t t_ns = static_cast<int64_t>(1e9 * setup.item_bytes / speed_bytes_per_s);
  r.t_us = t_ns / 1e3;

  PlanSpec plan;
  plan.kind = SamplerKind::kShuffle;
  plan.dataset_size = setup.items;
  plan.epochs = setup.epochs;
  plan.seed = seed;
  std::vector<ItemId> ids, epoch;
  for (uint64_t e = 0; e < setup.epochs; ++e) {
    GenerateEpoch(plan, e, &epoch);
    ids.insert(ids.end(), epoch.begin(), epoch.end());
  }
  StoreOptions o = BaseOptions(setup);
  o.create_if_missing = false;
  o.plan = plan;
  o.prefetch_depth = key.depth;
  std::unique_ptr<Store> store;
  Status s = Store::Open(o, setup.path, &store);
  if (!s.ok()) Die(s, "open for the reader");
  if (store->ResumePosition() != 0) {
    s = store->SetPlan(plan, 0);
    if (!s.ok()) Die(s, "SetPlan");
  }
  BufferSink sink(setup.item_bytes);
  std::vector<double> ram_us;
  ram_us.reserve(ids.size());
  r.reads = ids.size();
  int64_t get_ns = 0, late_ns = 0, gaps_ns = 0, debt_ns = 0;
  double wait_ram_ns = 0, wait_disk_ns = 0;
  const int64_t delay0 = RunDelayNs();
  rusage usage0;
  getrusage(RUSAGE_THREAD, &usage0);
  const double thread0 = ThreadCpuSeconds();
  const double process0 = bench::Stopwatch::CpuNow();
  const MachineCpu machine0 = ReadMachineCpu();
  const int64_t start = NowNs();
  for (uint64_t p = 0; p < ids.size(); ++p) {
    GetSource src = GetSource::kMiss;
    const int64_t t0 = NowNs();
    s = store->Get(p, ids[p], &sink, &src);
    const int64_t t1 = NowNs();
    const int64_t dt = t1 - t0;
    get_ns += dt;
    if (p == 0) r.first_get_ms = dt / 1e6;
    switch (src) {
      case GetSource::kRam:
        ++r.n_ram;
        ram_us.push_back(dt / 1e3);
        wait_ram_ns += dt - hit_ns;
        if (dt > 100000) ++r.slow_ram;
        break;
      case GetSource::kDisk:
        ++r.n_disk;
        wait_disk_ns += dt - hit_ns;
        if (dt > 100000) ++r.slow_disk;
        break;
      case GetSource::kMiss:
        ++r.n_miss;
        break;
    }
    if (!s.ok()) {
      ++r.errors;
    } else if (!expected.Check(ids[p], sink.meta(), sink.payload())) {
      ++r.wrong;
    }
    // Consume: T after the Get returned, however long the check took
    // (catchup: less the time the previous steps ran over).
    const int64_t deadline = t1 + t_ns - debt_ns;
    int64_t now = NowNs();
    if (now > t1 + t_ns) ++r.overruns;
    if (now >= deadline) {
      // Nothing left to consume: the check ran over T, or (catchup) the
      // schedule is behind.
    } else if (sleep_consume) {
      const timespec ts{static_cast<time_t>((deadline - now) / 1000000000),
                        static_cast<long>((deadline - now) % 1000000000)};
      nanosleep(&ts, nullptr);
      now = NowNs();
    } else {
      for (int64_t prev = now;; prev = now) {
        now = NowNs();
        if (now - prev > kGapNs) gaps_ns += now - prev;
        if (now >= deadline) break;
      }
    }
    // A spin that ends late was off its CPU at the deadline (or a sleep
    // woke late): the step took longer than T. catchup owes the overrun to
    // the next steps.
    late_ns += std::max<int64_t>(0, now - (t1 + t_ns));
    if (catch_up) debt_ns = std::max<int64_t>(0, now - deadline);
  }
  const int64_t end = NowNs();
  r.reader_cpu_s = ThreadCpuSeconds() - thread0;
  rusage usage1;
  getrusage(RUSAGE_THREAD, &usage1);
  r.voluntary_switches = usage1.ru_nvcsw - usage0.ru_nvcsw;
  r.involuntary_switches = usage1.ru_nivcsw - usage0.ru_nivcsw;
  const double process_cpu = bench::Stopwatch::CpuNow() - process0;
  r.others_cpu_s = process_cpu - r.reader_cpu_s;
  const MachineCpu machine1 = ReadMachineCpu();
  const int64_t delay1 = RunDelayNs();
  if (delay0 >= 0 && delay1 >= 0) r.run_delay_s = (delay1 - delay0) / 1e9;
  r.stats = store->Stats();
  s = store->Close();
  if (!s.ok()) Die(s, "close after the reader");
  r.wall_s = (end - start) / 1e9;
  r.get_s = get_ns / 1e9;
  r.wait_s = (get_ns - static_cast<double>(r.reads) * hit_ns) / 1e9;
  r.wait_share = r.wait_s / r.wall_s;
  r.wait_ram_s = wait_ram_ns / 1e9;
  r.wait_disk_s = wait_disk_ns / 1e9;
  r.ram_get_median_us = bench::Median(ram_us);
  r.consume_late_s = late_ns / 1e9;
  r.effective_mult = key.mult * (r.reads * (t_ns / 1e9)) / (r.wall_s - r.get_s);
  r.wasted_prefetch = r.stats.prefetched > r.n_ram ? r.stats.prefetched - r.n_ram : 0;
  r.spin_gaps_s = gaps_ns / 1e9;
  r.asleep_s = r.wall_s - r.reader_cpu_s - std::max(0.0, r.run_delay_s);
  r.machine_other_cores = (machine1.busy - machine0.busy - process_cpu) / r.wall_s;
  r.machine_steal_cores = (machine1.steal - machine0.steal) / r.wall_s;
  return r;
}

void PrintRunHeader() {
  std::printf("  %-32s %6s %6s %6s %6s %6s | %5s %5s %4s %4s | %5s %4s %5s %7s | %6s %7s %7s "
              "%7s %7s %5s %6s %6s %5s %5s %5s\n",
              "row", "T us", "wall s", "wait s", "share", "w.disk", "ram", "disk", "miss", ">100",
              "pref", "dup", "waits", "wait ms", "hit us", "rq-dly s", "gaps s", "asleep",
              "late s", "eff x", "rd cpu", "oth cp", "m.oth", "vcs", "ivcs");
}

void PrintRun(const RunResult& r) {
  std::printf("  %-32s %6.1f %6.2f %6.3f %5.1f%% %5.1f%% | %5" PRIu64 " %5" PRIu64 " %4" PRIu64
              " %4" PRIu64 " | %5" PRIu64 " %4" PRIu64 " %5" PRIu64 " %7.1f | %6.1f %7.3f %7.3f "
              "%7.3f %7.3f %5.2f %6.2f %6.2f %5.2f %5" PRId64 " %5" PRId64 "%s%s\n",
              r.key.Name().c_str(), r.t_us, r.wall_s, r.wait_s, 100 * r.wait_share,
              100 * r.wait_disk_s / r.wall_s, r.n_ram, r.n_disk, r.n_miss,
              r.slow_ram + r.slow_disk, r.stats.prefetched, r.wasted_prefetch, r.stats.waits,
              r.stats.wait_ns / 1e6, r.ram_get_median_us, r.run_delay_s, r.spin_gaps_s,
              r.key.variant == "sleep" ? 0.0 : r.asleep_s, r.consume_late_s, r.effective_mult,
              r.reader_cpu_s,
              r.others_cpu_s, r.machine_other_cores, r.voluntary_switches, r.involuntary_switches,
              r.overruns ? Fmt(" (%" PRIu64 " checks over T)", r.overruns).c_str() : "",
              (r.wrong || r.errors)
                  ? Fmt(" WRONG %" PRIu64 " ERR %" PRIu64, r.wrong, r.errors).c_str()
                  : "");
  std::fflush(stdout);
}

// ---------------------------------------------------------------- step 4

struct RssSample {
  uint64_t ids = 0;
  bool plan = false;
  long rss0 = 0, anon0 = 0, shm0 = 0, file0 = 0;
  long rss1 = 0, anon1 = 0, shm1 = 0, file1 = 0, hwm1 = 0;
  uint64_t stats_ram_bytes_per_item = 0;
  bool ok = false;
};

// In the child: open an empty store with `ids` ids and report the growth.
int RssChild(const std::string& dir, uint64_t ids, bool with_plan) {
  RssSample x;
  x.rss0 = bench::VmRssKib();
  x.anon0 = bench::ProcStatusKib("RssAnon");
  x.shm0 = bench::ProcStatusKib("RssShmem");
  x.file0 = bench::ProcStatusKib("RssFile");
  StoreOptions o;
  o.dataset_size = ids;
  o.ram = uint64_t{2} << 20;
  o.staging = uint64_t{1} << 20;  // inside ram: a 1 MiB RAM tier, as before
  o.queue_bytes = uint64_t{1} << 20;
  o.disk = uint64_t{1} << 30;
  o.shm_prefix = "opt4store-store-bench-rss";
  if (with_plan) {
    // Two epochs, so that the policy admits items and sizes its cost table.
    PlanSpec plan;
    plan.kind = SamplerKind::kShuffle;
    plan.dataset_size = ids;
    plan.epochs = 2;
    plan.seed = 1;
    o.plan = plan;
  }
  std::unique_ptr<Store> store;
  Status s = Store::Open(o, dir, &store);
  if (!s.ok()) Die(s, "rss child: open");
  // Let the planner step its first prefetch_depth positions.
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const StoreStats st = store->Stats();
  x.rss1 = bench::VmRssKib();
  x.anon1 = bench::ProcStatusKib("RssAnon");
  x.shm1 = bench::ProcStatusKib("RssShmem");
  x.file1 = bench::ProcStatusKib("RssFile");
  x.hwm1 = bench::VmHwmKib();
  s = store->Close();
  if (!s.ok()) Die(s, "rss child: close");
  store.reset();
  std::printf("RSSCHILD %ld %ld %ld %ld %ld %ld %ld %ld %ld %" PRIu64 "\n", x.rss0, x.anon0,
              x.shm0, x.file0, x.rss1, x.anon1, x.shm1, x.file1, x.hwm1,
              st.ram_bytes_per_item);
  return 0;
}

RssSample RunRssChild(const std::string& exe, const std::string& dir, uint64_t ids, bool plan) {
  RssSample x;
  x.ids = ids;
  x.plan = plan;
  const std::string cmd = "'" + exe + "' --rss-child '" + dir + "' " + std::to_string(ids) +
                          (plan ? " 1" : " 0");
  std::FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return x;
  char line[1024];
  while (std::fgets(line, sizeof line, p)) {
    std::istringstream in(line);
    std::string tag;
    in >> tag;
    if (tag != "RSSCHILD") continue;
    in >> x.rss0 >> x.anon0 >> x.shm0 >> x.file0 >> x.rss1 >> x.anon1 >> x.shm1 >> x.file1 >>
        x.hwm1 >> x.stats_ram_bytes_per_item;
    x.ok = static_cast<bool>(in);
  }
  x.ok = pclose(p) == 0 && x.ok;
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return x;
}

std::vector<uint64_t> ParseList(const std::string& s) {
  std::vector<uint64_t> v;
  std::stringstream in(s);
  std::string part;
  while (std::getline(in, part, ',')) v.push_back(std::strtoull(part.c_str(), nullptr, 10));
  return v;
}

std::vector<double> ParseDoubles(const std::string& s) {
  std::vector<double> v;
  std::stringstream in(s);
  std::string part;
  while (std::getline(in, part, ',')) v.push_back(std::atof(part.c_str()));
  return v;
}

}  // namespace
}  // namespace opt4store

int main(int argc, char** argv) {
  using namespace opt4store;
  if (argc == 5 && std::string(argv[1]) == "--rss-child") {
    return RssChild(argv[2], std::strtoull(argv[3], nullptr, 10), std::string(argv[4]) == "1");
  }
  bench::Args args = bench::ParseArgs(
      argc, argv,
      "store_bench: a reader consuming at disk speed against the Store's prefetch; RAM per id\n"
      "  --dir DIR          parent of the temporary store (default /var/tmp, or the\n"
      "                     binary's directory when /var/tmp is in memory)\n"
      "  --items N          items in the dataset (default 4000; --quick 600)\n"
      "  --item-kib K       item size in KiB (default 150)\n"
      "  --ram-fraction F   RAM budget as a fraction of the data (default 0.10)\n"
      "  --epochs E         epochs of the reader's shuffle plan (default 1)\n"
      "  --depths LIST      prefetch depths (default 1,64,512,2048; --quick 1,512)\n"
      "  --speeds LIST      consumer speeds, multiples of the on-demand disk speed\n"
      "                     (default 0.5,1,2; --quick 1)\n"
      "  --rss-ids N        ids of the large store in the RSS measure (default 1000000)\n"
      "  --keep             leave the store directory behind");
  std::string base;
  uint64_t items = args.quick ? 600 : 4000;
  double item_kib = 150;
  double ram_fraction = 0.10;
  uint64_t epochs = 1;
  std::vector<uint64_t> depths = args.quick ? std::vector<uint64_t>{1, 512}
                                            : std::vector<uint64_t>{1, 64, 512, 2048};
  std::vector<double> speeds = args.quick ? std::vector<double>{1} : std::vector<double>{0.5, 1, 2};
  uint64_t rss_ids = args.quick ? 200000 : 1000000;
  bool keep = false;
  for (size_t i = 0; i < args.rest.size(); ++i) {
    const std::string& a = args.rest[i];
    const bool has_value = i + 1 < args.rest.size();
    if (a == "--dir" && has_value) {
      base = args.rest[++i];
    } else if (a == "--items" && has_value) {
      items = std::strtoull(args.rest[++i].c_str(), nullptr, 10);
    } else if (a == "--item-kib" && has_value) {
      item_kib = std::atof(args.rest[++i].c_str());
    } else if (a == "--ram-fraction" && has_value) {
      ram_fraction = std::atof(args.rest[++i].c_str());
    } else if (a == "--epochs" && has_value) {
      epochs = std::strtoull(args.rest[++i].c_str(), nullptr, 10);
    } else if (a == "--depths" && has_value) {
      depths = ParseList(args.rest[++i]);
    } else if (a == "--speeds" && has_value) {
      speeds = ParseDoubles(args.rest[++i]);
    } else if (a == "--rss-ids" && has_value) {
      rss_ids = std::strtoull(args.rest[++i].c_str(), nullptr, 10);
    } else if (a == "--keep") {
      keep = true;

    } else {
      std::fprintf(stderr, "store_bench: unknown argument %s\n", a.c_str());
      return 64;
    }
  }
  if (items < 2 || item_kib <= 0 || ram_fraction <= 0 || epochs < 1 || depths.empty() ||
      speeds.empty() || rss_ids < 2000) {
    std::fprintf(stderr, "store_bench: bad sizes\n");
    return 64;
  }
  const int reps = args.reps > 0 ? args.reps : (args.quick ? 1 : 3);
  const bench::MachineInfo machine = bench::GetMachineInfo();
  const std::string exe = SelfExe();

  // ---------------------------------------------------------------- where
  bool in_memory = false;
  std::string fs_note;
  if (base.empty()) {
    base = "/var/tmp";
    FsTypeName(base, &in_memory);
    if (in_memory) {
      fs_note = "/var/tmp is in memory; ";
      base = std::filesystem::path(exe).parent_path().string();
    }
  }
  const std::string fs = FsTypeName(base, &in_memory);
  std::string tmpl = base + "/opt4store-store-bench.XXXXXX";
  if (mkdtemp(tmpl.data()) == nullptr) {
    std::fprintf(stderr, "store_bench: cannot create a directory under %s: %s\n", base.c_str(),
                 std::strerror(errno));
    return 3;
  }
  const std::string work = tmpl;

  Setup setup;
  setup.path = work + "/store";
  setup.items = items;
  setup.item_bytes = static_cast<size_t>(item_kib * 1024) / 8 * 8;
  setup.epochs = epochs;
  const uint64_t data_bytes = items * setup.item_bytes;
  setup.ram_bytes = std::max<uint64_t>(uint64_t{1} << 20,
                                       static_cast<uint64_t>(ram_fraction * data_bytes));
  setup.disk_bytes = std::max<uint64_t>(uint64_t{1} << 30, 2 * data_bytes);

  std::printf("store_bench: %" PRIu64 " items of %zu B (%.0f MiB), RAM budget %.1f MiB (%.0f%%), "
              "disk budget %.0f MiB, %" PRIu64 " epoch(s), %d repetition(s)\n",
              items, setup.item_bytes, data_bytes / 1048576.0, setup.ram_bytes / 1048576.0,
              100.0 * setup.ram_bytes / data_bytes, setup.disk_bytes / 1048576.0, epochs, reps);
  bench::PrintMachine(machine);
  std::printf("store directory: %s (%s%s)\n", work.c_str(), fs_note.c_str(), fs.c_str());
  if (in_memory) {
    std::printf("WARNING: %s is in memory: there is no device to wait for; the figures are "
                "the CPU ceiling, not the disk's\n",
                base.c_str());
  }

  // ---------------------------------------------------------------- fill
  Expected expected;
  expected.item_bytes = setup.item_bytes;
  expected.sums.resize(items);
  double fill_s = 0, hit_ns = 0, hit_mean_ns = 0;
  uint64_t hit_items = 0;
  StoreStats fill_stats;
  {
    StoreOptions o = BaseOptions(setup);
    o.dataset_size = items;
    o.error_if_exists = true;
    std::unique_ptr<Store> store;
    Status s = Store::Open(o, setup.path, &store);
    if (!s.ok()) Die(s, "create");
    std::string payload;
    bench::Stopwatch sw;
    for (ItemId id = 0; id < items; ++id) {
      MakePayload(id, setup.item_bytes, &payload);
      expected.sums[id] = Checksum(payload.data(), payload.size());
      s = store->Put(kNoPosition, id, MetaOf(id), payload);
      if (!s.ok()) Die(s, "put");
    }
    s = store->Flush();
    if (!s.ok()) Die(s, "flush");
    fill_s = sw.WallSeconds();
    fill_stats = store->Stats();
    if (fill_stats.disk_items != items) {
      std::printf("ERROR: the disk tier holds %" PRIu64 " of %" PRIu64 " items\n",
                  fill_stats.disk_items, items);
      return 1;
    }
    // 1b: the cost of a plain RAM hit, on the items the fill left resident.
    BufferSink sink(setup.item_bytes);
    std::vector<ItemId> resident;
    const uint64_t fit = setup.ram_bytes / setup.item_bytes;
    for (ItemId id = 0; id < std::min<uint64_t>(items, fit + 8); ++id) {
      GetSource src = GetSource::kMiss;
      s = store->Get(kNoPosition, id, &sink, &src);
      if (s.ok() && src == GetSource::kRam) resident.push_back(id);
    }
    std::vector<double> ns;
    std::mt19937 rng(7);
    uint64_t wrong = 0;
    for (int pass = 0; pass < kHitPasses; ++pass) {
      std::shuffle(resident.begin(), resident.end(), rng);
      for (ItemId id : resident) {
        GetSource src = GetSource::kMiss;
        const int64_t t0 = NowNs();
        s = store->Get(kNoPosition, id, &sink, &src);
        ns.push_back(static_cast<double>(NowNs() - t0));
        if (!s.ok() || src != GetSource::kRam ||
            !expected.Check(id, sink.meta(), sink.payload())) {
          ++wrong;
        }
      }
    }
    hit_items = resident.size();
    hit_ns = bench::Median(ns);
    hit_mean_ns = ns.empty() ? 0 : std::accumulate(ns.begin(), ns.end(), 0.0) / ns.size();
    if (resident.empty() || wrong > 0) {
      std::printf("ERROR: RAM-hit measure: %zu resident items, %" PRIu64 " wrong reads\n",
                  resident.size(), wrong);
      return 1;
    }
    s = store->Close();
    if (!s.ok()) Die(s, "close after the fill");
  }
  const int dropped = DropSegmentCache(setup.path);
  std::printf("fill: %" PRIu64 " Puts in %.1f s (%.0f MB/s incl. generating), %" PRIu64
              " segments, page cache dropped for %d segment files\n",
              items, fill_s, data_bytes / 1e6 / fill_s, fill_stats.disk_segments, dropped);
  std::printf("disk tier: io_uring %s, O_DIRECT %s, index %.1f B per stored item\n",
              fill_stats.io_uring ? "on" : "OFF", fill_stats.direct_io ? "on" : "OFF",
              fill_stats.disk_index_bytes_per_item);
  std::printf("RAM hit (Get of a resident item into a reused buffer, no plan): median %.1f us, "
              "mean %.1f us, over %d passes of %" PRIu64 " items (%.2f GB/s)\n",
              hit_ns / 1e3, hit_mean_ns / 1e3, kHitPasses, hit_items,
              setup.item_bytes / hit_ns);

  // ---------------------------------------------------------- steps 2 and 3
  std::vector<RowKey> rows;
  for (uint64_t d : depths) {
    for (double m : speeds) rows.push_back({d, "on-demand", m, ""});
    rows.push_back({d, "qd32", 1.0, ""});
  }
  // A diagnostic of the goal's row: a consumer that leaves its core free.
  rows.push_back({kDefaultDepth, "on-demand", 1.0, "sleep"});
  rows.push_back({kDefaultDepth, "on-demand", 1.0, "catchup"});
  rows.push_back({kDefaultDepth, "qd32", 1.0, "catchup"});
  std::vector<DiskSpeed> speeds_seen;
  std::vector<RunResult> runs;
  uint64_t wrong = 0, errors = 0;
  for (int rep = 0; rep < reps; ++rep) {
    std::printf("\n=== repetition %d of %d (load average %s)\n", rep + 1, reps,
                bench::LoadAverage().c_str());
    const DiskSpeed d = MeasureDisk(setup, expected, 100 + rep);
    speeds_seen.push_back(d);
    wrong += d.wrong;
    errors += d.errors;
    std::printf("disk speed: on demand (Get, 1 in flight) %.1f MiB/s = %.0f items/s, latency "
                "median %.0f us, p99 %.0f us | MultiGet QD 32: %.1f MiB/s in batches of 1024, "
                "%.1f MiB/s in batches of 32%s\n",
                d.ondemand_bytes_per_s / 1048576, d.ondemand_items_per_s, d.ondemand_median_us,
                d.ondemand_p99_us, d.qd32_bytes_per_s / 1048576,
                d.qd32_batch32_bytes_per_s / 1048576,
                (d.wrong || d.errors)
                    ? Fmt(" WRONG %" PRIu64 " ERRORS %" PRIu64, d.wrong, d.errors).c_str()
                    : "");
    PrintRunHeader();
    for (size_t k = 0; k < rows.size(); ++k) {
      const size_t i = rep % 2 == 0 ? k : rows.size() - 1 - k;
      const RowKey& key = rows[i];
      const double base_speed =
          key.basis == "qd32" ? d.qd32_bytes_per_s : d.ondemand_bytes_per_s;
      DropSegmentCache(setup.path);
      RunResult r = RunReader(setup, expected, key, key.mult * base_speed, hit_ns,
                              1000 * (rep + 1) + i, rep);
      wrong += r.wrong;
      errors += r.errors + r.n_miss;
      PrintRun(r);
      runs.push_back(r);
    }
  }

  // ---------------------------------------------------------------- summary
  std::printf("\n=== wait share per row over %d repetition(s): median [min .. max]; the other "
              "columns are medians\n", reps);
  std::printf("  %-32s %-24s %6s %6s %6s %6s %5s %8s %7s %7s %7s %5s %6s %5s\n", "row",
              "wait share", "T us", "ram", "disk", "pref", "dup", "rq-dly s", "gaps s", "asleep",
              "late s", "eff x", "oth cp", "m.oth");
  std::map<RowKey, std::vector<const RunResult*>> by_row;
  for (const RunResult& r : runs) by_row[r.key].push_back(&r);
  double goal_share = -1, goal_eff = 0;
  std::map<RowKey, std::vector<double>> shares, effs;
  for (const RowKey& key : rows) {
    const auto& rs = by_row[key];
    std::vector<double> share, t, ram, disk, pref, dup, delay, gaps, asleep, late, eff, oth, moth;
    for (const RunResult* r : rs) {
      share.push_back(r->wait_share);
      t.push_back(r->t_us);
      ram.push_back(static_cast<double>(r->n_ram));
      disk.push_back(static_cast<double>(r->n_disk));
      pref.push_back(static_cast<double>(r->stats.prefetched));
      dup.push_back(static_cast<double>(r->wasted_prefetch));
      delay.push_back(r->run_delay_s);
      gaps.push_back(r->spin_gaps_s);
      asleep.push_back(r->asleep_s);
      late.push_back(r->consume_late_s);
      eff.push_back(r->effective_mult);
      oth.push_back(r->others_cpu_s);
      moth.push_back(r->machine_other_cores);
    }
    shares[key] = share;
    effs[key] = eff;
    std::printf("  %-32s %6.1f%% [%5.1f .. %5.1f] %6.1f %6.0f %6.0f %6.0f %5.0f %8.3f %7.3f %7.3f "
                "%7.3f %5.2f %6.2f %5.2f\n",
                key.Name().c_str(), 100 * bench::Median(share), 100 * bench::Min(share),
                100 * bench::Max(share), bench::Median(t), bench::Median(ram),
                bench::Median(disk), bench::Median(pref), bench::Median(dup),
                bench::Median(delay), bench::Median(gaps),
                key.variant == "sleep" ? 0.0 : bench::Median(asleep), bench::Median(late),
                bench::Median(eff), bench::Median(oth), bench::Median(moth));
    if (key.depth == kDefaultDepth && key.basis == "on-demand" && key.mult == 1.0 &&
        key.variant.empty()) {
      goal_share = bench::Median(share);
      goal_eff = bench::Median(eff);
      // Where the goal row's wait went, per repetition.
      for (const RunResult* r : rs) {
        // RAM Gets: the typical one's excess over the baseline hit, times
        // their number; the rest of their wait is the slow tail.
        const double typical =
            r->n_ram * std::max(0.0, r->ram_get_median_us * 1e3 - hit_ns) / 1e9;
        std::printf("    rep %d: wait %.3f s of %.3f s = %.3f s in %" PRIu64 " Gets served from "
                    "disk + %.3f s in Gets served from RAM (%.3f s as every RAM Get's median "
                    "%.1f us vs the %.1f us hit, %.3f s in a tail: %" PRIu64 " RAM Gets over "
                    "100 us); the reader slept %" PRId64 " times (in Gets), was preempted %" PRId64
                    " times, runnable without a CPU %.3f s; other processes %.2f cores, host "
                    "steal %.2f cores\n",
                    r->rep + 1, r->wait_s, r->wall_s, r->wait_disk_s, r->n_disk, r->wait_ram_s,
                    typical, r->ram_get_median_us, hit_ns / 1e3, r->wait_ram_s - typical,
                    r->slow_ram, r->voluntary_switches, r->involuntary_switches,
                    r->run_delay_s, r->machine_other_cores, r->machine_steal_cores);
      }
    }
  }
  std::vector<double> od, q1024, q32;
  for (const DiskSpeed& d : speeds_seen) {
    od.push_back(d.ondemand_bytes_per_s / 1048576);
    q1024.push_back(d.qd32_bytes_per_s / 1048576);
    q32.push_back(d.qd32_batch32_bytes_per_s / 1048576);
  }
  std::printf("disk speed, MiB/s, median [min .. max]: on demand %.1f [%.1f .. %.1f]; QD 32 "
              "batches of 1024 %.1f [%.1f .. %.1f]; batches of 32 %.1f [%.1f .. %.1f]\n",
              bench::Median(od), bench::Min(od), bench::Max(od), bench::Median(q1024),
              bench::Min(q1024), bench::Max(q1024), bench::Median(q32), bench::Min(q32),
              bench::Max(q32));

  // ---------------------------------------------------------------- RAM per id
  std::printf("\n=== RAM per dataset id\n");
  std::printf("Stats() after the fill: ram_bytes_per_item %" PRIu64
              " B (shared table + owner state), disk_index_bytes_per_item %.1f B\n",
              fill_stats.ram_bytes_per_item, fill_stats.disk_index_bytes_per_item);
  const uint64_t small_ids = 1000;
  struct RssDelta {
    bool plan = false;
    bool ok = false;
    double total = 0, anon = 0, shm = 0, file = 0, hwm = 0;
    uint64_t stats_bpi = 0;
  };
  std::vector<RssDelta> rss;
  for (bool plan : {false, true}) {
    RssSample a = RunRssChild(exe, work + "/rss-small", small_ids, plan);
    RssSample b = RunRssChild(exe, work + "/rss-large", rss_ids, plan);
    RssDelta d;
    d.plan = plan;
    d.ok = a.ok && b.ok;
    if (d.ok) {
      const double n = static_cast<double>(rss_ids - small_ids);
      auto per = [&](long a0, long a1, long b0, long b1) {
        return 1024.0 * static_cast<double>((b1 - b0) - (a1 - a0)) / n;
      };
      d.total = per(a.rss0, a.rss1, b.rss0, b.rss1);
      d.anon = per(a.anon0, a.anon1, b.anon0, b.anon1);
      d.shm = per(a.shm0, a.shm1, b.shm0, b.shm1);
      d.file = per(a.file0, a.file1, b.file0, b.file1);
      d.hwm = per(a.rss0, a.hwm1, b.rss0, b.hwm1);
      d.stats_bpi = b.stats_ram_bytes_per_item;
      std::printf("RSS growth of Open, %s: %.1f B per id (anon %.1f, shmem %.1f, file %.1f; "
                  "peak %.1f) from %" PRIu64 " vs %" PRIu64 " ids; Stats().ram_bytes_per_item "
                  "%" PRIu64 " B\n",
                  plan ? "with a 2-epoch shuffle plan" : "no plan", d.total, d.anon, d.shm,
                  d.file, d.hwm, rss_ids, small_ids, d.stats_bpi);
    } else {
      std::printf("RSS growth of Open, %s: the child failed\n", plan ? "with plan" : "no plan");
      ++errors;
    }
    rss.push_back(d);
  }
  std::printf("from the code: RAM tier table 16 (shared) + handle 4 + control block 24 "
              "(shared: expected position 8, record place 16) + store owner 16 (pending lists "
              "8, prefetch pins 4, sizes 4) = 60 B, what Stats() reports (shared pages count "
              "in RSS once touched); plus the disk "
              "index 20 B per id (+4 B heap slot per stored item), the on-disk bit; with a plan "
              "opt's state_ 8 + costs_ 8 B per id, the next-use stream's last_ 8 B per id and "
              "8 B per plan position in its window, opt's slot_id_ 4 B per ring slot; "
              "CacheLib's flash index: 12 B per item\n");

  const bool goal_met = goal_share >= 0 && goal_share <= kGoalWaitShare;
  std::printf("\nsummary: reader at 1x on-demand disk speed, prefetch depth %" PRIu64
              ": waits %.1f%% of the time (median of %d; range %.1f .. %.1f); goal <= %.0f%% "
              "%s; it consumed at %.2fx in effect (steps ran late when it lost its CPU)\n",
              kDefaultDepth, 100 * goal_share, reps,
              100 * bench::Min(shares[RowKey{kDefaultDepth, "on-demand", 1.0, ""}]),
              100 * bench::Max(shares[RowKey{kDefaultDepth, "on-demand", 1.0, ""}]),
              100 * kGoalWaitShare,
              goal_share < 0 ? "NOT MEASURED" : (goal_met ? "MET" : "MISSED"), goal_eff);
  {
    const RowKey strict{kDefaultDepth, "qd32", 1.0, ""};
    if (shares.count(strict)) {
      std::printf("summary: reader at 1x QD-32 throughput, depth %" PRIu64
                  ": waits %.1f%% (median; range %.1f .. %.1f; %.2fx in effect)\n",
                  kDefaultDepth, 100 * bench::Median(shares[strict]),
                  100 * bench::Min(shares[strict]), 100 * bench::Max(shares[strict]),
                  bench::Median(effs[strict]));
    }
  }
  for (const char* basis : {"on-demand", "qd32"}) {
    const RowKey k{kDefaultDepth, basis, 1.0, "catchup"};
    if (shares.count(k)) {
      std::printf("summary: the same reader held at exactly 1x %s speed on average (catchup), "
                  "depth %" PRIu64 ": waits %.1f%% (median; range %.1f .. %.1f; %.2fx in effect)\n",
                  basis, kDefaultDepth, 100 * bench::Median(shares[k]),
                  100 * bench::Min(shares[k]), 100 * bench::Max(shares[k]),
                  bench::Median(effs[k]));
    }
  }
  if (rss.size() == 2 && rss[1].ok) {
    std::printf("summary: RAM per id %.1f B with a plan (%.1f B without), measured as RSS; "
                "Stats() says %" PRIu64 " + disk index %.1f B; CacheLib's flash index: 12 B\n",
                rss[1].total, rss[0].total, fill_stats.ram_bytes_per_item,
                fill_stats.disk_index_bytes_per_item);
  }
  if (wrong || errors) {
    std::printf("FAILURE: %" PRIu64 " wrong reads, %" PRIu64 " failed reads or misses\n", wrong,
                errors);
  }

  if (!args.json.empty()) {
    bench::Json j;
    j["benchmark"] = "store_bench";
    j["machine"] = bench::MachineJson(machine);
    j["directory_fs"] = fs;
    j["items"] = items;
    j["item_bytes"] = setup.item_bytes;
    j["ram_bytes"] = setup.ram_bytes;
    j["disk_bytes"] = setup.disk_bytes;
    j["epochs"] = epochs;
    j["reps"] = reps;
    j["fill_seconds"] = fill_s;
    j["ram_hit_median_ns"] = hit_ns;
    j["ram_hit_mean_ns"] = hit_mean_ns;
    j["disk_speed"] = bench::Json::array();
    for (const DiskSpeed& d : speeds_seen) {
      j["disk_speed"].push_back(
          {{"ondemand_bytes_per_s", d.ondemand_bytes_per_s},
           {"ondemand_items_per_s", d.ondemand_items_per_s},
           {"ondemand_median_us", d.ondemand_median_us},
           {"ondemand_p99_us", d.ondemand_p99_us},
           {"multiget_qd32_batch1024_bytes_per_s", d.qd32_bytes_per_s},
           {"multiget_qd32_batch32_bytes_per_s", d.qd32_batch32_bytes_per_s}});
    }
    j["runs"] = bench::Json::array();
    for (const RunResult& r : runs) {
      bench::Json run;
      run["rep"] = r.rep;
      run["prefetch_depth"] = r.key.depth;
      run["variant"] = r.key.variant;
      run["speed_basis"] = r.key.basis;
      run["speed_multiple"] = r.key.mult;
      run["consume_bytes_per_s"] = r.speed_bytes_per_s;
      run["t_us"] = r.t_us;
      run["reads"] = r.reads;
      run["wall_s"] = r.wall_s;
      run["get_s"] = r.get_s;
      run["wait_s"] = r.wait_s;
      run["wait_share"] = r.wait_share;
      run["wait_ram_s"] = r.wait_ram_s;
      run["wait_disk_s"] = r.wait_disk_s;
      run["source_ram"] = r.n_ram;
      run["source_disk"] = r.n_disk;
      run["source_miss"] = r.n_miss;
      run["ram_get_median_us"] = r.ram_get_median_us;
      run["first_get_ms"] = r.first_get_ms;
      run["prefetched"] = r.stats.prefetched;
      run["stats_waits"] = r.stats.waits;
      run["stats_wait_ns"] = r.stats.wait_ns;
      run["stats_hits_disk"] = r.stats.hits_disk;
      run["ram_insert_failures"] = r.stats.ram_insert_failures;
      run["reader_cpu_s"] = r.reader_cpu_s;
      run["others_cpu_s"] = r.others_cpu_s;
      run["reader_run_delay_s"] = r.run_delay_s;
      run["machine_other_cores"] = r.machine_other_cores;
      run["machine_steal_cores"] = r.machine_steal_cores;
      run["reader_asleep_s"] = r.asleep_s;
      run["spin_gaps_s"] = r.spin_gaps_s;
      run["voluntary_switches"] = r.voluntary_switches;
      run["involuntary_switches"] = r.involuntary_switches;
      run["slow_ram_gets"] = r.slow_ram;
      run["slow_disk_gets"] = r.slow_disk;
      run["effective_speed_multiple"] = r.effective_mult;
      run["consume_late_s"] = r.consume_late_s;
      run["wasted_prefetch"] = r.wasted_prefetch;
      run["checks_over_t"] = r.overruns;
      run["wrong"] = r.wrong;
      run["errors"] = r.errors;
      j["runs"].push_back(std::move(run));
    }
    bench::Json& per_id = j["ram_per_id"];
    per_id["stats_ram_bytes_per_item"] = fill_stats.ram_bytes_per_item;
    per_id["stats_disk_index_bytes_per_item"] = fill_stats.disk_index_bytes_per_item;
    per_id["rss_ids"] = rss_ids;
    per_id["rss_baseline_ids"] = small_ids;
    for (const RssDelta& d : rss) {
      per_id[d.plan ? "rss_with_plan" : "rss_no_plan"] = {{"ok", d.ok},
                                                          {"bytes_per_id", d.total},
                                                          {"anon", d.anon},
                                                          {"shmem", d.shm},
                                                          {"file", d.file},
                                                          {"peak", d.hwm}};
    }
    per_id["cachelib_flash_index_bytes_per_item"] = 12;
    j["goal_wait_share"] = kGoalWaitShare;
    j["measured_wait_share"] = goal_share;
    j["goal_met"] = goal_met;
    j["wrong"] = wrong;
    j["errors"] = errors;
    if (!bench::WriteJson(std::move(j), args.json)) {
      std::fprintf(stderr, "store_bench: cannot write %s\n", args.json.c_str());
      return 3;
    }
    std::printf("wrote %s\n", args.json.c_str());
  }
  std::error_code ec;
  if (!keep) std::filesystem::remove_all(work, ec);
  if (wrong || errors) return 1;
  if (args.enforce_goals && !goal_met) return 2;
  return 0;
}
