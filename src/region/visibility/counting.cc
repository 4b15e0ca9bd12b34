// Copyright cxlkv authors.
//
// CountingVisibility: counts every call, then forwards it.
#include "visibility.h"

namespace cxlkv::internal {

CountingVisibility::CountingVisibility(std::unique_ptr<Visibility> inner)
    : inner_(std::move(inner)), name_(std::string("counting(") + inner_->Name() + ")") {}

namespace {
void Add(std::atomic<uint64_t>& c, uint64_t n) { c.fetch_add(n, std::memory_order_relaxed); }
}  // namespace

uint64_t CountingVisibility::Load64(const void* p) {
  Add(loads_, 1);
  return inner_->Load64(p);
}
uint32_t CountingVisibility::Load32(const void* p) {
  Add(loads_, 1);
  return inner_->Load32(p);
}
void CountingVisibility::Store64(void* p, uint64_t v) {
  Add(stores_, 1);
  inner_->Store64(p, v);
}
void CountingVisibility::Store32(void* p, uint32_t v) {
  Add(stores_, 1);
  inner_->Store32(p, v);
}
void CountingVisibility::CopyFromRegion(void* dst, const void* src, size_t n) {
  Add(copy_out_, n);
  inner_->CopyFromRegion(dst, src, n);
}
void CountingVisibility::CopyToRegion(void* dst, const void* src, size_t n) {
  Add(copy_in_, n);
  inner_->CopyToRegion(dst, src, n);
}
void CountingVisibility::Flush(const void* p, size_t n) {
  Add(flushes_, 1);
  Add(flush_lines_, LinesTouched(p, n));
  inner_->Flush(p, n);
}
void CountingVisibility::Invalidate(const void* p, size_t n) {
  Add(invalidates_, 1);
  Add(invalidate_lines_, LinesTouched(p, n));
  inner_->Invalidate(p, n);
}
void CountingVisibility::StoreFence() {
  Add(store_fences_, 1);
  inner_->StoreFence();
}
void CountingVisibility::FullFence() {
  Add(full_fences_, 1);
  inner_->FullFence();
}

CountingVisibility::Counts CountingVisibility::counts() const {
  auto g = [](const std::atomic<uint64_t>& c) { return c.load(std::memory_order_relaxed); };
  Counts c;
  c.loads = g(loads_);
  c.stores = g(stores_);
  c.copy_in_bytes = g(copy_in_);
  c.copy_out_bytes = g(copy_out_);
  c.flushes = g(flushes_);
  c.flush_lines = g(flush_lines_);
  c.invalidates = g(invalidates_);
  c.invalidate_lines = g(invalidate_lines_);
  c.store_fences = g(store_fences_);
  c.full_fences = g(full_fences_);
  return c;
}

void CountingVisibility::Reset() {
  for (auto* c : {&loads_, &stores_, &copy_in_, &copy_out_, &flushes_, &flush_lines_, &invalidates_,
                  &invalidate_lines_, &store_fences_, &full_fences_})
    c->store(0, std::memory_order_relaxed);
}

}  // namespace cxlkv::internal
