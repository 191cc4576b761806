// Post-processors of tokenizer.json ("post_processor"), applied when add_special is requested:
// TemplateProcessing (single-sequence template: special tokens around $A), BertProcessing and
// RobertaProcessing ([CLS] A [SEP]), ByteLevel (no change to ids) and Sequence. Not pair encoding (the engine
// never encodes pairs) and not offsets. Invariant: the ids of the input sequence appear unchanged and in
// order in the output.
#pragma once
#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <vector>

namespace bunsen::text {

class PostProcessor {
 public:
  virtual ~PostProcessor() = default;
  virtual void add_special(std::vector<int32_t>& ids) const = 0;
};

// nullptr for a JSON null. Throws Error("tokenizer", ...) for unknown or unsupported types.
std::unique_ptr<PostProcessor> make_post_processor(const nlohmann::json& j);

}  // namespace bunsen::text
