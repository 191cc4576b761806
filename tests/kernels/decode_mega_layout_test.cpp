// The fused decode step's stage plans (src/kernels/cuda/decode_mega_layout.h), checked without a GPU: for
// every input width a model may have, a plan covers the width exactly, fits a ring stage and keeps its copies
// 16-byte aligned, and a segmented stage's rows spread each shared-memory wavefront of the consumer's loads
// over distinct banks at every step (the addresses as decode_mega_stages.cuh forms them).
#include "kernels/cuda/decode_mega_layout.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

namespace bunsen::kernels::cuda::mega {
namespace {

struct Plan {
  int S = 0, sl = 0, P = 0;
};

Plan plan_of(int K, int bits, int segs) {
  Plan p;
  seg_plan(K, bits, segs, p.S, p.sl, p.P);
  return p;
}

int cap_of(int bits) {
  return bits == 4 ? kQ4Codes : bits == 8 ? kQ8Codes : kBfCols;
}

// Input widths the fused step takes: bf16 K % 16 == 0, quantized K % 512 == 0 (decode_mega.h).
std::vector<int> widths(int bits, int step_scale = 1) {
  std::vector<int> k;
  const int step = (bits == 16 ? 16 : 512) * step_scale;
  for (int K = step; K <= 65536; K += step) k.push_back(K);
  return k;
}

TEST(DecodeMegaLayout, EveryPlanCoversItsWidthFitsAStageAndCopiesAligned) {
  int segmented = 0;
  for (int bits : {16, 4, 8}) {
    for (int segs : {1, 2, 4, 8}) {
      for (int K : widths(bits)) {
        const Plan p = plan_of(K, bits, segs);
        const std::string where = "bits " + std::to_string(bits) + " segs " + std::to_string(segs) + " K " +
                                  std::to_string(K) + ": S " + std::to_string(p.S) + " sl " +
                                  std::to_string(p.sl) + " P " + std::to_string(p.P);
        const int cap = cap_of(bits), unseg = std::min(K, cap);
        ASSERT_TRUE(p.S == 1 || p.S == 2 || p.S == 4 || p.S == 8) << where;
        ASSERT_LE(p.S, segs) << where;
        if (p.S == 1) {
          EXPECT_EQ(p.sl, unseg) << where;
          EXPECT_EQ(p.P, (K + unseg - 1) / unseg) << where;
        } else {
          ++segmented;
          EXPECT_EQ(p.P * p.S * p.sl, K) << where;  // no short last part
          EXPECT_LE(p.sl, cap) << where;
          EXPECT_EQ(p.sl % (bits == 4 ? 256 : bits == 8 ? 128 : 64), 0) << where;
          EXPECT_GT(p.S * p.sl, unseg) << where;  // longer row copies than the unsegmented stage's
          EXPECT_EQ(p.S * p.sl * bits / 8 % 16, 0) << where;
          if (bits < 16) {
            EXPECT_EQ(p.S * p.sl / 32 % 16, 0) << where;  // the scale / bias rows' bytes
          }
        }
        EXPECT_LE(seg_stage_bytes(bits, p.S, p.sl), kStageBytes) << where;
        EXPECT_EQ(seg_pitch(bits, p.S, p.sl) % 16, 0) << where;
        if (bits < 16) {
          EXPECT_EQ(seg_sb_pitch(bits, p.S, p.sl) % 16, 0) << where;
        }
      }
    }
  }
  EXPECT_GT(segmented, 400);  // the loop did reach segmented plans (459 of these widths x forms today)
}

// The real shapes' plans as docs/PERFORMANCE.md states them (Llama 3.1 8B: d 4,096, d_ff 14,336; Llama 3.2
// 1B: d 2,048, d_ff 8,192).
TEST(DecodeMegaLayout, RealShapesTakeWholeOrLongRows) {
  auto expect = [](int K, int bits, int S, int sl, int P) {
    const Plan p = plan_of(K, bits, 8);
    EXPECT_EQ(p.S, S) << "K " << K << " bits " << bits;
    EXPECT_EQ(p.sl, sl) << "K " << K << " bits " << bits;
    EXPECT_EQ(p.P, P) << "K " << K << " bits " << bits;
  };
  expect(4096, 16, 8, 512, 1);   // 8B q/k/v, o, gate/up: whole 8 KB rows
  expect(14336, 16, 8, 448, 4);  // 8B down: four 7 KB parts
  expect(2048, 16, 4, 512, 1);   // 1B q/k/v, o, gate/up: whole 4 KB rows
  expect(8192, 16, 8, 512, 2);   // 1B down
  expect(4096, 4, 2, 2048, 1);   // 8B 4-bit: whole 2 KB rows (4 and 8 segments copy no more)
  expect(14336, 4, 8, 1792, 1);  // whole 7 KB rows
  expect(4096, 8, 4, 1024, 1);   // 8B 8-bit: whole 4 KB rows
  expect(14336, 8, 8, 896, 2);
  expect(5632, 4, 1, 2048, 3);  // no exact segmented plan: the unsegmented stages, a short last part
}

// Byte offsets modulo 128 of `n` accesses of `bytes` each must not overlap (one wavefront: different banks).
void expect_disjoint(const std::vector<int>& offs, int bytes, const std::string& where) {
  std::vector<int> used(128, 0);
  for (int o : offs)
    for (int b = 0; b < bytes; ++b) ++used[(o + b) % 128];
  for (int b = 0; b < 128; ++b) ASSERT_LE(used[b], 1) << where << ": byte " << b << " of the bank window";
}

TEST(DecodeMegaLayout, SegmentedWavefrontsHitDistinctBanks) {
  int checked = 0;
  for (int bits : {16, 4, 8}) {
    for (int segs : {2, 4, 8}) {
      for (int K : widths(bits, bits == 16 ? 8 : 1)) {
        const Plan p = plan_of(K, bits, segs);
        if (p.S == 1) continue;
        const int S = p.S, kH = S / 2, pitch = seg_pitch(bits, S, p.sl);
        const std::string where = "bits " + std::to_string(bits) + " K " + std::to_string(K) + " S " +
                                  std::to_string(S) + " sl " + std::to_string(p.sl);
        ++checked;
        if (bits == 16) {
          // ldmatrix: 8 lanes give one 8x8 matrix's rows (16 bytes each); lane ga is MMA row ga + 8 h,
          // segment 2 (ga % kH) + h of row ga / kH, at 16-column step k (rotated, wrapping).
          for (int k = 0; k < p.sl; k += 16)
            for (int h = 0; h < 2; ++h) {
              std::vector<int> offs;
              for (int ga = 0; ga < 8; ++ga) {
                const int tau = ga % kH, kk = (k + seg_rot(16, S, tau)) % p.sl;
                offs.push_back((ga / kH) * pitch + (2 * tau + h) * p.sl * 2 + kk * 2);
              }
              expect_disjoint(offs, 16, where + " k " + std::to_string(k));
            }
        } else {
          // 4-bit: 8-byte loads, a half warp (lane groups 0-3 or 4-7, lanes t 0-3) per wavefront; 8-bit:
          // 16-byte loads, a quarter warp (lane groups 2q, 2q + 1). Group u of the segment, rotated.
          const int gb = 64 * bits / 8, segb = p.sl * bits / 8, ng = p.sl / 64, per = bits == 4 ? 4 : 2;
          for (int u = 0; u < ng; ++u)
            for (int h = 0; h < 2; ++h)
              for (int g0 = 0; g0 < 8; g0 += per) {
                std::vector<int> offs;
                for (int gq = g0; gq < g0 + per; ++gq)
                  for (int t = 0; t < 4; ++t) {
                    const int tau = gq % kH, ua = (u + seg_rot(bits, S, tau)) % ng;
                    offs.push_back((gq / kH) * pitch + (2 * tau + h) * segb + ua * gb + t * (gb / 4));
                  }
                expect_disjoint(offs, gb / 4, where + " group " + std::to_string(u));
              }
        }
      }
    }
  }
  EXPECT_GT(checked, 300);
}

}  // namespace
}  // namespace bunsen::kernels::cuda::mega
