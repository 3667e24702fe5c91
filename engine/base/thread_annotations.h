// Clang's thread-safety analysis: annotations that let the compiler check who
// holds which lock (https://clang.llvm.org/docs/ThreadSafetyAnalysis.html).
// Under clang they expand to its attributes; elsewhere to nothing. The test
// command builds the engine and the tiers with clang and
// -Wthread-safety -Werror=thread-safety, so a member read without its lock,
// or a REQUIRES function called without it, fails the build.
#ifndef OPT4STORE_ENGINE_BASE_THREAD_ANNOTATIONS_H_
#define OPT4STORE_ENGINE_BASE_THREAD_ANNOTATIONS_H_

#if defined(__clang__)
#define OPT4STORE_THREAD_ATTRIBUTE(x) __attribute__((x))
#else
#define OPT4STORE_THREAD_ATTRIBUTE(x)
#endif

// A type that is a lock (Mutex).
#define CAPABILITY(name) OPT4STORE_THREAD_ATTRIBUTE(capability(name))
// An RAII type that holds a lock for its lifetime (MutexLock).
#define SCOPED_CAPABILITY OPT4STORE_THREAD_ATTRIBUTE(scoped_lockable)
// A member read and written only with the lock held.
#define GUARDED_BY(lock) OPT4STORE_THREAD_ATTRIBUTE(guarded_by(lock))
// A pointer member whose pointee is guarded by the lock.
#define PT_GUARDED_BY(lock) OPT4STORE_THREAD_ATTRIBUTE(pt_guarded_by(lock))
// Locks that must be taken before (after) this one.
#define ACQUIRED_BEFORE(...) OPT4STORE_THREAD_ATTRIBUTE(acquired_before(__VA_ARGS__))
#define ACQUIRED_AFTER(...) OPT4STORE_THREAD_ATTRIBUTE(acquired_after(__VA_ARGS__))
// The caller must hold the lock(s).
#define REQUIRES(...) OPT4STORE_THREAD_ATTRIBUTE(requires_capability(__VA_ARGS__))
// The caller must not hold the lock(s): the function takes them itself.
#define EXCLUDES(...) OPT4STORE_THREAD_ATTRIBUTE(locks_excluded(__VA_ARGS__))
// The function takes (releases) the lock and returns with it held (free).
#define ACQUIRE(...) OPT4STORE_THREAD_ATTRIBUTE(acquire_capability(__VA_ARGS__))
#define RELEASE(...) OPT4STORE_THREAD_ATTRIBUTE(release_capability(__VA_ARGS__))
// The function tries to take the lock: held on return iff it returned `ok`.
#define TRY_ACQUIRE(...) OPT4STORE_THREAD_ATTRIBUTE(try_acquire_capability(__VA_ARGS__))
// Asserts, at run time or by the caller's knowledge, that the lock is held.
#define ASSERT_CAPABILITY(lock) OPT4STORE_THREAD_ATTRIBUTE(assert_capability(lock))
// For code the analysis cannot follow; each use says why.
#define NO_THREAD_SAFETY_ANALYSIS OPT4STORE_THREAD_ATTRIBUTE(no_thread_safety_analysis)

#endif  // OPT4STORE_ENGINE_BASE_THREAD_ANNOTATIONS_H_
