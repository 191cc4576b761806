// Anthropic Messages request parsing: content blocks -> template messages, tools, thinking, sampling.
#include "server/anthropic/request.h"

#include <cmath>

#include "core/status.h"
#include "server/api/api_error.h"

namespace bunsen::server::anthropic {
namespace {

std::string at(const std::string& prefix, size_t i) { return strfmt("%s[%zu]", prefix.c_str(), i); }

// A required string field of a block.
std::string need_string(const Json& obj, const char* key, const std::string& param) {
  auto it = obj.find(key);
  if (it == obj.end() || !it->is_string()) bad_request(param + "." + key, std::string(key) + " must be a string");
  return it->get<std::string>();
}

// A block's "type" (required string).
std::string block_type(const Json& block, const std::string& param) {
  if (!block.is_object()) bad_request(param, "content blocks must be objects");
  return need_string(block, "type", param);
}

[[noreturn]] void unsupported_media(const std::string& type, const std::string& param) {
  bad_request(param + ".type", "'" + type + "' content is not supported by this server (text-only model)");
}

// A string, or an array of {type:"text", text} blocks joined with newlines (system, tool_result content).
std::string text_of(const Json& content, const std::string& param) {
  if (content.is_null()) return {};
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) bad_request(param, "must be a string or an array of text blocks");
  std::string out;
  for (size_t i = 0; i < content.size(); ++i) {
    const std::string p = at(param, i);
    const std::string type = block_type(content[i], p);
    if (type == "image" || type == "document") unsupported_media(type, p);
    if (type != "text") bad_request(p + ".type", "expected a text block, got '" + type + "'");
    if (!out.empty()) out += "\n";
    out += need_string(content[i], "text", p);
  }
  return out;
}

// A user turn: text blocks become one user message; each tool_result becomes a "tool" message, in order.
void convert_user(const Json& blocks, const std::string& param, Json& out) {
  std::string text;
  bool have_text = false;
  size_t produced = 0;
  auto flush = [&] {
    if (!have_text) return;
    out.push_back(Json{{"role", "user"}, {"content", text}});
    ++produced;
    text.clear();
    have_text = false;
  };
  for (size_t j = 0; j < blocks.size(); ++j) {
    const std::string p = at(param, j);
    const std::string type = block_type(blocks[j], p);
    if (type == "text") {
      if (have_text) text += "\n";
      text += need_string(blocks[j], "text", p);
      have_text = true;
    } else if (type == "tool_result") {
      flush();
      std::string result = text_of(blocks[j].value("content", Json()), p + ".content");
      auto err = blocks[j].find("is_error");
      if (err != blocks[j].end() && !err->is_null() && !err->is_boolean())
        bad_request(p + ".is_error", "is_error must be a boolean");
      if (err != blocks[j].end() && err->is_boolean() && err->get<bool>()) result = "Error: " + result;
      out.push_back(Json{{"role", "tool"}, {"tool_call_id", need_string(blocks[j], "tool_use_id", p)},
                         {"content", result}});
      ++produced;
    } else if (type == "image" || type == "document") {
      unsupported_media(type, p);
    } else if (type == "tool_use" || type == "thinking" || type == "redacted_thinking") {
      bad_request(p + ".type", "'" + type + "' blocks are only allowed in assistant messages");
    } else {
      bad_request(p + ".type", "unknown content block type '" + type + "'");
    }
  }
  flush();
  if (produced == 0) out.push_back(Json{{"role", "user"}, {"content", ""}});
}

// An assistant turn: text joined, thinking as reasoning_content, tool_use as tool_calls.
void convert_assistant(const Json& blocks, const std::string& param, Json& out) {
  std::string text, reasoning;
  bool have_reasoning = false;
  Json calls = Json::array();
  for (size_t j = 0; j < blocks.size(); ++j) {
    const std::string p = at(param, j);
    const std::string type = block_type(blocks[j], p);
    if (type == "text") {
      text += need_string(blocks[j], "text", p);
    } else if (type == "thinking") {
      if (have_reasoning) reasoning += "\n";
      reasoning += need_string(blocks[j], "thinking", p);
      have_reasoning = true;
    } else if (type == "redacted_thinking") {
      // Opaque to us: nothing to show the model.
    } else if (type == "tool_use") {
      Json input = blocks[j].value("input", Json::object());
      if (!input.is_object()) bad_request(p + ".input", "tool_use input must be an object");
      calls.push_back(Json{{"id", need_string(blocks[j], "id", p)},
                           {"type", "function"},
                           {"function", Json{{"name", need_string(blocks[j], "name", p)}, {"arguments", input}}}});
    } else if (type == "image" || type == "document") {
      unsupported_media(type, p);
    } else if (type == "tool_result") {
      bad_request(p + ".type", "'tool_result' blocks are only allowed in user messages");
    } else {
      bad_request(p + ".type", "unknown content block type '" + type + "'");
    }
  }
  Json msg{{"role", "assistant"}, {"content", text}};
  if (have_reasoning) msg["reasoning_content"] = reasoning;
  if (!calls.empty()) msg["tool_calls"] = std::move(calls);
  out.push_back(std::move(msg));
}

// `system` plus any system-role messages, then the converted turns.
Json convert_messages(const Json& body) {
  auto mit = body.find("messages");
  if (mit == body.end() || !mit->is_array()) bad_request("messages", "messages must be an array");
  if (mit->empty()) bad_request("messages", "messages must contain at least one message");
  std::string system;
  bool have_system = false;
  auto add_system = [&](const std::string& s) {
    if (have_system && !s.empty()) system += "\n";
    system += s;
    have_system = true;
  };
  if (auto sit = body.find("system"); sit != body.end() && !sit->is_null()) add_system(text_of(*sit, "system"));
  Json turns = Json::array();
  for (size_t i = 0; i < mit->size(); ++i) {
    const Json& m = (*mit)[i];
    const std::string p = at("messages", i);
    if (!m.is_object()) bad_request(p, "each message must be an object");
    const std::string role = need_string(m, "role", p);
    auto cit = m.find("content");
    if (cit == m.end() || !(cit->is_string() || cit->is_array()))
      bad_request(p + ".content", "content must be a string or an array of content blocks");
    if (role == "system") {
      add_system(text_of(*cit, p + ".content"));
    } else if (role != "user" && role != "assistant") {
      bad_request(p + ".role", "role must be 'user' or 'assistant', got '" + role + "'");
    } else if (cit->is_string()) {
      turns.push_back(Json{{"role", role}, {"content", *cit}});
    } else if (role == "user") {
      convert_user(*cit, p + ".content", turns);
    } else {
      convert_assistant(*cit, p + ".content", turns);
    }
  }
  Json out = Json::array();
  if (have_system) out.push_back(Json{{"role", "system"}, {"content", system}});
  for (auto& t : turns) out.push_back(std::move(t));
  return out;
}

// Client tools [{name, description, input_schema}] -> OpenAI-shaped; server tools (typed) are skipped.
Json convert_tools(const Json& body) {
  auto it = body.find("tools");
  if (it == body.end() || it->is_null()) return Json::array();
  if (!it->is_array()) bad_request("tools", "tools must be an array");
  Json out = Json::array();
  for (size_t i = 0; i < it->size(); ++i) {
    const Json& t = (*it)[i];
    const std::string p = at("tools", i);
    if (!t.is_object()) bad_request(p, "each tool must be an object");
    std::string type = get_string(t, "type", "custom", p);
    if (type != "custom") continue;  // Anthropic-hosted tools (web_search_..., bash_...) cannot run here
    Json fn{{"name", need_string(t, "name", p)}};
    if (auto d = t.find("description"); d != t.end() && !d->is_null()) fn["description"] = get_string(t, "description", "", p);
    auto schema = t.find("input_schema");
    if (schema == t.end() || !schema->is_object()) bad_request(p + ".input_schema", "input_schema must be an object");
    fn["parameters"] = *schema;
    out.push_back(Json{{"type", "function"}, {"function", std::move(fn)}});
  }
  return out;
}

// tool_choice {type: auto|any|tool|none, name}: none drops the tools; tool keeps only the named one.
void apply_tool_choice(const Json& body, Json& tools, bool& parse) {
  parse = !tools.empty();
  auto it = body.find("tool_choice");
  if (it == body.end() || it->is_null()) return;
  if (!it->is_object()) bad_request("tool_choice", "tool_choice must be an object");
  const std::string type = need_string(*it, "type", "tool_choice");
  if (type == "auto" || type == "any") return;
  if (type == "none") {
    tools = Json::array();
    parse = false;
    return;
  }
  if (type != "tool") bad_request("tool_choice.type", "tool_choice.type must be auto, any, tool or none");
  const std::string name = need_string(*it, "name", "tool_choice");
  Json kept = Json::array();
  for (auto& t : tools)
    if (t["function"]["name"] == name) kept.push_back(t);
  if (kept.empty()) bad_request("tool_choice.name", "tool_choice names '" + name + "', which is not in tools");
  tools = std::move(kept);
}

void apply_thinking(const Json& body, const ServiceDefaults& defaults, Json& kwargs) {
  auto it = body.find("thinking");
  if (it == body.end() || it->is_null()) {
    if (defaults.thinking) kwargs["enable_thinking"] = *defaults.thinking;
    return;
  }
  if (!it->is_object()) bad_request("thinking", "thinking must be an object");
  const std::string type = need_string(*it, "type", "thinking");
  if (type == "enabled" || type == "adaptive") {
    if (type == "enabled" && get_int(*it, "budget_tokens", 1024, "thinking") < 1)
      bad_request("thinking.budget_tokens", "budget_tokens must be >= 1");
    kwargs["enable_thinking"] = true;
  } else if (type == "disabled") {
    kwargs["enable_thinking"] = false;
  } else {
    bad_request("thinking.type", "thinking.type must be 'enabled' or 'disabled'");
  }
}

std::vector<std::string> parse_stop_sequences(const Json& body) {
  std::vector<std::string> out;
  auto it = body.find("stop_sequences");
  if (it == body.end() || it->is_null()) return out;
  if (!it->is_array()) bad_request("stop_sequences", "stop_sequences must be an array of strings");
  constexpr size_t kMaxStopSequences = 64;
  if (it->size() > kMaxStopSequences)
    bad_request("stop_sequences", strfmt("at most %zu stop_sequences are allowed", kMaxStopSequences));
  for (size_t i = 0; i < it->size(); ++i) {
    const Json& s = (*it)[i];
    if (!s.is_string() || s.get<std::string>().empty())
      bad_request(at("stop_sequences", i), "each stop sequence must be a non-empty string");
    out.push_back(s.get<std::string>());
  }
  return out;
}

}  // namespace

Prompt parse_prompt(const Json& body, const ServiceDefaults& defaults) {
  Prompt p;
  p.messages = convert_messages(body);
  Json tools = convert_tools(body);
  apply_tool_choice(body, tools, p.parse_tool_calls);
  if (!tools.empty()) p.tools = std::move(tools);
  apply_thinking(body, defaults, p.kwargs);
  return p;
}

RenderedPrompt render_prompt(const Prompt& prompt, const ModelService& service) {
  RenderedPrompt r;
  r.text = service.render_chat(prompt.messages, prompt.tools, prompt.kwargs);
  r.ids = service.tokenize(r.text, /*add_special=*/false);
  return r;
}

std::string check_model(const Json& body, const ModelService& service) {
  auto it = body.find("model");
  if (it == body.end() || !it->is_string()) bad_request("model", "model is required and must be a string");
  std::string model = it->get<std::string>();
  if (!service.accepts_model(model))
    throw ApiError(404, "not_found_error", "model '" + model + "' not found (this server serves '" +
                                               service.model_id() + "')", "model");
  return model;
}

MessagesRequest parse_messages_request(const Json& body, const ModelService& service) {
  MessagesRequest req;
  req.model = check_model(body, service);
  auto mt = body.find("max_tokens");
  if (mt == body.end() || mt->is_null()) bad_request("max_tokens", "max_tokens is required");
  if (!mt->is_number_integer()) bad_request("max_tokens", "max_tokens must be an integer");
  if (mt->is_number_unsigned() && mt->get<uint64_t>() > (1ull << 40)) bad_request("max_tokens", "max_tokens is too large");
  if (mt->get<int64_t>() < 1) bad_request("max_tokens", "max_tokens must be >= 1");
  req.stream = get_bool(body, "stream", false);
  const ServiceDefaults& d = service.defaults();
  GenerationRequest& g = req.gen;
  g.max_tokens = mt->get<int64_t>();
  g.stop = parse_stop_sequences(body);
  g.sampling.temperature = static_cast<float>(get_number(body, "temperature", d.temperature));
  g.sampling.top_p = static_cast<float>(get_number(body, "top_p", d.top_p));
  int64_t top_k = get_int(body, "top_k", d.top_k);
  if (top_k < 0 || top_k > (1 << 30)) bad_request("top_k", "top_k must be >= 0");
  g.sampling.top_k = static_cast<int>(top_k);
  g.sampling.min_p = d.min_p;
  Prompt prompt = parse_prompt(body, d);
  RenderedPrompt rendered = render_prompt(prompt, service);
  g.prompt = std::move(rendered.ids);
  g.reasoning_open_in_prompt = ModelService::reasoning_open_at_end(rendered.text);
  g.parse_tool_calls = prompt.parse_tool_calls;
  if (!prompt.tools.is_null()) g.tools = nlohmann::json::parse(prompt.tools.dump());
  return req;
}

}  // namespace bunsen::server::anthropic
