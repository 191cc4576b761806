// Black-box tests of `bunsen convert` on the real binary: a tiny synthetic qwen2 checkpoint (written with the
// project's safetensors writer) converted with -q at 4 and 8 bits and without -q; the output's config
// quantization block, index json, tensor shapes/dtypes, dequantized values against the source weights
// (half a step for interior codes), untouched norms/biases, sharding, copied tokenizer files; and the
// one-line errors (existing DST, bad --q-bits / --q-group-size, missing source).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "cli_test_util.h"
#include "kernels/float_io.h"
#include "model/config.h"
#include "model/quant.h"
#include "model/registry.h"
#include "model/safetensors_writer.h"
#include "model/synthetic.h"
#include "model/weights.h"

namespace bunsen {
namespace {

namespace fs = std::filesystem;
using cli_test::Proc;
using nlohmann::json;

// hidden 128, d_ff 192: with group 128 the down_proj (in = 192) stays unquantized, as in mlx-lm.
constexpr const char* kConfig = R"({"model_type": "qwen2", "vocab_size": 300, "hidden_size": 128,
  "intermediate_size": 192, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
  "tie_word_embeddings": false, "torch_dtype": "bfloat16", "_name_or_path": "someone/tiny"})";

const std::map<std::string, std::string> kSideFiles = {
    {"tokenizer.json", R"({"model": {"type": "BPE"}})"},
    {"tokenizer_config.json", R"({"eos_token": "</s>"})"},
    {"special_tokens_map.json", R"({"eos_token": "</s>"})"},
    {"chat_template.jinja", "{{ messages }}"},
    {"generation_config.json", R"({"eos_token_id": 2})"},
    {"tokenizer.model", std::string("\x0a\x03\x00\xff sp", 7)},
};

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// A fresh source checkpoint directory `name` with weights in `dt` (plus tokenizer files and a README that
// convert must not copy).
std::string make_checkpoint(const std::string& name, DType dt) {
  const fs::path dir = fs::path(cli_test::scratch_dir()) / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir / "config.json") << kConfig;
  for (const auto& [f, text] : kSideFiles) std::ofstream(dir / f, std::ios::binary) << text;
  std::ofstream(dir / "README.md") << "not copied";
  const model::ModelConfig cfg = model::parse_config(kConfig, "tiny");
  std::vector<OwnedTensor> owned;
  std::vector<std::pair<std::string, Tensor>> views;
  for (const auto& s : model::expected_tensors(cfg)) {
    owned.push_back(model::synthetic_tensor(s.name, s.shape, dt, 11));
    views.emplace_back(s.name, owned.back().tensor);
  }
  model::save_safetensors((dir / "model.safetensors").string(), views, {{"format", "pt"}});
  return dir.string();
}

std::string fresh_dst(const std::string& name) {
  const fs::path p = fs::path(cli_test::scratch_dir()) / name;
  fs::remove_all(p);
  return p.string();
}

bool linear_or_embedding(const std::string& name, const Tensor& t) {
  return t.ndim == 2 && name.size() > 7 && name.compare(name.size() - 7, 7, ".weight") == 0;
}

// Dequantizes `base` from `out` and compares with the source weight: interior codes within half a step,
// the clamped end codes (0 and 2^bits - 1) within one step (MLX's edge-anchored scale can stretch the
// range by up to one step there); `slack` covers rounding the scale/bias to the source dtype.
void expect_dequantized_close(const model::WeightStore& out, const std::string& base, const Tensor& w,
                              model::QuantSpec spec, double slack_rel) {
  const int64_t rows = w.dim(0), cols = w.dim(1), gc = cols / spec.group_size;
  const Tensor q = out.get(base + ".weight", {rows, cols * spec.bits / 32});
  const Tensor s = out.get(base + ".scales", {rows, gc}), b = out.get(base + ".biases", {rows, gc});
  ASSERT_EQ(q.dtype, DType::kU32) << base;
  ASSERT_EQ(s.dtype, w.dtype) << base;
  ASSERT_EQ(b.dtype, w.dtype) << base;
  std::vector<float> sf(rows * gc), bf(rows * gc), deq(rows * cols), src(rows * cols);
  kernels::widen_row(s.data, s.dtype, rows * gc, sf.data());
  kernels::widen_row(b.data, b.dtype, rows * gc, bf.data());
  kernels::widen_row(w.data, w.dtype, rows * cols, src.data());
  model::dequantize_affine(q.ptr<uint32_t>(), sf.data(), bf.data(), rows, cols, spec, deq.data());
  const uint32_t top = (1u << spec.bits) - 1;
  int64_t bad = 0, interior = 0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const float scale = std::fabs(sf[r * gc + c / spec.group_size]), bias = std::fabs(bf[r * gc + c / spec.group_size]);
      const uint32_t code = model::unpack_one(q.ptr<uint32_t>() + r * (cols * spec.bits / 32), c, spec.bits);
      const bool end = code == 0 || code == top;
      interior += !end;
      const double tol = (end ? 1.0 : 0.5) * scale * (1 + slack_rel) + slack_rel * (scale * top + bias) + 1e-6;
      if (std::fabs(deq[r * cols + c] - src[r * cols + c]) > tol && bad++ < 3)
        ADD_FAILURE() << base << "[" << r << ", " << c << "]: dequantized " << deq[r * cols + c] << " vs "
                      << src[r * cols + c] << " (scale " << scale << ", code " << code << ")";
    }
  EXPECT_EQ(bad, 0) << base;
  EXPECT_GT(interior, rows * cols / 2) << base << ": codes pile up at the ends";
}

// Checks a converted directory against its source: config, index, every tensor, side files.
void check_converted(const std::string& src_dir, const std::string& dst, bool quantized, model::QuantSpec spec,
                     double slack_rel) {
  const json cfg = json::parse(slurp(fs::path(dst) / "config.json"));
  EXPECT_FALSE(cfg.contains("_name_or_path"));
  EXPECT_EQ(cfg["model_type"], "qwen2");
  if (quantized) {
    for (const char* key : {"quantization", "quantization_config"}) {
      ASSERT_TRUE(cfg.contains(key)) << key;
      EXPECT_EQ(cfg[key]["bits"], spec.bits) << key;
      EXPECT_EQ(cfg[key]["group_size"], spec.group_size) << key;
    }
  } else {
    EXPECT_FALSE(cfg.contains("quantization"));
  }
  const json idx = json::parse(slurp(fs::path(dst) / "model.safetensors.index.json"));
  const model::WeightStore in = model::WeightStore::open(src_dir);
  const model::WeightStore out = model::WeightStore::open(dst);
  std::set<std::string> expected_names;
  uint64_t params = 0;
  size_t n_quantized = 0;
  for (const std::string& name : in.names()) {
    const Tensor w = in.get(name);
    params += static_cast<uint64_t>(w.numel());
    const std::string base = name.substr(0, name.size() - 7);
    if (quantized && linear_or_embedding(name, w) && w.dim(1) % spec.group_size == 0) {
      ++n_quantized;
      for (const char* part : {".weight", ".scales", ".biases"}) expected_names.insert(base + part);
      expect_dequantized_close(out, base, w, spec, slack_rel);
      continue;
    }
    expected_names.insert(name);  // norms, biases and non-divisible weights: same dtype and bytes
    const Tensor o = out.get(name);
    EXPECT_EQ(o.dtype, w.dtype) << name;
    ASSERT_EQ(o.nbytes(), w.nbytes()) << name;
    EXPECT_EQ(std::memcmp(o.data, w.data, w.nbytes()), 0) << name;
  }
  // 7 projections × 2 layers + embed + lm_head; group 128 leaves both down_proj (in = 192) unquantized.
  EXPECT_EQ(n_quantized, !quantized ? 0u : spec.group_size == 128 ? 14u : 16u);
  const std::vector<std::string> names = out.names();
  EXPECT_EQ(std::set<std::string>(names.begin(), names.end()), expected_names);
  std::set<std::string> mapped;
  uint64_t total = 0;
  for (const auto& [name, file] : idx["weight_map"].items()) {
    mapped.insert(name);
    EXPECT_EQ(out.source_of(name), (fs::path(dst) / file.get<std::string>()).string()) << name;
    total += out.get(name).nbytes();
  }
  EXPECT_EQ(mapped, expected_names);
  EXPECT_EQ(idx["metadata"]["total_size"].get<uint64_t>(), total);
  EXPECT_EQ(idx["metadata"]["total_parameters"].get<uint64_t>(), params);
  for (const auto& [f, text] : kSideFiles) EXPECT_EQ(slurp(fs::path(dst) / f), text) << f;
  EXPECT_FALSE(fs::exists(fs::path(dst) / "README.md"));
}

TEST(CliConvert, Quantize4BitBf16) {
  const std::string src = make_checkpoint("src_bf16", DType::kBF16), dst = fresh_dst("q4");
  Proc r = cli_test::run_bunsen("convert --hf-path " + src + " --mlx-path " + dst + " -q --q-bits 4");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.err.find("model.layers.1.mlp.down_proj.weight (quantized)"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("100%"), std::string::npos) << r.err;  // the bar reaches the end
  // bf16 scale/bias rounding: relative error 2^-9 each; 2^-8 leaves a factor two of margin.
  check_converted(src, dst, true, {4, 64}, 1.0 / 256);
  EXPECT_TRUE(fs::exists(fs::path(dst) / "model.safetensors"));
  const json cfg = json::parse(slurp(fs::path(dst) / "config.json"));
  EXPECT_EQ(cfg["quantization"]["mode"], "affine");
  EXPECT_NO_THROW(model::load_config(dst));
}

TEST(CliConvert, Quantize8BitF32Group128) {
  // f32 source: scales/biases are stored exactly, so only f32 arithmetic slack is allowed.
  const std::string src = make_checkpoint("src_f32", DType::kF32), dst = fresh_dst("q8");
  Proc r = cli_test::run_bunsen("convert " + src + " --mlx-path=" + dst + " --quantize --q-bits 8 --q-group-size 128");
  ASSERT_EQ(r.code, 0) << r.err;
  check_converted(src, dst, true, {8, 128}, 1e-5);
  const model::WeightStore out = model::WeightStore::open(dst);
  EXPECT_EQ(out.get("model.layers.0.mlp.down_proj.weight").dtype, DType::kF32);  // in = 192: not divisible by 128
  EXPECT_FALSE(out.has("model.layers.0.mlp.down_proj.scales"));
}

TEST(CliConvert, UnquantizedCopyAndShards) {
  const std::string src = make_checkpoint("src_copy", DType::kBF16), dst = fresh_dst("plain");
  // 64 KiB shards: the bf16 tensors of this model (largest 300 × 128 × 2 = 75 KiB) need several.
  Proc r = cli_test::run_bunsen("convert --model " + src + " --mlx-path " + dst + " --shard-size 0.0000610351562");
  ASSERT_EQ(r.code, 0) << r.err;
  check_converted(src, dst, false, {}, 0);
  const json idx = json::parse(slurp(fs::path(dst) / "model.safetensors.index.json"));
  std::set<std::string> files;
  for (const auto& [name, file] : idx["weight_map"].items()) files.insert(file.get<std::string>());
  ASSERT_GT(files.size(), 2u);
  const std::string n = std::to_string(files.size());
  for (size_t i = 1; i <= files.size(); ++i) {
    char want[64];
    std::snprintf(want, sizeof want, "model-%05zu-of-%05zu.safetensors", i, files.size());
    EXPECT_TRUE(files.count(want)) << want;
    EXPECT_LE(fs::file_size(fs::path(dst) / want), (64u << 10) + 100000u);  // data ≤ 64 KiB unless one tensor is bigger
  }
  EXPECT_FALSE(fs::exists(fs::path(dst) / "model.safetensors"));
}

TEST(CliConvert, QuantizedTripleStaysInOneShard) {
  const std::string src = make_checkpoint("src_shard_q", DType::kBF16), dst = fresh_dst("q4_shards");
  Proc r = cli_test::run_bunsen("convert " + src + " --mlx-path " + dst + " -q --shard-size 0.00002");
  ASSERT_EQ(r.code, 0) << r.err;
  const json idx = json::parse(slurp(fs::path(dst) / "model.safetensors.index.json"));
  const json& wm = idx["weight_map"];
  ASSERT_TRUE(wm.contains("model.embed_tokens.scales"));
  for (const auto& [name, file] : wm.items()) {
    if (name.size() < 7 || name.compare(name.size() - 7, 7, ".scales") != 0) continue;
    const std::string base = name.substr(0, name.size() - 7);
    EXPECT_EQ(wm[base + ".weight"], file) << base;
    EXPECT_EQ(wm[base + ".biases"], file) << base;
  }
  check_converted(src, dst, true, {4, 64}, 1.0 / 256);
}

TEST(CliConvert, ExistingDestinationIsAnError) {
  const std::string src = make_checkpoint("src_exists", DType::kBF16), dst = fresh_dst("exists");
  fs::create_directories(dst);
  std::ofstream(fs::path(dst) / "keep.txt") << "mine";
  Proc r = cli_test::run_bunsen("convert --hf-path " + src + " --mlx-path " + dst + " -q");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("already exists"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(dst), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_EQ(slurp(fs::path(dst) / "keep.txt"), "mine");
  EXPECT_FALSE(fs::exists(fs::path(dst) / "config.json"));
}

TEST(CliConvert, BadFlagsNameTheFlag) {
  const std::string src = make_checkpoint("src_flags", DType::kBF16);
  struct Case {
    std::string args, fact;
  };
  const std::vector<Case> cases = {
      {"-q --q-bits 7", "--q-bits"},
      {"-q --q-bits four", "--q-bits"},
      {"-q --q-group-size 48", "--q-group-size"},
      {"--q-bits 8", "-q"},
      {"-q --shard-size 0", "--shard-size"},
  };
  for (const Case& c : cases) {
    const std::string dst = fresh_dst("badflag");
    Proc r = cli_test::run_bunsen("convert " + src + " --mlx-path " + dst + " " + c.args);
    EXPECT_EQ(r.code, 2) << c.args << ": " << r.err;
    EXPECT_NE(r.err.find(c.fact), std::string::npos) << c.args << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_FALSE(fs::exists(dst)) << c.args;
  }
  Proc none = cli_test::run_bunsen("convert --mlx-path " + fresh_dst("nosrc"));
  EXPECT_EQ(none.code, 2);
  EXPECT_NE(none.err.find("--hf-path"), std::string::npos) << none.err;
  const std::string dst = fresh_dst("missing_src");
  Proc missing = cli_test::run_bunsen("convert " + cli_test::scratch_dir() + "/no_such_model --mlx-path " + dst);
  EXPECT_EQ(missing.code, 1);
  EXPECT_NE(missing.err.find("no_such_model"), std::string::npos) << missing.err;
  EXPECT_FALSE(fs::exists(dst));
}

TEST(CliConvert, AlreadyQuantizedSourceIsRefused) {
  const std::string src = make_checkpoint("src_q_once", DType::kBF16), dst = fresh_dst("q_once");
  ASSERT_EQ(cli_test::run_bunsen("convert " + src + " --mlx-path " + dst + " -q").code, 0);
  const std::string again = fresh_dst("q_twice");
  Proc r = cli_test::run_bunsen("convert " + dst + " --mlx-path " + again + " -q");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("already quantized"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(again));
  // Without -q the quantized checkpoint is copied as it is (u32 weights included).
  Proc copy = cli_test::run_bunsen("convert " + dst + " --mlx-path " + again);
  ASSERT_EQ(copy.code, 0) << copy.err;
  const model::WeightStore a = model::WeightStore::open(dst), b = model::WeightStore::open(again);
  for (const std::string& n : a.names()) {
    ASSERT_TRUE(b.has(n)) << n;
    EXPECT_EQ(std::memcmp(a.get(n).data, b.get(n).data, a.get(n).nbytes()), 0) << n;
  }
  EXPECT_EQ(json::parse(slurp(fs::path(again) / "config.json"))["quantization"]["bits"], 4);
}

}  // namespace
}  // namespace bunsen
