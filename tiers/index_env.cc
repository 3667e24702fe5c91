#include "tiers/index_env.h"

#include <pthread.h>
#include <rocksdb/threadpool.h>
#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>

namespace opt4store {
namespace {

// A child forked from a process whose index ran RocksDB's static timer
// inherits the timer's condition variable with a waiter that is not in the
// child: at a normal exit(), the timer's destructor waits for that waiter
// in pthread_cond_destroy for ever (a script's os.fork() child that ended
// with sys.exit hung so; DataLoader workers leave by _exit). In such a
// child, exit() flushes stdio and leaves by _exit: registered last, the
// handler runs first, after Python's own finalization.
void ExitBeforeStatics(int status, void* /*arg*/) {
  std::fflush(nullptr);
  _exit(status);
}

void OnForkChild() { on_exit(&ExitBeforeStatics, nullptr); }

// One process's pools: flushes (HIGH) apart from compactions (LOW and
// BOTTOM), as RocksDB keeps them, so that a long compaction delays no flush.
struct Pools {
  pid_t pid;
  rocksdb::ThreadPool* flushes;
  rocksdb::ThreadPool* compactions;
};

class IndexEnvImpl : public rocksdb::EnvWrapper {
 public:
  IndexEnvImpl() : EnvWrapper(rocksdb::Env::Default()) {}

  const char* Name() const override { return "opt4store::IndexEnv"; }

  void Schedule(void (*function)(void* arg), void* arg, Priority pri, void* /*tag*/,
                void (*/*unschedule*/)(void* arg)) override {
    Pool(pri)->SubmitJob([function, arg] { function(arg); });
  }
  int UnSchedule(void* /*tag*/, Priority /*pri*/) override { return 0; }
  unsigned int GetThreadPoolQueueLen(Priority pri) const override {
    return Pool(pri)->GetQueueLen();
  }
  void SetBackgroundThreads(int number, Priority pri) override {
    Pool(pri)->SetBackgroundThreads(number);
  }
  int GetBackgroundThreads(Priority pri) override { return Pool(pri)->GetBackgroundThreads(); }
  void IncBackgroundThreadsIfNeeded(int number, Priority pri) override {
    rocksdb::ThreadPool* pool = Pool(pri);
    if (pool->GetBackgroundThreads() < number) pool->SetBackgroundThreads(number);
  }
  // Nothing joins the pools: they live as long as the process.
  void WaitForJoin() override {}

 private:
  rocksdb::ThreadPool* Pool(Priority pri) const {
    Pools* pools = current_.load(std::memory_order_acquire);
    if (pools == nullptr || pools->pid != getpid()) pools = StartPools(pools);
    return pri == Priority::HIGH ? pools->flushes : pools->compactions;
  }

  // No mutex: one inherited locked from a forking parent would never open.
  // Two threads that race here both build pools; the loser's are joined
  // (their threads started, idle: a pool deleted unjoined aborts in
  // RocksDB's assertion) and freed before any job reaches them. An
  // inherited parent's pools are left allocated: freeing them would join
  // threads this process never had.
  Pools* StartPools(Pools* seen) const {
    auto* mine = new Pools{getpid(), rocksdb::NewThreadPool(1), rocksdb::NewThreadPool(1)};
    if (current_.compare_exchange_strong(seen, mine, std::memory_order_acq_rel)) return mine;
    mine->flushes->JoinAllThreads();
    mine->compactions->JoinAllThreads();
    delete mine->flushes;
    delete mine->compactions;
    delete mine;
    return seen;  // the winner's (compare_exchange_strong loaded it)
  }

  mutable std::atomic<Pools*> current_{nullptr};
};

}  // namespace

rocksdb::Env* IndexEnv() {
  static IndexEnvImpl* const env = new IndexEnvImpl();
  // Children forked from here on, once this process runs an index.
  static const int exit_hook = pthread_atfork(nullptr, nullptr, &OnForkChild);
  (void)exit_hook;
  return env;
}

}  // namespace opt4store
