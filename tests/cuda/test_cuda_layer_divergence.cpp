// Where CUDA and the CPU part ways, layer by layer (a diagnostic that is also a test): every golden fixture
// runs its prompt, then one decode step, on the CPU (f32) and on cuda:0 (bf16 weights and activations)
// with an ActivationHook that records the residual stream after every decoder layer. Per layer the relative
// L2 error of CUDA vs CPU is printed; it must stay below a bound that bf16 activations meet with margin on
// every family (an error that jumps at one layer names the layer and the step kind where a kernel is wrong).
// In MoE families the CPU runs after CUDA, routed as CUDA routed wherever the two choose differently at a
// near-tie (golden_cuda_util.h: ImposedRouting), and every row is compared (no exclusions).
// Hooked steps run eagerly (no CUDA graph): test_cuda_model.cpp covers graph replay.
#include <cmath>
#include <cstring>

#include "../golden/golden_file.h"
#include "cuda_test_util.h"
#include "golden_cuda_util.h"
#include "kernels/device.h"

namespace bunsen::golden {
namespace {

using kernels::test::CudaTest;

constexpr double kMaxLayerRelErr = 0.03;  // bf16 residual stream over a few random-weight layers

// Records "layer" outputs (any device) as host f32 rows, one vector per layer; hands everything to
// `routing` too when set.
struct LayerCapture : model::ActivationHook {
  kernels::Context* ctx = nullptr;
  model::ActivationHook* routing = nullptr;
  std::vector<std::vector<float>> layers;
  void on(std::string_view name, int layer, const Tensor& t) override {
    if (routing) routing->on(name, layer, t);
    if (name != "layer" || layer < 0) return;
    if (static_cast<size_t>(layer) >= layers.size()) layers.resize(static_cast<size_t>(layer) + 1);
    auto& v = layers[static_cast<size_t>(layer)];
    v.clear();
    std::vector<float> row(static_cast<size_t>(t.dim(1)));
    for (int64_t r = 0; r < t.dim(0); ++r) {
      const size_t bytes = row.size() * sizeof(float);
      if (t.device.is_cuda()) {
        kernels::copy_async(*ctx, row.data(), t.row_ptr(r), bytes);
        kernels::synchronize(*ctx);
      } else {
        std::memcpy(row.data(), t.row_ptr(r), bytes);
      }
      v.insert(v.end(), row.begin(), row.end());
    }
  }
};

double rel_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    num += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    den += static_cast<double>(b[i]) * b[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

// Prompt ids[0, T-1) in one step, then ids[T-1] as a decode step; the captures of both steps.
void run(engine::Runner& runner, const std::vector<int32_t>& ids, LayerCapture& prompt, LayerCapture& decode) {
  kv::BlockTable table(runner.block_size());
  check(table.acquire_state_slot(runner.pool()), "test", "no free state slot");
  std::vector<kv::BlockId> blocks;
  check(runner.pool().allocate_n(table.blocks_needed(static_cast<int64_t>(ids.size())), blocks), "test",
        "out of KV blocks");
  for (auto b : blocks) table.append(b);
  const auto T = static_cast<int64_t>(ids.size());
  engine::SeqChunk pre{&table, ids.data(), T - 1, 0, engine::SeqChunk::Logits::kLast};
  runner.step({&pre, 1}, &prompt);
  engine::SeqChunk dec{&table, ids.data() + T - 1, 1, T - 1, engine::SeqChunk::Logits::kLast};
  runner.step({&dec, 1}, &decode);
  table.release_all(runner.pool());
}

TEST_F(CudaTest, EveryLayerStaysCloseToTheCpuInPromptAndDecode) {
  for (const std::string& name : fixture_names()) {
    SCOPED_TRACE(name);
    Fixture f = load_fixture(name);
    const std::string dir = build_checkpoint(f, DType::kBF16, "cuda_layers");
    const std::vector<int32_t> ids = to_i32(f.outputs->get("input_ids"));
    const auto T = static_cast<int64_t>(ids.size());
    auto cm = load(dir, Device::cpu());
    auto gm = load(dir, Device::cuda(0));
    engine::Runner cr(*cm, runner_options(T, 8));
    engine::Runner gr(*gm, runner_options(T, 8));
    LayerCapture cp, cd, gp, gd;
    gp.ctx = gd.ctx = &gr.context();
    // MoE: CUDA's routing of both steps (tokens 0..T-2, then T-1); the CPU runs after it, routed as CUDA
    // routed at near-ties.
    const bool moe = is_moe(cm->config());
    model::RoutingTrace device_routing(&gr.context());
    if (moe) gp.routing = gd.routing = &device_routing;
    run(gr, ids, gp, gd);
    ImposedRouting imposed(&device_routing);
    with_routing(moe ? &imposed : nullptr, [&] { run(cr, ids, cp, cd); });
    ASSERT_EQ(cp.layers.size(), gp.layers.size());
    ASSERT_EQ(cd.layers.size(), gd.layers.size());
    std::string line;
    for (size_t l = 0; l < cp.layers.size(); ++l) {
      const double ep = rel_l2(gp.layers[l], cp.layers[l]);
      const double ed = rel_l2(gd.layers[l], cd.layers[l]);
      char buf[64];
      std::snprintf(buf, sizeof buf, " %zu:%.1e/%.1e", l, ep, ed);
      line += buf;
      EXPECT_LE(ep, kMaxLayerRelErr) << "prompt, layer " << l;
      EXPECT_LE(ed, kMaxLayerRelErr) << "decode, layer " << l;
    }
    if (moe) imposed.finish(name);
    std::printf("[ layers   ] %-18s prompt/decode rel err:%s\n", name.c_str(), line.c_str());
  }
}

// Teacher-forced decode rows (the fixture's greedy tokens, one step each) on CUDA with and without CUDA
// graphs against the CPU: every row's cosine must be >= kMinCosine on both (MoE: the CPU reference is routed as
// the eager CUDA pass routed at near-ties, ImposedRouting; graph replay is bit-identical to eager decode,
// test_cuda_model's GraphReplayEqualsEagerDecode), and the first row where either falls below is printed
// (separates graph replay, context length and kernel bugs).
TEST_F(CudaTest, DecodeRowsMatchTheCpuWithAndWithoutGraphs) {
  for (const std::string& name : fixture_names()) {
    SCOPED_TRACE(name);
    Fixture f = load_fixture(name);
    const std::string dir = build_checkpoint(f, DType::kBF16, "cuda_rows");
    const std::vector<int32_t> ids = to_i32(f.outputs->get("input_ids"));
    const std::vector<int32_t> greedy = to_i32(f.outputs->get("greedy"));
    const auto T = static_cast<int64_t>(ids.size()), G = static_cast<int64_t>(greedy.size());
    auto cm = load(dir, Device::cpu());
    auto gm = load(dir, Device::cuda(0));
    const int64_t vocab = cm->config().vocab_size;
    const bool moe = is_moe(cm->config());
    std::vector<float> got[2];  // [eager, graphs]
    model::RoutingTrace device_routing;  // the eager pass's (tokens 0..T+G-2)
    for (bool graphs : {false, true}) {
      engine::RunnerOptions ro = runner_options(T, G + 8);
      ro.cuda_graphs = graphs;
      engine::Runner gr(*gm, ro);
      model::RoutingTrace trace(&gr.context());
      got[graphs] = decode_logits(gr, ids, greedy, moe && !graphs ? &trace : nullptr);
      if (!graphs) device_routing = trace;
    }
    engine::Runner cr(*cm, runner_options(T, G + 8));
    ImposedRouting imposed(&device_routing);
    const std::vector<float> want =
        with_routing(moe ? &imposed : nullptr, [&] { return decode_logits(cr, ids, greedy); });
    std::string line;
    for (bool graphs : {false, true}) {
      ASSERT_EQ(got[graphs].size(), want.size());
      int64_t first_bad = -1;
      double worst = 1.0;
      for (int64_t r = 0; r < G; ++r) {
        const double c = cosine(got[graphs].data() + r * vocab, want.data() + r * vocab, static_cast<size_t>(vocab));
        worst = std::min(worst, c);
        if (c < kMinCosine && first_bad < 0) first_bad = r;
      }
      char buf[96];
      std::snprintf(buf, sizeof buf, " %s: min cosine %.6f, first row below %lld", graphs ? "graphs" : "eager",
                    worst, (long long)first_bad);
      line += buf;
      EXPECT_EQ(first_bad, -1) << (graphs ? "with graphs" : "eager");
    }
    if (moe) imposed.finish(name);
    std::printf("[ rows     ] %-18s T=%lld%s\n", name.c_str(), (long long)T, line.c_str());
  }
}

}  // namespace
}  // namespace bunsen::golden
