// The reference routing the CUDA golden tests' RoutingFilter (tests/cuda/golden_cuda_util.h) starts from, on
// the CPU: for every MoE fixture, the CPU f32 routing trace over the sequence the CUDA parity tests compare
// (prompt + teacher-forced greedy tokens), in bf16 and in the 4-bit conversion the CUDA quant test uses,
// has one margin per position and MoE layer; the fraction of compared rows whose smallest margin falls
// below several thresholds is printed (how many rows a margin-only exclusion would drop, and how many are
// within reach of bf16 noise at all). Non-MoE fixtures give an empty filter. No GPU needed.
#include <gtest/gtest.h>

#include <filesystem>

#include "../cuda/golden_cuda_util.h"
#include "golden_file.h"
#include "model/convert.h"
#include "model/quant.h"

namespace bunsen::golden {
namespace {

namespace fs = std::filesystem;

// Rows as the CUDA parity tests count them: T prompt rows (positions 0..T-1), then G decode rows
// (positions T-1..T+G-2).
void report(const std::string& what, const RoutingFilter& f, int64_t T, int64_t G) {
  ASSERT_TRUE(f.moe());
  ASSERT_EQ(f.positions(), T + G - 1);
  for (const model::RoutingTrace::Layer& l : f.reference.layers()) {
    ASSERT_EQ(l.n_tokens(), T + G - 1);
    for (float m : l.margin) EXPECT_GE(m, 0.0f);
  }
  std::string line;
  for (double thr : {0.005, 0.01, 0.02, kAmbiguousRoutingMargin, 0.05, 0.1}) {
    int64_t below = 0;
    for (int64_t r = 0; r < T; ++r) below += f.reference.min_margin(r) < thr ? 1 : 0;
    for (int64_t i = 0; i < G; ++i) below += f.reference.min_margin(T - 1 + i) < thr ? 1 : 0;
    char buf[48];
    std::snprintf(buf, sizeof buf, " <%.3g:%.1f%%", thr, 100.0 * static_cast<double>(below) / (T + G));
    line += buf;
  }
  std::printf("[ routing  ] %-18s %zu MoE layers, %lld rows; rows with a margin below:%s\n", what.c_str(),
              f.reference.layers().size(), (long long)(T + G), line.c_str());
}

TEST(GoldenRouting, MoeFixturesHaveAReferenceRoutingForEveryComparedRow) {
  int64_t moe = 0;
  for (const std::string& name : fixture_names()) {
    SCOPED_TRACE(name);
    Fixture f = load_fixture(name);
    const std::string dir = build_checkpoint(f, DType::kBF16, "routing");
    const std::vector<int32_t> ids = to_i32(f.outputs->get("input_ids"));
    const std::vector<int32_t> greedy = to_i32(f.outputs->get("greedy"));
    const auto T = static_cast<int64_t>(ids.size()), G = static_cast<int64_t>(greedy.size());
    const std::vector<int32_t> seq = teacher_forced(ids, greedy);
    const RoutingFilter bf = routing_filter(dir, seq);
    if (!bf.moe()) {
      EXPECT_FALSE(is_moe(model::load_config(dir)));
      continue;
    }
    ++moe;
    report(name, bf, T, G);

    const std::string qdir = dir + "_q4";
    fs::remove_all(qdir);
    model::ConvertOptions co;
    co.src = dir;
    co.dst = qdir;
    co.quantize = true;
    co.spec = model::QuantSpec{4, 32};
    model::convert_checkpoint(co);
    report(name + " q4", routing_filter(qdir, seq), T, G);
    fs::remove_all(qdir);
  }
  EXPECT_GE(moe, 3) << "the MoE fixtures (qwen3_moe, qwen3_next, gemma4_moe) are missing";
}

}  // namespace
}  // namespace bunsen::golden
