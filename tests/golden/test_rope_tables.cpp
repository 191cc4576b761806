// RoPE inverse frequencies and cos/sin scaling for every scaling variant, against the tables transformers'
// own rope init functions produced (tests/golden/data/rope_tables.safetensors).
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "golden_file.h"
#include "model/config.h"

namespace bunsen::golden {
namespace {

TEST(RopeTables, MatchTransformers) {
  const std::string path = data_dir() + "/rope_tables.safetensors";
  model::MappedFile file(path);
  auto header = model::parse_safetensors_header(file.data(), file.size(), path);
  auto store = model::WeightStore::open_file(path);
  auto cases = nlohmann::json::parse(header.metadata.at("cases"));
  ASSERT_GE(cases.size(), 15u);
  for (const auto& c : cases) {
    const std::string name = c.get<std::string>();
    model::ModelConfig cfg = model::parse_config(header.metadata.at(name + ".config"), name);
    const std::string seq = header.metadata.at(name + ".seq_len");
    model::RopeTable t = model::compute_rope(cfg, seq == "none" ? 0 : std::stoll(seq));
    std::vector<float> ref = to_f32(store.get(name + ".inv_freq"));
    ASSERT_EQ(t.inv_freq.size(), ref.size()) << name;
    for (size_t i = 0; i < ref.size(); ++i)
      EXPECT_NEAR(t.inv_freq[i], ref[i], 2e-6 * std::fabs(ref[i])) << name << " [" << i << "]";
    EXPECT_NEAR(t.attention_scaling, std::stod(header.metadata.at(name + ".attention_scaling")), 1e-6) << name;
  }
}

}  // namespace
}  // namespace bunsen::golden
