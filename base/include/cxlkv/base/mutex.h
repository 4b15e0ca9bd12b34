// Copyright cxlkv authors.
//
// Mutex, MutexLock and CondVar: std::mutex, std::lock_guard and
// std::condition_variable with the Clang thread-safety annotations, so
// -Wthread-safety checks every GUARDED_BY, including across waits.
// Thread-safety: as the std types they wrap.
#ifndef CXLKV_BASE_MUTEX_H_
#define CXLKV_BASE_MUTEX_H_

#include <chrono>
#include <condition_variable>
#include <mutex>

#include "cxlkv/base/thread_annotations.h"

namespace cxlkv::base {

class CXLKV_CAPABILITY("mutex") Mutex {
 public:
  void Lock() CXLKV_ACQUIRE() { mu_.lock(); }
  void Unlock() CXLKV_RELEASE() { mu_.unlock(); }

 private:
  friend class CondVar;
  std::mutex mu_;
};

// Holds `mu` for the enclosing scope.
class CXLKV_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex* mu) CXLKV_ACQUIRE(mu) : mu_(mu) { mu_->Lock(); }
  ~MutexLock() CXLKV_RELEASE() { mu_->Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* const mu_;
};

// A condition variable over a Mutex. Every wait may also return spuriously:
// wait in a loop that rechecks the condition, under the lock.
class CondVar {
 public:
  // Releases *mu, blocks until signalled, reacquires *mu.
  void Wait(Mutex* mu) CXLKV_REQUIRES(mu) {
    std::unique_lock<std::mutex> l(mu->mu_, std::adopt_lock);
    cv_.wait(l);
    l.release();  // *mu stays held, as on entry
  }
  // As Wait, but gives up at `deadline`: false if it passed, true if
  // signalled (or woken spuriously) before.
  bool WaitUntil(Mutex* mu, std::chrono::steady_clock::time_point deadline) CXLKV_REQUIRES(mu) {
    std::unique_lock<std::mutex> l(mu->mu_, std::adopt_lock);
    const bool signalled = cv_.wait_until(l, deadline) == std::cv_status::no_timeout;
    l.release();
    return signalled;
  }
  // WaitUntil(mu, now + timeout).
  template <class Rep, class Period>
  bool WaitFor(Mutex* mu, std::chrono::duration<Rep, Period> timeout) CXLKV_REQUIRES(mu) {
    return WaitUntil(mu, std::chrono::steady_clock::now() + timeout);
  }
  void Signal() { cv_.notify_one(); }
  void SignalAll() { cv_.notify_all(); }

 private:
  std::condition_variable cv_;
};

}  // namespace cxlkv::base

#endif  // CXLKV_BASE_MUTEX_H_
