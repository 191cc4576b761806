// The L2 eviction priority of the decode GEMVs' weight streams. A batch-1 decode step streams every weight
// once through the 50 MB L2; at the default priority those lines push out what the next launches want again:
// their instructions (fetched cold every layer: a launch pays its code size on the critical path, see
// docs/PERFORMANCE.md, twenty-seventh session), the KV cache, the activations and norm weights. With
// `evict_first` the weight lines replace one another first. The hint is a cache policy operand on the loads
// and copies (`.L2::cache_hint`); it changes no value. Host side: l2_weights_evict_first(bits, bytes),
// carried to the kernels by GemvMultiArgs / QMmaArgs (per launch: gemv_body.cuh's with_l2_policy, gemv_qmma's
// weight bytes). Default (measured, H100, tg128 after 1,024, docs/PERFORMANCE.md, thirtieth and thirty-first
// sessions): evict_first for float weights (1B +2.2 %, 8B +2.2 %) and 8-bit (8B +1.6 %); for 4-bit only on
// launches whose weights fit the L2 (evict_first everywhere: 8B -3.1 %, 1B +1.1 %; kernel traces of both
// policies put the 8B's loss in its two launches larger than the L2, gate/up 66 MB +130 us and the 295 MB
// lm_head +14 us per token, while down (33 MB) and o (9 MB) got faster, as did every 1B launch up to its 19
// MB gate/up; its 148 MB lm_head lost 3.6 us). H200 end to end: 8B 4-bit +2.9 %, 1B 4-bit +2.2 % over
// evict_normal (thirty-second session). BUNSEN_L2_EVICT_FIRST=0|1 forces one policy everywhere, 2 the size
// rule everywhere. Users: gemv.cu's vec kernels, the 4-bit tile kernel's copies and the register kernels'
// stage loads (gemv_qmma_tiles.cuh load_stage). Invariants: hints only (sm_80+ instructions; the same bits
// with either policy); weights only, never the KV cache or activations.
#pragma once
#include <cstdint>

#include "kernels/cuda/mma_sync.cuh"

namespace bunsen::kernels::cuda {

// Whether the weight streams of a launch over `bits`-bit weights (16: float weights) of `weight_bytes` bytes
// in all (0: not known) carry the evict_first policy: BUNSEN_L2_EVICT_FIRST (read once) or
// set_l2_evict_first_for_testing when set (0 never, 1 always, 2 when the weights fit the L2), else the
// defaults: always for float and 8-bit weights, for 4-bit ones when they fit the L2.
bool l2_weights_evict_first(int bits = 16, int64_t weight_bytes = 0);

// The policy operand of a weight stream: evict_first, or evict_normal (the default priority).
__device__ __forceinline__ uint64_t weight_l2_policy(bool evict_first) {
  uint64_t first, normal;
  asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(first));
  asm("createpolicy.fractional.L2::evict_normal.b64 %0, 1.0;" : "=l"(normal));
  return evict_first ? first : normal;
}

// 16 bytes of a weight stream into registers: non-allocating in L1, read-only path, with L2 policy pol.
__device__ __forceinline__ uint4 ldg_weights16(const void* p, uint64_t pol) {
  uint4 r;
  asm("ld.global.nc.L1::no_allocate.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
      : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
      : "l"(p), "l"(pol));
  return r;
}

// cp_async_16 (mma_sync.cuh) of weights, with L2 policy pol.
__device__ __forceinline__ void cp_async_weights16(void* dst, const void* src, uint64_t pol) {
  asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2;\n" ::"r"(smem_u32(dst)),
               "l"(src), "l"(pol)
               : "memory");
}

}  // namespace bunsen::kernels::cuda
