// Copyright cxlkv authors.
//
// Lifecycle, second half: destroy, unformat, gc. Each follows one order:
//   1. probe the path: only a cxlkv region (valid or recognizably damaged)
//      or an empty file is ever touched;
//   2. try the exclusive flock (held by a process here: in use), release it;
//   3. watch the heartbeats without holding the lock, so processes attaching
//      meanwhile are not made to wait for the whole watch;
//   4. take the exclusive flock again, look at the records once more, and
//      act while holding it. An opener on this host waits for the lock and
//      then finds the path gone (mapping.cc starts over) or the bytes blank.
#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "cxlkv/lifecycle.h"
#include "lifecycle_internal.h"

namespace cxlkv {
namespace {

using internal::FlockResult;
using internal::kSuperblockBytes;

bool Touchable(RegionKind k) {
  return k == RegionKind::kRegion || k == RegionKind::kDamaged || k == RegionKind::kEmpty;
}

Status NotARegion(const std::string& path, const internal::Probe& p, const char* verb) {
  return Status::InvalidArgument(
      "region " + path + " is not a cxlkv region (" + RegionKindName(p.report.kind) +
      (p.report.detail.empty() ? "" : ": " + p.report.detail) + "); it is never " + verb);
}

Status InUse(const std::string& path, const AttachReport& r) {
  return Status::Busy("region " + path + " is in use: " + r.ToString() + "; stop them first");
}

// Zeroes [begin, end) of a file: holes where the filesystem can punch them
// (instant, and frees the memory of a tmpfs file), else written zeros.
Status ZeroFileRange(int fd, const std::string& path, uint64_t begin, uint64_t end) {
  if (begin >= end) return Status::OK();
  if (::fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(begin),
                  static_cast<off_t>(end - begin)) == 0) {
    return Status::OK();
  }
  static const std::vector<uint8_t> zero(1 << 20, 0);
  for (uint64_t off = begin; off < end;) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(zero.size(), end - off));
    const ssize_t w = ::pwrite(fd, zero.data(), n, static_cast<off_t>(off));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return Status::IOError("zero " + path + ": " + std::strerror(errno));
    off += static_cast<uint64_t>(w);
  }
  return Status::OK();
}

// Zeroes the region at [offset, offset+extent): everything after the
// header first, then the header, the magic last, so that a crash part-way
// leaves a region still recognizably ours (and `format --force` can finish
// the job) rather than bytes that look foreign.
Status ZeroRegion(const std::string& path, const internal::Probe& p, const LifecycleOptions& o,
                  int fd) {
  const uint64_t extent = o.size != 0 ? o.size : p.extent;
  if (p.regular) {
    const uint64_t b = o.offset, e = o.offset + std::max<uint64_t>(extent, kSuperblockBytes);
    CXLKV_RETURN_IF_ERROR(ZeroFileRange(fd, path, b + kSuperblockBytes, e));
    CXLKV_RETURN_IF_ERROR(ZeroFileRange(fd, path, b + 8, b + kSuperblockBytes));
    CXLKV_RETURN_IF_ERROR(ZeroFileRange(fd, path, b, b + 8));
    if (::fdatasync(fd) != 0 && errno != EINVAL && errno != EROFS) {
      return Status::IOError("sync " + path + ": " + std::strerror(errno));
    }
    return Status::OK();
  }
  internal::MappingOptions mo;
  mo.offset = o.offset;
  mo.size = extent;
  mo.reserve = false;
  mo.shared_lock = false;
  mo.sysfs_root = o.sysfs_root;
  std::unique_ptr<internal::Mapping> m;
  CXLKV_RETURN_IF_ERROR(internal::Mapping::Open(path, mo, &m));
  const uint64_t n = m->size();
  for (uint64_t off = kSuperblockBytes; off < n; off += 1ull << 30) {
    std::memset(m->base() + off, 0, std::min<uint64_t>(1ull << 30, n - off));
  }
  std::memset(m->base() + 8, 0, std::min<uint64_t>(n, kSuperblockBytes) - 8);
  reinterpret_cast<std::atomic<uint64_t>*>(m->base())->store(0, std::memory_order_release);
  return m->LostStatus();
}

// Steps 2-4 of the file comment for one probed path; `act` runs with the
// exclusive flock held (files) and gets the descriptor (-1 for a device).
template <typename Act>
Status WhileUnused(const std::string& path, internal::Probe& p, const LifecycleOptions& o,
                   int open_flags, Act act) {
  if (p.regular) {
    int fd = -1;
    std::string err;
    const FlockResult r = internal::TryExclusive(path, O_RDONLY, p.dev, p.ino, &fd, &err);
    if (fd >= 0) ::close(fd);
    if (r == FlockResult::kError) return Status::IOError(err);
    if (r == FlockResult::kHeld) {
      AttachReport rep;
      rep.attached = rep.locked_on_this_host = true;
      return InUse(path, rep);
    }
  }
  internal::WatchTarget t;
  t.region = p.region.get();
  AttachReport rep;
  if (t.region != nullptr) {
    rep.watched_ns = internal::Watch({&t}, o.liveness_timeout_ns);
    if (t.attached) {
      rep.attached = true;
      rep.live = t.live;
      return InUse(path, rep);
    }
  }
  int fd = -1;
  if (p.regular) {
    std::string err;
    const FlockResult r = internal::TryExclusive(path, open_flags, p.dev, p.ino, &fd, &err);
    if (r != FlockResult::kAcquired) {
      if (fd >= 0) ::close(fd);
      if (r == FlockResult::kError) return Status::IOError(err);
      rep.attached = rep.locked_on_this_host = true;
      return InUse(path, rep);
    }
  }
  if (internal::ChangedSinceWatch(&t)) {
    if (fd >= 0) ::close(fd);
    rep.attached = true;
    rep.live = t.live;
    return InUse(path, rep);
  }
  p.region.reset();  // our observer mapping: not needed for the act
  Status s = act(fd);
  if (fd >= 0) ::close(fd);
  return s;
}

}  // namespace

Status DestroyRegion(const std::string& path, const LifecycleOptions& options) {
  internal::Probe p;
  CXLKV_RETURN_IF_ERROR(internal::ProbePath(path, options, &p));
  if (p.report.kind == RegionKind::kAbsent) return Status::OK();
  if (!Touchable(p.report.kind)) return NotARegion(path, p, "destroyed");
  // Remove the file only when the region is all of it; a region sharing a
  // file or a device with others is zeroed in place.
  const bool remove = p.regular && options.offset == 0 &&
                      (p.report.kind != RegionKind::kRegion || p.extent == p.file_size);
  return WhileUnused(path, p, options, remove ? O_RDONLY : O_RDWR, [&](int fd) {
    if (!remove) return ZeroRegion(path, p, options, fd);
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
      return Status::IOError("remove " + path + ": " + std::strerror(errno));
    }
    return Status::OK();
  });
}

Status UnformatRegion(const std::string& path, const LifecycleOptions& options) {
  internal::Probe p;
  CXLKV_RETURN_IF_ERROR(internal::ProbePath(path, options, &p));
  if (p.report.kind == RegionKind::kAbsent) {
    return Status::NotFound("region " + path + " does not exist");
  }
  if (p.report.kind == RegionKind::kEmpty) return Status::OK();  // nothing formatted
  if (!Touchable(p.report.kind)) return NotARegion(path, p, "unformatted");
  return WhileUnused(path, p, options, O_RDWR,
                     [&](int fd) { return ZeroRegion(path, p, options, fd); });
}

namespace {

struct GcCandidate {
  std::string path;
  internal::Probe probe;
  internal::WatchTarget target;
};

// Probes one file for gc and adds it to *cands, or says in out->kept why
// not. A directory sweep (`named` false) passes over files that are not
// ours without a word; a named file is always reported.
void ConsiderForGc(const std::string& path, bool named, const LifecycleOptions& o, GcReport* out,
                   std::vector<std::unique_ptr<GcCandidate>>* cands) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    if (named) out->kept.push_back({path, std::string("cannot stat: ") + std::strerror(errno)});
    return;
  }
  if (!S_ISREG(st.st_mode)) {
    if (named) out->kept.push_back({path, "not a regular file; gc removes region files only"});
    return;
  }
  auto c = std::make_unique<GcCandidate>();
  c->path = path;
  if (Status s = internal::ProbePath(path, o, &c->probe); !s.ok()) {
    out->kept.push_back({path, s.ToString()});
    return;
  }
  const RegionKind k = c->probe.report.kind;
  if (k == RegionKind::kDamaged) {
    out->kept.push_back({path, "damaged region: " + c->probe.report.detail});
    return;
  }
  if (k != RegionKind::kRegion && k != RegionKind::kEmpty) {  // not ours
    if (named)
      out->kept.push_back({path, std::string("not a cxlkv region (") + RegionKindName(k) +
                                     "); gc never touches it"});
    return;
  }
  // The owner is the lstat's; the probe must have opened that same file.
  if (c->probe.dev != st.st_dev || c->probe.ino != st.st_ino) {
    out->kept.push_back({path, "replaced while gc looked at it"});
    return;
  }
  if (!named && o.gc_owners == GcOwners::kMine && st.st_uid != ::geteuid()) {
    out->kept.push_back({path, "owned by uid " + std::to_string(st.st_uid) +
                                   ", not this user (uid " + std::to_string(::geteuid()) +
                                   "): collected only when named, or with any owner"});
    return;
  }
  int fd = -1;
  std::string err;
  const FlockResult r =
      internal::TryExclusive(path, O_RDONLY, c->probe.dev, c->probe.ino, &fd, &err);
  if (fd >= 0) ::close(fd);
  if (r != FlockResult::kAcquired) {
    out->kept.push_back({path, r == FlockResult::kHeld ? "in use: held open by a process on "
                                                         "this host (flock)"
                                                       : err});
    return;
  }
  c->target.region = c->probe.region.get();
  cands->push_back(std::move(c));
}

// Watches every candidate at once, then removes those nobody is attached
// to, each under the exclusive flock and after one more look at its records.
void CollectAbandoned(std::vector<std::unique_ptr<GcCandidate>>& cands, const LifecycleOptions& o,
                      GcReport* out) {
  std::vector<internal::WatchTarget*> targets;
  for (auto& c : cands)
    if (c->target.region != nullptr) targets.push_back(&c->target);
  internal::Watch(targets, o.liveness_timeout_ns);
  for (auto& c : cands) {
    const std::string what = c->probe.report.kind == RegionKind::kEmpty ? "empty file" : "region";
    if (c->target.attached) {
      AttachReport rep;
      rep.attached = true;
      rep.live = c->target.live;
      out->kept.push_back({c->path, "in use: " + rep.ToString()});
      continue;
    }
    if (o.dry_run) {
      out->removed.push_back({c->path, what});
      continue;
    }
    int fd = -1;
    std::string err;
    const FlockResult r =
        internal::TryExclusive(c->path, O_RDONLY, c->probe.dev, c->probe.ino, &fd, &err);
    std::string why;
    if (r == FlockResult::kHeld) {
      why = "in use: held open by a process on this host (flock)";
    } else if (r == FlockResult::kError) {
      why = err;
    } else if (internal::ChangedSinceWatch(&c->target)) {
      why = "in use: a participant registered or beat during gc";
    } else if (::unlink(c->path.c_str()) != 0) {
      why = std::string("remove: ") + std::strerror(errno);
    }
    if (fd >= 0) ::close(fd);
    if (why.empty()) {
      out->removed.push_back({c->path, what});
    } else {
      out->kept.push_back({c->path, why});
    }
  }
}

LifecycleOptions GcOptions(const LifecycleOptions& options) {
  LifecycleOptions o = options;
  o.offset = 0;
  o.size = 0;
  return o;
}

}  // namespace

Status GcDirectory(const std::string& dir, const LifecycleOptions& options, GcReport* out) {
  *out = GcReport{};
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return Status::IOError("open directory " + dir + ": " + std::strerror(errno));
  std::vector<std::string> names;
  while (dirent* e = ::readdir(d)) names.emplace_back(e->d_name);
  ::closedir(d);
  std::sort(names.begin(), names.end());
  const LifecycleOptions o = GcOptions(options);
  std::vector<std::unique_ptr<GcCandidate>> cands;
  for (const std::string& name : names) {
    if (name == "." || name == "..") continue;
    ConsiderForGc(dir + "/" + name, /*named=*/false, o, out, &cands);
  }
  CollectAbandoned(cands, o, out);
  return Status::OK();
}

Status GcFiles(const std::vector<std::string>& paths, const LifecycleOptions& options,
               GcReport* out) {
  *out = GcReport{};
  const LifecycleOptions o = GcOptions(options);
  std::vector<std::unique_ptr<GcCandidate>> cands;
  for (const std::string& path : paths) ConsiderForGc(path, /*named=*/true, o, out, &cands);
  CollectAbandoned(cands, o, out);
  return Status::OK();
}

}  // namespace cxlkv
