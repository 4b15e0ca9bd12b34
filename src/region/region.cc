// Copyright cxlkv authors.
//
// Region base-class plumbing, leases, and small value helpers.
#include "cxlkv/region.h"

#include <cstdio>

#include "region_impl.h"

namespace cxlkv {

Region::~Region() = default;

void RegionInternal::SlotArea(Region* region, uint8_t** base, uint64_t* len) {
  const RegionInfo& info = region->info();
  *base = static_cast<internal::RegionImpl*>(region)->SlotData(0);
  *len = info.num_slots * info.slot_stride;
}

// static_cast is right: Region's constructor is private to RegionImpl.
uint8_t* RegionInternal::SlotData(Region* region, uint64_t slot) {
  return static_cast<internal::RegionImpl*>(region)->EntryData(slot);
}

internal::Visibility* RegionInternal::GetVisibility(Region* region) {
  return static_cast<internal::RegionImpl*>(region)->visibility();
}

int64_t RegionInternal::FindReadySlot(Region* region, NamespaceId ns, const BlockKey& key) {
  return static_cast<internal::RegionImpl*>(region)->FindReadySlot(ns, key);
}

std::vector<uint64_t> RegionInternal::CandidateSlots(Region* region, NamespaceId ns,
                                                     const BlockKey& key) {
  return static_cast<internal::RegionImpl*>(region)->CandidateSlots(ns, key);
}

WriteLease& WriteLease::operator=(WriteLease&& o) noexcept {
  if (this != &o) {
    if (open()) region_->AbortWrite(this);
    region_ = o.region_;
    data_ = o.data_;
    len_ = o.len_;
    slot_ = o.slot_;
    state_word_ = o.state_word_;
    data_word_ = o.data_word_;
    key_ = o.key_;
    ns_ = o.ns_;
    o.region_ = nullptr;
  }
  return *this;
}

WriteLease::~WriteLease() {
  if (open()) region_->AbortWrite(this);
}

ReadLease& ReadLease::operator=(ReadLease&& o) noexcept {
  if (this != &o) {
    if (open()) (void)region_->EndRead(this, nullptr, nullptr);
    region_ = o.region_;
    data_ = o.data_;
    len_ = o.len_;
    slot_ = o.slot_;
    state_word_ = o.state_word_;
    crc_ = o.crc_;
    writer_ = o.writer_;
    pinned_ = o.pinned_;
    key_ = o.key_;
    ns_ = o.ns_;
    o.region_ = nullptr;
  }
  return *this;
}

ReadLease::~ReadLease() {
  if (open()) (void)region_->EndRead(this, nullptr, nullptr);
}

PinSet& PinSet::operator=(PinSet&& o) noexcept {
  if (this != &o) {
    Release();
    region_ = o.region_;
    slots_ = std::move(o.slots_);
    o.region_ = nullptr;
    o.slots_.clear();
  }
  return *this;
}

void PinSet::Release() {
  if (region_ != nullptr && !slots_.empty()) region_->UnpinSlots(slots_);
  slots_.clear();
  region_ = nullptr;
}

const char* CoherenceModeName(CoherenceMode m) {
  switch (m) {
    case CoherenceMode::kHardware:
      return "hardware";
    case CoherenceMode::kSoftware:
      return "software";
  }
  return "unknown";
}

const char* CounterName(Counter c) {
  switch (c) {
    case Counter::kLookups:
      return "lookups";
    case Counter::kHits:
      return "hits";
    case Counter::kMisses:
      return "misses";
    case Counter::kStores:
      return "stores";
    case Counter::kStoreDuplicate:
      return "store_duplicate";
    case Counter::kStoreFull:
      return "store_failed_full";
    case Counter::kStoreTooLarge:
      return "store_failed_too_large";
    case Counter::kStoreLostRace:
      return "store_failed_lost_race";
    case Counter::kEvictions:
      return "evictions";
    case Counter::kCrcFailures:
      return "crc_failures";
    case Counter::kReclaimedSlots:
      return "reclaimed_slots";
    case Counter::kLoadRaces:
      return "load_races";
    case Counter::kCrossHits:
      return "cross_participant_hits";
    case Counter::kBytesLoaded:
      return "bytes_loaded";
    case Counter::kBytesStored:
      return "bytes_stored";
    case Counter::kReleasedPins:
      return "released_pins";
    case Counter::kStoreFenced:
      return "store_failed_fenced";
    case Counter::kStoreRefused:
      return "store_refused";
    case Counter::kCount:
      break;
  }
  return "unknown";
}

BlockKey BlockKey::FromBytes(const uint8_t* b, size_t n) {
  BlockKey k;
  for (size_t i = 0; i < 8 && i < n; ++i) k.hi = (k.hi << 8) | b[i];
  for (size_t i = 8; i < 16 && i < n; ++i) k.lo = (k.lo << 8) | b[i];
  return k;
}

Status BlockKey::FromHex(std::string_view hex, BlockKey* out) {
  if (hex.size() < 32) {
    return Status::InvalidArgument("block key needs 32 hex digits, got " +
                                   std::to_string(hex.size()));
  }
  uint8_t bytes[16];
  for (int i = 0; i < 16; ++i) {
    auto nib = [](char c) -> int {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      if (c >= 'A' && c <= 'F') return c - 'A' + 10;
      return -1;
    };
    const int h = nib(hex[2 * i]), l = nib(hex[2 * i + 1]);
    if (h < 0 || l < 0) return Status::InvalidArgument("block key has a non-hex digit");
    bytes[i] = static_cast<uint8_t>(h << 4 | l);
  }
  *out = FromBytes(bytes, 16);
  return Status::OK();
}

BlockKey BlockKey::FromId(uint64_t id) {
  BlockKey k;
  k.hi = internal::Mix64(id ^ 0x5851F42D4C957F2Dull);
  k.lo = internal::Mix64(id + 0x14057B7EF767814Full);
  return k;
}

std::string BlockKey::ToHex() const {
  char buf[33];
  std::snprintf(buf, sizeof buf, "%016llx%016llx", static_cast<unsigned long long>(hi),
                static_cast<unsigned long long>(lo));
  return buf;
}

std::string NamespaceDesc::ToString() const {
  return "{model=" + model + ", dtype=" + dtype + ", kv_layout=" + kv_layout +
         ", tp_rank=" + std::to_string(tp_rank) + ", kv_group=" + std::to_string(kv_group) + "}";
}

namespace internal {

RegionImpl::~RegionImpl() {
  Deregister();
  if (prefault_.joinable()) prefault_.join();
}

}  // namespace internal
}  // namespace cxlkv
