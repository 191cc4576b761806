// Launch plans of the tiled 4-bit tensor-core quantized GEMV (gemv_qmma.cu, gemv_qmma_ring.cu), for A/B
// runs in one binary: which kernel (the 8-warp 2-stage tile kernel, or the ring kernel with W warps per block
// and an S-stage cp.async ring whose stages are all issued before the programmatic-dependent-launch wait)
// and which k-split model. Host-only (tests include it). Not the plan itself (gemv_qmma.cu owns that).
// Invariants: a plan depends on (rows, k, bits, group, GPU) only, never on m, so every plan is batch
// invariant; the plan in force is read by each launch, so a test may switch it between launches.
#pragma once

namespace bunsen::kernels::cuda {

// 0: gemv_qmma_tile_kernel, 8 warps, 2 stages, choose_split (the default of every launch).
// 1: ring kernel, 8 warps x 4 stages, the ring cost model.   2: ring, 4 warps x 4 stages, ring model.
// 3: ring, 4 warps x 3 stages, ring model.                   4: ring, 8 warps x 2 stages, ring model.
constexpr int kQMmaPlans = 5;

// The plan forced on every launch: the test hook's, else BUNSEN_QMMA_PLAN (read once); -1 when neither
// sets one (unset or out of range): then each launch takes the default, plan 0 (gemv_qmma.cu plan_of).
int qmma_plan();
// Test/bench hook (process-wide): 0 .. kQMmaPlans - 1, or -1 to return to BUNSEN_QMMA_PLAN.
void set_qmma_plan_for_testing(int plan);
// "w8s2-tile", "w8s4-ring", ...: for bench output.
const char* qmma_plan_name(int plan);

// 8 bits: 0: gemv_qmma_kernel, the register kernel; group 64 (bf16 x, k % 512 == 0):
// 1: ring 8 warps x 2 stages; 2: 4 x 2; 3: 4 x 3; 4: 2 x 4 (an 8-bit stage is 8,960 B: 512 B rows), each
// with the ring cost model; any group (bf16 x, bf16/f16 scales): 5: the f16 kernel (gemv_qmma_h8.cu: one
// PRMT per code pair, x as scaled f16 in shared memory), 32 bytes of each row per stage, 2 blocks/SM (the
// default since 2026-12-05: H100, batch-1 decode, 8B 8-bit 239.8 -> 256.6 tok/s, 1B 1,036.8 -> 1,149.5;
// launches it cannot take, f32 x or f32 scales, fall back to plan 0); 6: (group 64 with 4-byte aligned
// scale/bias rows; else as 5) the same math with each lane's weights copied by cp.async into a 4-stage ring
// in shared memory, 2 blocks/SM. BUNSEN_QMMA_PLAN8 (read once) / the hook, as for 4 bits.
constexpr int kQMmaPlans8 = 7;
constexpr bool is_ring_plan8(int plan) {
  return plan >= 1 && plan <= 4;
}
constexpr bool is_h8_plan8(int plan) {
  return plan >= 5 && plan < kQMmaPlans8;
}
// The plans of a bit width: kQMmaPlans at 4 bits, kQMmaPlans8 at 8.
constexpr int qmma_plan_count(int bits) {
  return bits == 8 ? kQMmaPlans8 : kQMmaPlans;
}
int qmma_plan8();
void set_qmma_plan8_for_testing(int plan);
const char* qmma_plan8_name(int plan);

// The lean stage math of the 4-bit tile kernel, 4-bit ring plan 4 and the 8-bit ring plans
// (gemv_qmma_tiles.cuh compute_tile): on unless the test hook says 0 or BUNSEN_QMMA_LEAN=0 (read once).
// Either way a launch's outputs are the same bits.
bool qmma_lean();
// Test/bench hook (process-wide): 1 on, 0 off, -1 back to BUNSEN_QMMA_LEAN.
void set_qmma_lean_for_testing(int mode);

// The x staging of the 4-bit tile kernel (the default 4-bit launch): 1 (the default until an H200 A/B says
// otherwise) loads one 16-byte chunk of x per thread at a time, k / 2,048 dependent round trips after the
// PDL wait for a row (7 at k = 14,336); 8 (BUNSEN_QMMA_XBATCH=8, read once) issues up to 8 per thread first,
// one round trip up to k = 16,384. The same bits either way (the split comes from the 1-instance).
int qmma_xbatch();
// Test/bench hook (process-wide): 1 or 8, or -1 back to BUNSEN_QMMA_XBATCH.
void set_qmma_xbatch_for_testing(int batch);

}  // namespace bunsen::kernels::cuda
