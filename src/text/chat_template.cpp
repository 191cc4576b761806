// text::ChatTemplate (see chat_template.h): loading from a model directory and HF's render context.
// Not the Jinja engine (jinja/). Invariant: load errors name the directory and the file.
// Templates are parsed once at load; render only builds the context and evaluates.
#include "text/chat_template.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/status.h"
#include "text/jinja/json.h"

namespace bunsen::text {
namespace {

constexpr const char* kSpecialTokenKeys[] = {"bos_token", "eos_token", "unk_token", "sep_token",
                                             "pad_token", "cls_token", "mask_token"};

std::optional<std::string> read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) return std::nullopt;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A special token in tokenizer_config.json: "<s>", {"content": "<s>", ...} or null.
std::optional<std::string> token_text(const nlohmann::ordered_json& j) {
  if (j.is_string()) return j.get<std::string>();
  if (j.is_object() && j.contains("content") && j["content"].is_string()) return j["content"].get<std::string>();
  return std::nullopt;
}

}  // namespace

ChatTemplate::ChatTemplate(const std::string& source, nlohmann::ordered_json special_tokens)
    : special_tokens_(std::move(special_tokens)) {
  templates_.push_back(Named{"default", source, std::make_shared<const jinja::Template>(source)});
}

ChatTemplate ChatTemplate::from_files(std::string_view config_json, const std::optional<std::string>& jinja_file,
                                      const std::string& origin) {
  ChatTemplate t;
  nlohmann::ordered_json cfg = nlohmann::ordered_json::object();
  if (!config_json.empty()) {
    try {
      cfg = nlohmann::ordered_json::parse(config_json);
    } catch (const nlohmann::json::exception& e) {
      throw Error("template", origin + "/tokenizer_config.json: " + e.what());
    }
    if (!cfg.is_object()) throw Error("template", origin + "/tokenizer_config.json: not a JSON object");
  }
  for (const char* key : kSpecialTokenKeys)
    if (auto it = cfg.find(key); it != cfg.end())
      if (auto text = token_text(*it)) t.special_tokens_[key] = *text;
  // Model-specific named tokens (Gemma 3's boi_token, image_token, ...) become attributes in HF too.
  if (auto it = cfg.find("extra_special_tokens"); it != cfg.end() && it->is_object())
    for (const auto& [k, v] : it->items())
      if (auto text = token_text(v)) t.special_tokens_[k] = *text;
  if (auto it = cfg.find("additional_special_tokens"); it != cfg.end() && it->is_array()) {
    nlohmann::ordered_json list = nlohmann::ordered_json::array();
    for (const auto& v : *it)
      if (auto text = token_text(v)) list.push_back(*text);
    t.special_tokens_["additional_special_tokens"] = std::move(list);
  }
  auto add = [&](const std::string& name, const std::string& src, const std::string& file) {
    try {
      t.templates_.push_back(Named{name, src, std::make_shared<const jinja::Template>(src)});
    } catch (const Error& e) {
      throw Error("template", origin + "/" + file + ": " + e.message());
    }
  };
  if (jinja_file) {
    add("default", *jinja_file, "chat_template.jinja");
    return t;
  }
  auto it = cfg.find("chat_template");
  if (it == cfg.end() || it->is_null()) throw Error("template", origin + ": no chat template (no chat_template.jinja and "
                                                                         "no chat_template in tokenizer_config.json)");
  if (it->is_string()) {
    add("default", it->get<std::string>(), "tokenizer_config.json");
  } else if (it->is_array()) {
    for (const auto& e : *it) {
      if (!e.is_object() || !e.contains("name") || !e.contains("template") || !e["name"].is_string() ||
          !e["template"].is_string())
        throw Error("template", origin + "/tokenizer_config.json: chat_template list entries need string name and template");
      add(e["name"].get<std::string>(), e["template"].get<std::string>(), "tokenizer_config.json");
    }
  } else {
    throw Error("template", origin + "/tokenizer_config.json: chat_template must be a string or a list");
  }
  return t;
}

ChatTemplate ChatTemplate::load(const std::string& dir) {
  namespace fs = std::filesystem;
  std::optional<std::string> jinja_file = read_file(fs::path(dir) / "chat_template.jinja");
  std::optional<std::string> cfg = read_file(fs::path(dir) / "tokenizer_config.json");
  return from_files(cfg ? *cfg : std::string(), jinja_file, dir);
}

bool ChatTemplate::available(const std::string& dir) {
  namespace fs = std::filesystem;
  if (fs::exists(fs::path(dir) / "chat_template.jinja")) return true;
  std::optional<std::string> cfg = read_file(fs::path(dir) / "tokenizer_config.json");
  if (!cfg) return false;
  auto j = nlohmann::ordered_json::parse(*cfg, nullptr, /*allow_exceptions=*/false);
  return j.is_object() && j.contains("chat_template") && !j["chat_template"].is_null();
}

const ChatTemplate::Named& ChatTemplate::pick(bool has_tools) const {
  if (templates_.size() == 1) return templates_[0];
  if (has_tools)
    for (const auto& n : templates_)
      if (n.name == "tool_use") return n;
  for (const auto& n : templates_)
    if (n.name == "default") return n;
  throw Error("template", "This model has multiple chat templates with no default specified");
}

const std::string& ChatTemplate::source() const { return pick(false).source; }

std::string ChatTemplate::render(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                                 bool add_generation_prompt, const nlohmann::ordered_json& kwargs,
                                 const jinja::Limits& limits) const {
  using jinja::Value;
  jinja::Dict ctx;
  for (const auto& [k, v] : special_tokens_.items()) ctx.set(Value::string(k), jinja::from_json(v));
  if (!kwargs.is_null()) {
    if (!kwargs.is_object()) throw Error("template", "chat template kwargs must be a JSON object");
    for (const auto& [k, v] : kwargs.items()) {
      if (k == "messages" || k == "tools" || k == "documents" || k == "add_generation_prompt")
        throw Error("template", "TypeError: got multiple values for keyword argument '" + k + "'");
      ctx.set(Value::string(k), jinja::from_json(v));
    }
  }
  ctx.set(Value::string("messages"), jinja::from_json(messages));
  ctx.set(Value::string("tools"), tools.is_null() ? Value::none() : jinja::from_json(tools));
  ctx.set(Value::string("documents"), Value::none());
  ctx.set(Value::string("add_generation_prompt"), Value::boolean(add_generation_prompt));
  return pick(!tools.is_null()).tpl->render(ctx, limits);
}

}  // namespace bunsen::text
