// Host-callable entry points of the CUDA backend: device and pinned memory, copies and staged uploads,
// the bandwidth probe, the per-stream scratch arena, and one function per op of ops.h on device tensors
// described by plain structs.
// Not a validator and not CUDA-aware: plain C++17 (no CUDA headers, no Tensor) so dispatch.cpp (C++20)
// and the .cu files (C++17) both include it; dispatch.cpp checks dtypes and shapes first. Invariants:
// every launch goes to the given stream (nullptr = the legacy default stream) on the current device;
// ops never allocate except the scratch arena, which grows only outside CUDA graph capture; CUDA
// failures throw Error("cuda", "<op>: <cuda error> ...shapes").
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>

#include "core/dtype.h"

namespace bunsen::kernels::cuda {

// ---- device memory ----

// One cudaMalloc'd allocation on the current device, freed (cudaFree) on destruction.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes);  // throws Error("cuda", ...) when cudaMalloc fails
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return data_; }
  size_t size() const { return size_; }

  // cudaMalloc calls made through DeviceBuffer by this process so far (tests: "no allocation in the decode
  // loop" without reading the device-wide free memory, which other processes on the GPU change).
  static uint64_t allocations();

 private:
  void* data_ = nullptr;
  size_t size_ = 0;
};

// Copies that return once the bytes have arrived (they synchronise `stream`).
void copy_to_device(void* dst, const void* src, size_t bytes, void* stream = nullptr);
void copy_to_host(void* dst, const void* src, size_t bytes, void* stream = nullptr);
void copy_device_to_device(void* dst, const void* src, size_t bytes, void* stream = nullptr);
void synchronize(void* stream = nullptr);
int current_device();
void set_device(int index);  // cudaSetDevice: the calling thread's current device

// ---- pinned host memory and asynchronous transfers (transfer.cu) ----

// Page-locked host memory (cudaHostAlloc), freed on destruction: the host side of copies that really run
// asynchronously. A host pointer: tensors over it are CPU tensors.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  explicit PinnedBuffer(size_t bytes);  // throws Error("cuda", ...) when cudaHostAlloc fails
  ~PinnedBuffer();
  PinnedBuffer(PinnedBuffer&& o) noexcept;
  PinnedBuffer& operator=(PinnedBuffer&& o) noexcept;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;

  void* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  void* data_ = nullptr;
  size_t size_ = 0;
};

// Enqueues a copy of `bytes` bytes on `stream` and returns without waiting; the direction follows from
// the pointers (unified addressing). Host memory must stay untouched until the stream has passed the copy.
void copy_async(void* dst, const void* src, size_t bytes, void* stream);
// `height` rows of `width` bytes, row r at src + r * spitch -> dst + r * dpitch (cudaMemcpy2DAsync).
void copy_2d_async(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                   void* stream);
// Enqueues a zero fill of device memory on `stream`.
void fill_zero_async(void* dst, size_t bytes, void* stream);

// Events (transfer.cu): completion markers of the work enqueued on a stream before event_record. Timing is
// off. event_query is true once everything before the last record has run (or when never recorded).
void* event_create();
void event_destroy(void* event);
void event_record(void* event, void* stream);
bool event_query(void* event);
void event_synchronize(void* event);
// Work enqueued on `stream` after this call waits for `event`'s last record (the host does not wait).
void stream_wait_event(void* stream, void* event);

// One range of a host-to-device upload; src may be pageable (an mmap).
struct HostToDevice {
  void* dst = nullptr;
  const void* src = nullptr;
  size_t bytes = 0;
};

// Copies every range through a double-buffered pinned staging buffer of 2 x `chunk_bytes` on `stream`
// (the host copy of one chunk overlaps the device copy of the previous one) and returns when all bytes
// have arrived. progress(bytes done so far) runs on the calling thread after each chunk.
void upload(const HostToDevice* ranges, size_t n_ranges, size_t chunk_bytes, void* stream,
            const std::function<void(size_t)>& progress);

// Device-memory read bandwidth in 1e9 bytes/s: the best of `repeats` passes of a streaming read kernel
// over a fresh `bytes`-byte buffer (timed with CUDA events on `stream`). The roofline denominator.
double read_bandwidth_gbps(size_t bytes, int repeats, void* stream);
// cudaProfilerStart / cudaProfilerStop: the range a profiler started with --profile-from-start off records.
void profiler_range(bool start);

// ---- streams and graphs (graph.cu) ----
void* stream_create();  // a non-blocking stream on the current device
void stream_destroy(void* stream);
// Thread-local stream capture: work enqueued on `stream` until graph_end_capture() is recorded, not run.
void graph_begin_capture(void* stream);
void* graph_end_capture(void* stream);    // the instantiated cudaGraphExec_t
void graph_abort_capture(void* stream);   // ends a capture that failed half-way, discarding it
void graph_launch(void* exec, void* stream);
void graph_destroy(void* exec);

// ---- per-stream scratch arena ----
// Some ops need temporary device memory (split-KV partials, converted GEMM operands, the cuBLASLt
// workspace). Each (device, stream) owns one arena, allocated on first use and grown (after a stream
// synchronize) only when a call needs more and the stream is not capturing a graph; a call that needs
// more during capture throws, so run one step (or reserve_scratch) before capturing.
void reserve_scratch(void* stream, size_t bytes);
size_t scratch_capacity(void* stream);
// Frees the stream's arena (stream_destroy calls it: a later stream that reuses the handle starts empty).
void release_scratch(void* stream);

// ---- views of device tensors (dispatch.cpp builds them from Tensor) ----

// A 2-D matrix of rows: row r starts at data + r * stride elements, columns are contiguous.
struct DevRows {
  void* data = nullptr;
  DType dtype = DType::kF32;
  int64_t n_rows = 0, n_cols = 0, stride = 0;
};

// [n_tokens, n_heads, head_dim] with a contiguous last dim.
struct DevHeads {
  void* data = nullptr;
  DType dtype = DType::kF32;
  int64_t n_tokens = 0, n_heads = 0, head_dim = 0;
  int64_t token_stride = 0, head_stride = 0;  // elements
};

// One layer's paged cache: k and v [n_blocks, block_size, n_kv_heads, head_dim] f32|bf16, or (bits > 0,
// --kv-quant) u8 codes [..., head_dim * bits / 8] with f32 params [..., 2 * head_dim / group_size] per row
// (scale, bias per group; fp8: e4m3 codes and (scale, 0)), as kernels/kv_quant.h writes them.
struct DevCache {
  void* k = nullptr;
  void* v = nullptr;
  DType dtype = DType::kBF16;  // kU8 when bits > 0
  int64_t n_blocks = 0, block_size = 0, n_kv_heads = 0, head_dim = 0;  // head_dim in elements, not bytes
  int64_t k_strides[3] = {}, v_strides[3] = {};  // elements (bytes for codes), dims 0..2 (dim 3 is contiguous)
  float* k_params = nullptr;  // bits > 0 only
  float* v_params = nullptr;
  int64_t kp_strides[3] = {}, vp_strides[3] = {};  // floats, dims 0..2
  int bits = 0, group_size = 0;
  bool fp8 = false;
};

// Attention metadata, all device pointers (see ops.h AttentionMeta).
struct DevAttentionMeta {
  const int32_t* positions = nullptr;     // [n_tokens] i32
  const int32_t* seq_index = nullptr;     // [n_tokens] i32
  const int32_t* block_tables = nullptr;  // [n_seqs, max_blocks] i32, row stride table_stride
  int64_t n_seqs = 0, max_blocks = 0, table_stride = 0;
};

struct DevAttention {
  DevHeads out, q;  // [n_tokens, n_heads, head_dim] f32|bf16
  DevCache cache;
  DevAttentionMeta meta;
  float scale = 1.0f;
  int sliding_window = 0;
  float softcap = 0.0f;
  const void* prefetch = nullptr;  // AttentionParams::prefetch_next (a hint)
  int64_t prefetch_bytes = 0;
};

constexpr int kMaxRotaryDim = 512;  // rope passes inv_freq by value in the launch parameters
constexpr int kMaxHeadDim = 512;    // attention keeps one row of head_dim per lane group in registers

// ---- ops (semantics as in ops.h; activations f32|bf16, weights f32|f16|bf16) ----
// Index tensors live on the device and are not checked on the host: an out-of-range id gives a NaN
// embedding row, a slot past the cache is skipped, and a query whose visible keys map to an invalid
// sequence or block id gets NaN output; none of them reads or writes outside a tensor.

void embedding(void* stream, DevRows out, DevRows table, const int32_t* ids, float scale);
void rms_norm(void* stream, DevRows out, DevRows x, const void* w, DType w_dtype, float eps, float w_offset);
void add_scaled(void* stream, DevRows x, DevRows y, float scale);
// x = x_in + y * y_scale, then out = rms_norm(x) * (w + w_offset); one block per row, the row kept in
// registers. x_in: x's dtype and row stride, x itself (in place) or a buffer not overlapping x.
void add_rms_norm(void* stream, DevRows out, DevRows x, DevRows y, const void* w, DType w_dtype, float eps,
                  float y_scale, float w_offset, const void* x_in);
void scale(void* stream, DevRows x, float s);
// out = x · wᵀ (+ bias): m <= kGemvMaxM through the GEMV kernel, larger m through cuBLASLt (x is
// rounded to w's dtype there when they differ; f16 operands saturate at ±65504).
void linear(void* stream, DevRows out, DevRows x, DevRows w, const void* bias, DType bias_dtype);
void rope(void* stream, DevHeads x, const int32_t* positions, const float* inv_freq_host, int rotary_dim,
          float attention_scaling);
void kv_write(void* stream, const DevCache& cache, DevHeads k, DevHeads v, const int64_t* slot_mapping);
void paged_attention(void* stream, const DevAttention& a);
void silu_mul(void* stream, DevRows out, DevRows gate, DevRows up);
void gelu_tanh_mul(void* stream, DevRows out, DevRows gate, DevRows up);  // activation.cu
void softcap(void* stream, DevRows x, float cap);                          // activation.cu
void softmax(void* stream, DevRows x);
// out [x.n_rows] i32, contiguous; host_out (optional): pinned host memory that the kernel writes the ids to
// as well (visible to the host once the stream has passed the launch).
void argmax(void* stream, int32_t* out, DevRows x, int32_t* host_out = nullptr);
// Blocks per argmax row: 0 = BUNSEN_ARGMAX_SPLIT (unset: from the shapes), -1 = from the shapes (long rows
// over several blocks), 1 = one, n = n (capped).
void set_argmax_parts_for_testing(int parts);
// ops.h's sample() (sample.cu): one block per row, rows[x.n_rows] (host memory, read at launch).
struct SampleRow {
  float temperature;
  int32_t top_k;
  float top_p;
  float min_p;
  double u;
};
void sample(void* stream, int32_t* out, DevRows x, const SampleRow* rows);
// The scratch sample() takes for rows of n logits (one launch's rows at most: launches reuse it).
size_t sample_scratch_bytes(int64_t rows, int64_t n);
// sample()'s histogram atomics: -1 = BUNSEN_SAMPLE_HIST (read once; "first" or peers by default), 0 = the
// first active lane's bin aggregated, the others per lane, 1 = every bin's lanes aggregated
// (__match_any_sync).
void set_sample_hist_for_testing(int mode);
// out[r, :] = x[rows[r], :]; rows [out.n_rows] i32 on the device (a row outside x gives a NaN row).
void gather_rows(void* stream, DevRows out, DevRows x, const int32_t* rows);

constexpr int64_t kGemvMaxM = 8;

// ---- fused decode ops (issue 4; semantics as in ops.h, rope_kv.cu and linear_fused.cu) ----
struct DevLinearPart {
  DevRows out;                 // [m, n] f32|bf16 (unused by linear_swiglu)
  DevRows w;                   // [n, k] f32|f16|bf16
  const void* bias = nullptr;  // [n] or null
  DType bias_dtype = DType::kF32;
};
// parts[i].out = x · parts[i].wᵀ (+ bias) for 1 <= n_parts <= kMaxLinearParts: one GEMV launch over all
// parts' rows per kGemvMaxM rows of x when m <= kGemvMaxM (or the GEMV path is forced) and the parts share
// weight, output and bias dtypes; otherwise linear() per part.
constexpr int kMaxLinearParts = 4;
void linear_multi(void* stream, DevRows x, const DevLinearPart* parts, int n_parts);
// out = act(x · gateᵀ + b_gate) * (x · upᵀ + b_up), act = silu or (gelu_tanh) tanh-GELU, with gate and up
// kept in f32: one GEMV launch per kGemvMaxM rows of x, whatever m. gate.w and up.w share a dtype, their
// biases too.
void linear_swiglu(void* stream, DevRows out, DevRows x, const DevLinearPart& gate, const DevLinearPart& up,
                   bool gelu_tanh = false);
// ops.h AddRmsNorm: the residual add and norm a fused projection computes in its GEMV prologue.
struct DevAddNorm {
  DevRows x_in, y, x_out;   // [m, d]: f32, f32|bf16, f32
  const void* w = nullptr;  // [d]
  DType w_dtype = DType::kF32;
  float eps = 0.0f, y_scale = 1.0f, w_offset = 0.0f;
  const void* y_w = nullptr;  // [d], or null; the post-norm form (ops.h AddRmsNorm)
  DType y_w_dtype = DType::kF32;
  float x_scale = 1.0f;
};
// linear_multi with x (bf16, not written) computed from pre in the GEMV's prologue, where linear_multi takes
// one GEMV launch with bf16 weights, 1 <= m <= 2, d <= 4096. False, nothing launched, otherwise.
bool linear_multi_norm(void* stream, DevRows x, const DevLinearPart* parts, int n_parts,
                       const DevAddNorm& pre);
// linear_swiglu with x (bf16, not written) computed from pre in the GEMV's prologue: bf16 weights, 1 <= m <=
// 2, d <= 4096 on the vectorised path. False, nothing launched, otherwise.
bool linear_swiglu_norm(void* stream, DevRows out, DevRows x, const DevLinearPart& gate,
                        const DevLinearPart& up, bool gelu_tanh, const DevAddNorm& pre);
// rope(q), rope(k) (none when rotary_dim is 0), then kv_write(cache, k, v, slots), in one launch; q and
// k are rotated in place. q and k share a dtype.
struct DevRopeKv {
  DevHeads q;  // [n_tokens, n_heads, head_dim] f32|bf16
  DevHeads k;  // [n_tokens, n_kv_heads, head_dim], q's dtype
  DevHeads v;  // [n_tokens, n_kv_heads, head_dim] f32|bf16
  DevCache cache;
  const int32_t* positions = nullptr;     // [n_tokens] i32, device
  const int64_t* slot_mapping = nullptr;  // [n_tokens] i64, device
  const float* inv_freq_host = nullptr;   // [rotary_dim / 2] f32, host
  int rotary_dim = 0;
  float attention_scaling = 1.0f;
};
void rope_kv_write(void* stream, const DevRopeKv& a);
// linear_multi of parts q, k, v (r.q/k/v: their outputs as heads) with rope_kv_write(r) folded into the
// GEMV's store: one launch instead of two, the same bits (q/k/v rounded as stored, rotated, rounded, written
// to the cache). Only bf16 weights, x, outputs and cache, 1 <= m <= kGemvMaxM, on the vectorised GEMV path;
// false, nothing launched, otherwise (the caller then runs linear_multi and rope_kv_write). With pre: x (not
// written) computed from pre in the GEMV's prologue as linear_swiglu_norm does; false also where that does
// not apply.
bool linear_qkv_rope_kv(void* stream, DevRows x, const DevLinearPart* parts, const DevRopeKv& r,
                        const DevAddNorm* pre = nullptr);
// Test/bench hook (process-wide): the GEMV's k split (1, 2, 4 or 8 warps per row group; 0 = from the shapes).
void set_gemv_split_for_testing(int split);
// Test/bench hook: the GEMV's small-launch path. -1 = BUNSEN_GEMV_SMALL (unset/1: launches one wave covers,
// 0: never), 0 = never, 1 = launches one wave covers, 2 = every aligned launch.
void set_gemv_small_for_testing(int mode);
// Test/bench hook: the L2 policy of the decode GEMVs' weight streams (l2_hint.cuh), for the launches after
// the call. -1 = BUNSEN_L2_EVICT_FIRST (unset: evict_first, for 4-bit weights only on launches whose weights
// fit the L2), 0 = evict_normal everywhere, 1 = evict_first everywhere, 2 = the size rule everywhere.
void set_l2_evict_first_for_testing(int mode);
// Test/bench hook: the strided norm GEMV (gemv_vec_norm_strided_kernel) for m = 1, split = 1 norm launches.
// -1 = BUNSEN_GEMV_STRIDE (unset: on), 0 = off, 1 = on.
void set_gemv_stride_for_testing(int mode);

// ---- test hooks (process-wide) ----
enum class LinearPath : uint8_t { kAuto, kGemv, kGemm };
void set_linear_path_for_testing(LinearPath path);
void set_attention_splits_for_testing(int n_splits);  // 0 = choose from the shapes
void set_attention_flash_decode_for_testing(bool on);  // large decode batches on tensor cores (default: BUNSEN_FLASH_DECODE)
void set_attention_prefill_kernel_for_testing(int kernel);  // 0 = default (BUNSEN_FLASH_PREFILL; fa2b), 1 = WMMA, 2 = mma.sync, 3 = fa2b
void set_prefill_splits_for_testing(int n_splits);  // fa2b split-KV: 0 = from the shapes, 1 = never, n = n slices
void set_attention_decode_batched_for_testing(int mode);  // packed decode kernel: 0 = BUNSEN_DECODE_BATCHED (unset: by shape), 1 = never, 2 = 4 warps, 3 = 8 warps
// The packed decode kernel's copies: 0 = BUNSEN_DECODE_BULK, 1 = cp.async, 2 = bulk copies (sm_90).
void set_attention_decode_bulk_for_testing(int mode);
// Measurement tool: the packed decode kernel's instance of head_dim 128, <= 8 heads per kv head, 4 warps with
// a ring of `depth` stages (0 or 3: the default; 5).
void set_attention_decode_packed_depth_for_testing(int depth);
// Batched decode steps over a quantized cache on the packed tensor-core kernel (attention_decode_qmma.cu):
// 0 = BUNSEN_DECODE_QUANT_MMA (unset: off until measured on the device), 1 = never (SIMT), 2 = where it
// applies.
void set_attention_decode_quant_mma_for_testing(int mode);

}  // namespace bunsen::kernels::cuda
