// KvStorage: one zeroed host Buffer per layer holding K then V, or every layer's K and V packed into one
// caller-owned region; hands out KvLayerView views. Not bookkeeping (block_pool.cpp) and not an allocator of
// device memory. Invariants: K and V start kAlignment-aligned; views of different layers never overlap;
// bytes() == n_blocks * bytes_per_block().
#include "kv/kv_storage.h"

#include "core/status.h"

namespace bunsen::kv {
namespace {

void check_options(const KvStorageOptions& o) {
  check(o.n_blocks > 0, "kv", strfmt("n_blocks must be > 0, got %d", o.n_blocks));
  check(o.block_size > 0, "kv", strfmt("block_size must be > 0, got %d", o.block_size));
  check(o.dtype == DType::kF32 || o.dtype == DType::kBF16 || o.dtype == DType::kF16, "kv",
        strfmt("unsupported KV dtype %s (f32, bf16 or f16)", dtype_name(o.dtype)));
}

// Bytes of one of K or V for one layer and one block.
size_t half_block_bytes(const KvLayerShape& l, int32_t block_size, DType dtype) {
  return static_cast<size_t>(block_size) * static_cast<size_t>(l.n_kv_heads) *
         static_cast<size_t>(l.head_dim) * dtype_size(dtype);
}

size_t round_up(size_t n, size_t a) {
  return (n + a - 1) / a * a;
}

void check_layer(const KvLayerShape& l, size_t i) {
  check(l.n_kv_heads > 0 && l.head_dim > 0, "kv",
        strfmt("layer %zu: n_kv_heads and head_dim must be > 0 (got %lld, %lld)", i,
               static_cast<long long>(l.n_kv_heads), static_cast<long long>(l.head_dim)));
}

// Bytes of one layer's K then V (V kAlignment-aligned after K).
size_t layer_bytes(const KvLayerShape& l, const KvStorageOptions& o, size_t* v_offset) {
  const size_t half = half_block_bytes(l, o.block_size, o.dtype) * static_cast<size_t>(o.n_blocks);
  *v_offset = round_up(half, kAlignment);
  return *v_offset + half;
}

KvLayerView layer_view(const KvLayerShape& l, const KvStorageOptions& o, char* base, size_t v_offset,
                            Device device) {
  const int64_t shape[] = {o.n_blocks, o.block_size, l.n_kv_heads, l.head_dim};
  return {Tensor::view(base, o.dtype, shape, device), Tensor::view(base + v_offset, o.dtype, shape, device)};
}

}  // namespace

KvStorage::KvStorage(const std::vector<KvLayerShape>& layers, const KvStorageOptions& opts) : opts_(opts) {
  check_options(opts);
  buffers_.reserve(layers.size());
  views_.reserve(layers.size());
  for (size_t i = 0; i < layers.size(); ++i) {
    check_layer(layers[i], i);
    size_t v_offset = 0;
    Buffer buf(layer_bytes(layers[i], opts, &v_offset), /*zero=*/true);
    views_.push_back(layer_view(layers[i], opts, static_cast<char*>(buf.data()), v_offset, Device::cpu()));
    buffers_.push_back(std::move(buf));
  }
}

KvStorage::KvStorage(const std::vector<KvLayerShape>& layers, const KvStorageOptions& opts, void* base,
                     size_t bytes, Device device)
    : opts_(opts) {
  check_options(opts);
  const size_t need = required_bytes(layers, opts);
  check(base != nullptr && bytes >= need, "kv",
        strfmt("external KV memory of %zu bytes is smaller than the %zu bytes needed", bytes, need));
  views_.reserve(layers.size());
  size_t offset = 0;
  for (size_t i = 0; i < layers.size(); ++i) {
    size_t v_offset = 0;
    const size_t n = layer_bytes(layers[i], opts, &v_offset);
    views_.push_back(layer_view(layers[i], opts, static_cast<char*>(base) + offset, v_offset, device));
    offset += round_up(n, kAlignment);
  }
}

size_t KvStorage::required_bytes(const std::vector<KvLayerShape>& layers, const KvStorageOptions& opts) {
  check_options(opts);
  size_t total = 0;
  for (size_t i = 0; i < layers.size(); ++i) {
    check_layer(layers[i], i);
    size_t v_offset = 0;
    total += round_up(layer_bytes(layers[i], opts, &v_offset), kAlignment);
  }
  return total;
}

size_t KvStorage::bytes() const {
  size_t total = 0;
  for (const KvLayerView& v : views_) total += v.k.nbytes() + v.v.nbytes();
  return total;
}

size_t KvStorage::bytes_per_block(const std::vector<KvLayerShape>& layers, int32_t block_size, DType dtype) {
  size_t total = 0;
  for (const KvLayerShape& l : layers) total += 2 * half_block_bytes(l, block_size, dtype);
  return total;
}

}  // namespace bunsen::kv
