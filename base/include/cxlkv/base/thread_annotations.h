// Copyright cxlkv authors.
//
// Clang thread-safety annotations (-Wthread-safety): which mutex guards a
// member, which a function needs held. No-ops for other compilers. Use them
// with cxlkv::base::Mutex (base/mutex.h): std::mutex carries no annotations.
#ifndef CXLKV_BASE_THREAD_ANNOTATIONS_H_
#define CXLKV_BASE_THREAD_ANNOTATIONS_H_

#if defined(__clang__)
#define CXLKV_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define CXLKV_THREAD_ANNOTATION(x)
#endif

#define CXLKV_CAPABILITY(name) CXLKV_THREAD_ANNOTATION(capability(name))
#define CXLKV_SCOPED_CAPABILITY CXLKV_THREAD_ANNOTATION(scoped_lockable)
#define CXLKV_GUARDED_BY(mu) CXLKV_THREAD_ANNOTATION(guarded_by(mu))
#define CXLKV_PT_GUARDED_BY(mu) CXLKV_THREAD_ANNOTATION(pt_guarded_by(mu))
#define CXLKV_REQUIRES(...) CXLKV_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define CXLKV_EXCLUDES(...) CXLKV_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#define CXLKV_ACQUIRE(...) CXLKV_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define CXLKV_RELEASE(...) CXLKV_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define CXLKV_NO_THREAD_SAFETY_ANALYSIS CXLKV_THREAD_ANNOTATION(no_thread_safety_analysis)

#endif  // CXLKV_BASE_THREAD_ANNOTATIONS_H_
