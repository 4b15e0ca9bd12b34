// Copyright cxlkv authors.
//
// The non-coherence emulator (emulator.h). Files of one emulated machine:
//   host<N>.cache   header | line control words | line bytes (one per host)
//   memory.locks    header | one lock word per line of shared memory
//   sites           the Flush/Invalidate call sites seen (mutation tests)
// Every word that several processes touch is a std::atomic in a MAP_SHARED
// file (lock-free, so it works across processes).
#include "emulator.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>

namespace cxlkv::internal {
namespace {

constexpr uint64_t kCacheMagic = 0x45484341434D4543ull;  // "CEMCACHE"
constexpr uint64_t kHeaderBytes = 4096;

// Line control word: [holder pid:32][unused:29][locked:1][state:2].
constexpr uint64_t kInvalid = 0, kClean = 1, kDirty = 2;
constexpr uint64_t kStateMask = 3;
constexpr uint64_t kLocked = 4;

struct CacheHeader {
  std::atomic<uint64_t> magic;
  std::atomic<uint64_t> len;  // region bytes this cache covers
};

struct SiteEntry {
  std::atomic<uint64_t> key;  // offset + 1, bit 63 set for Invalidate; 0 = empty
  std::atomic<uint64_t> calls;
  char object[240];
};
static_assert(sizeof(SiteEntry) == 256);

uint64_t Mix(uint64_t z) {  // splitmix64's finaliser
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t CacheBytes(uint64_t lines) { return kHeaderBytes + lines * 8 + lines * 64; }
uint64_t LocksBytes(uint64_t lines) { return kHeaderBytes + lines * 8; }
uint64_t SitesBytes() { return kHeaderBytes + kEmulatorMaxSites * sizeof(SiteEntry); }

// Maps `path` (created if missing, grown to `bytes`) MAP_SHARED.
Status MapFile(const std::string& path, uint64_t bytes, bool create, uint8_t** out) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC | (create ? O_CREAT : 0), 0600);
  if (fd < 0) return Status::IOError("emulator: open " + path + ": " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 ||
      (static_cast<uint64_t>(st.st_size) < bytes && ::ftruncate(fd, bytes) != 0)) {
    const int e = errno;
    ::close(fd);
    return Status::IOError("emulator: size " + path + ": " + std::strerror(e));
  }
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int e = errno;
  ::close(fd);
  if (p == MAP_FAILED) return Status::IOError("emulator: mmap " + path + ": " + std::strerror(e));
  *out = static_cast<uint8_t*>(p);
  return Status::OK();
}

bool HolderDead(uint64_t word) {
  const pid_t pid = static_cast<pid_t>(word >> 32);
  return pid > 0 && ::kill(pid, 0) != 0 && errno == ESRCH;
}

uint64_t Me() { return static_cast<uint64_t>(::getpid()) << 32; }

// Takes the lock bit of `w` (keeping the other bits). A holder that died
// (SIGKILL mid-access) is taken over: its access never completed, and what
// it left in the line is what a crash leaves.
uint64_t LockWord(std::atomic<uint64_t>& w) {
  for (int spins = 0;; spins++) {
    uint64_t c = w.load(std::memory_order_relaxed);
    if ((c & kLocked) == 0) {
      if (w.compare_exchange_weak(c, (c & kStateMask) | kLocked | Me(), std::memory_order_acquire))
        return c & kStateMask;
      continue;
    }
    if (spins > 1000 && HolderDead(c)) {
      w.compare_exchange_strong(c, c & kStateMask, std::memory_order_relaxed);
      continue;
    }
    if (spins > 100) sched_yield();
  }
}

bool TryLockWord(std::atomic<uint64_t>& w, uint64_t* state) {
  uint64_t c = w.load(std::memory_order_relaxed);
  if (c & kLocked) return false;
  if (!w.compare_exchange_strong(c, (c & kStateMask) | kLocked | Me(), std::memory_order_acquire))
    return false;
  *state = c & kStateMask;
  return true;
}

void UnlockWord(std::atomic<uint64_t>& w, uint64_t state) {
  w.store(state, std::memory_order_release);
}

}  // namespace

struct EmulatedHost::Files {
  uint8_t* cache = nullptr;
  uint64_t cache_bytes = 0;
  uint8_t* locks = nullptr;
  uint64_t locks_bytes = 0;
  uint8_t* sites = nullptr;
  std::mutex site_mu;  // the process-local map below
  std::unordered_map<const void*, std::pair<uint32_t, bool>> site_of;  // ret -> (entry, drop)

  std::atomic<uint64_t>& Ctl(uint64_t l) {
    return reinterpret_cast<std::atomic<uint64_t>*>(cache + kHeaderBytes)[l];
  }
  uint8_t* Data(uint64_t lines, uint64_t l) { return cache + kHeaderBytes + lines * 8 + l * 64; }
  std::atomic<uint64_t>& MemLock(uint64_t l) {
    return reinterpret_cast<std::atomic<uint64_t>*>(locks + kHeaderBytes)[l];
  }
  SiteEntry* Site(uint32_t i) { return reinterpret_cast<SiteEntry*>(sites + kHeaderBytes) + i; }
};

Status EmulatedHost::Open(const EmulatorOptions& options, std::unique_ptr<EmulatedHost>* out) {
  if (options.dir.empty()) return Status::InvalidArgument("emulator: no directory");
  if (options.host >= kEmulatorMaxHosts)
    return Status::InvalidArgument("emulator: host " + std::to_string(options.host) +
                                   " out of range (0.." + std::to_string(kEmulatorMaxHosts - 1) +
                                   ")");
  if (::mkdir(options.dir.c_str(), 0700) != 0 && errno != EEXIST)
    return Status::IOError("emulator: mkdir " + options.dir + ": " + std::strerror(errno));
  std::unique_ptr<EmulatedHost> h(new EmulatedHost());
  h->options_ = options;
  h->f_ = std::make_unique<Files>();
  const std::string sites =
      options.sites_path.empty() ? options.dir + "/sites" : options.sites_path;
  Status s = MapFile(sites, SitesBytes(), true, &h->f_->sites);
  if (!s.ok()) return s;
  std::snprintf(h->name_, sizeof h->name_, "noncoherent-emulator(host %u)", options.host);
  h->rng_.store(Mix(options.seed * 0x9E3779B97F4A7C15ull + options.host * 1000003ull +
                    static_cast<uint64_t>(::getpid())));
  *out = std::move(h);
  return Status::OK();
}

EmulatedHost::~EmulatedHost() {
  if (!f_) return;
  if (f_->cache) ::munmap(f_->cache, f_->cache_bytes);
  if (f_->locks) ::munmap(f_->locks, f_->locks_bytes);
  if (f_->sites) ::munmap(f_->sites, SitesBytes());
}

void EmulatedHost::Attach(uint8_t* base, uint64_t len) {
  base_ = base;
  len_ = len;
  lines_ = (len + kLineBytes - 1) / kLineBytes;
  f_->cache_bytes = CacheBytes(lines_);
  f_->locks_bytes = LocksBytes(lines_);
  const std::string cache = options_.dir + "/host" + std::to_string(options_.host) + ".cache";
  Status s = MapFile(cache, f_->cache_bytes, true, &f_->cache);
  if (s.ok()) s = MapFile(options_.dir + "/memory.locks", f_->locks_bytes, true, &f_->locks);
  if (!s.ok()) {
    std::fprintf(stderr, "%s\n", s.ToString().c_str());
    std::abort();
  }
  // The first process of the machine records the length; every later one
  // must map the same region (one emulated machine, one region).
  for (uint8_t* file : {f_->cache, f_->locks}) {
    auto* hdr = reinterpret_cast<CacheHeader*>(file);
    uint64_t want = 0;
    if (!hdr->len.compare_exchange_strong(want, len) && want != len) {
      std::fprintf(stderr, "emulator: %s covers %llu bytes, this region is %llu\n",
                   options_.dir.c_str(), static_cast<unsigned long long>(want),
                   static_cast<unsigned long long>(len));
      std::abort();
    }
    hdr->magic.store(kCacheMagic);
  }
}

uint64_t EmulatedHost::Line(const void* p) const {
  const auto a = reinterpret_cast<const uint8_t*>(p);
  if (a < base_ || a >= base_ + len_) {
    std::fprintf(stderr, "emulator: access outside the region (%p not in [%p, +%llu))\n", p,
                 static_cast<void*>(base_), static_cast<unsigned long long>(len_));
    std::abort();
  }
  return static_cast<uint64_t>(a - base_) / kLineBytes;
}

uint8_t* EmulatedHost::LockFilled(uint64_t l) {
  uint64_t st = LockWord(f_->Ctl(l));
  uint8_t* d = f_->Data(lines_, l);
  if (st == kInvalid) {
    // A miss: the whole line from shared memory, never torn by another
    // host's write-back of it.
    LockWord(f_->MemLock(l));
    std::memcpy(d, base_ + l * kLineBytes, kLineBytes);
    UnlockWord(f_->MemLock(l), 0);
    fills_.fetch_add(1, std::memory_order_relaxed);
    // Leave it locked, now clean.
    f_->Ctl(l).store(kClean | kLocked | Me(), std::memory_order_relaxed);
  }
  return d;
}

void EmulatedHost::Unlock(uint64_t l, uint32_t state) { UnlockWord(f_->Ctl(l), state); }

namespace {
// Writes cached line l (locked by the caller, dirty) to shared memory whole.
void WriteBack(std::atomic<uint64_t>& mem_lock, uint8_t* shared_line, const uint8_t* cached) {
  LockWord(mem_lock);
  std::memcpy(shared_line, cached, kLineBytes);
  UnlockWord(mem_lock, 0);
}
}  // namespace

void EmulatedHost::NoteDirty(uint64_t l) {
  const uint64_t i = recent_n_.fetch_add(1, std::memory_order_relaxed);
  recent_[i % kRecent].store(l, std::memory_order_relaxed);
}

void EmulatedHost::MaybeRandomWriteback() {
  if (options_.writeback_every == 0) return;
  const uint64_t r = Mix(rng_.fetch_add(0x9E3779B97F4A7C15ull, std::memory_order_relaxed));
  if (r % options_.writeback_every != 0) return;
  const uint64_t n = recent_n_.load(std::memory_order_relaxed);
  if (n == 0) return;
  const uint64_t l = recent_[(r >> 20) % (n < kRecent ? n : kRecent)].load();
  uint64_t st = 0;
  if (l >= lines_ || !TryLockWord(f_->Ctl(l), &st)) return;
  if (st == kDirty) {
    WriteBack(f_->MemLock(l), base_ + l * kLineBytes, f_->Data(lines_, l));
    random_wb_.fetch_add(1, std::memory_order_relaxed);
    st = kClean;
  }
  Unlock(l, st);
}

// A word access is the one-line case of the copies below (the engine's
// words are aligned, so none straddles a line).
uint64_t EmulatedHost::Load64(const void* p) {
  uint64_t v;
  CopyFromRegion(&v, p, sizeof v);
  return v;
}

uint32_t EmulatedHost::Load32(const void* p) {
  uint32_t v;
  CopyFromRegion(&v, p, sizeof v);
  return v;
}

void EmulatedHost::Store64(void* p, uint64_t v) { CopyToRegion(p, &v, sizeof v); }
void EmulatedHost::Store32(void* p, uint32_t v) { CopyToRegion(p, &v, sizeof v); }

void EmulatedHost::CopyFromRegion(void* dst, const void* region_src, size_t n) {
  auto* out = static_cast<uint8_t*>(dst);
  auto a = reinterpret_cast<uintptr_t>(region_src);
  while (n > 0) {
    const size_t in_line = a & (kLineBytes - 1);
    const size_t k = std::min(n, kLineBytes - in_line);
    const uint64_t l = Line(reinterpret_cast<const void*>(a));
    uint8_t* d = LockFilled(l);
    std::memcpy(out, d + in_line, k);
    Unlock(l, f_->Ctl(l).load(std::memory_order_relaxed) & kStateMask);
    MaybeRandomWriteback();
    out += k;
    a += k;
    n -= k;
  }
}

void EmulatedHost::CopyToRegion(void* region_dst, const void* src, size_t n) {
  auto* in = static_cast<const uint8_t*>(src);
  auto a = reinterpret_cast<uintptr_t>(region_dst);
  while (n > 0) {
    const size_t in_line = a & (kLineBytes - 1);
    const size_t k = std::min(n, kLineBytes - in_line);
    const uint64_t l = Line(reinterpret_cast<const void*>(a));
    // Write-allocate: the rest of the line is this host's (possibly stale)
    // copy, which a later write-back carries along.
    uint8_t* d = LockFilled(l);
    std::memcpy(d + in_line, in, k);
    Unlock(l, kDirty);
    NoteDirty(l);
    MaybeRandomWriteback();
    in += k;
    a += k;
    n -= k;
  }
}

void EmulatedHost::RecordSite(const void* ret, bool invalidate, bool* drop) {
  std::lock_guard<std::mutex> g(f_->site_mu);
  auto it = f_->site_of.find(ret);
  if (it == f_->site_of.end()) {
    Dl_info info{};
    uint64_t off = reinterpret_cast<uintptr_t>(ret);
    const char* object = "?";
    if (::dladdr(ret, &info) != 0 && info.dli_fbase != nullptr) {
      off -= reinterpret_cast<uintptr_t>(info.dli_fbase);
      if (info.dli_fname) object = info.dli_fname;
    }
    bool dropped = false;
    for (uint64_t d : options_.drop_sites) dropped = dropped || d == off;
    const uint64_t key = (off + 1) | (invalidate ? (1ull << 63) : 0);
    uint32_t slot = kEmulatorMaxSites;
    for (uint32_t i = 0; i < kEmulatorMaxSites; i++) {
      SiteEntry* e = f_->Site(i);
      uint64_t k = e->key.load();
      if (k == 0 && e->key.compare_exchange_strong(k, key)) {
        std::snprintf(e->object, sizeof e->object, "%s", object);
        slot = i;
        break;
      }
      if (k == key) {
        slot = i;
        break;
      }
    }
    it = f_->site_of.emplace(ret, std::make_pair(slot, dropped)).first;
  }
  if (it->second.first < kEmulatorMaxSites)
    f_->Site(it->second.first)->calls.fetch_add(1, std::memory_order_relaxed);
  *drop = it->second.second;
  if (*drop) dropped_.fetch_add(1, std::memory_order_relaxed);
}

void EmulatedHost::WriteBackLines(const void* p, size_t n, bool invalidate) {
  if (n == 0) return;
  const uint64_t first = Line(p), last = Line(static_cast<const uint8_t*>(p) + n - 1);
  for (uint64_t l = first; l <= last; l++) {
    uint64_t st = LockWord(f_->Ctl(l));
    // A dirty copy reaches memory either way (CLWB; CLFLUSHOPT writes it
    // back before dropping it).
    if (st == kDirty) {
      WriteBack(f_->MemLock(l), base_ + l * kLineBytes, f_->Data(lines_, l));
      (invalidate ? inval_wb_ : flush_wb_).fetch_add(1, std::memory_order_relaxed);
      st = kClean;  // CLWB: the line may stay cached
    }
    Unlock(l, invalidate ? kInvalid : st);
  }
}

// Each records its own caller: the return address must be taken here, not
// in the shared walk, so that every engine call site stays its own site.
void EmulatedHost::Flush(const void* p, size_t n) {
  bool drop = false;
  RecordSite(__builtin_return_address(0), false, &drop);
  if (!drop) WriteBackLines(p, n, /*invalidate=*/false);
}

void EmulatedHost::Invalidate(const void* p, size_t n) {
  bool drop = false;
  RecordSite(__builtin_return_address(0), true, &drop);
  if (!drop) WriteBackLines(p, n, /*invalidate=*/true);
}

// Every emulated access is complete when its call returns (the line locks
// order them), so the fences have nothing left to order; they are still
// moments at which a real cache may write a line back.
void EmulatedHost::StoreFence() { MaybeRandomWriteback(); }
void EmulatedHost::FullFence() { MaybeRandomWriteback(); }

uint64_t EmulatedHost::WritebackAll() {
  uint64_t n = 0;
  for (uint64_t l = 0; l < lines_; l++) {
    uint64_t st = LockWord(f_->Ctl(l));
    if (st == kDirty) {
      WriteBack(f_->MemLock(l), base_ + l * kLineBytes, f_->Data(lines_, l));
      n++;
      st = kClean;
    }
    Unlock(l, st);
  }
  return n;
}

EmulatorStats EmulatedHost::stats() const {
  EmulatorStats s;
  s.fills = fills_.load();
  s.flush_writebacks = flush_wb_.load();
  s.invalidate_writebacks = inval_wb_.load();
  s.random_writebacks = random_wb_.load();
  s.dropped_calls = dropped_.load();
  return s;
}

// ---- EmulatorCacheSweeper ----

struct EmulatorCacheSweeper::Impl {
  std::string dir;
  uint8_t* shared = nullptr;
  uint64_t lines = 0;
  uint8_t* locks = nullptr;
  uint8_t* caches[kEmulatorMaxHosts] = {};  // null: that host has not attached yet
  uint64_t rng = 0;

  // Maps the caches of hosts that attached since the last call.
  Status MapNewHosts() {
    for (uint32_t h = 0; h < kEmulatorMaxHosts; h++) {
      if (caches[h] != nullptr) continue;
      const std::string path = dir + "/host" + std::to_string(h) + ".cache";
      struct stat st {};
      if (::stat(path.c_str(), &st) != 0 || static_cast<uint64_t>(st.st_size) < CacheBytes(lines))
        continue;
      Status s = MapFile(path, CacheBytes(lines), false, &caches[h]);
      if (!s.ok()) return s;
    }
    return Status::OK();
  }
};

Status EmulatorCacheSweeper::Open(const std::string& dir, uint8_t* shared_base, uint64_t len,
                                  uint64_t seed, std::unique_ptr<EmulatorCacheSweeper>* out) {
  std::unique_ptr<EmulatorCacheSweeper> sw(new EmulatorCacheSweeper());
  sw->impl_ = std::make_unique<Impl>();
  Impl& m = *sw->impl_;
  m.shared = shared_base;
  m.lines = (len + kLineBytes - 1) / kLineBytes;
  m.rng = Mix(seed + 0x5EEDull);
  m.dir = dir;
  Status s = MapFile(dir + "/memory.locks", LocksBytes(m.lines), true, &m.locks);
  if (!s.ok()) return s;
  s = m.MapNewHosts();
  if (!s.ok()) return s;
  *out = std::move(sw);
  return Status::OK();
}

EmulatorCacheSweeper::~EmulatorCacheSweeper() {
  if (!impl_) return;
  for (uint8_t* c : impl_->caches)
    if (c != nullptr) ::munmap(c, CacheBytes(impl_->lines));
  if (impl_->locks) ::munmap(impl_->locks, LocksBytes(impl_->lines));
}

uint64_t EmulatorCacheSweeper::Sweep(uint32_t one_in) {
  Impl& m = *impl_;
  uint64_t n = 0;
  auto* locks = reinterpret_cast<std::atomic<uint64_t>*>(m.locks + kHeaderBytes);
  (void)m.MapNewHosts();  // a host that cannot be mapped now is tried again next time
  for (uint8_t* c : m.caches) {
    if (c == nullptr) continue;
    auto* ctl = reinterpret_cast<std::atomic<uint64_t>*>(c + kHeaderBytes);
    uint8_t* data = c + kHeaderBytes + m.lines * 8;
    for (uint64_t l = 0; l < m.lines; l++) {
      if ((ctl[l].load(std::memory_order_relaxed) & kStateMask) != kDirty) continue;
      m.rng = Mix(m.rng + 0x9E3779B97F4A7C15ull);
      if (one_in > 1 && m.rng % one_in != 0) continue;
      uint64_t st = 0;
      if (!TryLockWord(ctl[l], &st)) continue;  // a stopped holder: skip it
      uint64_t mem_st = 0;
      if (st == kDirty && TryLockWord(locks[l], &mem_st)) {
        std::memcpy(m.shared + l * kLineBytes, data + l * 64, kLineBytes);
        UnlockWord(locks[l], 0);
        st = kClean;
        n++;
      }
      UnlockWord(ctl[l], st);
    }
  }
  return n;
}

// ---- sites ----

Status ReadEmulatorSites(const std::string& path, std::vector<EmulatorSite>* sites) {
  uint8_t* m = nullptr;
  if (::access(path.c_str(), F_OK) != 0) return Status::NotFound("emulator: no " + path);
  Status s = MapFile(path, SitesBytes(), false, &m);
  if (!s.ok()) return s;
  sites->clear();
  auto* e = reinterpret_cast<SiteEntry*>(m + kHeaderBytes);
  for (uint32_t i = 0; i < kEmulatorMaxSites; i++) {
    const uint64_t k = e[i].key.load();
    if (k == 0) continue;
    EmulatorSite site;
    site.invalidate = (k >> 63) != 0;
    site.offset = (k & ~(1ull << 63)) - 1;
    site.calls = e[i].calls.load();
    site.object.assign(e[i].object, strnlen(e[i].object, sizeof e[i].object));
    sites->push_back(site);
  }
  ::munmap(m, SitesBytes());
  if (sites->empty()) return Status::NotFound("emulator: no call site recorded in " + path);
  return Status::OK();
}

Status ParseEmulatorSites(const std::string& text, std::vector<uint64_t>* out) {
  out->clear();
  size_t i = 0;
  while (i < text.size()) {
    size_t j = text.find(',', i);
    if (j == std::string::npos) j = text.size();
    const std::string tok = text.substr(i, j - i);
    char* end = nullptr;
    errno = 0;
    const unsigned long long v = std::strtoull(tok.c_str(), &end, 0);
    if (tok.empty() || errno != 0 || end == nullptr || *end != '\0')
      return Status::InvalidArgument("emulator: bad call site '" + tok + "' in '" + text + "'");
    out->push_back(v);
    i = j + 1;
  }
  return Status::OK();
}

}  // namespace cxlkv::internal
