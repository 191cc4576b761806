// Black-box --kv-quant on bunsen generate: int8 greedy decode of the demo model equals the f32-KV one
// (int4 and fp8 run to the end); DIR/kv_config.json is read by default (a bad file fails with a one-line
// error naming it; "mode": "fp8" entries are taken) and ignored under --kv-quant off; unknown values are
// one-line errors.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "cli_test_util.h"

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

std::vector<int32_t> ids_of(const Proc& r) {
  return nlohmann::json::parse(r.out).at("generated_ids").get<std::vector<int32_t>>();
}

// The demo model's files linked into a fresh directory with `kv_config` as its kv_config.json.
std::string demo_with_kv_config(const std::string& name, const std::string& kv_config) {
  const fs::path demo = fs::path(cache()) / "models" / "demo-qwen3-tiny";
  const fs::path d = fs::path(cli_test::scratch_dir()) / name;
  fs::remove_all(d);
  fs::create_directories(d);
  for (const auto& e : fs::directory_iterator(demo)) fs::create_symlink(e.path(), d / e.path().filename());
  std::ofstream(d / "kv_config.json") << kv_config;
  return d.string();
}

TEST(CliKvQuant, Int8GreedyMatchesF32Kv) {
  const std::string args = "generate --prompt-tokens 3,14,15,92,65,35 --max-tokens 24 --temperature 0 --json --device cpu";
  Proc off = run(args + " --kv-quant off");
  ASSERT_EQ(off.code, 0) << off.err;
  Proc q8 = run(args + " --kv-quant 8");
  ASSERT_EQ(q8.code, 0) << q8.err;
  EXPECT_EQ(ids_of(q8), ids_of(off));
  Proc q4 = run(args + " --kv-quant 4");
  ASSERT_EQ(q4.code, 0) << q4.err;
  EXPECT_EQ(ids_of(q4).size(), ids_of(off).size());
  Proc f8 = run(args + " --kv-quant fp8");
  ASSERT_EQ(f8.code, 0) << f8.err;
  EXPECT_EQ(ids_of(f8).size(), ids_of(off).size());
}

TEST(CliKvQuant, KvConfigIsTheDefaultWhenPresent) {
  ASSERT_EQ(run("generate --prompt-tokens 1 --max-tokens 1 --json --device cpu").code, 0);  // the demo exists
  const std::string good = demo_with_kv_config("good", R"([{"layer_idx": 0, "bits": 8, "group_size": 64},
                                                          {"layer_idx": 1, "bits": 4, "group_size": 64}])");
  Proc ok = run("generate --model " + good + " --prompt-tokens 1,2,3 --max-tokens 4 --json --device cpu");
  EXPECT_EQ(ok.code, 0) << ok.err;
  const std::string fp8 = demo_with_kv_config("fp8", R"([{"layer_idx": 0, "mode": "fp8"},
                                                         {"layer_idx": 1, "bits": 8, "mode": "fp8", "group_size": 32}])");
  Proc f = run("generate --model " + fp8 + " --prompt-tokens 1,2,3 --max-tokens 4 --json --device cpu");
  EXPECT_EQ(f.code, 0) << f.err;
  const std::string fp8_bits = demo_with_kv_config("fp8_bits", R"([{"layer_idx": 0, "bits": 4, "mode": "fp8"}])");
  Proc fb = run("generate --model " + fp8_bits + " --prompt-tokens 1 --device cpu");
  EXPECT_EQ(fb.code, 2);
  EXPECT_NE(fb.err.find("fp8 needs bits 8"), std::string::npos) << fb.err;
  const std::string bad = demo_with_kv_config("bad", R"([{"layer_idx": 99, "bits": 8}])");
  Proc r = run("generate --model " + bad + " --prompt-tokens 1,2,3 --max-tokens 4 --device cpu");
  EXPECT_EQ(r.code, 2);  // a usage error ("cli")
  EXPECT_NE(r.err.find("kv_config.json: layer_idx 99"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  Proc off = run("generate --model " + bad + " --prompt-tokens 1,2,3 --max-tokens 4 --json --device cpu --kv-quant off");
  EXPECT_EQ(off.code, 0) << off.err;
  const std::string bits = demo_with_kv_config("bits", R"([{"layer_idx": 0, "bits": 3}])");
  Proc b = run("generate --model " + bits + " --prompt-tokens 1 --device cpu --kv-quant config");
  EXPECT_EQ(b.code, 2);
  EXPECT_NE(b.err.find("bits 3 must be 4 or 8"), std::string::npos) << b.err;
}

TEST(CliKvQuant, UnknownValueIsOneLineError) {
  Proc r = run("generate --prompt-tokens 1,2 --kv-quant fp16 --device cpu");
  EXPECT_EQ(r.code, 2);  // a usage error ("cli")
  EXPECT_NE(r.err.find("--kv-quant must be off, 4, 8, fp8 or config, got 'fp16'"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace bunsen
