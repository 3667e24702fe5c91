// bench_common.h: small helpers shared by the benchmarks in bench/: timers,
// medians, writing results as JSON (nlohmann-json), peak-RSS readers,
// machine facts and the command line every benchmark accepts (--quick,
// --json FILE, --reps N).
//
// Header-only and free of the engine, so that each *_bench.cc stays one file.
// Thread safety: none needed; every benchmark is single-threaded.
#ifndef OPT4STORE_BENCH_BENCH_COMMON_H_
#define OPT4STORE_BENCH_BENCH_COMMON_H_

#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace opt4store {
namespace bench {

// ---------------------------------------------------------------- timing

// Wall clock (steady) and this process's CPU time, started at construction.
// On a shared, noisy machine the CPU time is the steadier of the two; the
// benchmarks report both and judge goals on wall time.
class Stopwatch {
 public:
  Stopwatch() { Restart(); }
  void Restart() {
    wall0_ = std::chrono::steady_clock::now();
    cpu0_ = CpuNow();
  }
  double WallSeconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0_).count();
  }
  double CpuSeconds() const { return CpuNow() - cpu0_; }

  static double CpuNow() {
    timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
  }

 private:
  std::chrono::steady_clock::time_point wall0_;
  double cpu0_ = 0;
};

inline double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}
inline double Min(const std::vector<double>& v) {
  return v.empty() ? 0 : *std::min_element(v.begin(), v.end());
}
inline double Max(const std::vector<double>& v) {
  return v.empty() ? 0 : *std::max_element(v.begin(), v.end());
}

// Repeated timings of one thing.
struct Samples {
  std::vector<double> wall;
  std::vector<double> cpu;
  void Add(double w, double c) {
    wall.push_back(w);
    cpu.push_back(c);
  }
  double MedianWall() const { return Median(wall); }
  double MedianCpu() const { return Median(cpu); }
};

// ---------------------------------------------------------------- memory

// Peak resident set of this process, in KiB, from getrusage (Linux reports
// ru_maxrss in KiB).
inline long PeakRssKibRusage() {
  rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss;
}

// A "VmXXX:  1234 kB" field of /proc/self/status, in KiB; -1 if absent.
inline long ProcStatusKib(const char* field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  const size_t len = std::strlen(field);
  while (std::getline(in, line)) {
    if (line.compare(0, len, field) == 0 && line.size() > len && line[len] == ':') {
      return std::strtol(line.c_str() + len + 1, nullptr, 10);
    }
  }
  return -1;
}
inline long VmHwmKib() { return ProcStatusKib("VmHWM"); }
inline long VmRssKib() { return ProcStatusKib("VmRSS"); }

// ---------------------------------------------------------------- machine

inline std::string Trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\n");
  size_t e = s.find_last_not_of(" \t\n");
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

// The 1, 5 and 15 minute load averages, as /proc/loadavg prints them. On a
// shared 2-core machine a load above 2 means the timings were contended.
inline std::string LoadAverage() {
  std::ifstream in("/proc/loadavg");
  std::string a, b, c;
  in >> a >> b >> c;
  return a + " " + b + " " + c;
}

struct MachineInfo {
  long cpus = 0;
  std::string cpu_model;
  long mem_total_mib = 0;
  std::string compiler;
  bool optimized = false;
  bool asserts = true;
  std::string thp;              // transparent huge pages: always, madvise or never
  std::string glibc_tunables;   // $GLIBC_TUNABLES (e.g. glibc.malloc.hugetlb=1)
  std::string load_at_start;    // LoadAverage() when the benchmark started
};

inline MachineInfo GetMachineInfo() {
  MachineInfo m;
  m.cpus = sysconf(_SC_NPROCESSORS_ONLN);
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    if (line.compare(0, 10, "model name") == 0) {
      size_t colon = line.find(':');
      if (colon != std::string::npos) m.cpu_model = Trim(line.substr(colon + 1));
      break;
    }
  }
  std::ifstream meminfo("/proc/meminfo");
  while (std::getline(meminfo, line)) {
    if (line.compare(0, 9, "MemTotal:") == 0) {
      m.mem_total_mib = std::strtol(line.c_str() + 9, nullptr, 10) / 1024;
      break;
    }
  }
#if defined(__clang__)
  m.compiler = "clang " __clang_version__;
#elif defined(__GNUC__)
  m.compiler = "g++ " __VERSION__;
#endif
#ifdef __OPTIMIZE__
  m.optimized = true;
#endif
#ifdef NDEBUG
  m.asserts = false;
#endif
  std::ifstream thp("/sys/kernel/mm/transparent_hugepage/enabled");
  if (std::getline(thp, line)) {
    size_t b = line.find('['), e = line.find(']');
    m.thp = b != std::string::npos && e > b ? line.substr(b + 1, e - b - 1) : Trim(line);
  }
  if (const char* t = std::getenv("GLIBC_TUNABLES")) m.glibc_tunables = t;
  m.load_at_start = LoadAverage();
  return m;
}

inline void PrintMachine(const MachineInfo& m) {
  std::printf("machine: %ld cpus, %s, %ld MiB RAM, THP %s%s%s; %s; %s%s\n", m.cpus,
              m.cpu_model.c_str(), m.mem_total_mib, m.thp.empty() ? "?" : m.thp.c_str(),
              m.glibc_tunables.empty() ? "" : ", GLIBC_TUNABLES=",
              m.glibc_tunables.c_str(), m.compiler.c_str(),
              m.optimized ? "optimized" : "NOT OPTIMIZED", m.asserts ? ", asserts on" : "");
  std::printf("load average at start: %s\n", m.load_at_start.c_str());
}

// ---------------------------------------------------------------- JSON

// A benchmark's results: nlohmann's ordered_json, so that keys come out in
// the order they were set.
using Json = nlohmann::ordered_json;

inline Json MachineJson(const MachineInfo& m) {
  Json j;
  j["cpus"] = m.cpus;
  j["cpu_model"] = m.cpu_model;
  j["mem_total_mib"] = m.mem_total_mib;
  j["compiler"] = m.compiler;
  j["optimized"] = m.optimized;
  j["asserts"] = m.asserts;
  j["transparent_hugepages"] = m.thp;
  j["glibc_tunables"] = m.glibc_tunables;
  j["load_average_at_start"] = m.load_at_start;
  j["load_average_at_end"] = LoadAverage();
  return j;
}

// Rounds every double in *json to 9 significant digits: timings on a shared
// machine carry no more, and the files stay short.
inline void RoundDoubles(Json* json) {
  if (json->is_number_float()) {
    const double v = json->get<double>();
    if (std::isfinite(v)) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%.9g", v);
      *json = std::strtod(buf, nullptr);
    }
  } else if (json->is_structured()) {
    for (Json& element : *json) RoundDoubles(&element);
  }
}

// Writes json (one line, doubles rounded, NaN and infinities as null) and a
// newline to path; false on failure.
inline bool WriteJson(Json json, const std::string& path) {
  RoundDoubles(&json);
  const std::string text = json.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n";
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (!f) return false;
  const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  return std::fclose(f) == 0 && ok;
}

// ---------------------------------------------------------------- args

struct Args {
  bool quick = false;
  std::string json;  // empty: no JSON file
  int reps = 0;      // 0: the benchmark's default
  bool enforce_goals = false;
  std::vector<std::string> rest;  // anything else, for the benchmark itself
};

inline void Usage(const char* prog, const char* what) {
  std::fprintf(stderr,
               "usage: %s [--quick] [--json FILE] [--reps N] [--enforce-goals]\n%s\n"
               "  --quick          small sizes, for smoke runs\n"
               "  --json FILE      also write the results as JSON to FILE\n"
               "  --reps N         timed repetitions per measurement (median reported)\n"
               "  --enforce-goals  exit 2 when a speed or memory goal is missed\n"
               "A correctness mismatch (hits that differ from the reference) always "
               "exits 1.\n",
               prog, what);
}

inline Args ParseArgs(int argc, char** argv, const char* what) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string s = argv[i];
    if (s == "--quick") {
      a.quick = true;
    } else if (s == "--json" && i + 1 < argc) {
      a.json = argv[++i];
    } else if (s == "--reps" && i + 1 < argc) {
      a.reps = std::atoi(argv[++i]);
      if (a.reps < 1) {
        Usage(argv[0], what);
        std::exit(64);
      }
    } else if (s == "--enforce-goals") {
      a.enforce_goals = true;
    } else if (s == "-h" || s == "--help") {
      Usage(argv[0], what);
      std::exit(0);
    } else {
      a.rest.push_back(s);
    }
  }
  return a;
}

inline std::string Fmt(const char* format, ...) __attribute__((format(printf, 1, 2)));
inline std::string Fmt(const char* format, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, format);
  std::vsnprintf(buf, sizeof buf, format, ap);
  va_end(ap);
  return buf;
}

}  // namespace bench
}  // namespace opt4store

#endif  // OPT4STORE_BENCH_BENCH_COMMON_H_
