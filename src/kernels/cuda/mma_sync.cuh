// Warp-level tensor-core primitives shared by the mma.sync attention kernels (attention_decode_mma.cu,
// attention_decode_qmma.cu, attention_prefill_mma.cu): ldmatrix loads of shared memory and the m16n8k16 bf16
// (and f16) MMA with f32 accumulation, and the 16-byte (and 8-byte) cp.async copies into shared memory (plain
// and zero-filling; also used by gemv_qmma.cu's tiled kernel), and sm_90 bulk copies with their mbarriers.
// Not a kernel, and not the quantized GEMV's MMA (gemv_qmma.cu feeds separate registers). Invariants:
// device-only, inlined; p / dst point into shared memory.
#pragma once
#include <cstdint>

namespace bunsen::kernels::cuda {

__device__ __forceinline__ unsigned smem_u32(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared, asynchronous (L2 only); complete after cp_async_wait_group and visible to other
// threads after a barrier.
__device__ __forceinline__ void cp_async_16(void* dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smem_u32(dst)), "l"(src) : "memory");
}
// As cp_async_16, but only the first src_bytes (0 or 16) are read: src_bytes 0 writes zeros and reads nothing.
__device__ __forceinline__ void cp_async_16_zfill(void* dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(dst)), "l"(src), "r"(src_bytes)
               : "memory");
}
// 8 bytes global -> shared (cp.async.ca: via L1; src_bytes 0 writes zeros and reads nothing).
__device__ __forceinline__ void cp_async_8_zfill(void* dst, const void* src, int src_bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8, %2;\n" ::"r"(smem_u32(dst)), "l"(src), "r"(src_bytes)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit_group() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int kPending>
__device__ __forceinline__ void cp_async_wait_group() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

// Bulk copies (the TMA's non-tensor form: one instruction moves a contiguous run of 16-byte multiples from
// global to shared memory) that complete on an mbarrier, with the mbarrier primitives they need. sm_90+:
// older targets compile them to a trap, and the host launches the kernels that use them only where
// bulk_binary_ok() (attention_decode_mma.cu) says the loaded binary is sm_90+.
__device__ __forceinline__ void mbar_init(void* bar, unsigned count) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(count) : "memory");
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");  // visible to the async proxy
#else
  __trap();
#endif
}
// One arrival that also expects `bytes` more of bulk-copy completions in the current phase.
__device__ __forceinline__ void mbar_arrive_expect_tx(void* bar, unsigned bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(bytes)
               : "memory");
#else
  __trap();
#endif
}
// Returns once the phase of parity `parity` has completed (its arrivals and bytes are in).
__device__ __forceinline__ void mbar_wait(void* bar, unsigned parity) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  unsigned done = 0;
  do {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, "
        "p;\n}\n"
        : "=r"(done)
        : "r"(smem_u32(bar)), "r"(parity)
        : "memory");
  } while (done == 0);
#else
  __trap();
#endif
}
// bytes (a multiple of 16; src and dst 16-byte aligned) global -> shared, completing on bar's current phase.
__device__ __forceinline__ void bulk_copy_g2s(void* dst, const void* src, unsigned bytes, void* bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
          smem_u32(dst)),
      "l"(src), "r"(bytes), "r"(smem_u32(bar))
      : "memory");
#else
  __trap();
#endif
}
// Orders this thread's earlier generic-proxy shared-memory writes before later bulk copies (async proxy) into
// the same memory, once a barrier has passed between them.
__device__ __forceinline__ void fence_proxy_async_smem() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#else
  __trap();
#endif
}

// Four 8x8 b16 matrices; lane l addresses row l % 8 of matrix l / 8 and receives, of each matrix, row
// l / 4, elements 2 (l % 4) and 2 (l % 4) + 1 (.trans: rows 2 (l % 4), +1 of column l / 4).
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const void* p) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(s));
}

__device__ __forceinline__ void ldsm_x4_trans(uint32_t (&r)[4], const void* p) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(s));
}

// c += A·B (m16n8k16, bf16 in, f32 accumulate). With g = lane / 4, t = lane % 4: a[0] = A[g][2t, 2t+1],
// a[1] = A[g+8][2t..], a[2] = A[g][2t+8..], a[3] = A[g+8][2t+8..]; b0 = B[2t, 2t+1][g], b1 = B[2t+8..][g];
// c[0], c[1] = C[g][2t, 2t+1], c[2], c[3] = C[g+8][2t, 2t+1].
__device__ __forceinline__ void mma_m16n8k16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// The same with f16 A and B (attention_decode_qmma.cu: dequantized K / V tiles).
__device__ __forceinline__ void mma_m16n8k16_f16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                                 uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

}  // namespace bunsen::kernels::cuda
