// Reference rope, kv_write and paged_attention. Attention materialises every score of one (token,
// head) in a vector, then does a max-subtracted softmax and a weighted V sum: the textbook formula.
// Not fast and not allocation-free. Invariant: keys are read only through the block table; a quantized
// cache (PagedKv::bits > 0) is quantized row by row on write and each row dequantized when read.
#include <cmath>
#include <vector>

#include "kernels/float_io.h"
#include "kernels/kv_quant.h"
#include "kernels/ref/ref_ops.h"
#include "kernels/rows.h"

namespace bunsen::kernels::ref {

void rope(Tensor x, Tensor positions, const RopeParams& p) {
  const int32_t* pos = positions.ptr<int32_t>();
  const int64_t half = p.rotary_dim / 2;
  for (int64_t t = 0; t < x.shape[0]; ++t)
    for (int64_t h = 0; h < x.shape[1]; ++h) {
      float* xh = x.ptr<float>() + t * x.strides[0] + h * x.strides[1];
      for (int64_t i = 0; i < half; ++i) {
        float angle = static_cast<float>(pos[t]) * p.inv_freq[i];
        float c = std::cos(angle) * p.attention_scaling;
        float s = std::sin(angle) * p.attention_scaling;
        float x1 = xh[i], x2 = xh[i + half];
        xh[i] = x1 * c - x2 * s;
        xh[i + half] = x2 * c + x1 * s;
      }
    }
}

namespace {

// Row (block, offset, h) of cache.k (or cache.v) as f32 in `out` [head_dim].
void load_row(const PagedKv& cache, bool is_v, int64_t block, int64_t offset, int64_t h, float* out) {
  const Tensor& c = is_v ? cache.v : cache.k;
  const char* r = kv_row(c, block, offset, h);
  if (cache.quantized()) {
    const auto* params = reinterpret_cast<const float*>(kv_row(is_v ? cache.v_params : cache.k_params, block,
                                                               offset, h));
    kv_dequantize_row(reinterpret_cast<const uint8_t*>(r), params, cache.head_dim(), cache.bits,
                      cache.group_size, out, cache.fp8);
    return;
  }
  for (int64_t d = 0; d < cache.head_dim(); ++d) out[d] = load_f(r, c.dtype, d);
}

}  // namespace

void kv_write(const PagedKv& cache, Tensor k, Tensor v, Tensor slot_mapping) {
  const int64_t* slots = slot_mapping.ptr<int64_t>();
  const int64_t block_size = cache.k.shape[1];
  for (int64_t t = 0; t < k.shape[0]; ++t) {
    if (slots[t] < 0) continue;
    for (int64_t h = 0; h < k.shape[1]; ++h) {
      const float* kt = k.ptr<float>() + t * k.strides[0] + h * k.strides[1];
      const float* vt = v.ptr<float>() + t * v.strides[0] + h * v.strides[1];
      char* kd = kv_row(cache.k, slots[t] / block_size, slots[t] % block_size, h);
      char* vd = kv_row(cache.v, slots[t] / block_size, slots[t] % block_size, h);
      if (cache.quantized()) {
        const int64_t b = slots[t] / block_size, o = slots[t] % block_size;
        kv_quantize_row(kt, k.shape[2], cache.bits, cache.group_size, reinterpret_cast<uint8_t*>(kd),
                        reinterpret_cast<float*>(kv_row(cache.k_params, b, o, h)), cache.fp8);
        kv_quantize_row(vt, v.shape[2], cache.bits, cache.group_size, reinterpret_cast<uint8_t*>(vd),
                        reinterpret_cast<float*>(kv_row(cache.v_params, b, o, h)), cache.fp8);
        continue;
      }
      for (int64_t d = 0; d < k.shape[2]; ++d) {
        store_f(kd, cache.k.dtype, d, kt[d]);
        store_f(vd, cache.v.dtype, d, vt[d]);
      }
    }
  }
}

void paged_attention(Tensor out, Tensor q, const PagedKv& cache, const AttentionMeta& meta,
                     const AttentionParams& p) {
  const int64_t n_heads = q.shape[1], head_dim = q.shape[2];
  const int64_t group = n_heads / cache.k.shape[2];
  const int64_t block_size = cache.k.shape[1];
  const int32_t* positions = meta.positions.ptr<int32_t>();
  const int32_t* seq_index = meta.seq_index.ptr<int32_t>();
  std::vector<float> scores, row(static_cast<size_t>(head_dim));
  for (int64_t t = 0; t < q.shape[0]; ++t) {
    const int64_t pos = positions[t];
    const int64_t first = first_visible(pos, p.sliding_window);
    const int32_t* table = meta.block_tables.ptr<int32_t>() + seq_index[t] * meta.block_tables.strides[0];
    for (int64_t h = 0; h < n_heads; ++h) {
      const float* qh = q.ptr<float>() + t * q.strides[0] + h * q.strides[1];
      float* oh = out.ptr<float>() + t * out.strides[0] + h * out.strides[1];
      scores.assign(static_cast<size_t>(pos - first + 1), 0.0f);
      float mx = -INFINITY;
      for (int64_t key = first; key <= pos; ++key) {
        load_row(cache, false, table[key / block_size], key % block_size, h / group, row.data());
        float s = 0.0f;
        for (int64_t d = 0; d < head_dim; ++d) s += qh[d] * row[d];
        s *= p.scale;
        if (p.softcap > 0.0f) s = p.softcap * std::tanh(s / p.softcap);
        scores[key - first] = s;
        mx = std::fmax(mx, s);
      }
      float sum = 0.0f;
      for (float& s : scores) {
        s = std::exp(s - mx);
        sum += s;
      }
      for (int64_t d = 0; d < head_dim; ++d) oh[d] = 0.0f;
      for (int64_t key = first; key <= pos; ++key) {
        load_row(cache, true, table[key / block_size], key % block_size, h / group, row.data());
        float w = scores[key - first] / sum;
        for (int64_t d = 0; d < head_dim; ++d) oh[d] += w * row[d];
      }
    }
  }
}

}  // namespace bunsen::kernels::ref
