// CopyHelpers: a few threads that share one batch's RAM-hit copies with the
// reader that asked for the batch.
//
// Why: a batch of RAM hits is a memcpy of a few MiB from the shared arena
// into the batch tensors, and one core does not saturate the memory bus
// (measured in bench/loader_bench.py's all-in-RAM case). The reader's own
// thread takes part, so a batch of n copies runs on helpers + 1 cores, and a
// helper that is not scheduled in time only does less of it.
//
// Run(n, fn) calls fn(i) exactly once for every i in [0, n), on the caller
// and on the helpers, and returns when every call has returned. One batch
// at a time: a second caller, a call in a process forked after the pool
// was made (a DataLoader worker: the workers are the parallelism there, and
// the helpers do not exist in it), a small n, and a pool made with 0 helpers
// all run the loop on the caller alone.
//
// Thread safety: any thread may call Run. No mutex: the job is published
// by a generation word (a futex the helpers sleep on) and an open flag, and
// every helper that may touch the job counts itself in `users_` first, so
// the caller, having closed the job, waits for users_ == 0 (a Dekker
// handshake on sequentially consistent atomics) before fn goes away.
#ifndef OPT4STORE_ENGINE_STORE_COPY_HELPERS_H_
#define OPT4STORE_ENGINE_STORE_COPY_HELPERS_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

namespace opt4store {

class CopyHelpers {
 public:
  // Helpers for this machine: one fewer than its cores, at most 3.
  static int DefaultCount();

  // Starts no thread until the first Run that can use them. Belongs to the
  // process that makes it.
  explicit CopyHelpers(int helpers);
  ~CopyHelpers();
  CopyHelpers(const CopyHelpers&) = delete;
  CopyHelpers& operator=(const CopyHelpers&) = delete;

  // Fewer calls than this run on the caller alone (waking a helper costs
  // about as much as two copies of a small item).
  static constexpr size_t kMinParallel = 4;

  void Run(size_t n, const std::function<void(size_t)>& fn);

 private:
  void Start();
  void HelperLoop();
  // Claims and runs calls of the open job until none is left.
  void Drain();

  const int count_;
  const uint32_t fork_generation_;     // the process the pool belongs to
  std::vector<std::thread*> threads_;  // heap: a forked child leaks, never joins, them
  std::atomic<bool> started_{false};
  std::atomic<bool> busy_{false};  // a caller owns the job
  std::atomic<bool> stop_{false};

  std::atomic<uint32_t> generation_{0};  // bumped per job; the helpers' futex
  std::atomic<bool> open_{false};
  std::atomic<int> users_{0};
  std::atomic<size_t> next_{0};
  size_t n_ = 0;                                   // written before open_
  const std::function<void(size_t)>* fn_ = nullptr;  // written before open_
};

}  // namespace opt4store

#endif  // OPT4STORE_ENGINE_STORE_COPY_HELPERS_H_
