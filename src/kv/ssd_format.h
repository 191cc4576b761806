// SSD snapshot file format (versions 1, 2 and 3) for the prefix cache's disk tier: key and layout types, a fast
// 64-bit checksum, and encode/decode of the file header. Not I/O: SsdStore (ssd_store.h) reads and writes
// files. Invariants: all integers are little-endian; decode never reads outside the bytes it is given and
// accepts only a header whose checksum, magic, version and internal offsets all agree with the file size.
//
// File layout: [header: fixed 96 bytes | n_tensors x {u64 bytes, u64 checksum} | v2, v3: sliding extension, 24
//              bytes | v3: state extension, 8 bytes | u64 header checksum] [token ids: n_tokens x i32] [zero pad to 4096] [tensor 0]
//              [pad to 256] [tensor 1] ...
// Fixed part (byte offsets): 0 magic "BSNKVSSD", 8 u32 version, 12 u32 header_bytes, 16 u64 namespace,
// 24 u64 prefix_hash, 32 u64 seq, 40 u64 n_tokens, 48 i32 n_layers, 52 i32 block_size, 56 i32 n_kv_heads,
// 60 i32 head_dim, 64 u32 dtype, 68 u32 n_tensors, 72 u64 tokens checksum, 80 u64 payload_offset,
// 88 u64 file_bytes. The header checksum covers bytes [0, header_bytes - 8).
// Version 2 = a snapshot that also holds sliding-window blocks (SsdLayout::sliding); its extension: +0 u32
// sliding n_tensors, +4 i32 window, +8 u64 first_block, +16 u64 n_blocks. A snapshot without them is
// written as version 1, byte for byte as before version 2 existed.
// Version 3 = a snapshot that also holds linear-attention state (SsdLayout::state: a hybrid model's checkpoint at
// the prefix's end); its extension is version 2's (sliding n_tensors may be 0 there) followed by +24 u32 state
// n_tensors, +28 u32 zero. Readers that predate it reject it ("other format version"); hybrid engines use only
// version-3 files (their snapshots live under another namespace too, so an older file of theirs is never found).
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace bunsen::kv {

constexpr uint32_t kSsdFormatVersionState = 3;     // the newest version: snapshots with linear-attention state
constexpr uint32_t kSsdFormatVersion = 2;          // written for snapshots with sliding blocks and no state
constexpr uint32_t kSsdFormatVersionNoSliding = 1;  // still written for snapshots without either
constexpr size_t kSsdFixedHeaderBytes = 96;
constexpr size_t kSsdSlidingExtBytes = 24;          // version 2's extension
constexpr size_t kSsdStateExtBytes = 8;             // what version 3 adds after it
constexpr uint64_t kSsdPayloadAlign = 4096;  // payloads start page-aligned (mmap, O_DIRECT-friendly)
constexpr uint64_t kSsdTensorAlign = 256;
constexpr uint32_t kSsdMaxTensors = 1u << 16;

// Identifies one snapshot. name_space = hash of (model fingerprint, KV scheme, tokenizer hash, adapter set);
// prefix_hash = the hash chain over the prefix's tokens. Both are computed by the caller (prefix cache).
struct SsdEntryKey {
  uint64_t name_space = 0;
  uint64_t prefix_hash = 0;
  bool operator==(const SsdEntryKey&) const = default;
};

struct SsdEntryKeyHash {
  size_t operator()(const SsdEntryKey& k) const noexcept {
    return static_cast<size_t>(k.name_space * 0x9E3779B97F4A7C15ull ^ k.prefix_hash);
  }
};

// The sliding-window part of a snapshot (version 2): the LAST n_tensors entries of tensor_bytes hold the
// sliding-window layers' blocks [first_block, first_block + n_blocks) of the prefix (each
// [n_blocks, block_size, ...]), the window a query right after the prefix sees. n_tensors 0: none.
struct SsdSlidingPart {
  uint32_t n_tensors = 0;
  int32_t window = 0;  // tokens
  uint64_t first_block = 0;
  uint64_t n_blocks = 0;
  bool operator==(const SsdSlidingPart&) const = default;
};

// The linear-attention part of a snapshot (version 3): the n_tensors entries of tensor_bytes right before the
// sliding part (if any) hold a hybrid model's state checkpoint taken at the prefix's last token: per linear
// layer its conv state then its recurrent state (one slot each, f32, StateStorage order). n_tensors 0: none.
struct SsdStatePart {
  uint32_t n_tensors = 0;
  bool operator==(const SsdStatePart&) const = default;
};

// What the payload tensors are. By convention tensor_bytes lists [K0, V0, K1, V1, ...] (each
// [n_blocks, block_size, n_kv_heads, head_dim] dtype), then, with `state`, the linear-attention state
// tensors and, with `sliding`, the sliding space's tensors; the store only checks that payload sizes match
// tensor_bytes.
struct SsdLayout {
  int32_t n_layers = 0;
  int32_t block_size = 0;
  int32_t n_kv_heads = 0;
  int32_t head_dim = 0;
  DType dtype = DType::kBF16;
  std::vector<uint64_t> tensor_bytes{};
  SsdSlidingPart sliding{};
  SsdStatePart state{};
  bool operator==(const SsdLayout&) const = default;
};

// A decoded (or planned) header, with every offset resolved.
struct SsdFileHeader {
  SsdEntryKey key;
  uint64_t seq = 0;  // write order, for oldest-first eviction across restarts
  uint64_t n_tokens = 0;
  SsdLayout layout;
  uint64_t tokens_checksum = 0;
  std::vector<uint64_t> tensor_checksums;  // one per tensor
  uint64_t header_bytes = 0;               // == tokens offset
  uint64_t payload_offset = 0;
  std::vector<uint64_t> tensor_offsets;  // absolute file offsets
  uint64_t file_bytes = 0;
};

// 64-bit non-cryptographic checksum (4 independent multiply-rotate lanes, splitmix-style finish). Any
// change of a single aligned 8-byte word is guaranteed to change its lane; lengths are mixed in.
uint64_t ssd_checksum64(std::span<const std::byte> data);

// Fills header_bytes, payload_offset, tensor_offsets and file_bytes from n_tokens and layout.
void ssd_plan_offsets(SsdFileHeader& h);

// Header bytes (fixed part + table + checksum) ready to write at offset 0. Requires ssd_plan_offsets.
std::vector<std::byte> ssd_encode_header(const SsdFileHeader& h);

// header_bytes announced by the fixed part, or 0 when the magic is wrong or the value is implausible.
uint64_t ssd_peek_header_bytes(std::span<const std::byte> fixed);

// Decodes and validates a header. `bytes` must hold at least the announced header_bytes; file_size is the
// file's real size (truncation check). On failure returns nullopt and sets *why.
std::optional<SsdFileHeader> ssd_decode_header(std::span<const std::byte> bytes, uint64_t file_size,
                                               std::string* why);

}  // namespace bunsen::kv
