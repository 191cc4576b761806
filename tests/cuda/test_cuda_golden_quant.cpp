// Every golden family converted to MLX affine 4-bit (issues 8 and 9: "quantized versions of each family load
// and run on CPU and CUDA"): the bf16 fixture checkpoint is converted with model::convert_checkpoint (as
// `bunsen convert -q --q-bits 4 --q-group-size 32` does: bf16 scales and biases, quantized embeddings,
// stacked MoE experts as switch_mlp), loaded on the CPU and on cuda:0, and the CUDA logits must match the
// CPU's on the same quantized weights: cosine >= 0.999 at every prompt row and every teacher-forced decode
// row, argmax agreement >= 99 % over all rows of all fixtures, and no disagreement where CUDA has a clear
// winner. In MoE families the CPU reference is routed as CUDA routed wherever the two choose differently at a
// near-tie (golden_cuda_util.h: ImposedRouting, decided per layer and token in the scoring and the decode
// pass), so every row is compared strictly; a routing difference at a clear gap fails. The CPU's own
// correctness against the dequantized model is test_golden's GoldenQuant.
#include <filesystem>

#include "../golden/golden_file.h"
#include "cuda_test_util.h"
#include "golden_cuda_util.h"
#include "model/convert.h"
#include "model/quant.h"

namespace bunsen::golden {
namespace {

namespace fs = std::filesystem;
using kernels::test::CudaTest;

struct Rows {
  double worst_cosine = 1.0;
  int64_t agree = 0, total = 0, clear_disagreements = 0;
};

// CUDA rows vs CPU rows of the same shape [rows, vocab], every row.
void compare(const std::vector<float>& gpu, const std::vector<float>& cpu, int64_t vocab, Rows& out) {
  ASSERT_EQ(gpu.size(), cpu.size());
  const auto rows = static_cast<int64_t>(cpu.size()) / vocab;
  for (int64_t r = 0; r < rows; ++r) {
    const float* g = gpu.data() + r * vocab;
    const float* c = cpu.data() + r * vocab;
    out.worst_cosine = std::min(out.worst_cosine, cosine(g, c, static_cast<size_t>(vocab)));
    ++out.total;
    if (argmax(g, vocab) == argmax(c, vocab)) ++out.agree;
    else if (margin(g, vocab) >= kClearMargin) ++out.clear_disagreements;
  }
}

TEST_F(CudaTest, EveryFamilyConvertedTo4BitMatchesTheCpu) {
  Rows all;
  for (const std::string& name : fixture_names()) {
    if (name == "qwen3_demo") continue;  // the 152k-vocab demo repeats the qwen3 fixture
    SCOPED_TRACE(name);
    Fixture f = load_fixture(name);
    const std::string src = build_checkpoint(f, DType::kBF16, "cudaq4");
    const std::string qdir = src + "_q4";
    fs::remove_all(qdir);
    model::ConvertOptions co;
    co.src = src;
    co.dst = qdir;
    co.quantize = true;
    co.spec = model::QuantSpec{4, 32};
    EXPECT_GT(model::convert_checkpoint(co).n_quantized, 0u);

    const std::vector<int32_t> ids = to_i32(f.outputs->get("input_ids"));
    const std::vector<int32_t> greedy = to_i32(f.outputs->get("greedy"));
    const auto T = static_cast<int64_t>(ids.size());
    auto cm = load(qdir, Device::cpu());
    auto gm = load(qdir, Device::cuda(0));
    ASSERT_TRUE(gm->config().quantization.enabled);
    const int64_t vocab = cm->config().vocab_size;
    engine::Runner cr(*cm, runner_options(T, static_cast<int64_t>(greedy.size()) + 8));
    engine::Runner gr(*gm, runner_options(T, static_cast<int64_t>(greedy.size()) + 8));
    ASSERT_TRUE(gr.device().is_cuda());

    // MoE: CUDA's routing of the scoring pass and of the decode pass (prefill, then one step per teacher-forced
    // token), each from token 0; the CPU reference of each pass is routed as CUDA routed at near-ties.
    const bool moe = is_moe(cm->config());
    model::RoutingTrace gpu_score_routing(&gr.context()), gpu_decode_routing(&gr.context());
    const std::vector<float> gpu_score = engine::score(gr, ids, moe ? &gpu_score_routing : nullptr);
    const std::vector<float> gpu_decode = decode_logits(gr, ids, greedy, moe ? &gpu_decode_routing : nullptr);
    ImposedRouting score_routing(&gpu_score_routing), decode_routing(&gpu_decode_routing);
    const std::vector<float> cpu_score =
        with_routing(moe ? &score_routing : nullptr, [&] { return engine::score(cr, ids); });
    const std::vector<float> cpu_decode =
        with_routing(moe ? &decode_routing : nullptr, [&] { return decode_logits(cr, ids, greedy); });
    Rows mine;
    compare(gpu_score, cpu_score, vocab, mine);
    compare(gpu_decode, cpu_decode, vocab, mine);
    if (moe) {
      score_routing.finish(name + " q4 prompt");
      decode_routing.finish(name + " q4 decode");
    }
    std::printf("[ cuda q4  ] %-24s min cosine %.6f, argmax %lld/%lld\n", name.c_str(), mine.worst_cosine,
                (long long)mine.agree, (long long)mine.total);
    EXPECT_GE(mine.worst_cosine, kMinCosine);
    EXPECT_EQ(mine.clear_disagreements, 0);
    all.agree += mine.agree;
    all.total += mine.total;
    fs::remove_all(qdir);
  }
  ASSERT_GT(all.total, 0);
  EXPECT_GE(static_cast<double>(all.agree), kMinAgreement * static_cast<double>(all.total))
      << all.agree << " of " << all.total << " rows agree";
}

}  // namespace
}  // namespace bunsen::golden
