// Copyright cxlkv authors.
#include "mapping.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>

#include "failpoint.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

namespace cxlkv::internal {
namespace {

Status Errno(const std::string& what, const std::string& path, int err) {
  return Status::IOError(what + " " + path + ": " + std::strerror(err));
}

Status ReadU64File(const std::string& file, uint64_t* v) {
  std::ifstream in(file);
  if (!in) return Status::IOError("read " + file + ": cannot open");
  std::string text;
  std::getline(in, text);
  try {
    size_t used = 0;
    *v = std::stoull(text, &used, 0);
  } catch (...) {
    return Status::Corruption("read " + file + ": '" + text + "' is not a number");
  }
  return Status::OK();
}

// ---- SIGBUS guard ----
//
// A fixed table (no allocation, no locks: the handler reads it) of live
// mappings. An entry is claimed by CAS on `used`; `size` is published
// before `base` (release), so the handler never sees a base without its
// size.
struct GuardEntry {
  std::atomic<uint32_t> used{0};
  std::atomic<uintptr_t> base{0};
  std::atomic<uint64_t> size{0};
  std::atomic<uint32_t> state{0};  // 0 live, 1 being replaced, 2 replaced (lost)
  std::atomic<uint64_t> fault_offset{0};
  std::atomic<int32_t> fault_code{0};
};
constexpr int kGuardEntries = 256;
GuardEntry g_guard[kGuardEntries];
struct sigaction g_prev_sigbus;
std::once_flag g_guard_installed;

void OnSigbus(int sig, siginfo_t* info, void* uctx) {
  const auto addr = reinterpret_cast<uintptr_t>(info->si_addr);
  for (GuardEntry& e : g_guard) {
    const uintptr_t b = e.base.load(std::memory_order_acquire);
    if (b == 0 || addr < b || addr - b >= e.size.load(std::memory_order_relaxed)) continue;
    uint32_t expected = 0;
    if (e.state.compare_exchange_strong(expected, 1, std::memory_order_acq_rel)) {
      e.fault_offset.store(addr - b, std::memory_order_relaxed);
      e.fault_code.store(info->si_code, std::memory_order_relaxed);
      // mmap is a plain system call on Linux, safe here. MAP_NORESERVE: the
      // replacement is mostly never-written zero pages; do not charge it.
      void* p = ::mmap(reinterpret_cast<void*>(b), e.size.load(std::memory_order_relaxed),
                       PROT_READ | PROT_WRITE,
                       MAP_FIXED | MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (p == MAP_FAILED) break;  // cannot recover: die as unguarded code would
      e.state.store(2, std::memory_order_release);
      return;  // the faulting access is retried and reads zeros
    }
    // Another thread is replacing it: wait, then retry the access.
    while (e.state.load(std::memory_order_acquire) == 1) {
    }
    if (e.state.load(std::memory_order_acquire) == 2) return;
    break;
  }
  // Not ours: whatever was installed before us decides.
  if (g_prev_sigbus.sa_flags & SA_SIGINFO) {
    g_prev_sigbus.sa_sigaction(sig, info, uctx);
  } else if (g_prev_sigbus.sa_handler != SIG_DFL && g_prev_sigbus.sa_handler != SIG_IGN) {
    g_prev_sigbus.sa_handler(sig);
  } else {
    // Default action: reinstall it and return; the access faults again and
    // the process dies with SIGBUS as it would have without us.
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    ::sigaction(SIGBUS, &dfl, nullptr);
  }
}

int GuardRegister(uint8_t* base, uint64_t size) {
  std::call_once(g_guard_installed, [] {
    struct sigaction sa {};
    sa.sa_sigaction = OnSigbus;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGBUS, &sa, &g_prev_sigbus);
  });
  for (int i = 0; i < kGuardEntries; ++i) {
    uint32_t expected = 0;
    if (!g_guard[i].used.compare_exchange_strong(expected, 1, std::memory_order_acq_rel)) continue;
    g_guard[i].state.store(0, std::memory_order_relaxed);
    g_guard[i].size.store(size, std::memory_order_relaxed);
    g_guard[i].base.store(reinterpret_cast<uintptr_t>(base), std::memory_order_release);
    return i;
  }
  return -1;  // more than kGuardEntries mappings: this one is unguarded
}

void GuardUnregister(int i) {
  if (i < 0) return;
  g_guard[i].base.store(0, std::memory_order_release);
  g_guard[i].used.store(0, std::memory_order_release);
}

// True if [offset, offset+size) of the file has a hole (or lies past EOF).
bool HasHole(int fd, uint64_t offset, uint64_t size) {
  const off_t h = ::lseek(fd, static_cast<off_t>(offset), SEEK_HOLE);
  if (h < 0) return true;  // ENXIO (offset at/after EOF) or no SEEK_HOLE: assume one
  return static_cast<uint64_t>(h) < offset + size;
}

// Allocates every block of [offset, offset+size) (extending the file if it
// is shorter). fallocate(2) mode 0 never changes existing bytes, so it is
// safe on a live region. glibc's posix_fallocate is not used: where the
// filesystem lacks fallocate it emulates it by writing a byte per block,
// which can overwrite a concurrent writer's byte.
Status Reserve(int fd, const std::string& path, uint64_t offset, uint64_t size) {
  if (!HasHole(fd, offset, size)) return Status::OK();
  int rc;
  do {
    rc = ::fallocate(fd, 0, static_cast<off_t>(offset), static_cast<off_t>(size));
  } while (rc != 0 && errno == EINTR);
  if (rc == 0) return Status::OK();
  const int err = errno;
  const std::string what = "reserve " + std::to_string(size) + " bytes at offset " +
                           std::to_string(offset) + " of " + path + ": " + std::strerror(err);
  if (err == ENOSPC || err == EDQUOT) {
    return Status::IOError(what +
                           " (the filesystem cannot hold the region; a sparse region file "
                           "would fault with SIGBUS when it fills)");
  }
  if (err == EOPNOTSUPP) {
    return Status::Unsupported(what +
                               " (this filesystem cannot reserve space and the file is sparse: "
                               "write it out in full first, e.g. with dd from /dev/zero)");
  }
  return Status::IOError(what);
}

// True if [from, to) of the file holds only zeros (or nothing). Reads only
// the data the file has (SEEK_DATA skips holes); a read that fails counts
// as bytes.
bool BlankBetween(int fd, uint64_t from, uint64_t to) {
  char buf[1 << 16];
  uint64_t at = from;
  while (at < to) {
    const off_t data = ::lseek(fd, static_cast<off_t>(at), SEEK_DATA);
    if (data < 0) return errno == ENXIO;  // no data from `at` on
    at = static_cast<uint64_t>(data);
    if (at >= to) return true;
    const ssize_t n = ::pread(fd, buf, std::min<uint64_t>(sizeof buf, to - at), data);
    if (n <= 0) {
      if (n < 0 && errno == EINTR) continue;
      return false;
    }
    for (ssize_t i = 0; i < n; ++i)
      if (buf[i] != 0) return false;
    at += static_cast<uint64_t>(n);
  }
  return true;
}

}  // namespace

Status ReadDevdaxFacts(const std::string& sysfs_root, unsigned major, unsigned minor,
                       DevdaxFacts* out) {
  const std::string dir =
      sysfs_root + "/dev/char/" + std::to_string(major) + ":" + std::to_string(minor);
  CXLKV_RETURN_IF_ERROR(ReadU64File(dir + "/size", &out->size));
  uint64_t align = 0;
  if (ReadU64File(dir + "/align", &align).ok() && align != 0) {
    out->align = align;
  } else {
    out->align = 2ull << 20;  // device-dax default alignment
  }
  if ((out->align & (out->align - 1)) != 0) {
    return Status::Corruption(dir + "/align: " + std::to_string(out->align) +
                              " is not a power of two");
  }
  return Status::OK();
}

Status Mapping::Open(const std::string& path, uint64_t offset, uint64_t size, bool create,
                     const std::string& sysfs_root, std::unique_ptr<Mapping>* out) {
  MappingOptions o;
  o.offset = offset;
  o.size = size;
  o.create = create;
  o.sysfs_root = sysfs_root;
  return Open(path, o, out);
}

Status Mapping::Open(const std::string& path, const MappingOptions& options,
                     std::unique_ptr<Mapping>* out) {
  const uint64_t offset = options.offset;
  uint64_t size = options.size;
  const bool create = options.create;
  std::unique_ptr<Mapping> m(new Mapping());
  m->path_ = path;
  m->offset_ = offset;
  struct stat st {};
  const bool exists = ::stat(path.c_str(), &st) == 0;
  if (exists && S_ISCHR(st.st_mode)) {
    m->devdax_ = true;
    DevdaxFacts facts;
    CXLKV_RETURN_IF_ERROR(
        ReadDevdaxFacts(options.sysfs_root, major(st.st_rdev), minor(st.st_rdev), &facts)
            .WithContext("devdax " + path));
    if (offset % facts.align != 0) {
      return Status::InvalidArgument("devdax " + path + ": offset " + std::to_string(offset) +
                                     " is not a multiple of the device alignment " +
                                     std::to_string(facts.align));
    }
    if (offset >= facts.size) {
      return Status::InvalidArgument("devdax " + path + ": offset " + std::to_string(offset) +
                                     " beyond device size " + std::to_string(facts.size));
    }
    if (size == 0) size = facts.size - offset;
    if (size % facts.align != 0 || size > facts.size - offset) {
      return Status::InvalidArgument("devdax " + path + ": size " + std::to_string(size) +
                                     " must be a multiple of " + std::to_string(facts.align) +
                                     " within the device's " + std::to_string(facts.size) +
                                     " bytes");
    }
    m->fd_ = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
    if (m->fd_ < 0) return Errno("open", path, errno);
  } else {
    if (exists && !S_ISREG(st.st_mode)) {
      return Status::InvalidArgument(path + " is neither a regular file nor a character device");
    }
    if (offset % 4096 != 0) {
      return Status::InvalidArgument("region " + path + ": offset " + std::to_string(offset) +
                                     " is not a multiple of 4096");
    }
    if (!exists && !create) return Status::NotFound("region " + path + " does not exist");
    if (!exists) {
      // The default place is /dev/shm/cxlkv/<name>: create the directory.
      std::error_code ec;
      const auto parent = std::filesystem::path(path).parent_path();
      if (!parent.empty()) std::filesystem::create_directories(parent, ec);
    }
    m->fd_ = ::open(path.c_str(), O_RDWR | O_CLOEXEC | (create ? O_CREAT | O_EXCL : 0), 0660);
    if (m->fd_ >= 0 && create) {
      m->created_ = true;
      // Tests stop here to let another process format the file we created.
      CXLKV_FAILPOINT_HIT("open.after_create");
    } else if (m->fd_ < 0 && create && errno == EEXIST) {
      m->fd_ = ::open(path.c_str(), O_RDWR | O_CLOEXEC);  // someone created it first: fine
    }
    if (m->fd_ < 0) return Errno("open", path, errno);
    // A file this call created and could not make usable is removed again
    // (never one another process created), so a failed create leaves nothing.
    auto fail = [&m](Status s) {
      if (m->created_ && ::flock(m->fd_, LOCK_EX | LOCK_NB) == 0) ::unlink(m->path_.c_str());
      return s;
    };
    if (::fstat(m->fd_, &st) != 0) return fail(Errno("stat", path, errno));
    const auto file_size = static_cast<uint64_t>(st.st_size);
    if (size == 0) {
      if (file_size <= offset) {
        return fail(Status::InvalidArgument("region " + path + " is " + std::to_string(file_size) +
                                            " bytes, nothing after offset " +
                                            std::to_string(offset) + "; give a size to create it"));
      }
      size = file_size - offset;
    }
    // A short file is grown only when it holds nothing after the offset: a
    // creator's file not grown yet (it is 0 bytes from its O_EXCL create
    // until its fallocate, which other creators race), a failed create.
    // Bytes there may be a truncated region, whose directory names blocks
    // past the cut, or bytes that are no region: never grown. Nor removed
    // (fail() is not used): another process made them.
    if (file_size < offset + size &&
        (!create || (file_size > offset && !BlankBetween(m->fd_, offset, file_size)))) {
      std::string why = options.describe_short
                            ? options.describe_short(m->fd_, offset, file_size, size)
                            : std::string();
      if (why.empty()) {
        why = "region " + path + " is " + std::to_string(file_size) +
              " bytes, shorter than offset+size " + std::to_string(offset + size) +
              ": give a size that fits (or none: the whole file); if the file was truncated, "
              "reformat it with `cxlkv format --force`";
      }
      return Status::InvalidArgument(why);
    }
    if (options.reserve) {
      // Also for files someone else created or extended sparse (e.g. a
      // fabric backing file): a full filesystem is a clear error here
      // rather than SIGBUS on some later store or prefault.
      if (Status s = Reserve(m->fd_, path, offset, size); !s.ok()) return fail(s);
    } else if (file_size < offset + size &&
               ::ftruncate(m->fd_, static_cast<off_t>(offset + size)) != 0) {
      return fail(Errno("extend", path, errno));
    }
    if (options.shared_lock) {
      // A shared lock marks the file as in use on this host. Lifecycle code
      // (gc, destroy, unformat) holds an exclusive lock while it decides,
      // so wait for it (bounded), then make sure the path still names the
      // file we locked: if it was removed meanwhile, start over.
      bool locked = false;
      for (int i = 0; i < 500 && !locked; ++i) {
        if (::flock(m->fd_, LOCK_SH | LOCK_NB) == 0) {
          locked = true;
        } else if (errno == EWOULDBLOCK) {
          ::usleep(10'000);
        } else {
          return Errno("lock", path, errno);
        }
      }
      if (!locked)
        return Status::Busy("region " + path +
                            " is locked exclusively (gc, destroy or format --force running?)");
      struct stat now_st {};
      if (::fstat(m->fd_, &st) != 0) return Errno("stat", path, errno);
      if (::stat(path.c_str(), &now_st) != 0 || now_st.st_ino != st.st_ino ||
          now_st.st_dev != st.st_dev) {
        return Open(path, options, out);  // removed while we waited
      }
    }
  }
  void* p =
      ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, m->fd_, static_cast<off_t>(offset));
  if (p == MAP_FAILED) return Errno("mmap " + std::to_string(size) + " bytes of", path, errno);
  m->base_ = static_cast<uint8_t*>(p);
  m->size_ = size;
  m->guard_ = GuardRegister(m->base_, size);
  *out = std::move(m);
  return Status::OK();
}

void Mapping::RemoveIfCreatedAndUnused() {
  // Only if we created the file and nobody else has it open on this host.
  if (!created_ || fd_ < 0) return;
  if (::flock(fd_, LOCK_EX | LOCK_NB) == 0) ::unlink(path_.c_str());
}

Mapping::~Mapping() {
  GuardUnregister(guard_);
  if (base_ != nullptr) ::munmap(base_, size_);
  if (fd_ >= 0) ::close(fd_);
}

bool Mapping::lost() const {
  return guard_ >= 0 && g_guard[guard_].state.load(std::memory_order_acquire) == 2;
}

Status Mapping::LostStatus() const {
  if (!lost()) return Status::OK();
  const GuardEntry& e = g_guard[guard_];
  const int code = e.fault_code.load(std::memory_order_relaxed);
  const char* why = code == BUS_ADRERR ? "its file was truncated or removed from under it"
                    : (code == BUS_MCEERR_AR || code == BUS_MCEERR_AO)
                        ? "its memory reported an uncorrectable error"
                        : "the kernel could not back it";
  return Status::IOError(
      "region " + path_ + ": SIGBUS at offset " +
      std::to_string(e.fault_offset.load(std::memory_order_relaxed)) + " (" + why +
      "); the mapping was replaced with zeros, every block now misses and stores fail: close "
      "the region and reopen it");
}

Status Mapping::Prefault(uint64_t begin, uint64_t end) const {
  if (end > size_) end = size_;
  const uint64_t page = 4096;
  begin = begin / page * page;
  if (begin >= end) return Status::OK();
  for (;;) {
    if (::madvise(base_ + begin, end - begin, MADV_POPULATE_WRITE) == 0) return Status::OK();
    if (errno != EINTR) break;
  }
  const int err = errno;
  if (err == EINVAL && devdax_) {
    // Kernels whose device-dax mappings refuse MADV_POPULATE_WRITE: a
    // write fault per page that changes nothing (an atomic add of zero is
    // safe against concurrent writers). Device memory needs no allocation,
    // so touching it cannot fault for lack of space.
    for (uint64_t off = begin; off < end; off += page) {
      reinterpret_cast<std::atomic<uint64_t>*>(base_ + off)
          ->fetch_add(0, std::memory_order_relaxed);
    }
    return Status::OK();
  }
  // A kernel without MADV_POPULATE_WRITE (before 5.14): leave the faults to
  // first use. Never touch file pages here: on a file that lost its blocks
  // that is SIGBUS, where the call above reports EFAULT.
  if (err == EINVAL) return Status::OK();
  return Status::IOError(
      "prefault " + std::to_string(end - begin) + " bytes of " + path_ + " at offset " +
      std::to_string(begin) + ": " + std::strerror(err) +
      (err == EFAULT ? " (the file is shorter than the region: truncated?)" : ""));
}

}  // namespace cxlkv::internal
