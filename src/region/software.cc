// Copyright cxlkv authors.
//
// coherence=software (layout version 6): the region shared by hosts whose
// caches the hardware does not keep coherent. The protocol, its steps
// (SW1..SW5, SR1..SR4) and what it costs are in docs/coherence.md; this file
// is that protocol, step by step. Every load, store, flush and invalidate of
// region memory here goes through vis_ (src/region/visibility/), and no
// read-modify-write of region memory is used: each line has one writer host
// (the owner of its partition), so a line that a host's cache writes back on
// its own can only carry that host's bytes.
//
// Threads of one process share one partition: they are coherent with each
// other, and serialise slot claims on sw_claim_mu_.
//
// Layout 6 decouples the directory inside each partition (layout.h): an
// index entry names its data slot (SlotMeta::data), and the holder keeps
// its free data slots and the partition's exact LRU order in its own
// memory (software_state.h), so a store evicts the partition's least
// recently used block, not the oldest of a key's 32 ways.
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "crc32c.h"
#include "failpoint.h"
#include "region_impl.h"

namespace cxlkv::internal {
namespace {

using Clock = std::chrono::steady_clock;

uint64_t Reduce(uint64_t h, uint64_t n) {
  return static_cast<uint64_t>((static_cast<unsigned __int128>(h) * n) >> 64);
}

// The incarnation tag a layout-4 slot word carries in its owner field: the
// low 12 bits of the incarnation of the partition holder that wrote it.
constexpr uint32_t SwIncTag(uint64_t record_word) {
  return static_cast<uint32_t>(WordGen(record_word) & kOwnerMask);
}

// What a layout-4 slot CRC binds as its generation (SlotCrcTrailer): the
// slot generation (48 bits) and the writer's incarnation tag above it, so a
// CRC verifies only for the word, writer included, that it was written for
// (a metadata line read across two versions cannot pass).
constexpr uint64_t SwCrcGeneration(uint64_t slot_word) {
  return WordGen(slot_word) | (uint64_t(WordOwner(slot_word)) << 48);
}

// SW2's clock: milliseconds modulo 2^32 of the coarse monotonic clock (a
// vDSO read, no syscall, a few ns). Monotonic, not the wall clock hardware
// mode's RecencyTick() needs: these ticks never leave this process, so no
// other host has to agree with them, and an NTP step cannot reorder them.
// Ages are differences modulo 2^32: right for any age below 49 days.
uint32_t SwTick() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  // The real reading outside test builds (EvictionClock: a test's skew and hold).
  return EvictionClock(kSoftwareClock,
                       static_cast<uint32_t>(static_cast<uint64_t>(ts.tv_sec) * 1000u +
                                             static_cast<uint64_t>(ts.tv_nsec) / 1000000u));
}

uint64_t NewNonce() {
  const uint64_t t = static_cast<uint64_t>(Clock::now().time_since_epoch().count());
  const uint64_t v = Mix64(t ^ (uint64_t(::getpid()) << 32));
  return v == 0 ? 2 : v & ~1ull;
}

}  // namespace

// ---- attach ----

Status RegionImpl::SwInitOrThrow() {
  const RegionConfig& c = opts_.config;
  if (vis_ == nullptr) vis_ = NewCpuVisibility();
  if (vis_ == nullptr) {
    return Status::Unsupported(
        "coherence=software needs cache flush and invalidate instructions; this build has none "
        "for its architecture (x86-64 only; arm64 is unsupported: docs/coherence.md)");
  }
  if (c.software_partitions > kMaxSoftwarePartitions) {
    return Status::InvalidArgument("software_partitions " + std::to_string(c.software_partitions) +
                                   " out of range [1, 16]");
  }
  if (opts_.software_partition >= static_cast<int32_t>(kMaxSoftwarePartitions) ||
      opts_.software_partition < -1) {
    return Status::InvalidArgument("software_partition " +
                                   std::to_string(opts_.software_partition) +
                                   " out of range [-1, 15]");
  }
  vis_->Attach(base_, map_->size());
  CXLKV_RETURN_IF_ERROR(SwFormatOrWait());
  CXLKV_RETURN_IF_ERROR(Validate());
  // After Validate, so that a region of the other mode is refused for that.
  if (opts_.register_participant && opts_.software_partition < 0) {
    return Status::InvalidArgument(
        "coherence=software: a participant needs software_partition (0..software_partitions-1, "
        "handed out by an external lease); register_participant=false attaches read-only");
  }
  partitions_ = sb_->partitions;               // validated: 1..16, <= num_sets
  part_sets_ = geo_.num_sets / partitions_;    // exact: the geometry made it so
  part_datas_ = geo_.num_slots / partitions_;  // = part_sets_ x ways / 2
  if (opts_.register_participant &&
      static_cast<uint32_t>(opts_.software_partition) >= partitions_) {
    return Status::InvalidArgument("region " + map_->path() + " has " +
                                   std::to_string(partitions_) +
                                   " write partitions; software_partition " +
                                   std::to_string(opts_.software_partition) + " does not exist");
  }
  soft_ = true;
  sw_ns_ok_.assign(kNamespaceEntries, false);
  sw_hold_ = std::make_unique<SwHolderState>();
  obs_.resize(geo_.max_participants);
  if (opts_.register_participant) {
    CXLKV_RETURN_IF_ERROR(SwRegister());
    heartbeat_ = std::thread([this] { SwHeartbeatLoop(); });
  }
  return StartPrefault();
}

// Format-or-attach without a format lock CAS: only the attacher of
// partition 0 formats (the external lease makes it one process); everyone
// else waits for the magic.
Status RegionImpl::SwFormatOrWait() {
  const std::string& path = map_->path();
  const auto deadline = Clock::now() + std::chrono::nanoseconds(opts_.format_wait_ns);
  const bool formatter = opts_.register_participant && opts_.software_partition == 0;
  for (;;) {
    vis_->Invalidate(sb_, kSuperblockBytes);
    vis_->FullFence();
    if (vis_->Load64(&sb_->magic) == kMagic) return Status::OK();
    const uint64_t lock = vis_->Load64(&sb_->format_lock);
    Superblock copy;
    vis_->CopyFromRegion(&copy, sb_, sizeof copy);
    const bool header_intact = HeaderCrc(copy) == copy.header_crc && copy.layout_version != 0;
    // A finished format (SwFormat sets the lock's low bit with the magic,
    // after the header reached memory) whose magic word was damaged:
    // partition 0's holder restores it, as hardware mode's open does,
    // never formats over it (its blocks are every partition's); the loop's
    // invalidate, next, writes the line back (then a full fence) before
    // the magic is read again. Nobody else may write the line.
    const bool damaged_magic = header_intact && (lock & 1);
    if (formatter && damaged_magic) {
      vis_->Store64(&sb_->magic, kMagic);
      continue;
    }
    if (formatter && opts_.create_if_missing) {
      const RegionConfig& c = opts_.config;
      if (c.slot_size == 0) {
        return Status::InvalidArgument("region " + path +
                                       " is not formatted and no slot_size was given to format it");
      }
      if (c.software_partitions < 1) {
        return Status::InvalidArgument(
            "region " + path +
            " is not formatted; formatting with coherence=software needs software_partitions "
            "(1..16)");
      }
      if (header_intact && lock == 0 && !map_->created()) {
        return Status::Corruption("region " + path +
                                  ": magic number damaged but the header is intact; refusing to "
                                  "format over it (reformat with `cxlkv format --force`)");
      }
      // A format of partition 0's lease that did not finish (only partition
      // 0 formats) is redone; otherwise the bytes must be blank, as in
      // hardware mode (foreign bytes are never formatted over, not even
      // under what looks like a lock word).
      CXLKV_RETURN_IF_ERROR(CheckFormatTarget(lock));
      return SwFormat(NewNonce());
    }
    if (!opts_.create_if_missing) {
      if (damaged_magic) return Status::Corruption(SwMagicNotSetText(path, copy.partitions));
      return Status::NotFound("region " + path + " is not formatted");
    }
    if (Clock::now() > deadline) {
      if (damaged_magic) {
        return Status::Busy(SwMagicNotSetText(path, copy.partitions) + "; waited " +
                            std::to_string(opts_.format_wait_ns / 1000000) + " ms for it");
      }
      return Status::Busy("region " + path +
                          ": not formatted, and the attacher of write partition 0 (which formats "
                          "in coherence=software) did not format it within " +
                          std::to_string(opts_.format_wait_ns / 1000000) + " ms");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

Status RegionImpl::SwFormat(uint64_t nonce) {
  const RegionConfig& c = opts_.config;
  Geometry g;
  Status s = ComputeSoftwareGeometry(map_->size(), c.slot_size, c.max_participants,
                                     c.software_partitions, &g);
  if (!s.ok()) return s.WithContext("format region " + map_->path());
  if (c.software_partitions > g.num_sets) {
    return Status::InvalidArgument("format region " + map_->path() + ": " +
                                   std::to_string(c.software_partitions) +
                                   " write partitions need at least as many sets; the region has " +
                                   std::to_string(g.num_sets) +
                                   ": give a larger --region-size (RegionOptions::size) or fewer "
                                   "--partitions (RegionConfig::software_partitions)");
  }
  Superblock img;
  std::string text;
  CXLKV_RETURN_IF_ERROR(
      BuildHeader(g, c, kLayoutVersionSoftware, c.software_partitions, &img, &text));
  // The lock word says "a format of partition 0 is under way" to a restarted
  // partition 0; nobody else acts on it.
  vis_->Store64(&sb_->format_lock, nonce);
  vis_->Flush(&sb_->format_lock, 8);
  vis_->StoreFence();
  // Zero every metadata line (data slots are read only once READY).
  static const uint8_t kZero[1 << 16] = {};
  for (uint64_t off = kSuperblockBytes; off < g.data_off; off += sizeof kZero) {
    const uint64_t n = std::min<uint64_t>(sizeof kZero, g.data_off - off);
    vis_->CopyToRegion(base_ + off, kZero, n);
    vis_->Flush(base_ + off, n);
  }
  CXLKV_FAILPOINT_HIT("sw.format.after_zero");
  std::vector<uint8_t> json_area(kSuperblockBytes - sizeof(Superblock), 0);
  std::memcpy(json_area.data(), text.data(), text.size());
  vis_->CopyToRegion(base_ + sizeof(Superblock), json_area.data(), json_area.size());
  vis_->CopyToRegion(reinterpret_cast<uint8_t*>(sb_) + offsetof(Superblock, layout_version),
                     reinterpret_cast<const uint8_t*>(&img) + offsetof(Superblock, layout_version),
                     sizeof(Superblock) - offsetof(Superblock, layout_version));
  vis_->Flush(base_, kSuperblockBytes);
  vis_->StoreFence();
  // Magic last, once everything above has reached memory.
  vis_->Store64(&sb_->format_lock, nonce | 1);
  vis_->Store64(&sb_->magic, kMagic);
  vis_->Flush(sb_, 64);
  vis_->StoreFence();
  return Status::OK();
}

// ---- the registry record of our partition ----

Status RegionImpl::SwRegister() {
  const uint32_t p = static_cast<uint32_t>(opts_.software_partition);
  ParticipantRecord& r = parts_[p];
  vis_->Invalidate(&r, sizeof r);
  vis_->FullFence();
  const uint64_t old = vis_->Load64(&r.state);
  const uint64_t mine = PackWord(WordGen(old) + 1, 0, kPActive);
  // Counters of earlier owners of the partition stay in the record.
  for (uint32_t k = 0; k < kCounterCount; ++k)
    sw_counter_base_.v[k] = vis_->Load64(&r.counters.v[k]);
  vis_->Store64(&r.heartbeat_interval_ns, opts_.heartbeat_interval_ns);
  vis_->Store32(&r.pid, static_cast<uint32_t>(::getpid()));
  char host[32] = {};
  ::gethostname(host, sizeof host - 1);
  vis_->CopyToRegion(r.host, host, sizeof host);
  vis_->Store64(&r.sw_heartbeat, vis_->Load64(&r.sw_heartbeat) + 1);
  vis_->Store64(&r.state, mine);
  // No flush here: the attach sweep's SwStillOwner, next, invalidates the
  // state line, which writes it back (then a full fence) before any slot is
  // swept, and the heartbeat's flush carries the heartbeat line.
  self_ = static_cast<int32_t>(p);
  self_word_ = mine;
  info_.participant = self_;
  SwRecoverPartition(/*attach=*/true);
  return Status::OK();
}

void RegionImpl::SwRecoverPartition(bool attach) {
  // Earlier holders of this partition (dead, or replaced by the lease while
  // paused: zombies) leave slots WRITING or EVICTING, and READY blocks of
  // their incarnation; a zombie's late lines can land after our attach, so
  // the holder sweeps again, a slice per heartbeat. Readers already ignore
  // all of those (SwWriterCurrent); the sweep makes them FREE again, so the
  // slots are reused and every slot ends FREE or READY of the holder.
  const uint64_t ways = geo_.ways;
  const uint64_t first = uint64_t(self_index()) * part_sets_ * ways;
  const uint64_t n = part_sets_ * ways;
  uint64_t begin = 0, count = n;
  if (!attach) {
    // A slice of whole sets (each set's tag line is rewritten whole, below):
    // at least 1024 entries, a sixteenth of the partition. n, the cursor and
    // so every slice's start are multiples of the ways.
    count = std::min<uint64_t>(n, std::max<uint64_t>(1024, n / 16));
    count = std::min<uint64_t>(n, (count + ways - 1) / ways * ways);
    begin = sw_sweep_next_ % n;
    sw_sweep_next_ = (begin + count) % n;
  }
  // Our record reaches memory before the sweep frees anything (a zombie
  // that commits from here on is ignored by every reader); a newer holder
  // (the lease moved again) sweeps itself.
  if (attach && !SwStillOwner()) return;
  // Attach: every entry of an earlier incarnation is freed below, so all
  // of our data slots are free (software_state.h).
  if (attach) {
    sw_hold_->Reset(uint64_t(self_index()) * part_datas_, part_datas_, first, n);
    SwAttachHints();
  }
  const uint32_t mine = SwIncTag(self_word_);
  uint64_t freed = 0;
  uint32_t want[kMaxWays] = {};  // the set's tags, as its entries in memory say
  for (uint64_t i = 0; i < count; ++i) {
    const uint64_t s = first + (begin + i) % n;
    // Memory's word, not our cached copy (a zombie's line may have landed).
    vis_->Invalidate(&meta_[s], sizeof(SlotMeta));
    vis_->FullFence();
    const uint64_t w = vis_->Load64(&meta_[s].state);
    const uint8_t st = WordState(w);
    const bool ours = WordOwner(w) == mine;
    const uint64_t d = vis_->Load32(&meta_[s].data);
    // Ours, as memory says, on the data slot we gave it (a damaged index
    // sends the entry away below). At attach nothing is ours yet.
    const bool keep =
        !attach && (st == kReady || st == kWriting) && ours && sw_hold_->DataOf(s) == d;
    want[s % ways] = 0;
    if (keep) {
      // The line is ours (a line lands whole), so its key is: the tag it
      // names is the one readers must find, whatever tag line a zombie's
      // host wrote back over ours meanwhile.
      BlockKey key;
      key.hi = vis_->Load64(&meta_[s].key_hi);
      key.lo = vis_->Load64(&meta_[s].key_lo);
      uint64_t sets[2];
      SwSets(self_index(), vis_->Load32(&meta_[s].ns), key, sets, &want[s % ways]);
    } else {
      // Memory says FREE, or another incarnation's line (a paused old
      // holder's late write-back), where we may have believed a block of
      // ours: give that block's data slot back.
      if (!attach) sw_hold_->ReleaseEntry(s);
      if (!(st == kFree && WordOwner(w) == 0)) {
        // Free it with a new generation, so no reader's earlier READY word
        // can match again.
        vis_->Store64(&meta_[s].state, PackWord(WordGen(w) + 1, 0, kFree));
        vis_->Flush(&meta_[s], sizeof(SlotMeta));
        ++freed;
      }
    }
    if (s % ways == ways - 1) {
      // The set's whole tag line, rewritten from its entries and flushed:
      // our cached copy may be right while memory holds a zombie's line
      // (SetTags is shared by a set's entries, and a paused old holder's
      // SW3 flushes its whole stale copy), which would hide our blocks of
      // the set from every other host; a store makes the line dirty even
      // where our copy already says so, so the flush writes it back.
      SetTags& t = tags_[s / ways];
      for (uint64_t way = 0; way < ways; ++way) vis_->Store32(&t.tag[way], want[way]);
      vis_->Flush(&t, sizeof t);
    }
  }
  vis_->StoreFence();
  if (freed) Count(Counter::kReclaimedSlots, freed);
}

namespace {
// The payload check reads at most this many bytes of our blocks per
// heartbeat (80 MB/s of one core's reads and CRC32C at the default 100 ms),
// and visits at most a sweep slice's entries.
constexpr uint64_t kScrubBytesPerBeat = 8ull << 20;
}  // namespace

void RegionImpl::SwScrubPayloads() {
  // A paused old holder's fill can land in a data slot that one of our READY
  // entries names (it writes the payload before its ownership check fences
  // it), and its host's cache can write such lines back at any later
  // moment. Our own cached copy of the slot may still hold our bytes, so our
  // own reads and SW1 see nothing wrong while every other host fails the
  // CRC: the bytes are checked as memory holds them, and an entry whose
  // payload no longer matches is freed (its key can then be stored again).
  const uint64_t first = uint64_t(self_index()) * part_sets_ * geo_.ways;
  const uint64_t n = part_sets_ * geo_.ways;
  const uint64_t visit = std::min<uint64_t>(n, std::max<uint64_t>(1024, n / 16));
  const uint32_t mine = SwIncTag(self_word_);
  if (sw_scrub_buf_.size() < geo_.slot_size) sw_scrub_buf_.resize(geo_.slot_size);
  uint64_t bytes = 0;
  for (uint64_t i = 0; i < visit && bytes < kScrubBytesPerBeat; ++i) {
    const uint64_t s = first + sw_scrub_next_;
    sw_scrub_next_ = (sw_scrub_next_ + 1) % n;
    // One entry at a time under the claim lock: our Stores go on between
    // them, and none frees this entry or reuses its data slot meanwhile.
    std::lock_guard<std::mutex> l(sw_claim_mu_);
    if (fenced_.load(std::memory_order_acquire)) return;
    const uint64_t w = vis_->Load64(&meta_[s].state);  // our own line
    if (WordState(w) != kReady || WordOwner(w) != mine) continue;
    const SwMeta m = SwReadMeta(s, false);
    if (m.len > geo_.slot_size || sw_hold_->DataOf(s) != m.data) continue;  // the sweep's
    const uint8_t* data = SlotData(m.data);
    // Memory's bytes, not our cached copy (no line of a READY block's data
    // slot is dirty here: SW4 flushed them).
    vis_->Invalidate(data, m.len);
    vis_->FullFence();
    vis_->CopyFromRegion(sw_scrub_buf_.data(), data, m.len);
    bytes += m.len;
    if (BindSlotCrc(Crc32c(sw_scrub_buf_.data(), m.len), SwCrcGeneration(w), m.ns, m.key, m.len,
                    m.data) == m.crc) {
      continue;
    }
    Count(Counter::kCrcFailures);
    (void)SwFreeOwn(s, w);
  }
}

bool RegionImpl::SwWriterCurrent(uint64_t slot, uint64_t w, bool reread) const {
  const uint32_t q = SwPartitionOf(slot);
  if (!reread && SwOwnSlot(slot)) return WordOwner(w) == SwIncTag(self_word_);
  const ParticipantRecord& r = parts_[q];
  vis_->Invalidate(&r, 64);
  vis_->FullFence();
  return WordOwner(w) == SwIncTag(vis_->Load64(&r.state));
}

bool RegionImpl::SwStillOwner() {
  if (self_ < 0 || fenced_.load(std::memory_order_acquire)) return false;
  ParticipantRecord& r = parts_[self_];
  vis_->Invalidate(&r, 64);
  vis_->FullFence();
  const uint64_t w = vis_->Load64(&r.state);
  if (w == self_word_) return true;
  // A newer incarnation, ACTIVE or already closed again (FREE keeps its
  // incarnation): the lease gave our partition to a newer process. Only an
  // older word is a late line to overwrite; taking a newer FREE one for
  // that would bring a zombie back.
  if (WordGen(w) > WordGen(self_word_)) {
    Fence();
    return false;
  }
  // An older word: a late write-back of a previous (paused) owner's line.
  // We hold the lease: put ours back. Left dirty: our next check's
  // invalidate (within a heartbeat) writes it back; until then readers
  // miss our blocks, never serve others' (docs/coherence.md, "Mutants").
  vis_->Store64(&r.state, self_word_);
  return true;
}

void RegionImpl::SwPublishCounters() {
  if (self_ < 0 || fenced_.load(std::memory_order_acquire)) return;
  ParticipantRecord& r = parts_[self_];
  for (uint32_t k = 0; k < kCounterCount; ++k) {
    vis_->Store64(&r.counters.v[k],
                  sw_counter_base_.v[k] + observer_counters_.v[k].load(std::memory_order_relaxed));
  }
  vis_->Flush(&r.counters, sizeof r.counters);
  vis_->StoreFence();
}

void RegionImpl::SwHeartbeatLoop() {
  std::unique_lock<std::mutex> l(hb_mu_);
  // Attach has just swept and written the record back: the first beat (and
  // periodic sweep) comes one interval later.
  while (!hb_cv_.wait_for(l, std::chrono::nanoseconds(opts_.heartbeat_interval_ns),
                          [this] { return stop_; })) {
    l.unlock();
    if (SwStillOwner()) {
      // The heartbeat's own line: never the record's state line.
      ParticipantRecord& r = parts_[self_];
      vis_->Store64(&r.sw_heartbeat, vis_->Load64(&r.sw_heartbeat) + 1);
      vis_->Flush(&r.sw_heartbeat, 8);
      vis_->StoreFence();
      SwPublishCounters();
      SwFlushHints();  // a last partial batch of hints
      {
        std::lock_guard<std::mutex> c(sw_claim_mu_);
        SwRecoverPartition(/*attach=*/false);
      }
      SwScrubPayloads();
    }
    l.lock();
  }
}

void RegionImpl::SwDeregister() {
  if (self_ < 0) return;
  {
    std::lock_guard<std::mutex> l(hb_mu_);
    stop_ = true;
  }
  hb_cv_.notify_all();
  if (heartbeat_.joinable()) heartbeat_.join();
  if (SwStillOwner()) {
    SwPublishCounters();
    ParticipantRecord& r = parts_[self_];
    // FREE keeps the incarnation, so the next owner's is larger still.
    vis_->Store64(&r.state, PackWord(WordGen(self_word_), 0, kPFree));
    vis_->Flush(&r, 64);
    vis_->StoreFence();
  }
  self_ = -1;
}

// ---- directory ----

void RegionImpl::SwSets(uint32_t partition, NamespaceId ns, const BlockKey& key, uint64_t set[2],
                        uint32_t* tag) const {
  // The same hashes as Place(), reduced into the partition's sets.
  const uint64_t a = Mix64(key.lo ^ (uint64_t(ns) * 0x9E3779B97F4A7C15ull));
  const uint64_t b = Mix64(key.hi + a);
  const uint64_t first = uint64_t(partition) * part_sets_;
  set[0] = first + Reduce(a, part_sets_);
  set[1] = first + Reduce(b, part_sets_);
  *tag = static_cast<uint32_t>(b >> 32) | 1u;
}

RegionImpl::SwMeta RegionImpl::SwReadMeta(uint64_t slot, bool fresh) const {
  SlotMeta& m = meta_[slot];
  if (fresh) {
    vis_->Invalidate(&m, sizeof m);
    vis_->FullFence();
  }
  SwMeta out;
  out.state = vis_->Load64(&m.state);
  out.key.hi = vis_->Load64(&m.key_hi);
  out.key.lo = vis_->Load64(&m.key_lo);
  out.ns = vis_->Load32(&m.ns);
  out.len = vis_->Load32(&m.len);
  out.crc = vis_->Load32(&m.crc);
  out.writer = vis_->Load32(&m.writer);
  out.data = vis_->Load32(&m.data);
  return out;
}

int64_t RegionImpl::SwFind(NamespaceId ns, const BlockKey& key, bool readable_only,
                           int32_t partition, SwMeta* meta) const {
  const uint32_t own = self_ >= 0 ? self_index() : partitions_;
  for (uint32_t k = 0; k < partitions_; ++k) {
    // Own partition first (its lines are authoritative in our own cache).
    const uint32_t q = own < partitions_ ? (own + k) % partitions_ : k;
    if (partition >= 0 && q != static_cast<uint32_t>(partition)) continue;
    const bool fresh = q != own;  // another host's lines: SR1 invalidates
    uint64_t set[2];
    uint32_t tag;
    SwSets(q, ns, key, set, &tag);
    const int nsets = set[0] == set[1] ? 1 : 2;
    for (int i = 0; i < nsets; ++i) {
      SetTags& t = tags_[set[i]];
      if (fresh) {
        vis_->Invalidate(&t, sizeof t);
        vis_->FullFence();
      }
      for (uint32_t way = 0; way < geo_.ways; ++way) {
        if (vis_->Load32(&t.tag[way]) != tag) continue;
        const uint64_t slot = set[i] * geo_.ways + way;
        const SwMeta m = SwReadMeta(slot, fresh);
        const uint8_t st = WordState(m.state);
        if (st != kReady && (readable_only || st != kWriting)) continue;
        if (m.key.hi != key.hi || m.key.lo != key.lo || m.ns != ns) continue;
        // A block of an incarnation that no longer holds the partition (a
        // zombie's late commit, or the previous holder's) is no block.
        if (!SwWriterCurrent(slot, m.state, false)) continue;
        // Nor one of another partition we found damaged: only its holder may
        // drop it, and while it stays the key is stored and read elsewhere.
        if (fresh && SwKnownCorrupt(slot, m.state)) continue;
        *meta = m;
        return static_cast<int64_t>(slot);
      }
    }
  }
  return -1;
}

void RegionImpl::SwNoteCorrupt(uint64_t slot, uint64_t w) const {
  std::lock_guard<std::mutex> l(sw_bad_mu_);
  // Bounded: past this many, forgetting costs a damaged block one more
  // failed read each.
  if (sw_bad_.size() >= 65536) sw_bad_.clear();
  sw_bad_[slot] = w;
  sw_any_bad_.store(true, std::memory_order_release);
}

bool RegionImpl::SwKnownCorrupt(uint64_t slot, uint64_t w) const {
  if (!sw_any_bad_.load(std::memory_order_acquire)) return false;
  std::lock_guard<std::mutex> l(sw_bad_mu_);
  const auto it = sw_bad_.find(slot);
  return it != sw_bad_.end() && it->second == w;
}

void RegionImpl::SwTouch(uint64_t entry, uint64_t data, uint64_t w) {
  if (!SwOwnSlot(entry)) {
    SwNoteHint(entry, w);
    return;
  }
  // Exact LRU over the partition (software_state.h): a use moves the block
  // to the young end; one that is no longer the entry's is ignored.
  sw_hold_->Touch(data, entry, sw_hold_->Extend(SwTick()));
}

// ---- the hint channel (layout.h, "Hint rings") ----

namespace {
// Hits per flush of our ring: the lines written since the last flush and the
// head reach memory once per batch, not once per hit.
constexpr uint64_t kHintBatch = 16;
// The holder reads the other rings once per this many evictions (and at the
// first eviction after attach): the uses they tell reach the order before
// the blocks they name are the oldest (bench/eviction's models: a channel
// read within about 100 requests keeps 0.98 of hardware mode's hit rate).
constexpr uint64_t kDrainEvery = 8;
}  // namespace

void RegionImpl::SwNoteHint(uint64_t entry, uint64_t w) {
  // Observers have no ring (no partition, no lines of their own).
  if (self_ < 0 || fenced_.load(std::memory_order_acquire) || geo_.ring_entries == 0) return;
  std::lock_guard<std::mutex> l(sw_hint_.mu);
  std::atomic<uint64_t>* slots = SwRingSlots(self_index());
  vis_->Store64(&slots[sw_hint_.head % geo_.ring_entries], PackHint(entry, WordGen(w)));
  ++sw_hint_.head;
  if (sw_hint_.head - sw_hint_.flushed >= kHintBatch) SwFlushHintsLocked();
}

void RegionImpl::SwFlushHints() {
  if (self_ < 0 || fenced_.load(std::memory_order_acquire) || geo_.ring_entries == 0) return;
  std::lock_guard<std::mutex> l(sw_hint_.mu);
  if (sw_hint_.flushed != sw_hint_.head) SwFlushHintsLocked();
}

void RegionImpl::SwFlushHintsLocked() {
  std::atomic<uint64_t>* slots = SwRingSlots(self_index());
  const uint64_t r = geo_.ring_entries;
  const uint64_t from = std::max(sw_hint_.flushed, sw_hint_.head > r ? sw_hint_.head - r : 0);
  for (uint64_t i = from; i < sw_hint_.head;) {
    const uint64_t at = i % r;
    const uint64_t n = std::min(sw_hint_.head - i, r - at);
    vis_->Flush(&slots[at], n * 8);
    i += n;
  }
  // The slots reach memory before the head that names them.
  vis_->StoreFence();
  SwHintRingHead* h = SwRingHead(self_index());
  vis_->Store64(&h->head, sw_hint_.head);
  vis_->Flush(&h->head, 8);
  vis_->StoreFence();
  sw_hint_.flushed = sw_hint_.head;
}

void RegionImpl::SwAttachHints() {
  std::lock_guard<std::mutex> l(sw_hint_.mu);
  // Our ring starts again at 0 and the others are read from their last
  // ring's worth: nothing of the region is read here. Hints from before our
  // attach name entries the attach sweep freed (they fail the READY check),
  // and a holder that followed our ring further sees its head go back and
  // follows it from there (SwDrainHints).
  sw_hint_.head = sw_hint_.flushed = 0;
  for (uint64_t& v : sw_hint_.seen) v = 0;
  sw_hint_.evictions = 0;
}

void RegionImpl::SwDrainHints() {
  const uint64_t r = geo_.ring_entries;
  if (r == 0) return;
  const uint64_t first = uint64_t(self_index()) * part_sets_ * geo_.ways;
  const uint64_t n = part_sets_ * geo_.ways;
  const uint32_t mine = SwIncTag(self_word_);
  const uint64_t now = sw_hold_->Extend(SwTick());
  for (uint32_t q = 0; q < partitions_; ++q) {
    if (q == self_index()) continue;
    SwHintRingHead* h = SwRingHead(q);
    vis_->Invalidate(&h->head, 8);
    vis_->FullFence();
    const uint64_t head = vis_->Load64(&h->head);  // untrusted: any value
    uint64_t from = sw_hint_.seen[q];
    // A head that went back (a new holder of q restarted it, or damage):
    // read nothing this time, follow it from here.
    if (head < from) from = head;
    if (head - from > r) from = head - r;  // lapped: the last r are there
    sw_hint_.seen[q] = head;
    std::atomic<uint64_t>* slots = SwRingSlots(q);
    for (uint64_t i = from; i < head;) {
      const uint64_t at = i % r;
      const uint64_t k = std::min(head - i, r - at);
      vis_->Invalidate(&slots[at], k * 8);
      i += k;
    }
    vis_->FullFence();
    for (uint64_t i = from; i < head; ++i) {
      const uint64_t v = vis_->Load64(&slots[i % r]);
      if (v == 0) continue;
      const uint64_t e = (v >> kHintEntryShift) - 1;
      if (e < first || e - first >= n) continue;  // not ours (or damage)
      // Our own line: READY of ours at the hinted generation, or the hint
      // is stale (the block left since) and counts for nothing.
      const uint64_t w = vis_->Load64(&meta_[e].state);
      if (WordState(w) != kReady || WordOwner(w) != mine ||
          (WordGen(w) & kHintGenMask) != (v & kHintGenMask)) {
        continue;
      }
      sw_hold_->Touch(sw_hold_->DataOf(e), e, now);
    }
  }
}

void RegionImpl::SwEvictEntry(uint64_t entry, uint64_t w) {
  // SW2b: the entry's line says FREE(g+1) in memory before any payload
  // byte of its data slot changes: a reader that copied the old bytes sees
  // the entry changed when it re-reads it (a miss), never wrong bytes.
  SlotMeta& m = meta_[entry];
  vis_->Store32(&tags_[entry / geo_.ways].tag[entry % geo_.ways], 0);
  vis_->Store64(&m.state, PackWord(WordGen(w) + 1, 0, kFree));
  vis_->Flush(&m, sizeof m);  // the tag, a hint, is not flushed (see the sweep)
  CXLKV_FAILPOINT_HIT("sw.evict.before_fence");
  vis_->StoreFence();
}

bool RegionImpl::SwNamespaceReady(NamespaceId ns) const {
  if (ns >= kNamespaceEntries) return false;
  {
    std::lock_guard<std::mutex> l(sw_ns_mu_);
    if (sw_ns_ok_[ns]) return true;  // entries never change once READY
  }
  NamespaceRecord& r = nss_[ns];
  vis_->Invalidate(&r, sizeof r);
  vis_->FullFence();
  if (WordState(vis_->Load64(&r.state)) != kNsReady) return false;
  NamespaceImage im;
  vis_->CopyFromRegion(&im, &r.tp_rank, sizeof im);
  if (Crc32c(&im, sizeof im) != vis_->Load32(&r.desc_crc)) return false;
  std::lock_guard<std::mutex> l(sw_ns_mu_);
  sw_ns_ok_[ns] = true;
  return true;
}

Status RegionImpl::SwRegisterNamespace(const NamespaceDesc& d, NamespaceId* id) {
  CXLKV_RETURN_IF_ERROR(CheckNamespaceDesc(d));
  const NamespaceImage want = MakeNamespaceImage(d);
  const uint32_t crc = Crc32c(&want, sizeof want);
  // The lowest READY, intact entry with this descriptor in any partition's
  // range. Two hosts registering one descriptor at once can end up with two
  // ids (a cost of no CAS: their blocks do not dedupe); every later
  // registration picks the lowest.
  vis_->Invalidate(nss_, kNamespaceEntries * sizeof(NamespaceRecord));
  vis_->FullFence();
  for (uint32_t i = 0; i < kNamespaceEntries; ++i) {
    NamespaceRecord& r = nss_[i];
    if (WordState(vis_->Load64(&r.state)) != kNsReady) continue;
    NamespaceImage got;
    vis_->CopyFromRegion(&got, &r.tp_rank, sizeof got);
    if (std::memcmp(&got, &want, sizeof got) == 0 && vis_->Load32(&r.desc_crc) == crc) {
      *id = i;
      return Status::OK();
    }
  }
  if (self_ < 0) {
    return Status::NotFound("namespace " + d.ToString() + " is not registered in region " +
                            info_.path);
  }
  std::lock_guard<std::mutex> l(sw_claim_mu_);
  const uint32_t lo = self_index() * kNamespaceEntries / partitions_;
  const uint32_t hi = (self_index() + 1) * kNamespaceEntries / partitions_;
  for (uint32_t i = lo; i < hi; ++i) {
    NamespaceRecord& r = nss_[i];
    const uint64_t w = vis_->Load64(&r.state);
    if (WordState(w) == kNsReady) {
      NamespaceImage got;
      vis_->CopyFromRegion(&got, &r.tp_rank, sizeof got);
      if (std::memcmp(&got, &want, sizeof got) == 0 && vis_->Load32(&r.desc_crc) == crc) {
        *id = i;  // another thread of ours registered it meanwhile
        return Status::OK();
      }
      continue;
    }
    // FREE (or a WRITING left by a predecessor of our partition): ours.
    vis_->CopyToRegion(&r.tp_rank, &want, sizeof want);
    vis_->Store32(&r.desc_crc, crc);
    vis_->Flush(&r, sizeof r);
    vis_->StoreFence();
    vis_->Store64(&r.state, PackWord(0, self_index(), kNsReady));
    vis_->Flush(&r.state, 8);
    vis_->StoreFence();
    *id = i;
    return Status::OK();
  }
  return Status::NoSpace("region " + info_.path + ": write partition " +
                         std::to_string(self_index()) + "'s " + std::to_string(hi - lo) +
                         " namespace entries are all in use");
}

// ---- writes ----

Status RegionImpl::SwCheckWritable(StoreOutcome* outcome) const {
  if (map_->lost()) {
    *outcome = StoreOutcome::kRefused;
    return map_->LostStatus();
  }
  if (self_ < 0) {
    *outcome = StoreOutcome::kRefused;
    Count(Counter::kStoreRefused);
    return Status::InvalidArgument("region " + info_.path +
                                   " was opened as an observer (no software_partition)");
  }
  if (fenced_.load(std::memory_order_acquire)) {
    *outcome = StoreOutcome::kFenced;
    Count(Counter::kStoreFenced);
    return Status::Busy("region " + info_.path + ": write partition " +
                        std::to_string(self_index()) +
                        " was given to a newer process; reopen the region");
  }
  return Status::OK();
}

bool RegionImpl::SwFreeOwn(uint64_t slot, uint64_t word) {
  SlotMeta& m = meta_[slot];
  if (vis_->Load64(&m.state) != word) return false;
  SwEvictEntry(slot, word);
  // Its data slot is ours to reuse only now (SW2b).
  sw_hold_->ReleaseEntry(slot);
  return true;
}

Status RegionImpl::SwBeginWrite(NamespaceId ns, const BlockKey& key, size_t len, WriteLease* lease,
                                StoreOutcome* outcome, bool raw_fill, uint32_t depth) {
  StoreOutcome dummy;
  if (outcome == nullptr) outcome = &dummy;
  if (lease->open()) SwAbortWrite(lease);
  CXLKV_RETURN_IF_ERROR(SwCheckWritable(outcome));
  if (len > geo_.slot_size) {
    *outcome = StoreOutcome::kTooLarge;
    Count(Counter::kStoreTooLarge);
    return Status::InvalidArgument("block of " + std::to_string(len) +
                                   " bytes is larger than the slot size " +
                                   std::to_string(geo_.slot_size));
  }
  if (!SwNamespaceReady(ns)) {
    *outcome = StoreOutcome::kRefused;
    Count(Counter::kStoreRefused);
    return Status::InvalidArgument("namespace " + std::to_string(ns) +
                                   " is not registered in region " + info_.path);
  }
  // SW1: a READY copy anywhere (ours or another host's) is a duplicate.
  SwMeta m;
  if (const int64_t dup = SwFind(ns, key, true, -1, &m); dup >= 0) {
    // A use of the chunk, as a hit is (write.cc says why); ours only.
    SwTouch(static_cast<uint64_t>(dup), m.data, m.state);
    *outcome = StoreOutcome::kDuplicate;
    Count(Counter::kStoreDuplicate);
    return Status::OK();
  }
  uint64_t set[2];
  uint32_t tag;
  SwSets(self_index(), ns, key, set, &tag);
  std::unique_lock<std::mutex> l(sw_claim_mu_);
  // Our own partition again under the claim lock: another thread of ours.
  const int64_t mine = SwFind(ns, key, false, static_cast<int32_t>(self_index()), &m);
  if (mine >= 0) {
    const bool ready = WordState(m.state) == kReady;
    *outcome = ready ? StoreOutcome::kDuplicate : StoreOutcome::kLostRace;
    Count(ready ? Counter::kStoreDuplicate : Counter::kStoreLostRace);
    return ready ? Status::OK() : Status::Busy("another thread is storing this block");
  }
  // SW2: an index entry, a FREE way of the two sets (twice as many
  // entries as data slots: both sets are rarely full), else the least
  // recently used READY one of them, evicted.
  const int nsets = set[0] == set[1] ? 1 : 2;
  int64_t chosen = -1;
  uint64_t chosen_word = 0;
  bool evicted = false;
  for (int i = 0; i < nsets && chosen < 0; ++i) {
    for (uint32_t way = 0; way < geo_.ways; ++way) {
      const uint64_t s = set[i] * geo_.ways + way;
      const uint64_t w = vis_->Load64(&meta_[s].state);
      if (WordState(w) == kFree) {
        chosen = static_cast<int64_t>(s);
        chosen_word = w;
        break;
      }
    }
  }
  if (chosen < 0) {
    // Both sets full: the way whose data slot is least recently used.
    uint64_t best_tick = ~0ull;
    for (int i = 0; i < nsets; ++i) {
      for (uint32_t way = 0; way < geo_.ways; ++way) {
        const uint64_t s = set[i] * geo_.ways + way;
        const uint64_t w = vis_->Load64(&meta_[s].state);
        if (WordState(w) != kReady) continue;
        const uint64_t t = sw_hold_->TickOf(sw_hold_->DataOf(s));
        if (chosen < 0 || t < best_tick) {
          chosen = static_cast<int64_t>(s);
          chosen_word = w;
          best_tick = t;
        }
      }
    }
    if (chosen >= 0) {
      const uint64_t e = static_cast<uint64_t>(chosen);
      (void)SwFreeOwn(e, chosen_word);
      chosen_word = vis_->Load64(&meta_[e].state);
      evicted = true;
    }
  }
  if (chosen < 0) {
    *outcome = StoreOutcome::kFull;
    Count(Counter::kStoreFull);
    return Status::NoSpace("no free or evictable index entry for the block in write partition " +
                           std::to_string(self_index()));
  }
  const auto slot = static_cast<uint64_t>(chosen);
  // A data slot: a free one, else the partition's least recently used
  // block's, whose entry is freed first (SW2b).
  uint64_t d = sw_hold_->TakeFree(slot);
  if (d == SwHolderState::kNone) {
    // Other hosts' uses of our blocks first (their hints), so the victim is
    // the partition's least recently used as the whole fleet saw it.
    if (sw_hint_.evictions++ % kDrainEvery == 0) SwDrainHints();
    uint64_t victim = 0;
    if (!sw_hold_->PopOldest(&d, &victim)) {
      *outcome = StoreOutcome::kFull;
      Count(Counter::kStoreFull);
      return Status::NoSpace("no free or evictable data slot in write partition " +
                             std::to_string(self_index()) + ": every one is being written");
    }
    const uint64_t vw = vis_->Load64(&meta_[victim].state);
    // Our own line: READY of ours unless the sweep or damage got there
    // first; either way it must not say READY on this data slot once the
    // bytes change.
    if (WordState(vw) != kFree) SwEvictEntry(victim, vw);
    sw_hold_->Reassign(d, slot);
    evicted = true;
  }
  SlotMeta& sm = meta_[slot];
  SetTags& t = tags_[slot / geo_.ways];
  // SW3: the line says WRITING(g+1) with the new identity and its data
  // slot. Layout 6 needs no flush of it before the payload: memory says
  // FREE for this entry (freed and flushed by SW2b, the sweep, or never
  // used), and the data slot's previous entry said FREE in memory before
  // the slot was ours (SW2b), so no reader can take these bytes for any
  // block until SW5 publishes the whole line. The tag, a hint, is flushed
  // so other hosts find the block once it is READY. The owner field
  // carries our incarnation tag (since layout 4), checked by every reader
  // against the partition's record.
  const uint64_t writing = PackWord(WordGen(chosen_word) + 1, SwIncTag(self_word_), kWriting);
  vis_->Store64(&sm.state, writing);
  vis_->Store64(&sm.key_hi, key.hi);
  vis_->Store64(&sm.key_lo, key.lo);
  vis_->Store32(&sm.ns, ns);
  vis_->Store32(&sm.len, static_cast<uint32_t>(len));
  vis_->Store32(&sm.crc, 0);
  vis_->Store32(&sm.writer, self_index());
  vis_->Store32(&sm.data, static_cast<uint32_t>(d));
  vis_->Store32(&t.tag[slot % geo_.ways], tag);
  vis_->Flush(&t, sizeof t);
  vis_->StoreFence();
  sw_hold_->SetDepth(d, depth < kMaxChainDepth ? depth : kMaxChainDepth);
  l.unlock();
  if (evicted) Count(Counter::kEvictions);
  if (raw_fill) {
    // The caller (or a DMA engine) fills data() directly, not through the
    // visibility layer: drop this host's cached copies of the slot's old
    // bytes first, so no stale line can shadow the fill (a DMA write would
    // snoop them out on x86; an emulated cache would not).
    vis_->Invalidate(SlotData(d), len);
    vis_->FullFence();
  }
  RegionInternal::InitWriteLease(lease, this, SlotData(d), len, slot, writing, ns, key);
  *outcome = StoreOutcome::kStored;
  return Status::OK();
}

Status RegionImpl::SwCommitWrite(WriteLease* lease, const uint32_t* crc32c, StoreOutcome* outcome) {
  StoreOutcome dummy;
  if (outcome == nullptr) outcome = &dummy;
  if (!lease->open()) {
    *outcome = StoreOutcome::kRefused;
    return Status::InvalidArgument("CommitWrite on a closed lease");
  }
  const uint64_t slot = RegionInternal::LeaseSlot(*lease);
  const uint64_t word = RegionInternal::LeaseWord(*lease);
  const NamespaceId ns = RegionInternal::LeaseNs(*lease);
  const BlockKey key = RegionInternal::LeaseKey(*lease);
  const size_t len = lease->len();
  uint8_t* data = static_cast<uint8_t*>(lease->data());
  const uint64_t d = DataIndexOf(data);
  RegionInternal::CloseWriteLease(lease);
  // SW4: the payload reaches memory before the publish record.
  vis_->Flush(data, len);
  vis_->StoreFence();
  if (!SwStillOwner()) {
    *outcome = StoreOutcome::kFenced;
    Count(Counter::kStoreFenced);
    return Status::Busy("region " + info_.path + ": write partition " +
                        std::to_string(self_index()) +
                        " was given to a newer process; reopen the region");
  }
  SlotMeta& m = meta_[slot];
  if (vis_->Load64(&m.state) != word) {
    *outcome = StoreOutcome::kLostRace;
    Count(Counter::kStoreLostRace);
    return Status::Busy("slot " + std::to_string(slot) + " changed under its writer");
  }
  uint32_t src_crc;
  if (crc32c != nullptr) {
    src_crc = *crc32c;
  } else {
    std::vector<uint8_t> copy(len);
    vis_->CopyFromRegion(copy.data(), data, len);
    src_crc = Crc32c(copy.data(), len);
  }
  // A holder stalled here (after its last ownership check) resumes as a
  // zombie: the window of the model's sw-v3 counterexample.
  CXLKV_FAILPOINT_HIT("sw.commit.before_ready");
  // SW5: crc, then READY, in one line (a spontaneous write-back carries
  // both or neither of the READY word's companions).
  const uint64_t ready = PackWord(WordGen(word), WordOwner(word), kReady);
  vis_->Store32(&m.crc,
                BindSlotCrc(src_crc, SwCrcGeneration(word), ns, key, len, static_cast<int64_t>(d)));
  vis_->Store64(&m.state, ready);
  vis_->Flush(&m, sizeof m);
  vis_->StoreFence();
  // A store is a use: the block is as young as it gets until read.
  (void)sw_hold_->Commit(d, slot, sw_hold_->Extend(SwTick()));
  Count(Counter::kStores);
  Count(Counter::kBytesStored, len);
  *outcome = StoreOutcome::kStored;
  return Status::OK();
}

void RegionImpl::SwAbortWrite(WriteLease* lease) {
  if (!lease->open()) return;
  const uint64_t slot = RegionInternal::LeaseSlot(*lease);
  const uint64_t word = RegionInternal::LeaseWord(*lease);
  RegionInternal::CloseWriteLease(lease);
  if (self_ < 0 || fenced_.load(std::memory_order_acquire)) return;
  std::lock_guard<std::mutex> l(sw_claim_mu_);
  (void)SwFreeOwn(slot, word);
}

Status RegionImpl::SwStore(NamespaceId ns, const BlockKey& key, const void* data, size_t len,
                           StoreOutcome* outcome, uint32_t depth) {
  StoreOutcome dummy;
  if (outcome == nullptr) outcome = &dummy;
  WriteLease lease;
  Status s = SwBeginWrite(ns, key, len, &lease, outcome, /*raw_fill=*/false, depth);
  if (!s.ok() || !lease.open()) return s;
  const uint32_t crc = Crc32c(data, len);
  vis_->CopyToRegion(lease.data(), data, len);
  return SwCommitWrite(&lease, &crc, outcome);
}

// ---- reads ----

Status RegionImpl::SwLoad(NamespaceId ns, const BlockKey& key, void* dst, size_t capacity,
                          LoadInfo* info) {
  if (map_->lost()) return map_->LostStatus();
  SwMeta m;
  const int64_t found = SwFind(ns, key, true, -1, &m);  // SR1
  if (found < 0) {
    Count(Counter::kMisses);
    return Status::NotFound("block not in region");
  }
  const auto slot = static_cast<uint64_t>(found);
  const bool own = SwOwnSlot(slot);
  if (m.len > geo_.slot_size) {  // untrusted: never copy past the slot
    Count(Counter::kCrcFailures);
    Count(Counter::kMisses);
    if (!own) SwNoteCorrupt(slot, m.state);
    return Status::Corruption("slot " + std::to_string(slot) + " records length " +
                              std::to_string(m.len) + " > slot size");
  }
  if (capacity < m.len) {
    return Status::InvalidArgument("destination of " + std::to_string(capacity) +
                                   " bytes is smaller than the block (" + std::to_string(m.len) +
                                   ")");
  }
  if (!SwDataInPartition(m.data, SwPartitionOf(slot))) {  // untrusted: damage
    Count(Counter::kCrcFailures);
    Count(Counter::kMisses);
    if (!own) SwNoteCorrupt(slot, m.state);
    return Status::Corruption("entry " + std::to_string(slot) + " names data slot " +
                              std::to_string(m.data) + ", not one of its write partition's");
  }
  const uint8_t* data = SlotData(m.data);
  // SR2: drop any copy of the payload lines this host cached earlier.
  if (!own) {
    vis_->Invalidate(data, m.len);
    vis_->FullFence();
  }
  vis_->CopyFromRegion(dst, data, m.len);
  const uint32_t got =
      BindSlotCrc(Crc32c(dst, m.len), SwCrcGeneration(m.state), ns, key, m.len, m.data);
  // SR3: the copy's loads before the re-read of the state word.
  vis_->FullFence();
  const SwMeta after = SwReadMeta(slot, !own);
  // ... and the incarnation that wrote it still holds the partition (after
  // the copy: a zombie's READY line can land at any moment before it).
  if (after.state != m.state || after.key.hi != key.hi || after.key.lo != key.lo ||
      after.ns != ns || after.data != m.data || !SwWriterCurrent(slot, m.state, true)) {
    Count(Counter::kLoadRaces);
    Count(Counter::kMisses);
    return Status::NotFound("block replaced while it was being read");
  }
  // SR4: CRC always verified in this mode.
  if (got != m.crc) {
    Count(Counter::kCrcFailures);
    Count(Counter::kMisses);
    if (!own) {
      SwNoteCorrupt(slot, m.state);
    } else if (!fenced_.load(std::memory_order_acquire)) {
      std::lock_guard<std::mutex> l(sw_claim_mu_);
      (void)SwFreeOwn(slot, m.state);
    }
    char buf[64];
    std::snprintf(buf, sizeof buf, "stored 0x%08x, read 0x%08x", m.crc, got);
    return Status::Corruption("slot " + std::to_string(slot) + " failed CRC32C (" + buf + ")");
  }
  SwTouch(slot, m.data, m.state);
  const uint32_t writer = SwPartitionOf(slot);
  const bool cross = self_ < 0 || writer != self_index();
  Count(Counter::kHits);
  Count(Counter::kBytesLoaded, m.len);
  if (cross) Count(Counter::kCrossHits);
  if (info != nullptr) {
    info->len = m.len;
    info->writer_participant = writer;
    info->cross_participant = cross;
  }
  return Status::OK();
}

Status RegionImpl::SwBeginRead(NamespaceId ns, const BlockKey& key, ReadLease* lease) {
  if (lease->open()) (void)SwEndRead(lease, nullptr, nullptr);
  if (map_->lost()) return map_->LostStatus();
  SwMeta m;
  const int64_t found = SwFind(ns, key, true, -1, &m);
  if (found < 0) {
    Count(Counter::kMisses);
    return Status::NotFound("block not in region");
  }
  if (m.len > geo_.slot_size ||
      !SwDataInPartition(m.data, SwPartitionOf(static_cast<uint64_t>(found)))) {
    if (!SwOwnSlot(static_cast<uint64_t>(found)))
      SwNoteCorrupt(static_cast<uint64_t>(found), m.state);
    Count(Counter::kMisses);
    return Status::NotFound("block not in region");
  }
  const auto slot = static_cast<uint64_t>(found);
  const uint8_t* data = SlotData(m.data);
  // The caller (or a DMA engine) reads these bytes next: drop this host's
  // cached copies of them first (SR2).
  if (!SwOwnSlot(slot)) {
    vis_->Invalidate(data, m.len);
    vis_->FullFence();
  }
  RegionInternal::InitReadLease(lease, this, data, m.len, slot, m.state, m.crc, SwPartitionOf(slot),
                                false, ns, key);
  return Status::OK();
}

Status RegionImpl::SwEndRead(ReadLease* lease, const void* copied, const uint32_t* copied_crc32c) {
  if (!lease->open()) return Status::InvalidArgument("EndRead on a closed lease");
  const uint64_t slot = RegionInternal::LeaseSlot(*lease);
  const uint64_t word = RegionInternal::LeaseWord(*lease);
  const NamespaceId ns = RegionInternal::LeaseNs(*lease);
  const BlockKey key = RegionInternal::LeaseKey(*lease);
  const size_t len = lease->len();
  const uint32_t crc = lease->crc32c();
  const uint64_t d = DataIndexOf(lease->data());
  RegionInternal::CloseReadLease(lease);
  const bool own = SwOwnSlot(slot);
  // CRC mandatory: of the caller's copy, or its own CRC, or (neither given)
  // of the slot's bytes now, which equal what the caller read if the state
  // word is unchanged below.
  uint32_t plain;
  if (copied_crc32c != nullptr) {
    plain = *copied_crc32c;
  } else if (copied != nullptr) {
    plain = Crc32c(copied, len);
  } else {
    std::vector<uint8_t> now(len);
    vis_->CopyFromRegion(now.data(), SlotData(d), len);
    plain = Crc32c(now.data(), len);
  }
  vis_->FullFence();
  const SwMeta after = SwReadMeta(slot, !own);
  if (after.state != word || after.key.hi != key.hi || after.key.lo != key.lo || after.ns != ns ||
      after.data != d || !SwWriterCurrent(slot, word, true)) {
    Count(Counter::kLoadRaces);
    Count(Counter::kMisses);
    return Status::NotFound("block replaced while it was being read");
  }
  if (BindSlotCrc(plain, SwCrcGeneration(word), ns, key, len, static_cast<int64_t>(d)) != crc) {
    Count(Counter::kCrcFailures);
    Count(Counter::kMisses);
    if (!own) {
      SwNoteCorrupt(slot, word);
    } else if (!fenced_.load(std::memory_order_acquire)) {
      std::lock_guard<std::mutex> l(sw_claim_mu_);
      (void)SwFreeOwn(slot, word);
    }
    return Status::Corruption("slot " + std::to_string(slot) + " failed CRC32C");
  }
  SwTouch(slot, d, word);
  Count(Counter::kHits);
  Count(Counter::kBytesLoaded, len);
  if (self_ < 0 || SwPartitionOf(slot) != self_index()) Count(Counter::kCrossHits);
  return Status::OK();
}

// ---- maintenance ----

Status RegionImpl::SwDrop(NamespaceId ns, const BlockKey& key) {
  StoreOutcome o;
  CXLKV_RETURN_IF_ERROR(SwCheckWritable(&o));
  SwMeta m;
  const int64_t found = SwFind(ns, key, true, -1, &m);
  if (found < 0) return Status::NotFound("block not in region");
  const auto slot = static_cast<uint64_t>(found);
  if (!SwOwnSlot(slot)) {
    return Status::Unsupported("block is in write partition " +
                               std::to_string(SwPartitionOf(slot)) +
                               "; in coherence=software only that partition's owner may drop it");
  }
  std::lock_guard<std::mutex> l(sw_claim_mu_);
  if (!SwFreeOwn(slot, m.state)) return Status::Busy("block changed concurrently");
  return Status::OK();
}

Status RegionImpl::SwVerify(bool drop_corrupt, ScrubReport* report) {
  *report = ScrubReport{};
  if (drop_corrupt) {
    StoreOutcome o;
    CXLKV_RETURN_IF_ERROR(SwCheckWritable(&o));
  }
  std::vector<uint8_t> buf(geo_.slot_size);
  const uint64_t used = uint64_t(partitions_) * part_sets_ * geo_.ways;
  for (uint64_t s = 0; s < used; ++s) {
    const bool own = SwOwnSlot(s);
    const SwMeta m = SwReadMeta(s, !own);
    if (WordState(m.state) != kReady || !SwWriterCurrent(s, m.state, false)) continue;
    ++report->ready;
    bool ok = false;
    if (m.len <= geo_.slot_size && SwDataInPartition(m.data, SwPartitionOf(s))) {
      // Memory's bytes, also of our own blocks: our cached copy can be
      // right while memory's changed under it (a paused old holder's late
      // fill, damage), which every other host reads.
      vis_->Invalidate(SlotData(m.data), m.len);
      vis_->FullFence();
      vis_->CopyFromRegion(buf.data(), SlotData(m.data), m.len);
      vis_->FullFence();
      const SwMeta after = SwReadMeta(s, !own);
      if (after.state != m.state || after.data != m.data) {
        ++report->skipped_changed;
        continue;
      }
      ok = BindSlotCrc(Crc32c(buf.data(), m.len), SwCrcGeneration(m.state), m.ns, m.key, m.len,
                       m.data) == m.crc;
    }
    if (ok) {
      ++report->verified;
      continue;
    }
    ++report->crc_failures;
    Count(Counter::kCrcFailures);
    if (!own) SwNoteCorrupt(s, m.state);
    if (drop_corrupt && own) {
      std::lock_guard<std::mutex> l(sw_claim_mu_);
      if (SwFreeOwn(s, m.state)) ++report->dropped;
    }
  }
  return Status::OK();
}

Status RegionImpl::SwWipe(WipeReport* report) {
  *report = WipeReport{};
  StoreOutcome o;
  CXLKV_RETURN_IF_ERROR(SwCheckWritable(&o));
  // Only our own partition: other hosts' lines are theirs to write.
  const uint64_t first = uint64_t(self_index()) * part_sets_ * geo_.ways;
  std::lock_guard<std::mutex> l(sw_claim_mu_);
  for (uint64_t s = first; s < first + part_sets_ * geo_.ways; ++s) {
    const uint64_t w = vis_->Load64(&meta_[s].state);
    const uint8_t st = WordState(w);
    if (st == kReady) {
      if (SwFreeOwn(s, w)) ++report->dropped;
    } else if (st == kWriting || st == kEvicting) {
      ++report->writing;
    }
  }
  return Status::OK();
}

// ---- counters and participants ----

Counters RegionImpl::SwRegionCounters() const {
  Counters c;
  for (uint32_t p = 0; p < partitions_; ++p) {
    if (self_ >= 0 && p == self_index()) {
      for (uint32_t k = 0; k < kCounterCount; ++k)
        c.v[k] += sw_counter_base_.v[k] + observer_counters_.v[k].load(std::memory_order_relaxed);
      continue;
    }
    const ParticipantRecord& r = parts_[p];
    vis_->Invalidate(&r.counters, sizeof r.counters);
    vis_->FullFence();
    for (uint32_t k = 0; k < kCounterCount; ++k) c.v[k] += vis_->Load64(&r.counters.v[k]);
  }
  if (self_ < 0) {
    for (uint32_t k = 0; k < kCounterCount; ++k)
      c.v[k] += observer_counters_.v[k].load(std::memory_order_relaxed);
  }
  return c;
}

std::vector<ParticipantInfo> RegionImpl::SwParticipants() const {
  std::vector<ParticipantInfo> out;
  for (uint32_t i = 0; i < partitions_; ++i) {
    const ParticipantRecord& r = parts_[i];
    // Our own record's lines are authoritative in our cache (unless we were
    // fenced); invalidating them would also write them back, standing in
    // for the heartbeat's own flush.
    if (static_cast<int32_t>(i) != self_ || fenced_.load(std::memory_order_acquire)) {
      vis_->Invalidate(&r, sizeof r);
      vis_->FullFence();
    }
    const uint64_t w = vis_->Load64(&r.state);
    if (WordState(w) != kPActive) continue;
    ParticipantInfo p;
    p.index = i;
    p.incarnation = WordGen(w);
    p.pid = vis_->Load32(&r.pid);
    char host[33] = {};
    vis_->CopyFromRegion(host, r.host, 32);
    p.host = std::string(host, strnlen(host, 32));
    p.heartbeat = vis_->Load64(&r.sw_heartbeat);
    p.heartbeat_interval_ns = vis_->Load64(&r.heartbeat_interval_ns);
    p.self = static_cast<int32_t>(i) == self_;
    for (uint32_t k = 0; k < kCounterCount; ++k) p.counters.v[k] = vis_->Load64(&r.counters.v[k]);
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace cxlkv::internal
