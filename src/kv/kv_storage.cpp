// KvStorage: allocates one zeroed host Buffer per layer holding K then V and hands out PagedKv views.
// Not bookkeeping (block_pool.cpp) and not CUDA storage. Invariants: V starts kAlignment-aligned inside
// its layer's buffer; views of different layers never overlap; bytes() == n_blocks * bytes_per_block().
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

}  // namespace

KvStorage::KvStorage(const std::vector<KvLayerShape>& layers, const KvStorageOptions& opts) : opts_(opts) {
  check_options(opts);
  buffers_.reserve(layers.size());
  views_.reserve(layers.size());
  for (size_t i = 0; i < layers.size(); ++i) {
    const KvLayerShape& l = layers[i];
    check(l.n_kv_heads > 0 && l.head_dim > 0, "kv",
          strfmt("layer %zu: n_kv_heads and head_dim must be > 0 (got %lld, %lld)", i,
                 static_cast<long long>(l.n_kv_heads), static_cast<long long>(l.head_dim)));
    size_t half = half_block_bytes(l, opts.block_size, opts.dtype) * static_cast<size_t>(opts.n_blocks);
    size_t v_offset = round_up(half, kAlignment);
    Buffer buf(v_offset + half, /*zero=*/true);
    const int64_t shape[] = {opts.n_blocks, opts.block_size, l.n_kv_heads, l.head_dim};
    kernels::PagedKv view;
    view.k = Tensor::view(buf.data(), opts.dtype, shape);
    view.v = Tensor::view(static_cast<char*>(buf.data()) + v_offset, opts.dtype, shape);
    buffers_.push_back(std::move(buf));
    views_.push_back(view);
  }
}

size_t KvStorage::bytes() const {
  size_t total = 0;
  for (const kernels::PagedKv& v : views_) total += v.k.nbytes() + v.v.nbytes();
  return total;
}

size_t KvStorage::bytes_per_block(const std::vector<KvLayerShape>& layers, int32_t block_size, DType dtype) {
  size_t total = 0;
  for (const KvLayerShape& l : layers) total += 2 * half_block_bytes(l, block_size, dtype);
  return total;
}

}  // namespace bunsen::kv
