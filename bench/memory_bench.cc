// memory_bench: peak memory of a long simulation.
//
// The requirement it measures (bench/README.md): "Simulating 100 shuffled
// epochs of 1M ids at capacity 300k uses at most 256 MB peak RSS (OPT on
// permutations hits exactly capacity x (E-1))."
//
// Each configuration runs Simulate() in a child process of its own (fork),
// so that each peak is its own and not the high-water mark of an earlier
// run. The child reports getrusage(RUSAGE_SELF).ru_maxrss and VmHWM from
// /proc/self/status, its RSS before Simulate() started (the baseline of the
// binary), the hit counts and the time; the parent also reads the child's
// ru_maxrss from wait4(). Configurations:
//   opt   Simulate() with opt alone, default window (next_use.h)
//   all   Simulate() with every policy in one pass (skip with --opt-only)
// Exit status: 1 if opt's (or static's) hits differ from capacity x (E-1),
// 2 with --enforce-goals if opt's peak exceeds 256 MiB, 3 on an error.
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "bench_common.h"
#include "opt4store/plan.h"
#include "opt4store/policy.h"
#include "opt4store/simulator.h"
#include "opt4store/status.h"

namespace opt4store {
namespace {

using bench::Fmt;

constexpr long kGoalKib = 256 * 1024;  // 256 MiB
constexpr int kMaxPolicies = 16;

// What a child sends back through its pipe: plain data, no pointers.
struct ChildPolicy {
  int kind = 0;
  uint64_t hits = 0, misses = 0, admissions = 0, bypasses = 0, evictions = 0, ambiguous = 0;
  double seconds = 0;
};
struct ChildReport {
  int ok = 0;
  char error[512] = {0};
  double wall_seconds = 0;
  double cpu_seconds = 0;
  long rss_before_kib = 0;
  long maxrss_kib = 0;  // getrusage(RUSAGE_SELF), in the child
  long vmhwm_kib = 0;   // /proc/self/status VmHWM, in the child
  uint64_t accesses = 0;
  uint64_t window = 0;
  int exact_window = 0;
  int num_policies = 0;
  ChildPolicy policies[kMaxPolicies];
};

struct Config {
  std::string name;
  std::vector<PolicyKind> policies;
};

struct Outcome {
  Config config;
  ChildReport report;
  long wait4_maxrss_kib = 0;  // the child's ru_maxrss as its parent sees it
  int exit_status = 0;
};

void RunChild(const SimulationOptions& options, int fd) {
  ChildReport r;
  r.rss_before_kib = bench::VmRssKib();
  bench::Stopwatch sw;
  SimulationResult result;
  Status s = Simulate(options, &result);
  r.wall_seconds = sw.WallSeconds();
  r.cpu_seconds = sw.CpuSeconds();
  r.maxrss_kib = bench::PeakRssKibRusage();
  r.vmhwm_kib = bench::VmHwmKib();
  if (!s.ok()) {
    std::snprintf(r.error, sizeof r.error, "%s", s.ToString().c_str());
  } else {
    r.ok = 1;
    r.accesses = result.accesses;
    r.window = result.window;
    r.exact_window = result.exact_window;
    const auto& policies = result.points.at(0).policies;
    r.num_policies = static_cast<int>(policies.size());
    for (int i = 0; i < r.num_policies && i < kMaxPolicies; ++i) {
      const PolicyResult& p = policies[i];
      r.policies[i] = ChildPolicy{static_cast<int>(p.kind), p.counters.hits,
                                  p.counters.misses,  p.counters.admissions,
                                  p.counters.bypasses, p.counters.evictions,
                                  p.counters.ambiguous, p.seconds};
    }
  }
  const char* p = reinterpret_cast<const char*>(&r);
  size_t left = sizeof r;
  while (left > 0) {
    ssize_t n = write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) _exit(3);
    p += n;
    left -= static_cast<size_t>(n);
  }
  close(fd);
  _exit(0);
}

Outcome RunInChild(const Config& config, const SimulationOptions& base) {
  Outcome out;
  out.config = config;
  SimulationOptions options = base;
  options.policies = config.policies;
  std::fflush(stdout);
  std::fflush(stderr);
  int fds[2];
  if (pipe(fds) != 0) {
    std::perror("pipe");
    std::exit(3);
  }
  pid_t pid = fork();
  if (pid < 0) {
    std::perror("fork");
    std::exit(3);
  }
  if (pid == 0) {
    close(fds[0]);
    RunChild(options, fds[1]);
  }
  close(fds[1]);
  char* p = reinterpret_cast<char*>(&out.report);
  size_t got = 0;
  while (got < sizeof out.report) {
    ssize_t n = read(fds[0], p + got, sizeof out.report - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  close(fds[0]);
  int status = 0;
  rusage ru;
  std::memset(&ru, 0, sizeof ru);
  while (wait4(pid, &status, 0, &ru) < 0 && errno == EINTR) {
  }
  out.wait4_maxrss_kib = ru.ru_maxrss;
  out.exit_status = status;
  if (got != sizeof out.report) {
    out.report.ok = 0;
    std::snprintf(out.report.error, sizeof out.report.error,
                  "child died before reporting (wait status %d%s)", status,
                  WIFSIGNALED(status) ? Fmt(", signal %d", WTERMSIG(status)).c_str() : "");
  }
  return out;
}

int Main(int argc, char** argv) {
  bench::Args args = bench::ParseArgs(
      argc, argv,
      "  --opt-only       skip the all-policies run\n"
      "Peak RSS of Simulate() on 100 shuffled epochs of 1M ids, capacity 300k.");
  bool opt_only = false;
  for (const std::string& a : args.rest) {
    if (a == "--opt-only") {
      opt_only = true;
    } else {
      std::fprintf(stderr, "memory_bench: unknown argument %s\n", a.c_str());
      return 64;
    }
  }
  const uint64_t n = args.quick ? 100000 : 1000000;
  const uint64_t epochs = 100;
  const uint64_t capacity = args.quick ? 30000 : 300000;
  const uint64_t expected_hits = capacity * (epochs - 1);

  SimulationOptions base;
  base.plan.kind = SamplerKind::kShuffle;
  base.plan.dataset_size = n;
  base.plan.epochs = epochs;
  base.plan.seed = 42;
  base.window = 0;  // the default, as `opt4store simulate` uses it
  base.capacities = {capacity};
  base.seed = 42;

  const bench::MachineInfo machine = bench::GetMachineInfo();
  std::printf("memory_bench%s: Simulate() on %s, capacity %" PRIu64
              " items, default window; each configuration in its own process\n",
              args.quick ? " --quick" : "", base.plan.Describe().c_str(), capacity);
  bench::PrintMachine(machine);

  std::vector<Config> configs = {{"opt", {PolicyKind::kOpt}}};
  if (!opt_only) configs.push_back({"all", AllPolicies()});

  std::vector<Outcome> outcomes;
  bool hits_ok = true, goal_met = true, error = false;
  std::vector<std::string> failures;
  for (const Config& c : configs) {
    std::fprintf(stderr, "  running %s (%" PRIu64 " reads)...\n", c.name.c_str(), n * epochs);
    outcomes.push_back(RunInChild(c, base));
    const Outcome& o = outcomes.back();
    const ChildReport& r = o.report;
    if (!r.ok) {
      std::printf("\n[%s] ERROR: %s\n", c.name.c_str(), r.error);
      failures.push_back(c.name + ": " + r.error);
      error = true;
      continue;
    }
    const long peak = std::max(r.maxrss_kib, r.vmhwm_kib);
    std::printf("\n[%s] %" PRIu64 " reads in %.1f s wall (%.1f s cpu); window %" PRIu64
                " (%s)\n",
                c.name.c_str(), r.accesses, r.wall_seconds, r.cpu_seconds, r.window,
                r.exact_window ? "whole plan" : "sliding");
    std::printf("    peak RSS: ru_maxrss %.1f MiB, VmHWM %.1f MiB, wait4 ru_maxrss %.1f MiB; "
                "baseline before Simulate %.1f MiB\n",
                r.maxrss_kib / 1024.0, r.vmhwm_kib / 1024.0, o.wait4_maxrss_kib / 1024.0,
                r.rss_before_kib / 1024.0);
    if (c.name == "opt") {
      goal_met = peak <= kGoalKib;
      std::printf("    goal: peak <= 256 MiB: %s (%.1f MiB)\n", goal_met ? "MET" : "MISSED",
                  peak / 1024.0);
    } else {
      std::printf("    (no goal for this configuration; %s 256 MiB)\n",
                  peak <= kGoalKib ? "within" : "above");
    }
    std::printf("    %-10s %12s %9s %12s %12s %10s %9s %9s\n", "policy", "hits", "hit rate",
                "bypasses", "evictions", "ambiguous", "seconds", "ns/read");
    for (int i = 0; i < r.num_policies; ++i) {
      const ChildPolicy& p = r.policies[i];
      const PolicyKind kind = static_cast<PolicyKind>(p.kind);
      std::printf("    %-10s %12" PRIu64 " %9.4f %12" PRIu64 " %12" PRIu64 " %10" PRIu64
                  " %9.1f %9.1f\n",
                  PolicyName(kind), p.hits, static_cast<double>(p.hits) / r.accesses,
                  p.bypasses, p.evictions, p.ambiguous, p.seconds,
                  1e9 * p.seconds / static_cast<double>(r.accesses));
      if (kind == PolicyKind::kOpt || kind == PolicyKind::kOptSize ||
          kind == PolicyKind::kStatic) {
        if (p.hits != expected_hits) {
          hits_ok = false;
          failures.push_back(Fmt("%s: %s hits %" PRIu64 " != capacity x (E-1) = %" PRIu64,
                                 c.name.c_str(), PolicyName(kind), p.hits, expected_hits));
        }
      }
    }
    std::printf("    opt/opt-size/static hits == capacity x (E-1) = %" PRIu64 ": %s\n",
                expected_hits, hits_ok ? "yes" : "NO");
    if (r.wall_seconds > 180) {
      std::printf("    note: this run took %.0f s, more than 3 minutes on this machine\n",
                  r.wall_seconds);
    }
    std::fflush(stdout);
  }
  for (const std::string& f : failures) std::printf("FAILURE: %s\n", f.c_str());

  if (!outcomes.empty() && outcomes[0].report.ok) {
    const ChildReport& r = outcomes[0].report;
    std::printf("\nsummary: opt on %" PRIu64 " reads: peak RSS %.1f MiB (goal <= 256 MiB %s), "
                "%.1f s, hits %" PRIu64 " %s capacity x (E-1)\n",
                r.accesses, std::max(r.maxrss_kib, r.vmhwm_kib) / 1024.0,
                goal_met ? "MET" : "MISSED", r.wall_seconds, r.policies[0].hits,
                r.policies[0].hits == expected_hits ? "==" : "!=");
  }

  if (!args.json.empty()) {
    bench::Json j;
    j["benchmark"] = "memory_bench";
    j["quick"] = args.quick;
    j["machine"] = bench::MachineJson(machine);
    j["plan"] = base.plan.Describe();
    j["capacity_items"] = capacity;
    j["expected_opt_hits"] = expected_hits;
    j["goal_peak_mib"] = 256.0;
    j["goal_met"] = goal_met && !error;
    j["hits_ok"] = hits_ok && !error;
    j["method"] =
        "each configuration runs Simulate() in a forked child; peak = max(ru_maxrss, "
        "VmHWM) in the child";
    j["failures"] = failures;
    j["configurations"] = bench::Json::array();
    for (const Outcome& o : outcomes) {
      const ChildReport& r = o.report;
      bench::Json c;
      c["name"] = o.config.name;
      c["ok"] = r.ok != 0;
      if (!r.ok) c["error"] = r.error;
      c["reads"] = r.accesses;
      c["window"] = r.window;
      c["exact_window"] = r.exact_window != 0;
      c["wall_s"] = r.wall_seconds;
      c["cpu_s"] = r.cpu_seconds;
      c["ru_maxrss_mib"] = r.maxrss_kib / 1024.0;
      c["vmhwm_mib"] = r.vmhwm_kib / 1024.0;
      c["wait4_maxrss_mib"] = o.wait4_maxrss_kib / 1024.0;
      c["baseline_rss_mib"] = r.rss_before_kib / 1024.0;
      c["policies"] = bench::Json::array();
      for (int i = 0; i < r.num_policies; ++i) {
        const ChildPolicy& p = r.policies[i];
        c["policies"].push_back(
            {{"policy", PolicyName(static_cast<PolicyKind>(p.kind))},
             {"hits", p.hits},
             {"hit_rate", r.accesses ? static_cast<double>(p.hits) / r.accesses : 0.0},
             {"misses", p.misses},
             {"bypasses", p.bypasses},
             {"evictions", p.evictions},
             {"ambiguous", p.ambiguous},
             {"seconds", p.seconds}});
      }
      j["configurations"].push_back(std::move(c));
    }
    if (!bench::WriteJson(std::move(j), args.json)) {
      std::fprintf(stderr, "memory_bench: cannot write %s\n", args.json.c_str());
      return 3;
    }
    std::printf("wrote %s\n", args.json.c_str());
  }
  if (error) return 3;
  if (!hits_ok) return 1;
  if (args.enforce_goals && !goal_met) return 2;
  return 0;
}

}  // namespace
}  // namespace opt4store

int main(int argc, char** argv) { return opt4store::Main(argc, argv); }
