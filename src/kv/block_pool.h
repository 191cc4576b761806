// BlockPool: host-side bookkeeping of KV cache blocks — ids, refcounts, free list. Pure bookkeeping: no
// tensors, no device memory (KvStorage holds those). Invariants: a block is either free (refcount 0, on the
// free list exactly once) or in use (refcount >= 1); allocate() never hands out a used block; release of a
// free block is an Error (double free), never silent.
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

namespace bunsen::kv {

using BlockId = int32_t;

class BlockPool {
 public:
  explicit BlockPool(int32_t n_blocks);
  int32_t n_blocks() const { return static_cast<int32_t>(refcount_.size()); }
  int32_t n_free() const { return static_cast<int32_t>(free_.size()); }
  // nullopt when no block is free.
  std::optional<BlockId> allocate();
  // Allocates n blocks or none (all-or-nothing); the new ids are appended to `out` (not cleared).
  bool allocate_n(int32_t n, std::vector<BlockId>& out);
  void retain(BlockId id);   // refcount + 1 (a block shared by sequences and the prefix cache)
  void release(BlockId id);  // refcount - 1; back to the free list at 0
  int32_t refcount(BlockId id) const;

 private:
  std::vector<int32_t> refcount_;
  std::vector<BlockId> free_;  // LIFO stack
};

// Logical -> physical mapping of one sequence, plus slot arithmetic.
class BlockTable {
 public:
  explicit BlockTable(int32_t block_size) : block_size_(block_size) {}
  int32_t block_size() const { return block_size_; }
  const std::vector<BlockId>& blocks() const { return blocks_; }
  int64_t capacity_tokens() const { return static_cast<int64_t>(blocks_.size()) * block_size_; }
  // Number of additional blocks needed to hold `n_tokens` tokens in total.
  int32_t blocks_needed(int64_t n_tokens) const;
  void append(BlockId id) { blocks_.push_back(id); }
  // Cache slot of token position `pos` (block * block_size + offset). pos must be < capacity_tokens().
  int64_t slot(int64_t pos) const;
  // Returns all blocks to the pool and clears the table.
  void release_all(BlockPool& pool);
  // Forgets the blocks without releasing them: the caller has taken over their references (PrefixCache).
  void clear() { blocks_.clear(); }

 private:
  int32_t block_size_;
  std::vector<BlockId> blocks_;
};

}  // namespace bunsen::kv
