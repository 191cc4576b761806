// Black-box tests of the bunsen binary: generate on the built-in demo model (text, JSON, and the demo's
// greedy tokens equal to the HF golden of fixture qwen3_demo), benchmark JSON, and one-line errors with
// the right exit codes for bad input.
#include <gtest/gtest.h>

#include "cli_test_util.h"


#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "kernels/device.h"
#include "model/weights.h"

namespace bunsen {
namespace {

namespace fs = std::filesystem;

using cli_test::Proc;

std::string cache() {
  return cli_test::shared_cache();
}
Proc run(const std::string& args) {
  return cli_test::run_cached(args);
}

std::string golden_ids(const char* key, std::vector<int32_t>* out_vec = nullptr) {
  auto store = bunsen::model::WeightStore::open_file(std::string(BUNSEN_SOURCE_DIR) +
                                                     "/tests/golden/data/qwen3_demo/golden.safetensors");
  bunsen::Tensor t = store.get(key);
  std::string csv;
  for (int64_t i = 0; i < t.numel(); ++i) {
    int32_t v = t.ptr<int32_t>()[i];
    if (out_vec) out_vec->push_back(v);
    if (i) csv += ',';
    csv += std::to_string(v);
  }
  return csv;
}

TEST(Cli, DemoGreedyTokensEqualTransformers) {
  std::vector<int32_t> expected;
  golden_ids("greedy", &expected);
  Proc r = run("generate --prompt-tokens " + golden_ids("input_ids") + " --max-tokens " +
              std::to_string(expected.size()) + " --temperature 0 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j.at("generated_ids").get<std::vector<int32_t>>(), expected);
  EXPECT_EQ(j.at("finish_reason"), "length");
  EXPECT_GT(j.at("stats").at("decode_tok_s").get<double>(), 0.0);
}

TEST(Cli, StreamsTextAndEndsWithStats) {
  Proc r = run("generate --prompt \"Hello, world\" --max-tokens 12 --seed 5 --temperature 0.8");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_FALSE(r.out.empty());
  EXPECT_NE(r.err.find("prefill"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("decode"), std::string::npos) << r.err;
  // Same seed, same text.
  Proc again = run("generate --prompt \"Hello, world\" --max-tokens 12 --seed 5 --temperature 0.8");
  EXPECT_EQ(again.out, r.out);
}

TEST(Cli, JsonTextMatchesIds) {
  Proc r = run("generate -p \"The quick brown fox\" -n 6 --seed 1 --raw --json");
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j.at("prompt_ids").size(), 4u);  // Qwen3: The| quick| brown| fox
  EXPECT_LE(j.at("generated_ids").size(), 6u);
  EXPECT_TRUE(j.at("text").is_string());
}

TEST(Cli, PromptGoesThroughTheChatTemplateUnlessRaw) {
  Proc r = run("generate -p \"The quick brown fox\" -n 1 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  std::string ids;
  for (const auto& id : j.at("prompt_ids")) {
    if (!ids.empty()) ids += ',';
    ids += id.dump();
  }
  Proc text = run("detokenize --model " + cache() + "/models/demo-qwen3-tiny " + ids);
  ASSERT_EQ(text.code, 0) << text.err;
  // The Qwen3 template's rendering of one user message with the generation prompt.
  EXPECT_EQ(text.out, "<|im_start|>user\nThe quick brown fox<|im_end|>\n<|im_start|>assistant\n");
}

TEST(Cli, BenchmarkJson) {
  Proc r = run("benchmark --prompt-len 16 --gen 8 --no-probe --json");
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  for (const char* k : {"prefill_tok_s", "decode_tok_s", "ms_per_token", "weight_bytes_per_token", "decode_gbps"})
    EXPECT_GT(j.at(k).get<double>(), 0.0) << k;
  EXPECT_EQ(j.at("device"), bunsen::kernels::cuda_device_count() > 0 ? "cuda:0" : "cpu");
  EXPECT_EQ(j.at("decode_step"),
            "per-op");  // the one-launch step is opt-in (BUNSEN_DECODE_FUSED=1) and CUDA-only
  bool has_prompt_len = false;
  for (const auto& p : j.at("prefill")) {
    EXPECT_GT(p.at("tok_s").get<double>(), 0.0);
    has_prompt_len |= p.at("prompt_len") == 16;
  }
  EXPECT_TRUE(has_prompt_len) << j.at("prefill").dump();

  // Prefill-only lengths around the decode prompt, the longest past prompt + gen (the KV must hold it + 1).
  Proc pp = run("benchmark --prompt-len 16 --gen 8 --prefill-lens 8,32 --no-probe --json");
  ASSERT_EQ(pp.code, 0) << pp.err;
  auto k = nlohmann::json::parse(pp.out);
  std::vector<int64_t> lens;
  for (const auto& p : k.at("prefill")) {
    lens.push_back(p.at("prompt_len").get<int64_t>());
    EXPECT_GT(p.at("tok_s").get<double>(), 0.0) << p.dump();
  }
  if (bunsen::kernels::cuda_device_count() == 0) {  // on CUDA 512 and 2048 join by default
    EXPECT_EQ(lens, (std::vector<int64_t>{8, 16, 32}));
  }
  Proc bad = run("benchmark --prefill-lens 8,x");
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.err.find("--prefill-lens"), std::string::npos) << bad.err;
}

// The roofline denominators: the read-bandwidth and matmul-rate probes run unless --no-probe, and each
// prefill figure is a fraction of the measured matmul rate. A prefill multiplies the head once (the last
// token's logits), not once per prompt token: for the demo (qwen3, d_model 64, 2 layers, vocab 151,936) by
// hand, 2 layers x (64 x (64 + 2 x 32) + 64 x 64 + 3 x 64 x 128) = 73,728 layer params and 9,723,904 head
// params.
TEST(Cli, BenchmarkMatmulProbeAndPrefillFlops) {
  Proc r = run("benchmark --prompt-len 16 --gen 4 --prefill-lens 8 --json");
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j.at("matmul_params").get<int64_t>(), 73728 + 9723904);
  const double probe = j.at("probe_matmul_gflops").get<double>();
  EXPECT_GT(probe, 0.0);
  EXPECT_GT(j.at("probe_read_gbps").get<double>(), 0.0);
  if (bunsen::kernels::cuda_device_count() == 0)
    EXPECT_EQ(j.at("probe_matmul_shape"), nlohmann::json::parse("[64, 4096, 2048]"));
  ASSERT_EQ(j.at("prefill").size(), 2u) << r.out;
  for (const auto& p : j.at("prefill")) {
    const double len = p.at("prompt_len").get<double>(), tok_s = p.at("tok_s").get<double>();
    const double flop_per_token = p.at("gflops").get<double>() * 1e9 / tok_s;
    EXPECT_NEAR(flop_per_token, 2.0 * (73728.0 + 9723904.0 / len), 1e-6 * flop_per_token) << p.dump();
    EXPECT_NEAR(p.at("matmul_fraction").get<double>(), p.at("gflops").get<double>() / probe, 1e-9)
        << p.dump();
  }
  EXPECT_NEAR(j.at("prefill_matmul_fraction").get<double>(), j.at("prefill_gflops").get<double>() / probe,
              1e-9);
  // --no-probe: neither probe runs, and no fraction is claimed.
  Proc quiet = run("benchmark --prompt-len 16 --gen 4 --no-probe --json");
  ASSERT_EQ(quiet.code, 0) << quiet.err;
  auto q = nlohmann::json::parse(quiet.out);
  EXPECT_EQ(q.at("probe_matmul_gflops").get<double>(), 0.0);
  EXPECT_EQ(q.at("prefill_matmul_fraction").get<double>(), 0.0);
  EXPECT_FALSE(q.contains("probe_matmul_shape"));
  EXPECT_FALSE(q.at("prefill")[0].contains("matmul_fraction"));
}

// Batched decode steps, each also carrying a prompt chunk of another sequence (--mixed-prefill), as a serving
// step: the JSON names the batch and the chunk; the chunk without --decode-batch is a usage error.
TEST(Cli, BenchmarkDecodeBatchWithMixedPrefill) {
  Proc r = run("benchmark --prompt-len 16 --gen 4 --decode-batch 3 --mixed-prefill 24 --no-probe --json");
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j.at("decode_batch").size(), 1u) << r.out;
  const auto& d = j.at("decode_batch")[0];
  EXPECT_EQ(d.at("batch"), 3);
  EXPECT_EQ(d.at("prefill_tokens"), 24);
  EXPECT_GT(d.at("tok_s").get<double>(), 0.0);
  EXPECT_GT(d.at("ms_per_step").get<double>(), 0.0);
  Proc lone = run("benchmark --prompt-len 16 --gen 4 --mixed-prefill 24");
  EXPECT_EQ(lone.code, 2);
  EXPECT_NE(lone.err.find("--mixed-prefill needs --decode-batch"), std::string::npos) << lone.err;
}

// The timed decode sampled (--temperature and the filters): the JSON names the sampler; greedy is the
// default; filters without a temperature and out-of-range values are usage errors that name the flag.
TEST(Cli, BenchmarkSampledDecode) {
  Proc greedy = run("benchmark --prompt-len 16 --gen 4 --no-probe --json");
  ASSERT_EQ(greedy.code, 0) << greedy.err;
  EXPECT_EQ(nlohmann::json::parse(greedy.out).at("decode_sampler"), "greedy");
  Proc r =
      run("benchmark --prompt-len 16 --gen 6 --temperature 0.8 --top-p 0.9 --top-k 40 --no-probe --json");
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j.at("decode_sampler"), "temperature 0.8, top_k 40, top_p 0.9, min_p 0");
  EXPECT_GT(j.at("decode_tok_s").get<double>(), 0.0);
  Proc lone = run("benchmark --prompt-len 16 --gen 4 --top-p 0.9");
  EXPECT_EQ(lone.code, 2);
  EXPECT_NE(lone.err.find("need --temperature > 0"), std::string::npos) << lone.err;
  Proc bad = run("benchmark --prompt-len 16 --gen 4 --temperature 1 --min-p 2");
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.err.find("--min-p must be in [0, 1]"), std::string::npos) << bad.err;
}

TEST(Cli, ErrorsAreOneLineWithExitCodes) {
  Proc bad_flag = run("generate --bogus");
  EXPECT_EQ(bad_flag.code, 2);
  EXPECT_NE(bad_flag.err.find("unknown option '--bogus'"), std::string::npos) << bad_flag.err;

  Proc no_dir = run("generate --model /nonexistent/model --prompt hi");
  EXPECT_EQ(no_dir.code, 1);
  EXPECT_NE(no_dir.err.find("/nonexistent/model/config.json"), std::string::npos) << no_dir.err;
  EXPECT_EQ(std::count(no_dir.err.begin(), no_dir.err.end(), '\n'), 1) << no_dir.err;

  fs::path d = fs::path(cache()) / "mamba";
  fs::create_directories(d);
  std::ofstream(d / "config.json") << R"({"model_type":"mamba","vocab_size":10,"hidden_size":8,
      "intermediate_size":8,"num_hidden_layers":1,"num_attention_heads":1})";
  Proc unknown = run("generate --model " + d.string() + " --prompt hi");
  EXPECT_EQ(unknown.code, 1);
  EXPECT_NE(unknown.err.find("unsupported model_type 'mamba' (supported: llama"), std::string::npos) << unknown.err;

  if (bunsen::kernels::cuda_device_count() == 0) {  // with a GPU, --device cuda runs
    Proc cuda = run("generate --device cuda --prompt hi");
    EXPECT_EQ(cuda.code, 2);
    EXPECT_NE(cuda.err.find(bunsen::kernels::cuda_built() ? "no CUDA device" : "no CUDA backend"), std::string::npos)
        << cuda.err;
    EXPECT_EQ(std::count(cuda.err.begin(), cuda.err.end(), '\n'), 1) << cuda.err;
  }
  Proc no_such_gpu = run("generate --device cuda:999 --prompt hi");
  EXPECT_EQ(no_such_gpu.code, 2);
  EXPECT_NE(no_such_gpu.err.find("--device cuda:999"), std::string::npos) << no_such_gpu.err;
  Proc bad_device = run("benchmark --device tpu");
  EXPECT_EQ(bad_device.code, 2);
  EXPECT_NE(bad_device.err.find("cpu or cuda[:N]"), std::string::npos) << bad_device.err;

  Proc both = run("generate --prompt hi --prompt-tokens 1,2");
  EXPECT_EQ(both.code, 2);
  Proc bad_ids = run("generate --prompt-tokens 1,x");
  EXPECT_EQ(bad_ids.code, 2);
  EXPECT_NE(bad_ids.err.find("--prompt-tokens"), std::string::npos);
  Proc oob = run("generate --prompt-tokens 999999999 --max-tokens 2");
  EXPECT_EQ(oob.code, 1);
  EXPECT_NE(oob.err.find("out of range"), std::string::npos) << oob.err;
}

// Every verb's --help: exit 0 on stdout, its usage line first, every line within 100 columns (long option
// help wraps at word boundaries, continuation lines under the help column), and a wrapped help text keeps its
// words in order.
TEST(Cli, HelpOfEveryVerbFitsOneHundredColumns) {
  for (const char* verb :
       {"serve", "generate", "benchmark", "convert", "fit", "template", "tokenize", "detokenize"}) {
    Proc h = run(std::string(verb) + " --help");
    EXPECT_EQ(h.code, 0) << verb << ": " << h.err;
    EXPECT_EQ(h.out.rfind(std::string("usage: bunsen ") + verb, 0), 0u) << h.out;
    EXPECT_NE(h.out.find("\noptions:\n"), std::string::npos) << h.out;
    std::istringstream lines(h.out);
    int n = 0;
    for (std::string line; std::getline(lines, line); ++n)
      EXPECT_LE(line.size(), 100u) << verb << ": " << line;
    EXPECT_GT(n, 5) << h.out;
  }
  Proc serve = run("serve --help");
  const size_t at = serve.out.find("  --kv-quant off|4|8|fp8|config");
  ASSERT_NE(at, std::string::npos) << serve.out;
  const size_t end = serve.out.find("\n  --", at + 1);
  std::string entry = serve.out.substr(at, end - at), joined;
  const size_t cont = entry.find("\n" + std::string(30, ' '));  // a continuation line under the help column
  ASSERT_NE(cont, std::string::npos) << entry;
  EXPECT_NE(entry[cont + 31], ' ') << entry;
  std::istringstream words(entry);
  for (std::string w; words >> w;) joined += (joined.empty() ? "" : " ") + w;
  EXPECT_NE(joined.find("fp8 (e4m3, one f32 scale per token and kv head), or config"), std::string::npos)
      << joined;
  EXPECT_NE(joined.find("so decode is slower (docs/PERFORMANCE.md)"), std::string::npos) << joined;
}

TEST(Cli, MissingTensorAndShapeMismatch) {
  // A real checkpoint directory with one tensor removed / one tensor of the wrong shape.
  Proc ok = run("generate --prompt-tokens 1 --max-tokens 1 --json");  // makes sure the demo exists
  ASSERT_EQ(ok.code, 0) << ok.err;
  const fs::path demo = fs::path(cache()) / "models" / "demo-qwen3-tiny";
  auto store = bunsen::model::WeightStore::open(demo.string());
  for (const std::string mode : {"missing", "shape"}) {
    fs::path d = fs::path(cache()) / ("broken_" + mode);
    fs::remove_all(d);
    fs::create_directories(d);
    fs::copy_file(demo / "config.json", d / "config.json");
    std::vector<std::pair<std::string, bunsen::Tensor>> tensors;
    std::vector<float> wrong(64 * 3, 1.0f);
    for (const auto& n : store.names()) {
      if (n == "model.layers.1.mlp.up_proj.weight") {
        if (mode == "missing") continue;
        tensors.emplace_back(n, bunsen::Tensor::view(wrong.data(), bunsen::DType::kF32, {3, 64}));
        continue;
      }
      tensors.emplace_back(n, store.get(n));
    }
    bunsen::model::write_safetensors((d / "model.safetensors").string(), tensors);
    Proc r = run("generate --model " + d.string() + " --prompt-tokens 1,2");
    EXPECT_EQ(r.code, 1);
    const std::string want = mode == "missing" ? "missing tensor 'model.layers.1.mlp.up_proj.weight'"
                                               : "tensor 'model.layers.1.mlp.up_proj.weight'";
    EXPECT_NE(r.err.find(want), std::string::npos) << r.err;
    if (mode == "shape") {
      EXPECT_NE(r.err.find("has shape [3, 64], expected ["), std::string::npos) << r.err;
    }
  }
}

}  // namespace
}  // namespace bunsen
