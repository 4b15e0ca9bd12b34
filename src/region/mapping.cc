// Copyright cxlkv authors.
#include "mapping.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>

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
  std::unique_ptr<Mapping> m(new Mapping());
  m->path_ = path;
  m->offset_ = offset;
  struct stat st {};
  const bool exists = ::stat(path.c_str(), &st) == 0;
  if (exists && S_ISCHR(st.st_mode)) {
    m->devdax_ = true;
    DevdaxFacts facts;
    CXLKV_RETURN_IF_ERROR(ReadDevdaxFacts(sysfs_root, major(st.st_rdev), minor(st.st_rdev), &facts)
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
    } else if (m->fd_ < 0 && create && errno == EEXIST) {
      m->fd_ = ::open(path.c_str(), O_RDWR | O_CLOEXEC);  // someone created it first: fine
    }
    if (m->fd_ < 0) return Errno("open", path, errno);
    if (::fstat(m->fd_, &st) != 0) return Errno("stat", path, errno);
    uint64_t file_size = static_cast<uint64_t>(st.st_size);
    if (size == 0) {
      if (file_size <= offset) {
        return Status::InvalidArgument("region " + path + " is " + std::to_string(file_size) +
                                       " bytes, nothing after offset " + std::to_string(offset) +
                                       "; give a size to create it");
      }
      size = file_size - offset;
    }
    if (file_size < offset + size) {
      if (!create) {
        return Status::InvalidArgument("region " + path + " is " + std::to_string(file_size) +
                                       " bytes, shorter than offset+size " +
                                       std::to_string(offset + size));
      }
      // posix_fallocate reserves the tmpfs pages now, so a full /dev/shm is
      // a clear error here rather than SIGBUS on some later store.
      int err = ::posix_fallocate(m->fd_, 0, static_cast<off_t>(offset + size));
      if (err != 0) {
        if (err == EOPNOTSUPP || err == EINVAL) {
          if (::ftruncate(m->fd_, static_cast<off_t>(offset + size)) != 0)
            return Errno("extend", path, errno);
        } else {
          return Errno("allocate " + std::to_string(offset + size) + " bytes for", path, err);
        }
      }
    }
    // A shared lock marks the file as in use on this host. `cxlkv gc` and
    // `cxlkv format --force` hold an exclusive lock while they decide, so
    // wait for it (bounded), then make sure the path still names the file
    // we locked: if gc removed it meanwhile, start over on the new path.
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
                          " is locked exclusively (gc or format --force running?)");
    struct stat now_st {};
    if (::fstat(m->fd_, &st) != 0) return Errno("stat", path, errno);
    if (::stat(path.c_str(), &now_st) != 0 || now_st.st_ino != st.st_ino ||
        now_st.st_dev != st.st_dev) {
      return Open(path, offset, size, create, sysfs_root, out);  // removed while we waited
    }
  }
  void* p =
      ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, m->fd_, static_cast<off_t>(offset));
  if (p == MAP_FAILED) return Errno("mmap " + std::to_string(size) + " bytes of", path, errno);
  m->base_ = static_cast<uint8_t*>(p);
  m->size_ = size;
  *out = std::move(m);
  return Status::OK();
}

void Mapping::RemoveIfCreatedAndUnused() {
  // Only if we created the file and nobody else has it open on this host.
  if (!created_ || fd_ < 0) return;
  if (::flock(fd_, LOCK_EX | LOCK_NB) == 0) ::unlink(path_.c_str());
}

Mapping::~Mapping() {
  if (base_ != nullptr) ::munmap(base_, size_);
  if (fd_ >= 0) ::close(fd_);
}

void Mapping::Prefault(uint64_t begin, uint64_t end) const {
  if (end > size_) end = size_;
  const uint64_t page = 4096;
  begin = begin / page * page;
  if (begin >= end) return;
  if (::madvise(base_ + begin, end - begin, MADV_POPULATE_WRITE) == 0) return;
  // Older kernels / devdax: a write fault per page that changes nothing. An
  // atomic add of zero is safe against concurrent writers of the same word.
  for (uint64_t off = begin; off < end; off += page) {
    reinterpret_cast<std::atomic<uint64_t>*>(base_ + off)->fetch_add(0, std::memory_order_relaxed);
  }
}

}  // namespace cxlkv::internal
