// Copyright cxlkv authors.
//
// Participant registry: who is attached, and reclaiming those who died.
//
// Liveness needs no clock agreement between hosts: each participant only
// advances its own heartbeat counter; each observer notes, on its own
// monotonic clock, when it last saw a record's (state, heartbeat) change.
// A record unchanged for the liveness timeout is dead. The observer then
// CASes it ACTIVE -> RECLAIMING(observer) and sweeps the region: slots the
// dead one was writing or evicting are freed (never served: they were not
// READY), its pin bits are cleared, its counters retired. A reclaimer that
// dies mid-sweep leaves RECLAIMING, which is itself judged by the same rule
// and taken over (the sweep is idempotent).
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "cxlkv/lifecycle.h"
#include "failpoint.h"
#include "region_impl.h"

namespace cxlkv::internal {
namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

Status RegionImpl::RegisterSelf() {
  // If every entry is taken, some may belong to dead processes: watch them
  // for a liveness timeout and reclaim the dead (no participant may be
  // left to do it), then try again.
  const auto give_up = std::chrono::steady_clock::now() +
                       std::chrono::nanoseconds(opts_.liveness_timeout_ns * 3 / 2 + 100'000'000);
  for (;;) {
    Status s = TryRegister();
    if (!s.IsNoSpace() || std::chrono::steady_clock::now() > give_up) return s;
    ReapDead();
    std::this_thread::sleep_for(std::chrono::nanoseconds(opts_.heartbeat_interval_ns));
  }
}

Status RegionImpl::TryRegister() {
  for (uint32_t i = 0; i < geo_.max_participants; ++i) {
    ParticipantRecord& r = parts_[i];
    uint64_t w = r.state.load(std::memory_order_acquire);
    if (WordState(w) != kPFree) continue;
    const uint64_t mine = PackWord(WordGen(w) + 1, 0, kPActive);
    if (!r.state.compare_exchange_strong(w, mine, std::memory_order_acq_rel)) continue;
    self_ = static_cast<int32_t>(i);
    self_word_ = mine;
    r.heartbeat_interval_ns.store(opts_.heartbeat_interval_ns, std::memory_order_relaxed);
    r.pid.store(static_cast<uint32_t>(::getpid()), std::memory_order_relaxed);
    char host[32] = {};
    ::gethostname(host, sizeof host - 1);
    for (size_t k = 0; k < sizeof host; ++k) {
      reinterpret_cast<std::atomic<char>*>(&r.host[k])->store(host[k], std::memory_order_relaxed);
    }
    r.heartbeat.fetch_add(1, std::memory_order_release);
    my_counters_.store(&r.counters, std::memory_order_relaxed);
    info_.participant = self_;
    return Status::OK();
  }
  return Status::NoSpace("region " + map_->path() + ": all " +
                         std::to_string(geo_.max_participants) +
                         " participant entries are in use (dead ones are reclaimed after the "
                         "liveness timeout)");
}

void RegionImpl::Deregister() {
  if (soft_) return SwDeregister();
  if (self_ < 0) return;
  {
    std::lock_guard<std::mutex> l(hb_mu_);
    stop_ = true;
  }
  hb_cv_.notify_all();
  if (heartbeat_.joinable()) heartbeat_.join();
  ParticipantRecord& r = parts_[self_];
  uint64_t w = self_word_;
  // Leave like a dead participant would be reclaimed, but by ourselves.
  const uint64_t reclaiming = PackWord(WordGen(w), self_index(), kPReclaiming);
  if (r.state.compare_exchange_strong(w, reclaiming, std::memory_order_acq_rel)) {
    SweepParticipant(self_index(), reclaiming);
    r.state.store(PackWord(WordGen(w), 0, kPFree), std::memory_order_release);
  }
  my_counters_.store(&observer_counters_, std::memory_order_relaxed);
  self_ = -1;
}

bool RegionImpl::ParticipantActive(uint32_t index) const {
  if (index >= geo_.max_participants) return false;
  return WordState(parts_[index].state.load(std::memory_order_acquire)) == kPActive;
}

bool RegionImpl::OwnerAlive(uint32_t index) const {
  if (index >= geo_.max_participants) return false;
  const uint8_t st = WordState(parts_[index].state.load(std::memory_order_acquire));
  return st == kPActive || st == kPReclaiming;
}

void RegionImpl::HeartbeatLoop() {
  std::unique_lock<std::mutex> l(hb_mu_);
  while (!stop_) {
    ParticipantRecord& r = parts_[self_];
    r.heartbeat.fetch_add(1, std::memory_order_release);
    if (!StillRegistered()) Fence();
    l.unlock();
    ReapDeadParticipants();
    if (!fenced_.load(std::memory_order_acquire)) SweepOrphans();
    l.lock();
    hb_cv_.wait_for(l, std::chrono::nanoseconds(opts_.heartbeat_interval_ns),
                    [this] { return stop_; });
  }
}

bool RegionImpl::StillRegistered() const {
  // seq_cst: callers pair this load with a CAS or RMW on a slot (claim, pin)
  // against the reclaimer's registry CAS followed by its sweep of the slot.
  return self_ >= 0 && !fenced_.load(std::memory_order_acquire) &&
         parts_[self_].state.load(std::memory_order_seq_cst) == self_word_;
}

void RegionImpl::Fence() {
  // We were judged dead (e.g. paused past the liveness timeout) and
  // reclaimed. Our entry, slots and pin bit may already belong to others:
  // from now on we act on nothing as index self_, and count locally.
  if (!fenced_.exchange(true, std::memory_order_acq_rel)) {
    my_counters_.store(&observer_counters_, std::memory_order_relaxed);
  }
}

size_t RegionImpl::ReapDeadParticipants() {
  // Software mode: nothing of a dead host needs freeing by others (its
  // partition's next owner recovers it at attach: docs/coherence.md).
  if (soft_) return 0;
  if (self_ < 0 || fenced_.load(std::memory_order_acquire)) return 0;
  return ReapDead();
}

size_t RegionImpl::ReapDead() {
  const auto now = Clock::now();
  std::vector<std::pair<uint32_t, uint64_t>> dead;
  {
    std::lock_guard<std::mutex> l(obs_mu_);
    for (uint32_t i = 0; i < geo_.max_participants; ++i) {
      if (static_cast<int32_t>(i) == self_) continue;
      const ParticipantRecord& r = parts_[i];
      const uint64_t w = r.state.load(std::memory_order_acquire);
      const uint8_t st = WordState(w);
      Observation& o = obs_[i];
      if (st != kPActive && st != kPReclaiming) {
        o.valid = false;
        continue;
      }
      const uint64_t hb = r.heartbeat.load(std::memory_order_acquire);
      if (!o.valid || o.word != w || o.heartbeat != hb) {
        o = Observation{w, hb, now, true};
        continue;
      }
      // The declared interval is untrusted: cap what it can stretch, at the
      // longest interval Open accepts (the lifecycle watch uses the same cap).
      const uint64_t declared = std::min<uint64_t>(
          r.heartbeat_interval_ns.load(std::memory_order_relaxed), kMaxHeartbeatIntervalNs);
      const auto timeout =
          std::chrono::nanoseconds(std::max(opts_.liveness_timeout_ns, 4 * declared));
      if (now - o.since > timeout) dead.emplace_back(i, w);
    }
  }
  size_t reclaimed = 0;
  for (auto [i, w] : dead) {
    if (TryReclaim(i, w)) ++reclaimed;
  }
  return reclaimed;
}

bool RegionImpl::TryReclaim(uint32_t index, uint64_t observed) {
  ParticipantRecord& r = parts_[index];
  // Before we registered ourselves the reclaimer field names nobody.
  const uint32_t me = self_ >= 0 ? self_index() : static_cast<uint32_t>(kOwnerMask);
  const uint64_t mine = PackWord(WordGen(observed), me, kPReclaiming);
  if (!r.state.compare_exchange_strong(observed, mine, std::memory_order_seq_cst)) return false;
  SweepParticipant(index, mine);
  uint64_t expected = mine;
  r.state.compare_exchange_strong(expected, PackWord(WordGen(mine), 0, kPFree),
                                  std::memory_order_acq_rel);
  std::lock_guard<std::mutex> l(obs_mu_);
  obs_[index].valid = false;
  return true;
}

void RegionImpl::SweepParticipant(uint32_t index, uint64_t reclaiming) {
  const uint64_t bit = 1ull << (index % 64);
  const uint32_t word_ix = index / 64;
  for (uint64_t s = 0; s < geo_.num_entries; ++s) {
    // Still our reclaim? A reclaimer paused past the liveness timeout is
    // itself reclaimed and its sweep taken over; the entry may since belong
    // to a new participant, whose slots and pin bits carry the same index.
    if (parts_[index].state.load(std::memory_order_seq_cst) != reclaiming) return;
    std::atomic<uint64_t>& st = meta_[s].state;
    uint64_t w = st.load(std::memory_order_seq_cst);
    const uint8_t state = WordState(w);
    if (state == kWriting && WordOwner(w) == index) {
      // Half-written slots were never READY, so no reader accepted them;
      // take them (generation bump: any earlier reader's recheck fails),
      // clear the tag while owning, free.
      if (TakeAndFreeSlot(s, w)) CountReclaim(Counter::kReclaimedSlots);
    } else if (state == kEvicting && WordOwner(w) == index) {
      // Died mid-eviction, before writing anything: the block is intact
      // (and may be pinned).
      RestoreEvictedBlock(s, w);
    }
    std::atomic<uint64_t>& pw = PinWords(s)[word_ix];
    if (pw.load(std::memory_order_seq_cst) & bit) {
      if (pw.fetch_and(~bit, std::memory_order_acq_rel) & bit) CountReclaim(Counter::kReleasedPins);
    }
    if (s == geo_.num_entries / 2) CXLKV_FAILPOINT_HIT("reclaim.mid_sweep");
  }
  if (parts_[index].state.load(std::memory_order_seq_cst) != reclaiming) return;
  // Layout 5: the orphan rule over every data word, after its entries (an
  // entry restored READY above keeps its data slot; one freed above ends
  // its lease). Words carry no participant: every over lease is freed.
  if (geo_.decoupled) (void)SettleOrphanedData();
  for (uint32_t n = 0; n < kNamespaceEntries; ++n) {
    uint64_t w = nss_[n].state.load(std::memory_order_acquire);
    if (WordState(w) == static_cast<uint8_t>(NamespaceState::kWriting) && WordOwner(w) == index) {
      nss_[n].state.compare_exchange_strong(w, 0, std::memory_order_acq_rel);
    }
  }
  // Retire the counters: each value moves exactly once (exchange), so a
  // reclaimer dying here loses at most the counters in flight, never
  // double-counts.
  CounterBlock& c = parts_[index].counters;
  for (uint32_t k = 0; k < kCounterCount; ++k) {
    const uint64_t v = c.v[k].exchange(0, std::memory_order_acq_rel);
    if (v) retired_->v[k].fetch_add(v, std::memory_order_relaxed);
  }
}

void RegionImpl::SweepOrphans() {
  // A WRITING or EVICTING slot, or a pin bit, whose owner index is not a
  // live entry (FREE, damaged, or >= max_participants) is never cleaned up
  // by a reclaim sweep: its owner was reclaimed before it acted (a paused
  // claim or pin that landed after the sweep), or the word was damaged.
  // Visit a slice of the slots per heartbeat (a whole pass per liveness
  // timeout, so the work per beat stays bounded on huge regions) and act on
  // a word only when a later visit, at least a liveness timeout after the
  // first, finds it unchanged and its owner still not alive.
  const auto now = Clock::now();
  const auto stall = std::chrono::nanoseconds(opts_.liveness_timeout_ns);
  const uint64_t n = geo_.num_entries;
  const uint64_t per_pass = std::max<uint64_t>(
      1, opts_.liveness_timeout_ns / std::max<uint64_t>(1, opts_.heartbeat_interval_ns));
  const uint64_t chunk =
      std::min<uint64_t>(n, std::max<uint64_t>(64, (n + per_pass - 1) / per_pass));
  constexpr size_t kMaxTracked = 4096;  // bounded memory on a badly damaged region
  auto stale = [&](std::unordered_map<uint64_t, OrphanObs>& m, uint64_t id, uint64_t v) {
    auto it = m.find(id);
    if (it == m.end() || it->second.word != v) {
      if (it != m.end()) {
        it->second = OrphanObs{v, now};
      } else if (m.size() < kMaxTracked) {
        m.emplace(id, OrphanObs{v, now});
      }
      return false;
    }
    if (now - it->second.since < stall) return false;
    m.erase(it);
    return true;
  };
  std::unordered_map<uint64_t, uint64_t> moving;  // orphaned data slots to settle
  for (uint64_t i = 0; i < chunk; ++i) {
    const uint64_t s = orphan_cursor_;
    orphan_cursor_ = (orphan_cursor_ + 1) % n;
    // Layout 5: data slot s (while s < num_slots) whose lease is over, or
    // MOVING for a READY lease (layout.h's orphan rule): a mover, dropper
    // or writer reclaimed or dead before it acted.
    if (geo_.decoupled && s < geo_.num_slots) {
      const uint64_t dw = dwords_[s].load(std::memory_order_seq_cst);
      if (DataWordFate(s, dw) == DataFate::kKeep) {
        orphan_data_.erase(s);
      } else if (stale(orphan_data_, s, dw)) {
        moving.emplace(s, dw);
      }
    }
    std::atomic<uint64_t>& st = meta_[s].state;
    uint64_t w = st.load(std::memory_order_seq_cst);
    const uint8_t state = WordState(w);
    // Layout 5: a READY entry whose data slot's word is not its lease (a
    // committed lease's word always is: HELD, or MOVING until its writer's
    // settle) is damage, to its index or to that word: the slot's holder or
    // next claim overwrites its bytes, and until a read or an eviction
    // drops it, it holds an entry and, named by no word, its own data slot
    // may be held for it for good.
    // (ReadyOffData: the rule the verify scrub and inspect read too.)
    const bool orphan = state > kEvicting ||
                        ((state == kWriting || state == kEvicting) && !OwnerAlive(WordOwner(w))) ||
                        ReadyOffData(s, w);
    if (!orphan) {
      orphan_slots_.erase(s);
    } else if (stale(orphan_slots_, s, w)) {
      if (state == kEvicting) {
        RestoreEvictedBlock(s, w);  // the block is intact, as in a reclaim sweep
      } else if (state == kReady) {
        // Dropped like a block that fails its CRC (its own data slot, if
        // a word names it, is then a lease that is over: the data sweep).
        if (ReadyOffData(s, w) && TakeAndFreeSlot(s, w)) Count(Counter::kCrcFailures);
      } else if (TakeAndFreeSlot(s, w)) {
        Count(Counter::kReclaimedSlots);
      }
    }
    // Our own pin bit where we hold no pin: damage, which no other
    // participant can tell from a pin of ours (we are alive).
    if (!soft_) ClearStrayOwnPin(s);
    for (uint32_t k = 0; k < geo_.pin_words; ++k) {
      std::atomic<uint64_t>& pw = PinWords(s)[k];
      const uint64_t bits = pw.load(std::memory_order_relaxed);
      uint64_t dead = 0;
      for (uint64_t b = bits; b != 0; b &= b - 1) {
        const uint32_t p = k * 64 + static_cast<uint32_t>(__builtin_ctzll(b));
        if (static_cast<int32_t>(p) != self_ && !OwnerAlive(p)) dead |= 1ull << (p % 64);
      }
      const uint64_t id = s * geo_.pin_words + k;
      if (dead == 0) {
        orphan_pins_.erase(id);
        continue;
      }
      if (!stale(orphan_pins_, id, dead)) continue;
      // Re-check right before clearing: an entry registered since may pin.
      for (uint64_t b = dead; b != 0; b &= b - 1) {
        const uint32_t p = k * 64 + static_cast<uint32_t>(__builtin_ctzll(b));
        if (OwnerAlive(p)) dead &= ~(1ull << (p % 64));
      }
      const uint64_t cleared = pw.fetch_and(~dead, std::memory_order_acq_rel) & dead;
      if (cleared) Count(Counter::kReleasedPins, __builtin_popcountll(cleared));
    }
  }
  // Not counted: each went with an entry that was.
  if (!moving.empty()) (void)SettleMovingSlots(std::move(moving));
}

std::vector<ParticipantInfo> RegionImpl::Participants() const {
  if (soft_) return SwParticipants();
  std::vector<ParticipantInfo> out;
  for (uint32_t i = 0; i < geo_.max_participants; ++i) {
    const ParticipantRecord& r = parts_[i];
    const uint64_t w = r.state.load(std::memory_order_acquire);
    const uint8_t st = WordState(w);
    if (st != kPActive && st != kPReclaiming) continue;
    ParticipantInfo p;
    p.index = i;
    p.incarnation = WordGen(w);
    p.pid = r.pid.load(std::memory_order_relaxed);
    char host[33] = {};
    for (size_t k = 0; k < 32; ++k) {
      host[k] =
          reinterpret_cast<const std::atomic<char>*>(&r.host[k])->load(std::memory_order_relaxed);
    }
    p.host = std::string(host, strnlen(host, 32));
    p.heartbeat = r.heartbeat.load(std::memory_order_relaxed);
    p.heartbeat_interval_ns = r.heartbeat_interval_ns.load(std::memory_order_relaxed);
    p.reclaiming = st == kPReclaiming;
    p.self = static_cast<int32_t>(i) == self_;
    for (uint32_t k = 0; k < kCounterCount; ++k) {
      p.counters.v[k] = r.counters.v[k].load(std::memory_order_relaxed);
    }
    out.push_back(std::move(p));
  }
  return out;
}

Counters RegionImpl::ProcessCounters() const {
  Counters c;
  for (uint32_t k = 0; k < kCounterCount; ++k) {
    c.v[k] = my_counters_.load(std::memory_order_relaxed)->v[k].load(std::memory_order_relaxed);
  }
  return c;
}

Counters RegionImpl::RegionCounters() const {
  if (soft_) return SwRegionCounters();
  Counters c;
  for (uint32_t k = 0; k < kCounterCount; ++k) {
    c.v[k] = retired_->v[k].load(std::memory_order_relaxed);
  }
  for (uint32_t i = 0; i < geo_.max_participants; ++i) {
    for (uint32_t k = 0; k < kCounterCount; ++k) {
      c.v[k] += parts_[i].counters.v[k].load(std::memory_order_relaxed);
    }
  }
  if (self_ < 0) {
    for (uint32_t k = 0; k < kCounterCount; ++k) {
      c.v[k] += observer_counters_.v[k].load(std::memory_order_relaxed);
    }
  }
  return c;
}

}  // namespace cxlkv::internal
