// Copyright cxlkv authors.
//
// Mutex and MutexLock: std::mutex and std::lock_guard with the Clang
// thread-safety annotations, so -Wthread-safety checks every GUARDED_BY.
// Thread-safety: as std::mutex.
#ifndef CXLKV_BASE_MUTEX_H_
#define CXLKV_BASE_MUTEX_H_

#include <mutex>

#include "cxlkv/base/thread_annotations.h"

namespace cxlkv::base {

class CXLKV_CAPABILITY("mutex") Mutex {
 public:
  void Lock() CXLKV_ACQUIRE() { mu_.lock(); }
  void Unlock() CXLKV_RELEASE() { mu_.unlock(); }

 private:
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

}  // namespace cxlkv::base

#endif  // CXLKV_BASE_MUTEX_H_
