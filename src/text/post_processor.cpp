// TemplateProcessing / BertProcessing / RobertaProcessing / ByteLevel / Sequence post-processors for single
// sequences. Not pair encoding and not offsets (trim_offsets has no effect on ids). Invariant: a template's
// special token ids come from the template's own "special_tokens" table, as in HF, not from the vocab.
#include "text/post_processor.h"

#include <nlohmann/json.hpp>
#include <string>

#include "core/status.h"
#include "text/json_util.h"

namespace bunsen::text {
namespace {

class TemplateProcessor final : public PostProcessor {
 public:
  explicit TemplateProcessor(const nlohmann::json& j) {
    const auto& specials = j.contains("special_tokens") ? j.at("special_tokens") : nlohmann::json::object();
    for (const auto& item : j.at("single")) {
      if (item.contains("Sequence")) {
        check(item.at("Sequence").value("id", "A") == "A", "tokenizer",
              "template 'single' may only use sequence A");
        items_.push_back({true, {}});
        continue;
      }
      check(item.contains("SpecialToken"), "tokenizer", "template item must be Sequence or SpecialToken");
      std::string name = item.at("SpecialToken").at("id").get<std::string>();
      check(specials.contains(name), "tokenizer",
            "template special token '" + name + "' is not in special_tokens");
      items_.push_back({false, specials.at(name).at("ids").get<std::vector<int32_t>>()});
    }
  }
  void add_special(std::vector<int32_t>& ids) const override {
    std::vector<int32_t> out;
    for (const Item& it : items_) {
      if (it.is_sequence)
        out.insert(out.end(), ids.begin(), ids.end());
      else
        out.insert(out.end(), it.ids.begin(), it.ids.end());
    }
    ids = std::move(out);
  }

 private:
  struct Item {
    bool is_sequence;
    std::vector<int32_t> ids;
  };
  std::vector<Item> items_;
};

// BertProcessing and RobertaProcessing: [cls] A [sep] for a single sequence; ids from their ["tok", id]
// pairs.
class ClsSepProcessor final : public PostProcessor {
 public:
  explicit ClsSepProcessor(const nlohmann::json& j) : cls_(pair_id(j, "cls")), sep_(pair_id(j, "sep")) {}
  void add_special(std::vector<int32_t>& ids) const override {
    ids.insert(ids.begin(), cls_);
    ids.push_back(sep_);
  }

 private:
  static int32_t pair_id(const nlohmann::json& j, const char* key) {
    const auto& p = j.at(key);
    check(p.is_array() && p.size() == 2, "tokenizer", std::string("'") + key + "' must be [token, id]");
    return p[1].get<int32_t>();
  }
  int32_t cls_, sep_;
};

class NoOpProcessor final : public PostProcessor {
 public:
  void add_special(std::vector<int32_t>&) const override {}
};

class SequenceProcessor final : public PostProcessor {
 public:
  explicit SequenceProcessor(std::vector<std::unique_ptr<PostProcessor>> parts) : parts_(std::move(parts)) {}
  void add_special(std::vector<int32_t>& ids) const override {
    for (const auto& p : parts_) p->add_special(ids);
  }

 private:
  std::vector<std::unique_ptr<PostProcessor>> parts_;
};

}  // namespace

std::unique_ptr<PostProcessor> make_post_processor(const nlohmann::json& j) {
  json_util::NestingGuard nesting;
  if (j.is_null()) return nullptr;
  const std::string type = json_util::get_string(j, "type");
  if (type == "TemplateProcessing") return std::make_unique<TemplateProcessor>(j);
  if (type == "BertProcessing" || type == "RobertaProcessing") return std::make_unique<ClsSepProcessor>(j);
  if (type == "ByteLevel") return std::make_unique<NoOpProcessor>();  // only trims offsets in HF
  if (type == "Sequence") {
    std::vector<std::unique_ptr<PostProcessor>> parts;
    for (const auto& p : j.at("processors")) {
      auto part = make_post_processor(p);
      if (part) parts.push_back(std::move(part));
    }
    return std::make_unique<SequenceProcessor>(std::move(parts));
  }
  throw Error("tokenizer", "unsupported post_processor type '" + type + "'");
}

}  // namespace bunsen::text
