// Mutex and MutexLock: std::mutex with the annotations clang's thread-safety
// analysis checks (thread_annotations.h). libstdc++'s std::mutex and
// std::lock_guard carry none, so a member GUARDED_BY a std::mutex could not
// be checked.
//
// Thread safety: a Mutex is a lock; MutexLock holds one for its scope. Not
// for memory shared between processes (the shared queue uses a robust
// process-shared pthread mutex of its own).
#ifndef OPT4STORE_ENGINE_BASE_MUTEX_H_
#define OPT4STORE_ENGINE_BASE_MUTEX_H_

#include <mutex>

#include "engine/base/thread_annotations.h"

namespace opt4store {

class CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ACQUIRE() { mu_.lock(); }
  void Unlock() RELEASE() { mu_.unlock(); }
  // Tells the analysis the caller holds it (no run-time check).
  void AssertHeld() const ASSERT_CAPABILITY(this) {}

 private:
  std::mutex mu_;
};

class SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ACQUIRE(mu) : mu_(mu) { mu_->Lock(); }
  ~MutexLock() RELEASE() { mu_->Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* const mu_;
};

}  // namespace opt4store

#endif  // OPT4STORE_ENGINE_BASE_MUTEX_H_
