// KvStorage: the per-layer K and V tensors of the paged cache, [n_blocks, block_size, n_kv_heads, head_dim]
// each, in one host allocation per layer, or laid out over caller-owned memory on any device (the engine
// allocates CUDA memory through kernels/ and hands it in: kv itself depends on core only). Not bookkeeping
// (BlockPool) and not kernels: contents change only inside the model's forward through the slot mapping.
// A layer may be affine-quantized (--kv-quant): then K and V hold u8 codes and two f32 tensors hold the
// per-group (scale, bias) pairs (layout in kernels::PagedKv, ops.h).
// Invariant: every layer of one KvStorage has the same n_blocks and block_size, so one block id addresses all
// its layers. A runner with sliding-window and full-attention layers keeps two (engine/runner_sliding.cpp):
// one per block space, each with its own BlockPool.
#pragma once
#include <cstdint>
#include <vector>

#include "core/buffer.h"

namespace bunsen::kv {

struct KvLayerShape {
  int64_t n_kv_heads = 0;
  int64_t head_dim = 0;
};

// One layer's cache: slot s lives at block s / block_size, offset s % block_size. The engine hands these to
// the kernels as kernels::PagedKv (same two views); kv does not depend on kernels.
struct KvLayerView {
  Tensor k;         // [n_blocks, block_size, n_kv_heads, head_dim] dtype, or [..., head_dim * bits / 8] u8
  Tensor v;         // same as k
  Tensor k_params;  // quantized only: [n_blocks, block_size, n_kv_heads, 2 * head_dim / group_size] f32
  Tensor v_params;  // quantized only: same as k_params
  int bits = 0;        // 0: unquantized
  int group_size = 0;  // quantized only: the effective group (see kv_effective_group)
  bool fp8 = false;    // bits 8 only: e4m3 codes, params (scale, 0) per group
};

// One layer's KV quantization: bits 0 (off, the storage dtype), 4 or 8 (affine, f32 scale and bias per
// group of group_size head_dim elements), or fp8 (bits 8, e4m3 codes, f32 scale = amax / 448 per group
// and a 0 bias, so the params layout is the affine one; group_size 0 = the whole head_dim).
struct KvQuantSpec {
  int bits = 0;
  int group_size = 64;
  bool fp8 = false;
  bool operator==(const KvQuantSpec&) const = default;
};

// The group a layer really uses: group_size when it divides head_dim, else (and for 0) the whole head_dim.
int kv_effective_group(int64_t head_dim, int group_size);

struct KvStorageOptions {
  int32_t n_blocks = 0;
  int32_t block_size = 16;
  DType dtype = DType::kF32;        // unquantized layers: f32 or bf16 on CPU
  std::vector<KvQuantSpec> quant;   // per layer; empty (or shorter than the layers): the rest unquantized
};

class KvStorage {
 public:
  // Owning host storage, zeroed.
  KvStorage(const std::vector<KvLayerShape>& layers, const KvStorageOptions& opts);
  // Views over `bytes` bytes at `base` (kAlignment-aligned) on `device`, owned by the caller and outliving
  // this object; `bytes` must be >= required_bytes(layers, opts). Contents are left as they are.
  KvStorage(const std::vector<KvLayerShape>& layers, const KvStorageOptions& opts, void* base, size_t bytes,
            Device device);
  // Bytes the external-memory constructor needs (K then V per layer, each kAlignment-aligned).
  static size_t required_bytes(const std::vector<KvLayerShape>& layers, const KvStorageOptions& opts);
  int32_t n_blocks() const { return opts_.n_blocks; }
  int32_t block_size() const { return opts_.block_size; }
  DType dtype() const { return opts_.dtype; }
  size_t bytes() const;
  // One view per layer, in layer order; stable for the storage's lifetime.
  const std::vector<KvLayerView>& layers() const { return views_; }
  // Bytes one block occupies across all layers (K and V): memory planning.
  static size_t bytes_per_block(const std::vector<KvLayerShape>& layers, int32_t block_size, DType dtype,
                                const std::vector<KvQuantSpec>& quant = {});
  // True when some layer is quantized.
  bool quantized() const;

 private:
  KvStorageOptions opts_;
  std::vector<Buffer> buffers_;  // empty for external memory
  std::vector<KvLayerView> views_;
};

}  // namespace bunsen::kv
