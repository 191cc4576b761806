// Diagnostic (disabled by default; run with --gtest_also_run_disabled_tests and BUNSEN_DIAG_FIXTURE=name,
// BUNSEN_DIAG_ROW=r, BUNSEN_DIAG_Q4=1 for the checkpoint converted to 4-bit): where one prompt row of a golden fixture parts from the CPU. The prompt is scored on the
// CPU (f32) in one step and on cuda:0 (bf16) in several ways: one step with each prefill-attention kernel, steps
// of 16 tokens, and one token per step (the decode path for every row). Per way it prints, per layer, the
// relative L2 error of the residual stream over all rows and at the row, the row with the largest error, and at
// MoE layers the router logits of the row on both devices; with one token per step, the
// logits' worst cosine row. Asserts only that every way ran; it exists to name
// the layer, the row and the path where an error enters.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>

#include "../golden/golden_file.h"
#include "cuda_test_util.h"
#include "golden_cuda_util.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/device.h"
#include "model/convert.h"

namespace bunsen::golden {
namespace {

using kernels::test::CudaTest;
namespace fs = std::filesystem;

// Appends the rows of every hooked (name, layer) tensor as host f32, step after step.
struct RowCapture : model::ActivationHook {
  kernels::Context* ctx = nullptr;
  std::map<std::pair<std::string, int>, std::vector<float>> rows;
  std::map<std::pair<std::string, int>, int64_t> width;
  void on(std::string_view name, int layer, const Tensor& t) override {
    if ((name != "layer" && name != "router_logits" && name != "logits") || t.dtype != DType::kF32 || t.ndim != 2)
      return;
    const auto key = std::make_pair(std::string(name), layer);
    std::vector<float> host(static_cast<size_t>(t.dim(1)));
    for (int64_t r = 0; r < t.dim(0); ++r) {
      if (t.device.is_cuda()) {
        kernels::copy_async(*ctx, host.data(), t.row_ptr(r), host.size() * sizeof(float));
        kernels::synchronize(*ctx);
      } else {
        std::memcpy(host.data(), t.row_ptr(r), host.size() * sizeof(float));
      }
      auto& v = rows[key];
      v.insert(v.end(), host.begin(), host.end());
    }
    width[key] = t.dim(1);
  }
};

double rel(const float* a, const float* b, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    num += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    den += static_cast<double>(b[i]) * b[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

// Scores ids[0, T) in steps of `step` tokens (every step's hooks appended in row order).
void score(engine::Runner& runner, const std::vector<int32_t>& ids, int64_t step, RowCapture& cap) {
  kv::BlockTable table(runner.block_size());
  check(table.acquire_state_slot(runner.pool()), "diag", "no free state slot");
  std::vector<kv::BlockId> blocks;
  const auto T = static_cast<int64_t>(ids.size());
  check(runner.pool().allocate_n(table.blocks_needed(T), blocks), "diag", "out of KV blocks");
  for (auto b : blocks) table.append(b);
  for (int64_t s = 0; s < T; s += step) {
    engine::SeqChunk c{&table, ids.data() + s, std::min(step, T - s), s, engine::SeqChunk::Logits::kLast};
    runner.step({&c, 1}, &cap);
  }
  table.release_all(runner.pool());
}

TEST_F(CudaTest, DISABLED_RowDiagnosis) {
  const char* fx = std::getenv("BUNSEN_DIAG_FIXTURE");
  const std::string name = fx != nullptr ? fx : "qwen3_next";
  const int64_t row = std::getenv("BUNSEN_DIAG_ROW") != nullptr ? std::atoll(std::getenv("BUNSEN_DIAG_ROW")) : 75;
  Fixture f = load_fixture(name);
  std::string dir = build_checkpoint(f, DType::kBF16, "cuda_diag");
  if (std::getenv("BUNSEN_DIAG_Q4") != nullptr) {  // as EveryFamilyConvertedTo4BitMatchesTheCpu: 4-bit, group 32
    model::ConvertOptions co;
    co.src = dir;
    co.dst = dir + "_q4";
    fs::remove_all(co.dst);
    co.quantize = true;
    co.spec = model::QuantSpec{4, 32};
    model::convert_checkpoint(co);
    dir = co.dst;
  }
  std::vector<int32_t> ids = to_i32(f.outputs->get("input_ids"));
  ids.pop_back();  // the prompt step of the layer-divergence test: T - 1 tokens
  const auto T = static_cast<int64_t>(ids.size());
  ASSERT_LT(row, T);
  auto cm = load(dir, Device::cpu());
  auto gm = load(dir, Device::cuda(0));
  engine::Runner cr(*cm, runner_options(T + 1, 8));
  engine::Runner gr(*gm, runner_options(T + 1, 8));
  RowCapture ref;
  score(cr, ids, 1, ref);  // one token per step: every row's logits
  struct Way {
    const char* what;
    int kernel;
    int64_t step;
  };
  const Way ways[] = {{"one step, default kernel", 0, T}, {"one step, WMMA", 1, T}, {"one step, mma.sync", 2, T},
                      {"one step, fa2b", 3, T},           {"steps of 16", 0, 16},   {"one token per step", 0, 1}};
  for (const Way& w : ways) {
    kernels::cuda::set_attention_prefill_kernel_for_testing(w.kernel);
    RowCapture got;
    got.ctx = &gr.context();
    score(gr, ids, w.step, got);
    kernels::cuda::set_attention_prefill_kernel_for_testing(0);
    std::printf("[ diag     ] %s row %lld: %s\n", name.c_str(), (long long)row, w.what);
    for (const auto& [key, want] : ref.rows) {
      auto it = got.rows.find(key);
      if (it == got.rows.end() || it->second.size() != want.size()) continue;  // logits: only with one token per step
      const std::vector<float>& have = it->second;
      const auto W = static_cast<size_t>(ref.width[key]);
      if (key.first == "logits") {
        double worst_cos = 2;
        int64_t worst_row = 0;
        for (int64_t r = 0; r < T; ++r) {
          const double c = cosine(have.data() + r * W, want.data() + r * W, W);
          if (c < worst_cos) worst_cos = c, worst_row = r;
        }
        std::printf("[ diag     ]   logits: worst cosine %.6f at row %lld; row %lld: %.6f\n", worst_cos,
                    (long long)worst_row, (long long)row, cosine(have.data() + row * W, want.data() + row * W, W));
        continue;
      }
      int64_t worst = 0;
      double worst_err = -1;
      for (int64_t r = 0; r < T; ++r) {
        const double e = rel(have.data() + r * W, want.data() + r * W, W);
        if (e > worst_err) worst_err = e, worst = r;
      }
      const double at_row = rel(have.data() + row * W, want.data() + row * W, W);
      std::printf("[ diag     ]   %-13s %d: all %.2e  row %.2e  worst row %lld %.2e", key.first.c_str(), key.second,
                  rel(have.data(), want.data(), have.size()), at_row, (long long)worst, worst_err);
      if (key.first == "router_logits") {
        std::printf("  cpu/cuda:");
        for (size_t e = 0; e < W; ++e)
          std::printf(" %.4f/%.4f", want[static_cast<size_t>(row) * W + e], have[static_cast<size_t>(row) * W + e]);
      }
      std::printf("\n");
    }
  }
}

}  // namespace
}  // namespace bunsen::golden
