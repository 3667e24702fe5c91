// ram_bench: RAM-tier read bandwidth against plain memcpy.
//
// The requirement it measures (bench/RAM.md): "RAM-tier reads of 150 KiB
// samples, one thread: at least 80% of memcpy bandwidth on the same machine."
//
// Method. One pool of N items of 150 KiB (2 GiB by default, far beyond the
// 32 MiB L3) is built twice: as a plain anonymous mapping (the baseline) and
// as a RamTier in /dev/shm holding the same bytes. A seeded random order of
// the N items is drawn once. Each repetition times, in one thread:
//   memcpy  std::memcpy of each item of the plain pool, in that order,
//           into the destination;
//   read    RamTier::Read of each item, same order, through a ReadSink that
//           hands out the same destination (the path a binding takes: Peek,
//           one copy into the caller's buffer, validation, stats).
// The passes alternate within each repetition (memcpy, read, prefetched
// read; then the reverse order in the next repetition), so all see the same
// machine noise and none always runs first; the medians over repetitions
// are reported, and the ratio read/memcpy of each repetition. Two destinations:
//   hot     one 150 KiB buffer, reused (stays in L2: the source side is the
//           cost), the case of a caller that recycles a pinned buffer;
//   cold    a ring of destinations totalling 256 MiB (each copy writes lines
//           not in cache), the case of a fresh tensor per sample.
// Each repetition also times a third pass: Read with PrefetchEntry 16 and
// PrefetchData 8 items ahead, as a Store that follows its plan can do.
// Then a fresh handle (Attach: a new mapping with no page tables yet, as a
// spawned or forked worker has) reads every item once, and another does the
// same after MapAllPages().
// A last measure times 64-byte items (N = 1M, random order) to show the
// fixed cost of a Read in ns, against a 64-byte memcpy.
// After the timed passes, 256 random items are read again and compared byte
// for byte with the pool; a difference exits 1.
//
// Exit status: 1 on a wrong byte, 2 with --enforce-goals when read/memcpy <
// 0.80 (hot or cold), 3 on an error.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "bench_common.h"
#include "opt4store/sizes.h"
#include "opt4store/status.h"
#include "tiers/ram_tier.h"

namespace opt4store {
namespace {

using bench::Fmt;

constexpr uint64_t kItemBytes = 150 * 1024;
constexpr double kGoalRatio = 0.80;
constexpr uint64_t kColdRingBytes = 256ull << 20;

inline void Clobber(void* p) { asm volatile("" : : "r"(p) : "memory"); }

// Hands out destinations from a ring (or always the same one).
class RingSink : public ReadSink {
 public:
  RingSink(char* base, uint64_t slots, uint64_t slot_bytes)
      : base_(base), slots_(slots), slot_bytes_(slot_bytes) {}
  Status Prepare(uint64_t meta_size, uint64_t payload_size, void** meta_dst,
                 void** payload_dst) override {
    if (payload_size > slot_bytes_ || meta_size > sizeof meta_) {
      return Status::InvalidArgument("item larger than the benchmark's buffers");
    }
    *payload_dst = base_ + next_ * slot_bytes_;
    *meta_dst = meta_;
    return Status::OK();
  }
  void Advance() {
    if (++next_ == slots_) next_ = 0;
  }
  char* Current() const { return base_ + next_ * slot_bytes_; }

 private:
  char* base_;
  uint64_t slots_, slot_bytes_, next_ = 0;
  char meta_[256];
};

char* MapAnonymous(uint64_t bytes) {
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    std::perror("mmap");
    std::exit(3);
  }
  return static_cast<char*>(p);
}

void FillItem(uint64_t id, char* dst, uint64_t bytes) {
  uint64_t x = id * 0x9E3779B97F4A7C15ULL + 1;
  for (uint64_t i = 0; i + 8 <= bytes; i += 8) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    std::memcpy(dst + i, &x, 8);
  }
}

struct PairResult {
  std::string name;
  std::vector<double> memcpy_gbps, read_gbps, ratio, prefetched_gbps, prefetched_ratio;
  double memcpy_median = 0, read_median = 0, ratio_median = 0;
  double prefetched_median = 0, prefetched_ratio_median = 0;
};

// How far ahead the prefetched pass hints the entry and the data.
constexpr size_t kEntryAhead = 16;
constexpr size_t kDataAhead = 8;

// Times, per repetition, a memcpy pass, a Read pass, and a Read pass with
// PrefetchEntry/PrefetchData hints ahead (what a Store that follows its
// plan can do); returns GB/s.
PairResult RunPair(const std::string& name, RamTier* tier, const char* pool,
                   const std::vector<ItemId>& order, uint64_t item_bytes, RingSink* sink, int reps,
                   bool* error) {
  PairResult r;
  r.name = name;
  const double bytes = static_cast<double>(order.size()) * static_cast<double>(item_bytes);
  const size_t n = order.size();
  // Pass 0: memcpy; 1: Read; 2: Read with prefetch hints. Returns seconds.
  auto run = [&](int pass) -> double {
    bench::Stopwatch sw;
    for (size_t i = 0; i < n; ++i) {
      const ItemId id = order[i];
      if (pass == 0) {
        std::memcpy(sink->Current(), pool + static_cast<uint64_t>(id) * item_bytes, item_bytes);
      } else {
        if (pass == 2) {
          if (i + kEntryAhead < n) tier->PrefetchEntry(order[i + kEntryAhead]);
          if (i + kDataAhead < n) tier->PrefetchData(order[i + kDataAhead]);
        }
        Status s = tier->Read(id, sink);
        if (!s.ok()) {
          std::fprintf(stderr, "ram_bench: Read(%u): %s\n", id, s.ToString().c_str());
          *error = true;
          return 1;
        }
      }
      Clobber(sink->Current());
      sink->Advance();
    }
    return sw.WallSeconds();
  };
  for (int rep = 0; rep < reps && !*error; ++rep) {
    // Alternate the order of the passes (0 1 2, then 2 1 0) so that no
    // pass always runs first or last.
    double t[3];
    for (int k = 0; k < 3; ++k) {
      const int pass = rep % 2 == 0 ? k : 2 - k;
      t[pass] = run(pass);
    }
    r.memcpy_gbps.push_back(bytes / t[0] / 1e9);
    r.read_gbps.push_back(bytes / t[1] / 1e9);
    r.ratio.push_back(t[0] / t[1]);
    r.prefetched_gbps.push_back(bytes / t[2] / 1e9);
    r.prefetched_ratio.push_back(t[0] / t[2]);
  }
  r.memcpy_median = bench::Median(r.memcpy_gbps);
  r.read_median = bench::Median(r.read_gbps);
  r.ratio_median = bench::Median(r.ratio);
  r.prefetched_median = bench::Median(r.prefetched_gbps);
  r.prefetched_ratio_median = bench::Median(r.prefetched_ratio);
  return r;
}

Status BuildTier(uint64_t items, uint64_t item_bytes, const char* pool,
                 std::unique_ptr<RamTier>* tier) {
  RamTierOptions o;
  o.capacity_bytes = items * item_bytes;
  o.num_items = items;
  o.name_prefix = "opt4store-ram-bench";
  OPT4STORE_RETURN_IF_ERROR(RamTier::Create(o, tier));
  for (uint64_t id = 0; id < items; ++id) {
    OPT4STORE_RETURN_IF_ERROR(
        (*tier)->Insert(static_cast<ItemId>(id), nullptr, 0, pool + id * item_bytes, item_bytes));
  }
  return Status::OK();
}

int Main(int argc, char** argv) {
  bench::Args args = bench::ParseArgs(
      argc, argv,
      "  --pool-mib N     bytes of 150 KiB items in each pool (default 2048; 256 with --quick)\n"
      "RAM-tier Read of 150 KiB items against memcpy of the same items, one thread.");
  uint64_t pool_mib = args.quick ? 256 : 2048;
  for (size_t i = 0; i < args.rest.size(); ++i) {
    if (args.rest[i] == "--pool-mib" && i + 1 < args.rest.size()) {
      pool_mib = std::strtoull(args.rest[++i].c_str(), nullptr, 10);
    } else {
      std::fprintf(stderr, "ram_bench: unknown argument %s\n", args.rest[i].c_str());
      return 64;
    }
  }
  const int reps = args.reps > 0 ? args.reps : (args.quick ? 3 : 7);
  const uint64_t items = (pool_mib << 20) / kItemBytes;
  const uint64_t pool_bytes = items * kItemBytes;

  const bench::MachineInfo machine = bench::GetMachineInfo();
  std::printf("ram_bench%s: %" PRIu64
              " items of 150 KiB (%s per pool), random order, "
              "%d repetitions, one thread\n",
              args.quick ? " --quick" : "", items, FormatSize(pool_bytes).c_str(), reps);
  bench::PrintMachine(machine);

  // The baseline pool, and the same bytes in the RAM tier.
  char* pool = MapAnonymous(pool_bytes);
  for (uint64_t id = 0; id < items; ++id) FillItem(id, pool + id * kItemBytes, kItemBytes);
  std::unique_ptr<RamTier> tier;
  bench::Stopwatch build;
  Status s = BuildTier(items, kItemBytes, pool, &tier);
  if (!s.ok()) {
    std::fprintf(stderr, "ram_bench: %s\n", s.ToString().c_str());
    return 3;
  }
  std::printf("RAM tier %s: built in %.2f s (creation reserves every page)\n", tier->name().c_str(),
              build.WallSeconds());

  std::vector<ItemId> order(items);
  for (uint64_t i = 0; i < items; ++i) order[i] = static_cast<ItemId>(i);
  std::shuffle(order.begin(), order.end(), std::mt19937_64(42));

  char* hot = MapAnonymous(kItemBytes);
  std::memset(hot, 1, kItemBytes);
  const uint64_t cold_slots = kColdRingBytes / kItemBytes;
  char* cold = MapAnonymous(cold_slots * kItemBytes);
  std::memset(cold, 1, cold_slots * kItemBytes);
  RingSink hot_sink(hot, 1, kItemBytes);
  RingSink cold_sink(cold, cold_slots, kItemBytes);

  bool error = false;
  std::vector<PairResult> results;
  results.push_back(RunPair("hot", tier.get(), pool, order, kItemBytes, &hot_sink, reps, &error));
  if (!error) {
    results.push_back(
        RunPair("cold", tier.get(), pool, order, kItemBytes, &cold_sink, reps, &error));
  }
  if (error) return 3;

  // A fresh mapping (what a spawned or forked worker has): first pass with
  // lazy page-table faults, then with MapAllPages() first.
  double fresh_gbps = 0, mapped_gbps = 0, map_seconds = 0;
  for (int k = 0; k < 2 && !error; ++k) {
    std::unique_ptr<RamTier> fresh;
    s = RamTier::Attach(tier->name(), &fresh);
    if (!s.ok()) {
      std::fprintf(stderr, "ram_bench: %s\n", s.ToString().c_str());
      return 3;
    }
    bench::Stopwatch sw;
    if (k == 1) {
      s = fresh->MapAllPages();
      if (!s.ok()) {
        std::fprintf(stderr, "ram_bench: %s\n", s.ToString().c_str());
        return 3;
      }
      map_seconds = sw.WallSeconds();
      sw.Restart();
    }
    for (ItemId id : order) {
      if (!fresh->Read(id, &hot_sink).ok()) error = true;
      Clobber(hot_sink.Current());
    }
    (k == 0 ? fresh_gbps : mapped_gbps) = static_cast<double>(pool_bytes) / sw.WallSeconds() / 1e9;
  }
  if (error) return 3;

  // Fixed cost: 64-byte items.
  const uint64_t small_items = args.quick ? 100000 : 1000000;
  const uint64_t small_bytes = 64;
  char* small_pool = MapAnonymous(small_items * small_bytes);
  for (uint64_t id = 0; id < small_items; ++id) {
    FillItem(id, small_pool + id * small_bytes, small_bytes);
  }
  std::unique_ptr<RamTier> small_tier;
  s = BuildTier(small_items, small_bytes, small_pool, &small_tier);
  if (!s.ok()) {
    std::fprintf(stderr, "ram_bench: %s\n", s.ToString().c_str());
    return 3;
  }
  std::vector<ItemId> small_order(small_items);
  for (uint64_t i = 0; i < small_items; ++i) small_order[i] = static_cast<ItemId>(i);
  std::shuffle(small_order.begin(), small_order.end(), std::mt19937_64(43));
  RingSink small_sink(hot, 1, small_bytes);
  PairResult small = RunPair("64 B", small_tier.get(), small_pool, small_order, small_bytes,
                             &small_sink, reps, &error);
  if (error) return 3;
  const double small_memcpy_ns = small_bytes / small.memcpy_median;  // bytes / (GB/s) = ns
  const double small_read_ns = small_bytes / small.read_median;
  const double small_prefetched_ns = small_bytes / small.prefetched_median;

  // Correctness: random items, byte for byte.
  uint64_t wrong = 0;
  std::mt19937_64 rng(7);
  for (int i = 0; i < 256; ++i) {
    const ItemId id = static_cast<ItemId>(rng() % items);
    StringSink sink;
    if (!tier->Read(id, &sink).ok() || sink.payload.size() != kItemBytes ||
        std::memcmp(sink.payload.data(), pool + uint64_t{id} * kItemBytes, kItemBytes) != 0) {
      ++wrong;
    }
  }
  const RamTierStats stats = tier->Stats();

  std::printf("\n%-6s %12s %12s %12s %18s %20s\n", "dest", "memcpy GB/s", "Read GB/s",
              "Read/memcpy", "ratio min..max", "prefetched Read");
  bool goal_met = true;
  for (const PairResult& r : results) {
    const bool met = r.ratio_median >= kGoalRatio;
    goal_met = goal_met && met;
    std::printf("%-6s %12.2f %12.2f %11.1f%% %8.1f%%..%.1f%% %10.2f GB/s %5.1f%%  %s\n",
                r.name.c_str(), r.memcpy_median, r.read_median, 100 * r.ratio_median,
                100 * bench::Min(r.ratio), 100 * bench::Max(r.ratio), r.prefetched_median,
                100 * r.prefetched_ratio_median, met ? "goal MET" : "goal MISSED");
  }
  std::printf(
      "64-byte items, random order: memcpy %.1f ns, Read %.1f ns, Read with "
      "PrefetchEntry/PrefetchData ahead %.1f ns per item\n",
      small_memcpy_ns, small_read_ns, small_prefetched_ns);
  std::printf(
      "fresh mapping (Attach), first pass, hot destination: %.2f GB/s; after "
      "MapAllPages() (%.2f s for %s): %.2f GB/s\n",
      fresh_gbps, map_seconds, FormatSize(pool_bytes).c_str(), mapped_gbps);
  std::printf("RAM tier stats: %" PRIu64 " hits, %" PRIu64 " bytes copied, %" PRIu64
              " retries; %" PRIu64 " B of shared state per item; segment %s\n",
              stats.hits, stats.bytes_copied, stats.retries, stats.table_bytes_per_item,
              FormatSize(stats.segment_bytes).c_str());
  std::printf("byte-for-byte check of 256 random items: %s\n", wrong ? "WRONG BYTES" : "ok");
  std::printf(
      "\nsummary: Read of 150 KiB items = %.1f%% (hot destination) and %.1f%% (cold) of "
      "memcpy bandwidth; goal >= 80%% %s\n",
      100 * results[0].ratio_median, 100 * results[1].ratio_median, goal_met ? "MET" : "MISSED");

  if (!args.json.empty()) {
    bench::Json j;
    j["benchmark"] = "ram_bench";
    j["quick"] = args.quick;
    j["machine"] = bench::MachineJson(machine);
    j["method"] =
        "one thread; N items of 150 KiB in a plain anonymous mapping and in a RamTier; "
        "per repetition a memcpy pass then a RamTier::Read pass over the same seeded random "
        "order into the same destination(s); medians over repetitions";
    j["item_bytes"] = kItemBytes;
    j["items"] = items;
    j["pool_bytes"] = pool_bytes;
    j["repetitions"] = reps;
    j["goal_ratio"] = kGoalRatio;
    j["goal_met"] = goal_met;
    j["bytes_ok"] = wrong == 0;
    j["results"] = bench::Json::array();
    for (const PairResult& r : results) {
      j["results"].push_back({{"destination", r.name},
                              {"memcpy_gbps", r.memcpy_median},
                              {"read_gbps", r.read_median},
                              {"ratio", r.ratio_median},
                              {"ratio_min", bench::Min(r.ratio)},
                              {"ratio_max", bench::Max(r.ratio)},
                              {"prefetched_read_gbps", r.prefetched_median},
                              {"prefetched_ratio", r.prefetched_ratio_median},
                              {"memcpy_gbps_all", r.memcpy_gbps},
                              {"read_gbps_all", r.read_gbps}});
    }
    j["fresh_mapping"] = {{"first_pass_gbps", fresh_gbps},
                          {"map_all_pages_s", map_seconds},
                          {"first_pass_after_map_all_pages_gbps", mapped_gbps}};
    j["small_items"] = {{"item_bytes", small_bytes},
                        {"items", small_items},
                        {"memcpy_ns", small_memcpy_ns},
                        {"read_ns", small_read_ns},
                        {"prefetched_read_ns", small_prefetched_ns}};
    j["ram_tier"] = {{"hits", stats.hits},
                     {"retries", stats.retries},
                     {"table_bytes_per_item", stats.table_bytes_per_item},
                     {"segment_bytes", stats.segment_bytes}};
    if (!bench::WriteJson(std::move(j), args.json)) {
      std::fprintf(stderr, "ram_bench: cannot write %s\n", args.json.c_str());
      return 3;
    }
    std::printf("wrote %s\n", args.json.c_str());
  }
  if (wrong) return 1;
  if (args.enforce_goals && !goal_met) return 2;
  return 0;
}

}  // namespace
}  // namespace opt4store

int main(int argc, char** argv) { return opt4store::Main(argc, argv); }
