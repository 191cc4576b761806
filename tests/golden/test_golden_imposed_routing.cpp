// ImposedRouting (tests/cuda/golden_cuda_util.h), the CPU reference routed as a device routed, checked on the
// CPU with a stand-in "device" trace for every MoE fixture (bf16 checkpoint, the teacher-forced sequence the
// CUDA parity tests score): the CPU's own trace imposes nothing and leaves the logits bit-identical; a trace
// that swaps one token's k-th expert for the next-best one at the last MoE layer is imposed when that gap is
// below kAmbiguousRoutingMargin (exactly that (layer, token), changing no earlier row) and reported as clear
// otherwise; a trace that swaps the top expert for the worst one is never imposed and is reported as clear.
// No GPU needed.
#include <gtest/gtest.h>

#include <cstring>

#include "../cuda/golden_cuda_util.h"
#include "golden_file.h"

namespace bunsen::golden {
namespace {

// `base` fed again through the hook names, with token `token` of decoder layer `layer` routed to `ids`.
model::RoutingTrace altered(const model::RoutingTrace& base, int layer, int64_t token,
                            const std::vector<int32_t>& ids) {
  model::RoutingTrace out;
  for (const model::RoutingTrace::Layer& l : base.layers()) {
    std::vector<float> logits = l.logits;
    std::vector<int32_t> chosen = l.ids;
    if (l.layer == layer) std::copy(ids.begin(), ids.end(), chosen.begin() + token * l.top_k);
    out.on("router_logits", l.layer, Tensor::view(logits.data(), DType::kF32, {l.n_tokens(), l.n_experts}));
    out.on("router_ids", l.layer, Tensor::view(chosen.data(), DType::kI32, {l.n_tokens(), l.top_k}));
  }
  return out;
}

bool same_rows(const std::vector<float>& a, const std::vector<float>& b, int64_t from, int64_t to, int64_t width) {
  return std::memcmp(a.data() + from * width, b.data() + from * width,
                     static_cast<size_t>((to - from) * width) * sizeof(float)) == 0;
}

TEST(GoldenImposedRouting, ImposesNearTiesOnlyAndChangesNothingElse) {
  int64_t moe = 0;
  for (const std::string& name : fixture_names()) {
    SCOPED_TRACE(name);
    Fixture f = load_fixture(name);
    const std::string dir = build_checkpoint(f, DType::kBF16, "imposed");
    if (!is_moe(model::load_config(dir))) continue;
    ++moe;
    const std::vector<int32_t> seq =
        teacher_forced(to_i32(f.outputs->get("input_ids")), to_i32(f.outputs->get("greedy")));
    const auto n = static_cast<int64_t>(seq.size());
    auto cm = load(dir, Device::cpu());
    const int64_t vocab = cm->config().vocab_size;
    engine::Runner runner(*cm, runner_options(n, 8));
    model::RoutingTrace own;
    const std::vector<float> want = engine::score(runner, seq, &own);
    ASSERT_FALSE(own.layers().empty());

    ImposedRouting same(&own);
    const std::vector<float> got = with_routing(&same, [&] { return engine::score(runner, seq); });
    EXPECT_EQ(same.forced, 0);
    EXPECT_EQ(same.clear, 0);
    EXPECT_EQ(same.missing, 0);
    EXPECT_EQ(same.asked, static_cast<int64_t>(own.layers().size()) * n);
    EXPECT_TRUE(same_rows(got, want, 0, n, vocab)) << "the CPU's own routing imposed";

    // The last MoE layer (no later MoE layer can route differently because of it): the token of smallest margin,
    // its k-th expert swapped for the best one it did not choose; and the token of largest margin, its top
    // expert swapped for the worst one.
    const model::RoutingTrace::Layer& last = own.layers().back();
    const int64_t k = last.top_k, e = last.n_experts;
    int64_t near = 0, far = 0;
    for (int64_t t = 0; t < n; ++t) {
      near = last.margin[static_cast<size_t>(t)] < last.margin[static_cast<size_t>(near)] ? t : near;
      far = last.margin[static_cast<size_t>(t)] > last.margin[static_cast<size_t>(far)] ? t : far;
    }
    auto swapped = [&](int64_t t, int64_t slot, bool best) {
      std::vector<int32_t> ids(last.ids.begin() + t * k, last.ids.begin() + (t + 1) * k);
      const float* l = last.logits.data() + t * e;
      int32_t pick = -1;
      for (int32_t x = 0; x < e; ++x)
        if (std::find(ids.begin(), ids.end(), x) == ids.end() && (pick < 0 || (best ? l[x] > l[pick] : l[x] < l[pick])))
          pick = x;
      ids[static_cast<size_t>(slot)] = pick;
      return ids;
    };
    const std::vector<int32_t> near_ids = swapped(near, k - 1, true);
    const model::RoutingTrace near_trace = altered(own, last.layer, near, near_ids);
    ImposedRouting imposed(&near_trace);
    const std::vector<float> moved = with_routing(&imposed, [&] { return engine::score(runner, seq); });
    const double gap = last.margin[static_cast<size_t>(near)];
    std::printf("[ imposed  ] %-18s layer %d token %lld gap %.4f: %lld imposed, %lld clear\n", name.c_str(),
                last.layer, (long long)near, gap, (long long)imposed.forced, (long long)imposed.clear);
    EXPECT_EQ(imposed.missing, 0);
    EXPECT_TRUE(same_rows(moved, want, 0, near, vocab)) << "rows before the imposed token";
    if (gap < kAmbiguousRoutingMargin) {
      EXPECT_EQ(imposed.forced_at, (std::vector<std::pair<int, int64_t>>{{last.layer, near}}));
      EXPECT_EQ(imposed.clear, 0);
      EXPECT_FALSE(same_rows(moved, want, near, near + 1, vocab)) << "the imposed token's row";
    } else {
      EXPECT_EQ(imposed.forced, 0);
      EXPECT_EQ(imposed.clear_at, (std::vector<std::pair<int, int64_t>>{{last.layer, near}}));
      EXPECT_TRUE(same_rows(moved, want, 0, n, vocab));
    }

    const model::RoutingTrace far_trace = altered(own, last.layer, far, swapped(far, 0, false));
    ImposedRouting refused(&far_trace);
    const std::vector<float> kept = with_routing(&refused, [&] { return engine::score(runner, seq); });
    EXPECT_EQ(refused.forced, 0);
    EXPECT_EQ(refused.clear_at, (std::vector<std::pair<int, int64_t>>{{last.layer, far}}));
    ASSERT_EQ(refused.clear_gap.size(), 1u);
    EXPECT_GE(refused.clear_gap[0], kAmbiguousRoutingMargin);
    EXPECT_TRUE(same_rows(kept, want, 0, n, vocab)) << "a clear difference is never imposed";
  }
  EXPECT_GE(moe, 3) << "the MoE fixtures (qwen3_moe, qwen3_next, gemma4_moe) are missing";
}

}  // namespace
}  // namespace bunsen::golden
