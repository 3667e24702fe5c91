// The disk tier keeps two descriptors per segment file while it is open, so
// a large budget needs more open files than many processes may have (a
// soft limit of 1024 is common). It raises the soft limit to what its
// budget may hold open, up to the hard limit, and says so when the hard
// limit is lower. Each case runs in a child: limits are per process.
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include "disk_test_util.h"
#include "engine/base/file_limit.h"
#include "fork_child.h"
#include "test_util.h"
#include "tiers/disk_tier.h"

namespace opt4store {
namespace {

using opt4store_test::Child;
using opt4store_test::ForkChild;
using opt4store_test::Reap;

struct Report {
  uint64_t limit_after = 0;  // the soft limit once the tier (or the call) is done
  uint64_t puts_ok = 0;
  int32_t code = 0;  // of the first failure
  char message[240] = {};
};

bool SetSoftLimit(uint64_t soft, uint64_t hard) {
  struct rlimit r;
  if (getrlimit(RLIMIT_NOFILE, &r) != 0) return false;
  r.rlim_cur = soft;
  if (hard != 0) r.rlim_max = hard;
  return setrlimit(RLIMIT_NOFILE, &r) == 0;
}

uint64_t SoftLimit() {
  struct rlimit r;
  getrlimit(RLIMIT_NOFILE, &r);
  return r.rlim_cur;
}

Report Collect(const Child& child) {
  Report r;
  const bool got = read(child.fd, &r, sizeof r) == sizeof r;
  close(child.fd);
  const int status = Reap(child.pid);
  REQUIRE(got);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
  return r;
}

TEST_CASE("Disk tier: a budget of many segments raises the soft limit on open files",
          "[disk]") {
  struct rlimit hard;
  REQUIRE(getrlimit(RLIMIT_NOFILE, &hard) == 0);
  // 1026 segments of 64 KiB may be held: 2 descriptors each, plus 1024.
  constexpr uint64_t kWanted = 2 * (64 * 1024 / 64 + 2) + 1024;
  if (hard.rlim_max != RLIM_INFINITY && hard.rlim_max < kWanted) {
    WARN("hard limit on open files " << hard.rlim_max << " is below " << kWanted);
    return;
  }
  opt4store_test::TempDir dir;
  Child child = ForkChild([&](int fd) {
    Report r;
    if (!SetSoftLimit(128, 0)) return 2;
    DiskTierOptions o;
    o.budget_bytes = uint64_t{64} << 20;
    o.segment_bytes = 64 << 10;
    std::unique_ptr<DiskTier> tier;
    Status s = DiskTier::Open(o, dir.path(), &tier);
    r.limit_after = SoftLimit();
    // 40 KiB records, one segment each: 600 segment files, 1200
    // descriptors, where the limit was 128.
    for (ItemId id = 0; s.ok() && id < 600; ++id) {
      s = tier->Put(id, opt4store_test::TestMeta(id),
                    opt4store_test::NoiseBytes(40 << 10, id + 1));
      if (s.ok()) ++r.puts_ok;
    }
    if (tier && s.ok()) s = tier->Close();
    r.code = static_cast<int32_t>(s.code());
    snprintf(r.message, sizeof r.message, "%s", s.ToString().c_str());
    return write(fd, &r, sizeof r) == sizeof r ? 0 : 4;
  });
  const Report r = Collect(child);
  INFO(r.message);
  CHECK(r.limit_after >= kWanted);
  CHECK(r.puts_ok == 600);
  CHECK(r.code == 0);
}

TEST_CASE("RaiseOpenFileLimit: up to the hard limit, NoSpace naming the remedy beyond it",
          "[disk]") {
  Child child = ForkChild([&](int fd) {
    Report r;
    if (!SetSoftLimit(100, 200)) return 2;
    uint64_t limit = 0;
    // Within the hard limit: raised to what is asked, never lowered.
    if (!RaiseOpenFileLimit(150, &limit).ok() || limit != 150 || SoftLimit() != 150) return 5;
    if (!RaiseOpenFileLimit(120, &limit).ok() || limit != 150 || SoftLimit() != 150) return 6;
    const Status s = RaiseOpenFileLimit(500, &limit);
    r.limit_after = SoftLimit();
    r.puts_ok = limit;
    r.code = static_cast<int32_t>(s.code());
    snprintf(r.message, sizeof r.message, "%s", s.ToString().c_str());
    return write(fd, &r, sizeof r) == sizeof r ? 0 : 4;
  });
  const Report r = Collect(child);
  INFO(r.message);
  CHECK(r.code == static_cast<int32_t>(Status::Code::kNoSpace));
  CHECK(r.limit_after == 200);  // raised to the hard limit all the same
  CHECK(r.puts_ok == 200);
  const std::string why = r.message;
  CHECK(why.find("200") != std::string::npos);
  CHECK(why.find("500") != std::string::npos);
  CHECK(why.find("ulimit -n") != std::string::npos);
}

}  // namespace
}  // namespace opt4store
