// Every golden family converted to MLX affine 4-bit and 8-bit (issues 8, 9) with model::convert_checkpoint,
// as `bunsen convert -q` does: the quantized checkpoint loads, and its logits equal those of the same model
// with every quantized weight dequantized into an f32 checkpoint (linear_q vs linear on dequant(w): f32
// kernel tolerance). The KL divergence of the quantized model to the unquantized one is printed per fixture
// (reported, not asserted: these are random-weight models). CPU.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "engine/generator.h"
#include "golden_file.h"
#include "model/convert.h"
#include "model/quant.h"
#include "model/registry.h"
#include "model/weights.h"

namespace bunsen::golden {
namespace {

namespace fs = std::filesystem;

std::vector<float> logits_of(model::Model& m, const std::vector<int32_t>& ids) {
  engine::RunnerOptions ro;
  ro.max_context = static_cast<int64_t>(ids.size()) + 8;
  ro.max_tokens_per_step = static_cast<int64_t>(ids.size());
  ro.max_logit_rows = static_cast<int64_t>(ids.size());
  ro.block_size = 4;
  engine::Runner runner(m, ro);
  return engine::score(runner, ids, nullptr);
}

// The quantized checkpoint `qdir` with every <module>.weight/.scales/.biases triple replaced by the f32
// dequantized weight, written as `out`/model.safetensors next to the source's (unquantized) config.json.
void write_dequantized(const std::string& qdir, const model::QuantSpec& spec, const std::string& src_dir,
                       const std::string& out) {
  model::WeightStore q = model::WeightStore::open(qdir);
  std::vector<OwnedTensor> owned;
  std::vector<std::pair<std::string, Tensor>> list;
  for (const std::string& name : q.names()) {
    if (name.ends_with(".scales") || name.ends_with(".biases")) continue;
    const Tensor t = q.get(name);
    const std::string prefix = name.substr(0, name.size() - std::string(".weight").size());
    if (t.dtype != DType::kU32 || !name.ends_with(".weight") || !q.has(prefix + ".scales")) {
      list.emplace_back(name, t);
      continue;
    }
    const Tensor sc = q.get(prefix + ".scales"), bi = q.get(prefix + ".biases");
    EXPECT_EQ(sc.dtype, DType::kF32) << name;  // the source is f32: so are its scales and biases
    const int64_t rows = t.dim(0), cols = t.dim(1) * 32 / spec.bits;
    owned.push_back(OwnedTensor::make(DType::kF32, {rows, cols}));
    model::dequantize_affine(t.ptr<uint32_t>(), sc.ptr<float>(), bi.ptr<float>(), rows, cols, spec,
                             owned.back().tensor.ptr<float>());
    list.emplace_back(name, owned.back().tensor);
  }
  fs::create_directories(out);
  model::write_safetensors(out + "/model.safetensors", list);
  fs::copy_file(src_dir + "/config.json", out + "/config.json", fs::copy_options::overwrite_existing);
}

// KL(p || q) of the softmax rows, averaged over rows.
double mean_kl(const std::vector<float>& p_logits, const std::vector<float>& q_logits, int64_t vocab) {
  double total = 0;
  const auto rows = static_cast<int64_t>(p_logits.size()) / vocab;
  for (int64_t r = 0; r < rows; ++r) {
    const float* a = p_logits.data() + r * vocab;
    const float* b = q_logits.data() + r * vocab;
    double ma = a[0], mb = b[0];
    for (int64_t i = 1; i < vocab; ++i) ma = std::max<double>(ma, a[i]), mb = std::max<double>(mb, b[i]);
    double za = 0, zb = 0;
    for (int64_t i = 0; i < vocab; ++i) za += std::exp(a[i] - ma), zb += std::exp(b[i] - mb);
    double kl = 0;
    for (int64_t i = 0; i < vocab; ++i) {
      const double lp = a[i] - ma - std::log(za), lq = b[i] - mb - std::log(zb);
      kl += std::exp(lp) * (lp - lq);
    }
    total += kl;
  }
  return total / static_cast<double>(rows);
}

class GoldenQuant : public testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(GoldenQuant, ConvertedLogitsEqualTheDequantizedModel) {
  const auto& [name, bits] = GetParam();
  Fixture f = load_fixture(name);
  const std::string src = build_checkpoint(f, DType::kF32, "quant" + std::to_string(bits));  // q4/q8 run in parallel
  const std::string qdir = src + "_q" + std::to_string(bits), ddir = src + "_deq" + std::to_string(bits);
  fs::remove_all(qdir);
  fs::remove_all(ddir);
  model::ConvertOptions co;
  co.src = src;
  co.dst = qdir;
  co.quantize = true;
  co.spec = model::QuantSpec{bits, 32};
  const model::ConvertResult cr = model::convert_checkpoint(co);
  EXPECT_GT(cr.n_quantized, 0u);
  write_dequantized(qdir, co.spec, src, ddir);

  const std::vector<int32_t> ids = to_i32(f.outputs->get("input_ids"));
  auto qm = model::load_model(qdir);
  ASSERT_TRUE(qm->config().quantization.enabled);
  auto dm = model::load_model(ddir);
  auto fm = model::load_model(src);
  const std::vector<float> ql = logits_of(*qm, ids), dl = logits_of(*dm, ids), fl = logits_of(*fm, ids);
  ASSERT_EQ(ql.size(), dl.size());
  EXPECT_LE(rel_err(ql.data(), dl.data(), dl.size()), 1e-4) << name << " " << bits << "-bit vs dequantized";
  const double kl = mean_kl(fl, ql, qm->config().vocab_size);
  EXPECT_TRUE(std::isfinite(kl));
  std::printf("[ KL       ] %s %d-bit g32: mean KL(f32 || quantized) = %.3g nats over %zu rows\n", name.c_str(), bits,
              kl, ids.size());
  RecordProperty("kl_" + std::to_string(bits), std::to_string(kl));
  fs::remove_all(qdir);
  fs::remove_all(ddir);
}

std::vector<std::string> small_fixtures() {  // the 152k-vocab demo only repeats qwen3 at 19 MB of embedding
  std::vector<std::string> out;
  for (const auto& n : fixture_names())
    if (n != "qwen3_demo") out.push_back(n);
  return out;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GoldenQuant, testing::Combine(testing::ValuesIn(small_fixtures()), testing::Values(4, 8)),
                         [](const testing::TestParamInfo<GoldenQuant::ParamType>& p) {
                           return std::get<0>(p.param) + "_q" + std::to_string(std::get<1>(p.param));
                         });

}  // namespace
}  // namespace bunsen::golden
