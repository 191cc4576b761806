// BlockPool: host-side bookkeeping of KV cache blocks — ids, refcounts, free list — and of the per-sequence
// linear-attention state slots of hybrid models (a second, small free list; StateStorage holds the tensors).
// Pure bookkeeping: no tensors, no device memory (KvStorage holds those). Invariants: a block is either free
// (refcount 0, on the free list exactly once) or in use (refcount >= 1); allocate() never hands out a used
// block; release of a free block or slot is an Error (double free), never silent.
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

namespace bunsen::kv {

using BlockId = int32_t;

class BlockPool {
 public:
  // n_state_slots: linear-attention state slots (0 for models without linear-attention layers).
  explicit BlockPool(int32_t n_blocks, int32_t n_state_slots = 0);
  int32_t n_blocks() const { return static_cast<int32_t>(refcount_.size()); }
  int32_t n_free() const { return static_cast<int32_t>(free_.size()); }
  // nullopt when no block is free.
  std::optional<BlockId> allocate();
  // Allocates n blocks or none (all-or-nothing); the new ids are appended to `out` (not cleared).
  bool allocate_n(int32_t n, std::vector<BlockId>& out);
  void retain(BlockId id);   // refcount + 1 (a block shared by sequences and the prefix cache)
  void release(BlockId id);  // refcount - 1; back to the free list at 0
  int32_t refcount(BlockId id) const;

  int32_t n_state_slots() const { return static_cast<int32_t>(slot_used_.size()); }
  int32_t n_free_state_slots() const { return static_cast<int32_t>(free_slots_.size()); }
  std::optional<int32_t> allocate_state_slot();  // nullopt when none is free
  void release_state_slot(int32_t slot);

 private:
  std::vector<int32_t> refcount_;
  std::vector<BlockId> free_;  // LIFO stack
  std::vector<bool> slot_used_;
  std::vector<int32_t> free_slots_;  // LIFO stack
};

// Logical -> physical mapping of one sequence, plus slot arithmetic; for hybrid models also the sequence's
// linear-attention state slot (its cache is blocks + that slot, both returned by release_all).
// Sliding-window tables (the engine's second block space, engine/runner.h) also release their leading
// blocks once every position in them has left the window: those entries read kReleased (-1), are always a
// prefix of the table, own no reference and are skipped by release_all.
class BlockTable {
 public:
  explicit BlockTable(int32_t block_size) : block_size_(block_size) {}
  int32_t block_size() const { return block_size_; }
  const std::vector<BlockId>& blocks() const { return blocks_; }
  int64_t capacity_tokens() const { return static_cast<int64_t>(blocks_.size()) * block_size_; }
  // Number of additional blocks needed to hold `n_tokens` tokens in total.
  int32_t blocks_needed(int64_t n_tokens) const;
  void append(BlockId id) { blocks_.push_back(id); }
  static constexpr BlockId kReleased = -1;
  // Leading entries released (kReleased); blocks()[n_released()...] are live.
  int32_t n_released() const { return n_released_; }
  // Marks the first live block released and returns its id: the caller drops its reference.
  BlockId release_front();
  // Appends a released entry (a prefix hit whose early blocks are out of the window); only while the table
  // holds no live block.
  void append_released();
  // Cache slot of token position `pos` (block * block_size + offset). pos must be < capacity_tokens() and
  // its block live.
  int64_t slot(int64_t pos) const;
  // Returns all blocks (and the state slot) to the pool and clears the table.
  void release_all(BlockPool& pool);
  // The sequence's linear-attention state slot, -1 when it holds none.
  int32_t state_slot() const { return state_slot_; }
  // Takes a state slot from the pool unless the table holds one or the pool has none at all (a model without
  // linear-attention layers). False only when the pool has slots but none is free.
  bool acquire_state_slot(BlockPool& pool);
  void release_state_slot(BlockPool& pool);
  // Forgets the blocks without releasing them: the caller has taken over their references (PrefixCache).
  void clear() {
    blocks_.clear();
    n_released_ = 0;
  }

 private:
  int32_t block_size_;
  std::vector<BlockId> blocks_;
  int32_t n_released_ = 0;
  int32_t state_slot_ = -1;
};

}  // namespace bunsen::kv
