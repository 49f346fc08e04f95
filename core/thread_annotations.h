// Clang's thread-safety analysis (-Wthread-safety): which mutex guards which
// field, and which functions must (or must not) hold it, written where the
// compiler checks it. Under GCC the macros are empty; ci/test's
// `thread_safety` step compiles the annotated files with clang.
//
// The attributes are clang's (clang.llvm.org/docs/ThreadSafetyAnalysis.html);
// the macro names follow that page. libstdc++'s std::mutex carries no
// annotations, so the analysis cannot see it: annotated code uses Mutex and
// MutexLock below, thin wrappers over std::mutex and std::unique_lock.
//
//   Mutex mu_;
//   int count_ GUARDED_BY(mu_) = 0;
//   void Bump() EXCLUDES(mu_) { MutexLock lock(mu_); ++count_; }
//   void BumpLocked() REQUIRES(mu_) { ++count_; }
//
// A condition-variable wait takes MutexLock::native() (the lock is released
// and taken again inside, as the analysis assumes of any call); its
// predicate, a lambda, says REQUIRES(mu_) so that it may read the fields.
#pragma once

#include <mutex>

#if defined(__clang__)
#define TRAINQ_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define TRAINQ_THREAD_ANNOTATION(x)
#endif

// A type that is a lock (Mutex), and one that holds a lock for its scope.
#define CAPABILITY(name) TRAINQ_THREAD_ANNOTATION(capability(name))
#define SCOPED_CAPABILITY TRAINQ_THREAD_ANNOTATION(scoped_lockable)
// A field read or written only with the mutex held; a pointer whose pointee is.
#define GUARDED_BY(mu) TRAINQ_THREAD_ANNOTATION(guarded_by(mu))
#define PT_GUARDED_BY(mu) TRAINQ_THREAD_ANNOTATION(pt_guarded_by(mu))
// A function called with the mutex held / not held.
#define REQUIRES(...) TRAINQ_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define EXCLUDES(...) TRAINQ_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
// A function that takes / lets go of the mutex (the object's own when empty).
#define ACQUIRE(...) TRAINQ_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define RELEASE(...) TRAINQ_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define TRY_ACQUIRE(...) TRAINQ_THREAD_ANNOTATION(try_acquire_capability(__VA_ARGS__))
// Tells the analysis the mutex is held (checked at run time, if at all, by the caller).
#define ASSERT_CAPABILITY(x) TRAINQ_THREAD_ANNOTATION(assert_capability(x))
#define RETURN_CAPABILITY(x) TRAINQ_THREAD_ANNOTATION(lock_returned(x))
// For the few places the analysis cannot follow; say why beside it.
#define NO_THREAD_SAFETY_ANALYSIS TRAINQ_THREAD_ANNOTATION(no_thread_safety_analysis)

namespace trainq {

// std::mutex, annotated.
class CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ACQUIRE() { mu_.lock(); }
  void Unlock() RELEASE() { mu_.unlock(); }
  bool TryLock() TRY_ACQUIRE(true) { return mu_.try_lock(); }

 private:
  friend class MutexLock;
  std::mutex mu_;
};

// Holds a Mutex for its scope, like std::unique_lock: Unlock() and Lock()
// let go of it and take it again within the scope; native() is the
// std::unique_lock a std::condition_variable (or Clock::WaitUntil) waits on.
class SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) ACQUIRE(mu) : lock_(mu.mu_) {}
  ~MutexLock() RELEASE() {}
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

  void Unlock() RELEASE() { lock_.unlock(); }
  void Lock() ACQUIRE() { lock_.lock(); }
  std::unique_lock<std::mutex>& native() { return lock_; }

 private:
  std::unique_lock<std::mutex> lock_;
};

}  // namespace trainq
