// BlockPool and BlockTable: refcounted block bookkeeping and logical->physical slot arithmetic.
// Not storage: no tensors here (kv_storage.cpp). Invariants (checked, never assumed): every id passed in
// is in [0, n_blocks); a free block has refcount 0 and sits on the free list exactly once; releasing or
// retaining a free block throws Error("kv", ...) instead of corrupting the free list.
#include "kv/block_pool.h"

#include "core/status.h"

namespace bunsen::kv {

BlockPool::BlockPool(int32_t n_blocks, int32_t n_state_slots) {
  check(n_blocks >= 0, "kv", strfmt("block pool size must be >= 0, got %d", n_blocks));
  check(n_state_slots >= 0, "kv", strfmt("state slot count must be >= 0, got %d", n_state_slots));
  slot_used_.assign(static_cast<size_t>(n_state_slots), false);
  for (int32_t i = n_state_slots - 1; i >= 0; --i) free_slots_.push_back(i);
  refcount_.assign(static_cast<size_t>(n_blocks), 0);
  free_.reserve(static_cast<size_t>(n_blocks));
  // LIFO stack: push in reverse so a fresh pool hands out 0, 1, 2, ...
  for (int32_t i = n_blocks - 1; i >= 0; --i) free_.push_back(i);
}

static void check_id(BlockId id, int32_t n_blocks) {
  if (!(id >= 0 && id < n_blocks))
    throw Error("kv", strfmt("block id %d out of range [0, %d)", id, n_blocks));
}

std::optional<BlockId> BlockPool::allocate() {
  if (free_.empty()) return std::nullopt;
  BlockId id = free_.back();
  free_.pop_back();
  refcount_[static_cast<size_t>(id)] = 1;
  return id;
}

bool BlockPool::allocate_n(int32_t n, std::vector<BlockId>& out) {
  check(n >= 0, "kv", strfmt("cannot allocate a negative number of blocks (%d)", n));
  if (n > n_free()) return false;
  out.reserve(out.size() + static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) out.push_back(*allocate());
  return true;
}

void BlockPool::retain(BlockId id) {
  check_id(id, n_blocks());
  int32_t& rc = refcount_[static_cast<size_t>(id)];
  if (rc <= 0) throw Error("kv", strfmt("retain of free block %d", id));
  ++rc;
}

void BlockPool::release(BlockId id) {
  check_id(id, n_blocks());
  int32_t& rc = refcount_[static_cast<size_t>(id)];
  if (rc <= 0) throw Error("kv", strfmt("double free of block %d", id));
  if (--rc == 0) free_.push_back(id);
}

int32_t BlockPool::refcount(BlockId id) const {
  check_id(id, n_blocks());
  return refcount_[static_cast<size_t>(id)];
}

std::optional<int32_t> BlockPool::allocate_state_slot() {
  if (free_slots_.empty()) return std::nullopt;
  const int32_t s = free_slots_.back();
  free_slots_.pop_back();
  slot_used_[static_cast<size_t>(s)] = true;
  return s;
}

void BlockPool::release_state_slot(int32_t slot) {
  check(slot >= 0 && slot < n_state_slots(), "kv",
        strfmt("state slot %d out of range [0, %d)", slot, n_state_slots()));
  if (!slot_used_[static_cast<size_t>(slot)]) throw Error("kv", strfmt("double free of state slot %d", slot));
  slot_used_[static_cast<size_t>(slot)] = false;
  free_slots_.push_back(slot);
}

int32_t BlockTable::blocks_needed(int64_t n_tokens) const {
  check(block_size_ > 0, "kv", strfmt("block size must be > 0, got %d", block_size_));
  check(n_tokens >= 0, "kv", strfmt("token count must be >= 0, got %lld", static_cast<long long>(n_tokens)));
  int64_t total = (n_tokens + block_size_ - 1) / block_size_;
  int64_t extra = total - static_cast<int64_t>(blocks_.size());
  return extra > 0 ? static_cast<int32_t>(extra) : 0;
}

int64_t BlockTable::slot(int64_t pos) const {
  check(pos >= 0 && pos < capacity_tokens(), "kv",
        strfmt("position %lld beyond block table capacity %lld", static_cast<long long>(pos),
               static_cast<long long>(capacity_tokens())));
  BlockId block = blocks_[static_cast<size_t>(pos / block_size_)];
  if (block < 0)
    throw Error("kv", strfmt("position %lld lies in released block %lld of a sliding-window table",
                             static_cast<long long>(pos), static_cast<long long>(pos / block_size_)));
  return static_cast<int64_t>(block) * block_size_ + pos % block_size_;
}

BlockId BlockTable::release_front() {
  check(n_released_ < static_cast<int32_t>(blocks_.size()), "kv",
        strfmt("release_front: all %zu blocks of the table are released already", blocks_.size()));
  const BlockId id = blocks_[static_cast<size_t>(n_released_)];
  blocks_[static_cast<size_t>(n_released_++)] = kReleased;
  return id;
}

void BlockTable::append_released() {
  check(n_released_ == static_cast<int32_t>(blocks_.size()), "kv",
        strfmt("append_released: the table holds %zu live blocks; released entries must be a prefix",
               blocks_.size() - static_cast<size_t>(n_released_)));
  blocks_.push_back(kReleased);
  ++n_released_;
}

void BlockTable::release_all(BlockPool& pool) {
  for (size_t i = static_cast<size_t>(n_released_); i < blocks_.size(); ++i) pool.release(blocks_[i]);
  blocks_.clear();
  n_released_ = 0;
  release_state_slot(pool);
}

bool BlockTable::acquire_state_slot(BlockPool& pool) {
  if (state_slot_ >= 0 || pool.n_state_slots() == 0) return true;
  const std::optional<int32_t> s = pool.allocate_state_slot();
  if (!s) return false;
  state_slot_ = *s;
  return true;
}

void BlockTable::release_state_slot(BlockPool& pool) {
  if (state_slot_ < 0) return;
  pool.release_state_slot(state_slot_);
  state_slot_ = -1;
}

}  // namespace bunsen::kv
