// OpenAI Responses request parsing: items -> template messages, tools, reasoning, sampling.
#include "server/responses/request.h"

#include <string>

#include "core/status.h"
#include "server/api/api_error.h"

namespace bunsen::server::responses {
namespace {

std::string at(const std::string& prefix, size_t i) { return strfmt("%s[%zu]", prefix.c_str(), i); }

// A float default as the decimal it was written as (0.7f echoes 0.7, not 0.699999988).
double shortest(float v) { return std::stod(strfmt("%.7g", static_cast<double>(v))); }

std::string need_string(const Json& obj, const char* key, const std::string& param) {
  auto it = obj.find(key);
  if (it == obj.end() || !it->is_string()) bad_request(param + "." + key, std::string(key) + " must be a string");
  return it->get<std::string>();
}

// Message content: a string, or parts [{type: input_text|output_text|text|refusal, text|refusal}].
std::string content_text(const Json& content, const std::string& param, const char* joiner) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) bad_request(param, "content must be a string or an array of content parts");
  std::string out;
  for (size_t j = 0; j < content.size(); ++j) {
    const Json& part = content[j];
    const std::string p = at(param, j);
    if (!part.is_object()) bad_request(p, "content parts must be objects");
    const std::string type = need_string(part, "type", p);
    std::string text;
    if (type == "input_text" || type == "output_text" || type == "text") {
      text = need_string(part, "text", p);
    } else if (type == "refusal") {
      text = need_string(part, "refusal", p);
    } else if (type == "input_image" || type == "input_file" || type == "input_audio") {
      bad_request(p + ".type", "'" + type + "' content is not supported by this server (text-only model)");
    } else {
      bad_request(p + ".type", "unknown content part type '" + type + "'");
    }
    if (j > 0) out += joiner;
    out += text;
  }
  return out;
}

// A reasoning item's text: its reasoning_text content, else its summary.
std::string reasoning_text(const Json& item) {
  std::string out;
  for (const char* key : {"content", "summary"}) {
    auto it = item.find(key);
    if (it == item.end() || !it->is_array()) continue;
    for (const auto& part : *it)
      if (part.is_object() && part.contains("text") && part["text"].is_string()) {
        if (!out.empty()) out += "\n";
        out += part["text"].get<std::string>();
      }
    if (!out.empty()) break;
  }
  return out;
}

// Builds the turns; function_calls join the assistant message right before them.
class Converter {
 public:
  void message(const Json& item, const std::string& p) {
    const std::string role = need_string(item, "role", p);
    auto cit = item.find("content");
    if (cit == item.end()) bad_request(p + ".content", "content is required");
    if (role == "system" || role == "developer") {
      if (have_system_) system_ += "\n";
      system_ += content_text(*cit, p + ".content", "\n");
      have_system_ = true;
    } else if (role == "user") {
      turns_.push_back(Json{{"role", "user"}, {"content", content_text(*cit, p + ".content", "\n")}});
    } else if (role == "assistant") {
      assistant(content_text(*cit, p + ".content", ""));
    } else {
      bad_request(p + ".role", "role must be user, assistant, system or developer, got '" + role + "'");
    }
  }

  void function_call(const Json& item, const std::string& p) {
    const std::string args = need_string(item, "arguments", p);
    // Object arguments render like the model wrote them (tojson spacing), strings verbatim.
    Json parsed;
    try {
      parsed = parse_json_body(args);  // depth-capped; anything but a JSON object stays a string
    } catch (const ApiError&) {
    }
    Json call{{"id", need_string(item, "call_id", p)},
              {"type", "function"},
              {"function", Json{{"name", need_string(item, "name", p)},
                                {"arguments", parsed.is_object() ? parsed : Json(args)}}}};
    if (turns_.empty() || turns_.back()["role"] != "assistant" || !pending_reasoning_.empty()) assistant("");
    Json& last = turns_.back();
    if (!last.contains("tool_calls")) last["tool_calls"] = Json::array();
    last["tool_calls"].push_back(std::move(call));
  }

  void function_call_output(const Json& item, const std::string& p) {
    auto out = item.find("output");
    if (out == item.end()) bad_request(p + ".output", "output is required");
    turns_.push_back(Json{{"role", "tool"},
                          {"tool_call_id", need_string(item, "call_id", p)},
                          {"content", content_text(*out, p + ".output", "\n")}});
  }

  void reasoning(const Json& item) {
    std::string text = reasoning_text(item);
    if (!text.empty()) pending_reasoning_ += text;
  }

  Json finish(const std::string& instructions, bool has_instructions) {
    Json out = Json::array();
    std::string system = instructions;
    if (have_system_) system = has_instructions ? instructions + "\n" + system_ : system_;
    if (has_instructions || have_system_) out.push_back(Json{{"role", "system"}, {"content", system}});
    for (auto& t : turns_) out.push_back(std::move(t));
    return out;
  }

  bool has_turns() const { return !turns_.empty(); }

 private:
  void assistant(std::string content) {
    Json msg{{"role", "assistant"}, {"content", std::move(content)}};
    if (!pending_reasoning_.empty()) msg["reasoning_content"] = std::move(pending_reasoning_);
    pending_reasoning_.clear();
    turns_.push_back(std::move(msg));
  }

  Json turns_ = Json::array();
  std::string system_;
  bool have_system_ = false;
  std::string pending_reasoning_;
};

// Flat function tools [{type:"function", name, description, parameters}] (the chat-style nested shape is
// accepted too); hosted tool types (web_search, file_search, ...) cannot run here and are skipped.
void parse_tools(const Json& body, ResponsesRequest& req) {
  auto it = body.find("tools");
  if (it == body.end() || it->is_null()) return;
  if (!it->is_array()) bad_request("tools", "tools must be an array");
  Json tpl = Json::array();
  for (size_t i = 0; i < it->size(); ++i) {
    const Json& t = (*it)[i];
    const std::string p = at("tools", i);
    if (!t.is_object()) bad_request(p, "each tool must be an object");
    if (need_string(t, "type", p) != "function") continue;
    const Json& fn = t.contains("function") && t["function"].is_object() ? t["function"] : t;
    Json f{{"name", need_string(fn, "name", p)}};
    if (fn.contains("description") && fn["description"].is_string()) f["description"] = fn["description"];
    Json params = fn.value("parameters", Json{{"type", "object"}, {"properties", Json::object()}});
    if (!params.is_object()) bad_request(p + ".parameters", "parameters must be an object");
    f["parameters"] = params;
    req.tools.push_back(t);
    tpl.push_back(Json{{"type", "function"}, {"function", std::move(f)}});
  }
  if (!tpl.empty()) req.template_tools = std::move(tpl);
}

// "auto" | "none" | "required" | {type:"function", name}: none drops the tools, a name keeps only it.
void parse_tool_choice(const Json& body, ResponsesRequest& req) {
  req.parse_tool_calls = !req.template_tools.is_null();
  auto it = body.find("tool_choice");
  if (it == body.end() || it->is_null()) return;
  req.tool_choice = *it;
  if (it->is_string()) {
    const std::string c = it->get<std::string>();
    if (c == "none") {
      req.template_tools = Json();
      req.parse_tool_calls = false;
    } else if (c != "auto" && c != "required") {
      bad_request("tool_choice", "tool_choice must be auto, none, required or a function");
    }
    return;
  }
  if (!it->is_object()) bad_request("tool_choice", "tool_choice must be a string or an object");
  if (it->value("type", "") != "function") return;  // allowed_tools etc.: treated as auto
  const std::string name = need_string(*it, "name", "tool_choice");
  Json kept = Json::array();
  if (!req.template_tools.is_null())
    for (auto& t : req.template_tools)
      if (t["function"]["name"] == name) kept.push_back(t);
  if (kept.empty()) bad_request("tool_choice.name", "tool_choice names '" + name + "', which is not in tools");
  req.template_tools = std::move(kept);
}

void parse_reasoning(const Json& body, const ServiceDefaults& d, ResponsesRequest& req) {
  auto it = body.find("reasoning");
  if (it != body.end() && !it->is_null()) {
    if (!it->is_object()) bad_request("reasoning", "reasoning must be an object");
    const std::string effort = get_string(*it, "effort", "", "reasoning");
    req.reasoning = Json{{"effort", effort.empty() ? Json() : Json(effort)}, {"summary", it->value("summary", Json())}};
    if (!effort.empty()) {
      req.kwargs["enable_thinking"] = effort != "none" && effort != "minimal";
      return;
    }
  } else {
    req.reasoning = Json{{"effort", nullptr}, {"summary", nullptr}};
  }
  if (d.thinking) req.kwargs["enable_thinking"] = *d.thinking;
}

Json normalise_input(const Json& body) {
  auto it = body.find("input");
  if (it == body.end() || it->is_null()) return Json::array();
  if (it->is_string()) return Json::array({Json{{"type", "message"}, {"role", "user"}, {"content", *it}}});
  if (!it->is_array()) bad_request("input", "input must be a string or an array of items");
  return *it;
}

}  // namespace

Json items_to_messages(const Json& items, const std::string& instructions, bool has_instructions, size_t n_history) {
  Converter conv;
  for (size_t i = 0; i < items.size(); ++i) {
    const Json& item = items[i];
    const std::string p = at("input", i >= n_history ? i - n_history : i);
    if (!item.is_object()) bad_request(p, "each input item must be an object");
    std::string type = item.contains("role") && !item.contains("type") ? "message" : need_string(item, "type", p);
    if (type == "message") {
      conv.message(item, p);
    } else if (type == "function_call") {
      conv.function_call(item, p);
    } else if (type == "function_call_output") {
      conv.function_call_output(item, p);
    } else if (type == "reasoning") {
      conv.reasoning(item);
    } else {
      bad_request(p + ".type", "input item type '" + type + "' is not supported");
    }
  }
  if (!conv.has_turns()) bad_request("input", "input must contain at least one message");
  return conv.finish(instructions, has_instructions);
}

ResponsesRequest parse_responses_request(const Json& body, const ModelService& service) {
  ResponsesRequest req;
  std::string model = get_string(body, "model", "");
  if (!model.empty() && !service.accepts_model(model))
    throw ApiError(404, "invalid_request_error", "The model '" + model + "' does not exist", "model", "model_not_found");
  req.model = service.model_id();
  req.stream = get_bool(body, "stream", false);
  req.store = get_bool(body, "store", true);
  req.previous_response_id = get_string(body, "previous_response_id", "");
  req.input_items = normalise_input(body);
  if (auto it = body.find("instructions"); it != body.end() && !it->is_null()) {
    req.instructions = get_string(body, "instructions", "");
    req.has_instructions = true;
  }
  parse_tools(body, req);
  parse_tool_choice(body, req);
  parse_reasoning(body, service.defaults(), req);
  if (auto it = body.find("max_output_tokens"); it != body.end() && !it->is_null()) {
    if (!it->is_number_integer() || it->get<int64_t>() < 1 ||
        (it->is_number_unsigned() && it->get<uint64_t>() > (1ull << 40)))
      bad_request("max_output_tokens", "max_output_tokens must be an integer >= 1");
    req.max_output_tokens = it->get<int64_t>();
  }
  req.parallel_tool_calls = get_bool(body, "parallel_tool_calls", true);
  if (auto it = body.find("metadata"); it != body.end() && !it->is_null()) {
    if (!it->is_object()) bad_request("metadata", "metadata must be an object");
    req.metadata = *it;
  }
  const ServiceDefaults& d = service.defaults();
  auto& s = req.gen.sampling;
  req.temperature = get_number(body, "temperature", shortest(d.temperature));
  req.top_p = get_number(body, "top_p", shortest(d.top_p));
  s.temperature = static_cast<float>(req.temperature);
  s.top_p = static_cast<float>(req.top_p);
  int64_t top_k = get_int(body, "top_k", d.top_k);
  if (top_k < 0 || top_k > (1 << 30)) bad_request("top_k", "top_k must be >= 0");
  s.top_k = static_cast<int>(top_k);
  s.min_p = d.min_p;
  if (auto it = body.find("seed"); it != body.end() && !it->is_null()) {
    if (!it->is_number_integer()) bad_request("seed", "seed must be an integer");
    s.seed = it->is_number_unsigned() ? it->get<uint64_t>() : static_cast<uint64_t>(it->get<int64_t>());
  }
  return req;
}

void build_prompt(ResponsesRequest& req, const Json& history, const ModelService& service) {
  Json items = history;
  for (const auto& item : req.input_items) items.push_back(item);
  Json messages = items_to_messages(items, req.instructions, req.has_instructions, history.size());
  const std::string rendered = service.render_chat(messages, req.template_tools, req.kwargs);
  GenerationRequest& g = req.gen;
  g.prompt = service.tokenize(rendered, /*add_special=*/false);
  g.max_tokens = req.max_output_tokens ? *req.max_output_tokens
                                       : service.default_max_tokens(static_cast<int64_t>(g.prompt.size()));
  g.reasoning_open_in_prompt = ModelService::reasoning_open_at_end(rendered);
  g.parse_tool_calls = req.parse_tool_calls;
  if (!req.template_tools.is_null()) g.tools = nlohmann::json::parse(req.template_tools.dump());
}

}  // namespace bunsen::server::responses
