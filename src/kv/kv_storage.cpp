// KvStorage: one zeroed host Buffer per layer holding K then V (then, for a quantized layer, the K and V
// scale/bias tensors), or every layer packed into one caller-owned region; hands out KvLayerView views.
// Not bookkeeping (block_pool.cpp) and not an allocator of device memory. Invariants: every part starts
// kAlignment-aligned; views of different layers never overlap; bytes() == n_blocks * bytes_per_block().
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

KvQuantSpec spec_of(const std::vector<KvQuantSpec>& quant, size_t i) {
  return i < quant.size() ? quant[i] : KvQuantSpec{};
}

void check_layer(const KvLayerShape& l, const KvQuantSpec& q, size_t i) {
  check(l.n_kv_heads > 0 && l.head_dim > 0, "kv",
        strfmt("layer %zu: n_kv_heads and head_dim must be > 0 (got %lld, %lld)", i,
               static_cast<long long>(l.n_kv_heads), static_cast<long long>(l.head_dim)));
  if (q.bits == 0) return;
  check(q.bits == 4 || q.bits == 8, "kv", strfmt("layer %zu: KV quantization bits must be 4 or 8, got %d", i, q.bits));
  check(q.group_size > 0 || (q.fp8 && q.group_size == 0), "kv",
        strfmt("layer %zu: KV quantization group_size must be > 0 (0 = head_dim: fp8 only), got %d", i, q.group_size));
  check(!q.fp8 || q.bits == 8, "kv", strfmt("layer %zu: fp8 (e4m3) KV needs bits 8, got %d", i, q.bits));
  const int g = kv_effective_group(l.head_dim, q.group_size);
  check((static_cast<int64_t>(g) * q.bits) % 8 == 0, "kv",
        strfmt("layer %zu: %d-bit KV needs an even group (head_dim %lld)", i, q.bits,
               static_cast<long long>(l.head_dim)));
}

size_t round_up(size_t n, size_t a) {
  return (n + a - 1) / a * a;
}

// Per-slot bytes of one of K or V (codes or values) and of one of the K/V params (0 unquantized).
size_t row_bytes(const KvLayerShape& l, const KvQuantSpec& q, DType dtype) {
  const auto rows = static_cast<size_t>(l.n_kv_heads);
  if (q.bits == 0) return rows * static_cast<size_t>(l.head_dim) * dtype_size(dtype);
  return rows * static_cast<size_t>(l.head_dim * q.bits / 8);
}

size_t param_bytes(const KvLayerShape& l, const KvQuantSpec& q) {
  if (q.bits == 0) return 0;
  return static_cast<size_t>(l.n_kv_heads) * 2 * static_cast<size_t>(l.head_dim / kv_effective_group(l.head_dim, q.group_size)) *
         sizeof(float);
}

// Offsets of one layer's parts (K, V, K params, V params), each kAlignment-aligned; returns the end.
struct LayerLayout {
  size_t v = 0, kp = 0, vp = 0, end = 0;
};

LayerLayout layout_of(const KvLayerShape& l, const KvQuantSpec& q, const KvStorageOptions& o) {
  const auto n = static_cast<size_t>(o.n_blocks) * static_cast<size_t>(o.block_size);
  const size_t half = row_bytes(l, q, o.dtype) * n, params = param_bytes(l, q) * n;
  LayerLayout ll;
  ll.v = round_up(half, kAlignment);
  ll.kp = round_up(ll.v + half, kAlignment);
  ll.vp = round_up(ll.kp + params, kAlignment);
  ll.end = q.bits == 0 ? ll.v + half : ll.vp + params;
  return ll;
}

KvLayerView layer_view(const KvLayerShape& l, const KvQuantSpec& q, const KvStorageOptions& o, char* base,
                       Device device) {
  const LayerLayout ll = layout_of(l, q, o);
  KvLayerView v;
  if (q.bits == 0) {
    const int64_t shape[] = {o.n_blocks, o.block_size, l.n_kv_heads, l.head_dim};
    v.k = Tensor::view(base, o.dtype, shape, device);
    v.v = Tensor::view(base + ll.v, o.dtype, shape, device);
    return v;
  }
  v.bits = q.bits;
  v.group_size = kv_effective_group(l.head_dim, q.group_size);
  v.fp8 = q.fp8;
  const int64_t codes[] = {o.n_blocks, o.block_size, l.n_kv_heads, l.head_dim * q.bits / 8};
  const int64_t params[] = {o.n_blocks, o.block_size, l.n_kv_heads, 2 * (l.head_dim / v.group_size)};
  v.k = Tensor::view(base, DType::kU8, codes, device);
  v.v = Tensor::view(base + ll.v, DType::kU8, codes, device);
  v.k_params = Tensor::view(base + ll.kp, DType::kF32, params, device);
  v.v_params = Tensor::view(base + ll.vp, DType::kF32, params, device);
  return v;
}

}  // namespace

int kv_effective_group(int64_t head_dim, int group_size) {
  return group_size > 0 && head_dim % group_size == 0 ? group_size : static_cast<int>(head_dim);
}

KvStorage::KvStorage(const std::vector<KvLayerShape>& layers, const KvStorageOptions& opts) : opts_(opts) {
  check_options(opts);
  buffers_.reserve(layers.size());
  views_.reserve(layers.size());
  for (size_t i = 0; i < layers.size(); ++i) {
    const KvQuantSpec q = spec_of(opts.quant, i);
    check_layer(layers[i], q, i);
    Buffer buf(layout_of(layers[i], q, opts).end, /*zero=*/true);
    views_.push_back(layer_view(layers[i], q, opts, static_cast<char*>(buf.data()), Device::cpu()));
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
    const KvQuantSpec q = spec_of(opts.quant, i);
    views_.push_back(layer_view(layers[i], q, opts, static_cast<char*>(base) + offset, device));
    offset += round_up(layout_of(layers[i], q, opts).end, kAlignment);
  }
}

size_t KvStorage::required_bytes(const std::vector<KvLayerShape>& layers, const KvStorageOptions& opts) {
  check_options(opts);
  size_t total = 0;
  for (size_t i = 0; i < layers.size(); ++i) {
    const KvQuantSpec q = spec_of(opts.quant, i);
    check_layer(layers[i], q, i);
    total += round_up(layout_of(layers[i], q, opts).end, kAlignment);
  }
  return total;
}

size_t KvStorage::bytes() const {
  size_t total = 0;
  for (const KvLayerView& v : views_)
    total += v.k.nbytes() + v.v.nbytes() + (v.bits != 0 ? v.k_params.nbytes() + v.v_params.nbytes() : 0);
  return total;
}

bool KvStorage::quantized() const {
  for (const KvLayerView& v : views_)
    if (v.bits != 0) return true;
  return false;
}

size_t KvStorage::bytes_per_block(const std::vector<KvLayerShape>& layers, int32_t block_size, DType dtype,
                                  const std::vector<KvQuantSpec>& quant) {
  size_t total = 0;
  for (size_t i = 0; i < layers.size(); ++i) {
    const KvQuantSpec q = spec_of(quant, i);
    total += 2 * (row_bytes(layers[i], q, dtype) + param_bytes(layers[i], q)) * static_cast<size_t>(block_size);
  }
  return total;
}

}  // namespace bunsen::kv
