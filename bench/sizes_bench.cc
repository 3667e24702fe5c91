// sizes_bench: eviction with variable item sizes.
//
// Part 1, large plans: opt (furthest next use first), opt-size (largest
// size x time-to-next-use first), lru and static on skewed sizes, at byte
// capacities of 10%, 30% and 50% of the dataset's total bytes, on
// replacement and shuffled plans. Reports object hit rate (hits / reads) and
// byte hit rate (bytes hit / bytes read). Size models:
//   lognormal   size = exp(N(ln 64 KiB, 1.0)), rounded, at least 1 byte
//   two-class   90% of ids 16 KiB, 10% of ids 320 KiB (20x larger)
// Sizes are drawn from SplitMix64 (plan.h), so they are the same on every
// platform.
//
// Part 2, small cases: many random short sequences (3-9 ids, 8-32 reads)
// with random sizes and capacities, where the true optimum (maximum object
// hits, with bypass) is found by exhaustive search (exhaustive_opt.h). Reports
// each policy's mean gap to the optimum. Cases with uniform sizes double as a
// correctness check: there opt, and the reference Belady, must equal the
// optimum exactly (exit 1 otherwise); and no policy may ever beat it.
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "bench_common.h"
#include "tests/reference/exhaustive_opt.h"
#include "opt4store/item_sizes.h"
#include "opt4store/plan.h"
#include "opt4store/policy.h"
#include "opt4store/simulator.h"
#include "opt4store/status.h"
#include "tests/reference/reference_belady.h"

namespace opt4store {
namespace {

using bench::Fmt;

void CheckOk(const Status& s, const std::string& what) {
  if (!s.ok()) {
    std::fprintf(stderr, "sizes_bench: %s: %s\n", what.c_str(), s.ToString().c_str());
    std::exit(3);
  }
}

const std::vector<PolicyKind> kCompared = {PolicyKind::kOpt, PolicyKind::kOptSize,
                                           PolicyKind::kLru, PolicyKind::kStatic};

// A uniform double in [0, 1) from 53 random bits.
double Uniform01(SplitMix64* rng) { return static_cast<double>(rng->Next() >> 11) * 0x1.0p-53; }

// Standard normal by Box-Muller.
double Normal(SplitMix64* rng) {
  double u1 = Uniform01(rng);
  double u2 = Uniform01(rng);
  if (u1 < 1e-300) u1 = 1e-300;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

std::vector<uint64_t> LognormalSizes(uint64_t n, uint64_t seed) {
  SplitMix64 rng(Mix64(seed ^ 0x51235ull));
  const double mu = std::log(65536.0), sigma = 1.0;
  std::vector<uint64_t> sizes(n);
  for (auto& s : sizes) s = std::max<uint64_t>(1, std::llround(std::exp(mu + sigma * Normal(&rng))));
  return sizes;
}

std::vector<uint64_t> TwoClassSizes(uint64_t n, uint64_t seed) {
  SplitMix64 rng(Mix64(seed ^ 0x7c1a55ull));
  std::vector<uint64_t> sizes(n);
  for (auto& s : sizes) s = rng.Below(10) == 0 ? 20 * 16384 : 16384;
  return sizes;
}

// ---------------------------------------------------------------- part 1

struct LargeRow {
  std::string sizes, plan;
  double fraction = 0;
  uint64_t capacity = 0;
  PolicyKind kind = PolicyKind::kOpt;
  PolicyCounters counters;
  uint64_t reads = 0, bytes_read = 0, bytes_hit = 0;
  double seconds = 0;
  double hit_rate() const { return reads ? double(counters.hits) / double(reads) : 0; }
  double byte_hit_rate() const { return bytes_read ? double(bytes_hit) / double(bytes_read) : 0; }
};

std::vector<LargeRow> RunLarge(bool quick, uint64_t seed) {
  const uint64_t n = quick ? 10000 : 200000;
  const uint64_t epochs = quick ? 5 : 10;
  const std::vector<double> fractions = {0.10, 0.30, 0.50};
  struct SizeModel {
    std::string name;
    std::vector<uint64_t> sizes;
  };
  std::vector<SizeModel> models = {{"lognormal", LognormalSizes(n, seed)},
                                   {"two-class", TwoClassSizes(n, seed)}};
  std::vector<LargeRow> rows;
  for (const SizeModel& model : models) {
    ItemSizes sizes = ItemSizes::FromVector(model.sizes);
    for (SamplerKind plan_kind : {SamplerKind::kReplacement, SamplerKind::kShuffle}) {
      SimulationOptions options;
      options.plan.kind = plan_kind;
      options.plan.dataset_size = n;
      options.plan.epochs = epochs;
      options.plan.seed = seed;
      options.policies = kCompared;
      options.sizes = sizes;
      options.seed = seed;
      for (double f : fractions) {
        options.capacities.push_back(
            static_cast<uint64_t>(std::llround(f * static_cast<double>(sizes.Total()))));
      }
      std::fprintf(stderr, "  %s, %s...\n", model.name.c_str(), SamplerName(plan_kind));
      SimulationResult result;
      CheckOk(Simulate(options, &result), "Simulate " + options.plan.Describe());
      for (size_t c = 0; c < result.points.size(); ++c) {
        for (const PolicyResult& p : result.points[c].policies) {
          LargeRow row;
          row.sizes = model.name;
          row.plan = SamplerName(plan_kind);
          row.fraction = fractions[c];
          row.capacity = result.points[c].capacity;
          row.kind = p.kind;
          row.counters = p.counters;
          row.reads = result.accesses;
          row.bytes_read = p.bytes_read;
          row.bytes_hit = p.bytes_hit;
          row.seconds = p.seconds;
          rows.push_back(row);
        }
      }
    }
  }
  return rows;
}

void PrintLarge(const std::vector<LargeRow>& rows) {
  std::printf("\n== part 1: object hit rate / byte hit rate (%" PRIu64 " reads per plan)\n",
              rows.empty() ? 0 : rows[0].reads);
  std::printf("   %-10s %-12s %5s  ", "sizes", "plan", "cap");
  for (PolicyKind k : kCompared) std::printf("%-19s", PolicyName(k));
  std::printf("opt-size vs opt\n");
  for (size_t i = 0; i < rows.size(); i += kCompared.size()) {
    std::printf("   %-10s %-12s %4.0f%%  ", rows[i].sizes.c_str(), rows[i].plan.c_str(),
                100 * rows[i].fraction);
    double opt_rate = 0, opt_size_rate = 0;
    for (size_t k = 0; k < kCompared.size(); ++k) {
      const LargeRow& r = rows[i + k];
      std::printf("%.4f / %.4f    ", r.hit_rate(), r.byte_hit_rate());
      if (r.kind == PolicyKind::kOpt) opt_rate = r.hit_rate();
      if (r.kind == PolicyKind::kOptSize) opt_size_rate = r.hit_rate();
    }
    std::printf("%+.4f\n", opt_size_rate - opt_rate);
  }
}

// ---------------------------------------------------------------- part 2

struct SmallStats {
  uint64_t cases = 0;
  uint64_t optimum_hits = 0;                   // sum over cases
  std::map<PolicyKind, uint64_t> hits;         // sum over cases
  std::map<PolicyKind, double> rel_gap_sum;    // sum of (opt - hits) / opt, opt > 0
  std::map<PolicyKind, uint64_t> rel_cases;    // cases with optimum > 0
  std::map<PolicyKind, uint64_t> at_optimum;   // cases where hits == optimum
  std::map<PolicyKind, double> worst_rel_gap;  // max of (opt - hits) / opt
  std::map<PolicyKind, uint64_t> above;        // hits > optimum: impossible
};

const char* kSizeModels[] = {"uniform", "random 1-8", "two-class 1/5"};

int RunSmall(bool quick, uint64_t seed, std::vector<SmallStats>* stats,
             std::vector<std::string>* failures) {
  const int cases = quick ? 300 : 3000;
  stats->assign(3, SmallStats{});
  SplitMix64 rng(Mix64(seed ^ 0xca5e5ull));
  for (int c = 0; c < cases; ++c) {
    const int model = c % 3;
    const uint32_t n = 3 + static_cast<uint32_t>(rng.Below(7));  // 3..9 ids
    std::vector<uint64_t> sizes(n, 1);
    for (auto& s : sizes) {
      if (model == 1) s = 1 + rng.Below(8);
      if (model == 2) s = rng.Below(10) < 3 ? 5 : 1;
    }
    uint64_t total = 0;
    for (uint64_t s : sizes) total += s;
    // Sequences: half uniformly random reads, half whole shuffled epochs.
    auto seq = std::make_shared<std::vector<ItemId>>();
    if (rng.Below(2) == 0) {
      const uint64_t len = 8 + rng.Below(25);
      for (uint64_t i = 0; i < len; ++i) seq->push_back(static_cast<ItemId>(rng.Below(n)));
    } else {
      const uint64_t epochs = 2 + rng.Below(3);
      std::vector<ItemId> perm(n);
      for (uint64_t e = 0; e < epochs; ++e) {
        for (uint32_t i = 0; i < n; ++i) perm[i] = i;
        for (uint32_t i = n - 1; i > 0; --i) std::swap(perm[i], perm[rng.Below(i + 1)]);
        seq->insert(seq->end(), perm.begin(), perm.end());
      }
    }
    // Capacity: 15%..60% of the total, at least 1, below the total.
    uint64_t capacity = static_cast<uint64_t>(
        std::llround((0.15 + 0.45 * Uniform01(&rng)) * static_cast<double>(total)));
    capacity = std::min(std::max<uint64_t>(capacity, 1), total - 1);

    const uint64_t optimum = reference::ExhaustiveMaxHits(*seq, sizes, capacity);

    SimulationOptions options;
    options.plan.kind = SamplerKind::kExplicit;
    options.plan.dataset_size = n;
    options.plan.ids = seq;
    options.policies = kCompared;
    options.capacities = {capacity};
    options.sizes = ItemSizes::FromVector(sizes);
    options.seed = seed;
    SimulationResult result;
    CheckOk(Simulate(options, &result), Fmt("Simulate small case %d", c));

    SmallStats& st = (*stats)[model];
    ++st.cases;
    st.optimum_hits += optimum;
    for (const PolicyResult& p : result.points.at(0).policies) {
      const uint64_t h = p.counters.hits;
      st.hits[p.kind] += h;
      if (h == optimum) ++st.at_optimum[p.kind];
      if (h > optimum) {
        ++st.above[p.kind];
        failures->push_back(Fmt("small case %d: %s got %" PRIu64 " hits, above the optimum %" PRIu64,
                                c, PolicyName(p.kind), h, optimum));
      }
      if (optimum > 0) {
        const double gap = (double(optimum) - double(h)) / double(optimum);
        st.rel_gap_sum[p.kind] += gap;
        ++st.rel_cases[p.kind];
        st.worst_rel_gap[p.kind] = std::max(st.worst_rel_gap[p.kind], gap);
      }
      if (model == 0 && (p.kind == PolicyKind::kOpt || p.kind == PolicyKind::kOptSize) &&
          h != optimum) {
        failures->push_back(Fmt("small case %d (uniform sizes): %s got %" PRIu64
                                " hits, optimum %" PRIu64,
                                c, PolicyName(p.kind), h, optimum));
      }
    }
    if (model == 0) {
      const uint64_t ref = reference::Belady(*seq, capacity, n).hits;
      if (ref != optimum) {
        failures->push_back(Fmt("small case %d (uniform sizes): reference Belady %" PRIu64
                                " hits, optimum %" PRIu64,
                                c, ref, optimum));
      }
    }
  }
  return cases;
}

void PrintSmall(const std::vector<SmallStats>& stats) {
  std::printf("\n== part 2: small random cases against the exhaustive optimum (max object hits)\n");
  std::printf("   mean gap = mean over cases of (optimum - hits) / optimum; "
              "'at opt' = share of cases with exactly the optimum\n");
  std::printf("   %-14s %6s %9s  ", "sizes", "cases", "opt hits");
  for (PolicyKind k : kCompared) std::printf("%-27s", Fmt("%s gap/at opt/worst", PolicyName(k)).c_str());
  std::printf("\n");
  for (size_t m = 0; m < stats.size(); ++m) {
    const SmallStats& st = stats[m];
    std::printf("   %-14s %6" PRIu64 " %9" PRIu64 "  ", kSizeModels[m], st.cases, st.optimum_hits);
    for (PolicyKind k : kCompared) {
      const double mean = st.rel_cases.count(k) && st.rel_cases.at(k)
                              ? st.rel_gap_sum.at(k) / double(st.rel_cases.at(k))
                              : 0;
      const double at = st.cases ? double(st.at_optimum.count(k) ? st.at_optimum.at(k) : 0) /
                                       double(st.cases)
                                 : 0;
      const double worst = st.worst_rel_gap.count(k) ? st.worst_rel_gap.at(k) : 0;
      std::printf("%-27s", Fmt("%5.2f%% / %5.1f%% / %4.0f%%", 100 * mean, 100 * at, 100 * worst).c_str());
    }
    std::printf("\n");
  }
}

int Main(int argc, char** argv) {
  const bench::Args args = bench::ParseArgs(
      argc, argv, "Compares opt, opt-size, lru and static with variable item sizes.");
  if (!args.rest.empty()) {
    std::fprintf(stderr, "sizes_bench: unknown argument %s\n", args.rest[0].c_str());
    return 64;
  }
  const uint64_t seed = 42;
  const bench::MachineInfo machine = bench::GetMachineInfo();
  std::printf("sizes_bench%s\n", args.quick ? " --quick" : "");
  bench::PrintMachine(machine);

  bench::Stopwatch sw;
  std::vector<LargeRow> large = RunLarge(args.quick, seed);
  const double large_seconds = sw.WallSeconds();
  PrintLarge(large);

  sw.Restart();
  std::vector<SmallStats> small;
  std::vector<std::string> failures;
  RunSmall(args.quick, seed, &small, &failures);
  const double small_seconds = sw.WallSeconds();
  PrintSmall(small);
  for (const std::string& f : failures) std::printf("   FAILURE: %s\n", f.c_str());
  std::printf("\n(part 1 took %.1f s, part 2 %.1f s)\n", large_seconds, small_seconds);

  // One line: mean object / byte hit rate over every part-1 configuration,
  // and the mean gap to the optimum over the non-uniform small cases.
  std::printf("summary: mean object/byte hit rate over %zu configurations:",
              large.size() / kCompared.size());
  for (PolicyKind k : kCompared) {
    double obj = 0, byte = 0;
    int count = 0;
    for (const LargeRow& r : large) {
      if (r.kind != k) continue;
      obj += r.hit_rate();
      byte += r.byte_hit_rate();
      ++count;
    }
    std::printf(" %s %.3f/%.3f", PolicyName(k), count ? obj / count : 0,
                count ? byte / count : 0);
  }
  std::printf("; small cases with sizes, mean gap to optimum:");
  for (PolicyKind k : {PolicyKind::kOpt, PolicyKind::kOptSize}) {
    double gap = 0;
    uint64_t cases = 0;
    for (size_t m = 1; m < small.size(); ++m) {
      if (!small[m].rel_cases.count(k)) continue;
      gap += small[m].rel_gap_sum.at(k);
      cases += small[m].rel_cases.at(k);
    }
    std::printf(" %s %.2f%%", PolicyName(k), cases ? 100 * gap / double(cases) : 0);
  }
  std::printf("; %s\n", failures.empty() ? "no check failed" : "CHECKS FAILED");

  if (!args.json.empty()) {
    bench::Json j;
    j["benchmark"] = "sizes_bench";
    j["quick"] = args.quick;
    j["machine"] = bench::MachineJson(machine);
    j["size_models"] = "lognormal: exp(N(ln 65536, 1.0)); two-class: 90% 16 KiB, 10% 320 KiB";
    j["large"] = bench::Json::array();
    for (const LargeRow& r : large) {
      j["large"].push_back({{"sizes", r.sizes},
                            {"plan", r.plan},
                            {"capacity_fraction", r.fraction},
                            {"capacity_bytes", r.capacity},
                            {"policy", PolicyName(r.kind)},
                            {"reads", r.reads},
                            {"hits", r.counters.hits},
                            {"bypasses", r.counters.bypasses},
                            {"evictions", r.counters.evictions},
                            {"hit_rate", r.hit_rate()},
                            {"byte_hit_rate", r.byte_hit_rate()},
                            {"seconds", r.seconds}});
    }
    j["small"] = bench::Json::array();
    for (size_t m = 0; m < small.size(); ++m) {
      const SmallStats& st = small[m];
      bench::Json policies = bench::Json::array();
      for (PolicyKind k : kCompared) {
        const uint64_t at_optimum = st.at_optimum.count(k) ? st.at_optimum.at(k) : 0;
        policies.push_back(
            {{"policy", PolicyName(k)},
             {"hits", st.hits.count(k) ? st.hits.at(k) : 0},
             {"mean_relative_gap", st.rel_cases.count(k) && st.rel_cases.at(k)
                                       ? st.rel_gap_sum.at(k) / double(st.rel_cases.at(k))
                                       : 0.0},
             {"share_at_optimum", st.cases ? double(at_optimum) / double(st.cases) : 0.0},
             {"worst_relative_gap", st.worst_rel_gap.count(k) ? st.worst_rel_gap.at(k) : 0.0},
             {"above_optimum", st.above.count(k) ? st.above.at(k) : 0}});
      }
      j["small"].push_back({{"sizes", kSizeModels[m]},
                            {"cases", st.cases},
                            {"optimum_hits", st.optimum_hits},
                            {"policies", std::move(policies)}});
    }
    j["failures"] = failures;
    if (!bench::WriteJson(std::move(j), args.json)) {
      std::fprintf(stderr, "sizes_bench: cannot write %s\n", args.json.c_str());
      return 3;
    }
    std::printf("wrote %s\n", args.json.c_str());
  }
  return failures.empty() ? 0 : 1;
}

}  // namespace
}  // namespace opt4store

int main(int argc, char** argv) { return opt4store::Main(argc, argv); }
