// decode_fused.h's entry points: validates a FusedDecodeStep and launches cuda::decode_mega, or declines
// (returns false) so the model runs its per-layer ops. Not a kernel.
#include <atomic>
#include <cstring>
#include <string>

#include "core/env.h"
#include "kernels/decode_fused.h"
#ifdef BUNSEN_HAVE_CUDA
#include "kernels/cuda/decode_mega.h"
#endif

namespace bunsen::kernels {
namespace {
std::atomic<int> g_mode{-1};
std::atomic<int64_t> g_launches{0};

#ifdef BUNSEN_HAVE_CUDA
// A [rows, cols] matrix of `dtype` on the device with contiguous, 16-byte aligned rows (what the bulk copies
// read).
bool device_matrix(const Tensor& t, DType dtype, int64_t rows, int64_t cols) {
  return !t.empty() && t.device.is_cuda() && t.dtype == dtype && t.ndim == 2 && t.dim(0) == rows &&
         t.dim(1) == cols && t.stride(1) == 1 && t.stride(0) == cols &&
         reinterpret_cast<uintptr_t>(t.data) % 16 == 0;
}
// An MLX affine group-64 matrix [rows, cols] of `bits` (4 or 8) the fused step streams: contiguous codes,
// bf16 scales / biases.
bool quant_matrix(const QuantWeight& w, int bits, int64_t rows, int64_t cols) {
  return w.bits == bits && w.group_size == 64 && cols % 512 == 0 &&
         device_matrix(w.packed, DType::kU32, rows, cols * bits / 32) &&
         device_matrix(w.scales, DType::kBF16, rows, cols / 64) &&
         device_matrix(w.biases, DType::kBF16, rows, cols / 64);
}
bool cuda_row(const Tensor& t, DType dtype, int64_t n) {
  return !t.empty() && t.device.is_cuda() && t.dtype == dtype && t.numel() == n && t.rows_contiguous() &&
         reinterpret_cast<uintptr_t>(t.data) % 16 == 0;
}
#endif
}  // namespace

int64_t fused_decode_scratch_floats(int64_t n_heads, int64_t head_dim) {
#ifdef BUNSEN_HAVE_CUDA
  return cuda::mega_scratch_floats(n_heads, head_dim);
#else
  (void)n_heads;
  (void)head_dim;
  return 0;
#endif
}

bool fused_decode_enabled() {
  const int mode = g_mode.load();
  if (mode >= 0) return mode == 1;
  static const bool on = env_flag("BUNSEN_DECODE_FUSED", false);
  return on;
}

void set_fused_decode_for_testing(int mode) {
  g_mode.store(mode);
}

int64_t fused_decode_launches() {
  return g_launches.load();
}

bool decode_layers_fused(Context& ctx, const FusedDecodeStep& s) {
#ifdef BUNSEN_HAVE_CUDA
  if (s.layers.empty() || static_cast<int>(s.layers.size()) > cuda::kMegaMaxLayers) return false;
  if (!s.x.device.is_cuda() || s.n_kv_heads <= 0 || s.head_dim <= 0) return false;
  const int64_t d = s.x.numel(), hd = s.head_dim, qd = s.n_heads * hd, kvd = s.n_kv_heads * hd;
  const bool quant = s.layers[0].gate.empty();
  const int bits = quant ? s.layers[0].quant[4].bits : 16;
  if (bits != 4 && bits != 8 && bits != 16) return false;
  const int64_t d_ff =
      quant ? (s.layers[0].quant[4].empty() ? 0 : s.layers[0].quant[4].rows()) : s.layers[0].gate.dim(0);
  if (!cuda_row(s.x, DType::kF32, d) || !cuda_row(s.q, DType::kBF16, qd) ||
      !cuda_row(s.k, DType::kBF16, kvd) || !cuda_row(s.v, DType::kBF16, kvd) ||
      !cuda_row(s.attn, DType::kBF16, qd) || !cuda_row(s.act, DType::kBF16, d_ff))
    return false;
  if (s.scratch.dtype != DType::kF32 || !s.scratch.device.is_cuda() ||
      s.scratch.numel() < cuda::mega_scratch_floats(s.n_heads, hd))
    return false;
  for (const Tensor* t : {&s.positions, &s.slot_mapping, &s.block_tables})
    if (t->empty() || !t->device.is_cuda()) return false;
  if (s.positions.numel() != 1 || s.positions.dtype != DType::kI32 || s.slot_mapping.numel() != 1 ||
      s.slot_mapping.dtype != DType::kI64 || s.block_tables.ndim != 2 || s.block_tables.dim(0) < 1 ||
      s.block_tables.dtype != DType::kI32 || !s.block_tables.rows_contiguous())
    return false;
  if (s.rope.rotary_dim > cuda::kMegaMaxRotary || s.rope.rotary_dim > hd || s.rope.rotary_dim % 2 != 0)
    return false;
  cuda::MegaArgs a;
  a.n_layers = static_cast<int>(s.layers.size());
  a.d = static_cast<int>(d);
  a.n_heads = s.n_heads;
  a.n_kv = s.n_kv_heads;
  a.head_dim = s.head_dim;
  a.d_ff = static_cast<int>(d_ff);
  const DType norm_dtype = s.layers[0].in_norm.dtype;
  if (norm_dtype != DType::kF32 && norm_dtype != DType::kBF16) return false;
  a.norm_bf16 = norm_dtype == DType::kBF16 ? 1 : 0;
  a.bits = bits;
  int64_t block_size = 0;
  for (size_t i = 0; i < s.layers.size(); ++i) {
    const FusedDecodeLayer& l = s.layers[i];
    const int64_t shape[7][2] = {{qd, d}, {kvd, d}, {kvd, d}, {d, qd}, {d_ff, d}, {d_ff, d}, {d, d_ff}};
    const Tensor* ws[7] = {&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down};
    cuda::MegaLayer& m = a.layers[i];
    for (int j = 0; j < 7; ++j) {
      if (quant) {
        if (!ws[j]->empty() || !quant_matrix(l.quant[j], bits, shape[j][0], shape[j][1])) return false;
        m.w[j] = l.quant[j].packed.data;
        m.sc[j] = l.quant[j].scales.data;
        m.bi[j] = l.quant[j].biases.data;
      } else {
        if (!device_matrix(*ws[j], DType::kBF16, shape[j][0], shape[j][1])) return false;
        m.w[j] = ws[j]->data;
        m.sc[j] = m.bi[j] = nullptr;
      }
    }
    if (!cuda_row(l.in_norm, norm_dtype, d) || !cuda_row(l.post_norm, norm_dtype, d)) return false;
    const PagedKv& kv = l.kv;
    if (kv.quantized() || kv.k.dtype != DType::kBF16 || kv.v.dtype != DType::kBF16 || kv.k.ndim != 4 ||
        !kv.k.is_contiguous() || !kv.v.is_contiguous() || kv.k.dim(2) != s.n_kv_heads || kv.k.dim(3) != hd ||
        kv.v.numel() != kv.k.numel() || (block_size != 0 && kv.k.dim(1) != block_size))
      return false;
    block_size = kv.k.dim(1);
    m.in_norm = l.in_norm.data;
    m.post_norm = l.post_norm.data;
    m.k_cache = kv.k.data;
    m.v_cache = kv.v.data;
    m.rope = l.rope && s.rope.rotary_dim > 0 ? 1 : 0;
  }
  a.eps = s.eps;
  a.residual = s.residual;
  a.scale = s.scale;
  a.rope_scaling = s.rope.attention_scaling;
  a.rotary_dim = s.rope.rotary_dim;
  if (s.rope.rotary_dim > 0 && s.rope.inv_freq == nullptr) return false;
  if (s.rope.rotary_dim > 0)
    std::memcpy(a.inv_freq, s.rope.inv_freq, sizeof(float) * (s.rope.rotary_dim / 2));
  a.x = s.x.ptr<float>();
  a.positions = s.positions.ptr<int32_t>();
  a.slot_mapping = s.slot_mapping.ptr<int64_t>();
  a.block_table = s.block_tables.ptr<int32_t>();
  a.block_size = static_cast<int>(block_size);
  a.q = s.q.data;
  a.k = s.k.data;
  a.v = s.v.data;
  a.attn = s.attn.data;
  a.act = s.act.data;
  a.partials = s.scratch.ptr<float>();
  static const int debug =
      env_int("BUNSEN_DECODE_FUSED_DEBUG", 0);  // timing experiments (docs/PERFORMANCE.md)
  a.debug = debug;
  static const int copy_mode = env_int("BUNSEN_DECODE_FUSED_COPY", 0);  // an experiment (docs/PERFORMANCE.md)
  a.copy_mode = copy_mode;
  // The most segments per stage row (decode_mega.h): by default 8 for bf16 weights and 1 (unsegmented) for
  // quantized ones, the faster of each on the H100 (docs/PERFORMANCE.md); BUNSEN_DECODE_FUSED_SEGS sets both.
  static const int segs_env = env_int("BUNSEN_DECODE_FUSED_SEGS", 0);
  const int segs = segs_env > 0 ? segs_env : a.bits == 16 ? 8 : 1;
  a.segs = segs >= 8 ? 8 : segs >= 4 ? 4 : segs >= 2 ? 2 : 1;
  static const int vec_batch = env_int("BUNSEN_DECODE_FUSED_VEC_BATCH", 8);  // an A/B switch (decode_mega.h)
  a.vec_batch = vec_batch;
  if (!cuda::mega_supported(a)) return false;
  static const std::string timing_path(env_str("BUNSEN_DECODE_FUSED_TIMING"));  // a diagnostic record
  if (!timing_path.empty()) a.timing = cuda::mega_timing_buffer(a, timing_path);
  cuda::decode_mega(ctx.cuda_stream, a);
  g_launches.fetch_add(1);
  return true;
#else
  (void)ctx;
  (void)s;
  return false;
#endif
}

}  // namespace bunsen::kernels
