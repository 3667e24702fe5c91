// CopyHelpers (engine/store/copy_helpers.h): every call exactly once, the
// helpers really take part, concurrent callers, and a forked child that
// runs alone instead of waiting for threads it does not have.
#include "engine/store/copy_helpers.h"

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "fork_child.h"

namespace opt4store {
namespace {

TEST_CASE("CopyHelpers calls fn once for every index", "[copy_helpers]") {
  for (int helpers : {0, 1, 3}) {
    CopyHelpers pool(helpers);
    for (size_t n = 0; n < 70; ++n) {
      std::vector<std::atomic<int>> calls(n);
      pool.Run(n, [&](size_t i) { calls[i].fetch_add(1); });
      for (size_t i = 0; i < n; ++i) REQUIRE(calls[i].load() == 1);
    }
  }
}

TEST_CASE("CopyHelpers runs calls on its helpers, not only the caller", "[copy_helpers]") {
  CopyHelpers pool(1);
  const std::thread::id caller = std::this_thread::get_id();
  int on_helper = 0;
  // Slow calls, so that a woken helper always finds some left.
  for (int run = 0; run < 20 && on_helper == 0; ++run) {
    std::mutex mu;
    std::set<std::thread::id> threads;
    pool.Run(8, [&](size_t) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      std::lock_guard<std::mutex> lock(mu);
      threads.insert(std::this_thread::get_id());
    });
    for (const std::thread::id& t : threads) on_helper += t != caller;
  }
  CHECK(on_helper > 0);
}

TEST_CASE("CopyHelpers: concurrent callers both finish with every call made", "[copy_helpers]") {
  CopyHelpers pool(2);
  constexpr size_t kN = 64;
  std::vector<std::atomic<int>> a(kN), b(kN);
  auto run = [&pool](std::vector<std::atomic<int>>* calls) {
    for (int r = 0; r < 200; ++r) pool.Run(kN, [calls](size_t i) { (*calls)[i].fetch_add(1); });
  };
  std::thread other(run, &b);
  run(&a);
  other.join();
  for (size_t i = 0; i < kN; ++i) {
    REQUIRE(a[i].load() == 200);
    REQUIRE(b[i].load() == 200);
  }
}

TEST_CASE("CopyHelpers in a forked child runs on the caller alone", "[copy_helpers]") {
  CopyHelpers pool(1);
  std::atomic<int> total{0};
  pool.Run(16, [&](size_t) { total.fetch_add(1); });  // the helper exists in the parent
  REQUIRE(total.load() == 16);
  // Forks beside the pool's helper thread on purpose: that is the case tested.
  opt4store_test::Child child = opt4store_test::ForkChild([&pool](int) {
    const std::thread::id me = std::this_thread::get_id();
    int elsewhere = 0;
    std::atomic<int> calls{0};
    pool.Run(16, [&](size_t) {
      calls.fetch_add(1);
      elsewhere += std::this_thread::get_id() != me;
    });
    return calls.load() == 16 && elsewhere == 0 ? 0 : 1;
  });
  const int status = opt4store_test::Reap(child.pid);
  close(child.fd);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  pool.Run(16, [&](size_t) { total.fetch_add(1); });  // the parent's pool still works
  CHECK(total.load() == 32);
}

}  // namespace
}  // namespace opt4store
