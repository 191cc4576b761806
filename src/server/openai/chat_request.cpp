// Chat request parsing (see chat_request.h).
#include "server/openai/chat_request.h"

#include <set>

#include "core/status.h"
#include "server/api/api_error.h"

namespace bunsen::server::openai {
namespace {

std::string at(const std::string& prefix, size_t i) { return prefix + "[" + std::to_string(i) + "]"; }

// String content, or an array of {type:"text", text} parts joined by newlines (what vLLM does for
// string-only templates). Null/absent content is "" for assistants (tool-call turns) and an error otherwise.
std::string content_text(const Json& msg, const std::string& where, bool optional) {
  auto it = msg.find("content");
  if (it == msg.end() || it->is_null()) {
    if (optional) return "";
    bad_request(where + ".content", where + ".content is required for this role");
  }
  if (it->is_string()) return it->get<std::string>();
  if (!it->is_array())
    bad_request(where + ".content", where + ".content must be a string or an array of content parts, got " +
                                        std::string(it->type_name()));
  std::string out;
  for (size_t j = 0; j < it->size(); ++j) {
    const Json& part = (*it)[j];
    const std::string p = at(where + ".content", j);
    if (!part.is_object()) bad_request(p, p + " must be an object");
    const std::string type = get_string(part, "type", "", p);
    if (type != "text")
      bad_request(p + ".type", "content part type '" + type + "' is not supported (only 'text')");
    auto text = part.find("text");
    if (text == part.end() || !text->is_string()) bad_request(p + ".text", p + ".text must be a string");
    if (j > 0) out += "\n";
    out += text->get<std::string>();
  }
  return out;
}

// Assistant tool_calls: [{id, type:"function", function:{name, arguments}}]; arguments given as a JSON
// object string become that object (templates print mappings with tojson), other strings stay strings.
Json convert_tool_calls(const Json& calls, const std::string& where) {
  if (!calls.is_array()) bad_request(where, where + " must be an array");
  Json out = Json::array();
  for (size_t j = 0; j < calls.size(); ++j) {
    const Json& c = calls[j];
    const std::string p = at(where, j);
    if (!c.is_object()) bad_request(p, p + " must be an object");
    const std::string type = get_string(c, "type", "function", p);
    if (type != "function") bad_request(p + ".type", "tool call type '" + type + "' is not supported");
    auto fn = c.find("function");
    if (fn == c.end() || !fn->is_object()) bad_request(p + ".function", p + ".function must be an object");
    const std::string name = get_string(*fn, "name", "", p + ".function");
    if (name.empty()) bad_request(p + ".function.name", p + ".function.name is required");
    Json args = Json::object();
    if (auto a = fn->find("arguments"); a != fn->end() && !a->is_null()) {
      if (a->is_object()) {
        args = *a;
      } else if (a->is_string()) {
        try {
          args = parse_json_body(a->get<std::string>());
        } catch (const ApiError&) {
          args = *a;  // not a JSON object: the template prints the string as it is
        }
      } else {
        bad_request(p + ".function.arguments", p + ".function.arguments must be a JSON string or an object");
      }
    }
    Json call = {{"id", get_string(c, "id", "", p)},
                 {"type", "function"},
                 {"function", {{"name", name}, {"arguments", std::move(args)}}}};
    out.push_back(std::move(call));
  }
  return out;
}

Json convert_message(const Json& msg, size_t i) {
  static const std::set<std::string> kRoles = {"system", "developer", "user", "assistant", "tool"};
  const std::string where = at("messages", i);
  if (!msg.is_object()) bad_request(where, where + " must be an object");
  auto role_it = msg.find("role");
  if (role_it == msg.end() || !role_it->is_string() || !kRoles.count(role_it->get<std::string>()))
    bad_request(where + ".role", where + ".role must be one of system, developer, user, assistant, tool");
  std::string role = role_it->get<std::string>();
  const bool assistant = role == "assistant";
  Json out = {{"role", role == "developer" ? "system" : role}, {"content", content_text(msg, where, assistant)}};
  if (auto name = msg.find("name"); name != msg.end() && !name->is_null()) out["name"] = get_string(msg, "name", "", where);
  if (assistant) {
    if (auto calls = msg.find("tool_calls"); calls != msg.end() && !calls->is_null())
      out["tool_calls"] = convert_tool_calls(*calls, where + ".tool_calls");
    for (const char* key : {"reasoning_content", "reasoning"}) {
      auto r = msg.find(key);
      if (r != msg.end() && r->is_string() && !out.contains("reasoning_content")) out["reasoning_content"] = *r;
    }
  }
  if (role == "tool") {
    auto id = msg.find("tool_call_id");
    if (id != msg.end() && !id->is_null()) out["tool_call_id"] = get_string(msg, "tool_call_id", "", where);
  }
  return out;
}

// tool_choice → whether tool calls are parsed. Named/"required" choices must name a declared tool.
bool parse_tool_choice(const Json& body, const Json& tools) {
  auto it = body.find("tool_choice");
  const bool have_tools = tools.is_array() && !tools.empty();
  if (it == body.end() || it->is_null()) return have_tools;
  if (it->is_string()) {
    const std::string choice = it->get<std::string>();
    if (choice == "none") return false;
    if (choice == "auto") return have_tools;
    if (choice != "required") bad_request("tool_choice", "tool_choice must be auto, none, required or a function");
    if (!have_tools) bad_request("tool_choice", "tool_choice 'required' needs a non-empty 'tools' list");
    return true;
  }
  if (!it->is_object()) bad_request("tool_choice", "tool_choice must be a string or an object");
  if (get_string(*it, "type", "", "tool_choice") != "function")
    bad_request("tool_choice.type", "tool_choice.type must be 'function'");
  auto fn = it->find("function");
  if (fn == it->end() || !fn->is_object()) bad_request("tool_choice.function", "tool_choice.function is required");
  const std::string name = get_string(*fn, "name", "", "tool_choice.function");
  if (have_tools) {
    for (const Json& t : tools)
      if (t.at("function").at("name") == name) return true;
  }
  bad_request("tool_choice.function.name", "tool_choice names '" + name + "', which is not in 'tools'");
}

}  // namespace

Json convert_messages(const Json& body) {
  auto it = body.find("messages");
  if (it == body.end() || it->is_null()) bad_request("messages", "'messages' is required");
  if (!it->is_array()) bad_request("messages", "'messages' must be an array");
  if (it->empty()) bad_request("messages", "'messages' must contain at least one message");
  Json out = Json::array();
  for (size_t i = 0; i < it->size(); ++i) out.push_back(convert_message((*it)[i], i));
  return out;
}

Json convert_tools(const Json& body) {
  auto it = body.find("tools");
  if (it == body.end() || it->is_null()) return nullptr;
  if (!it->is_array()) bad_request("tools", "'tools' must be an array");
  if (it->empty()) return nullptr;
  for (size_t i = 0; i < it->size(); ++i) {
    const Json& t = (*it)[i];
    const std::string p = at("tools", i);
    if (!t.is_object()) bad_request(p, p + " must be an object");
    if (get_string(t, "type", "", p) != "function") bad_request(p + ".type", p + ".type must be 'function'");
    auto fn = t.find("function");
    if (fn == t.end() || !fn->is_object()) bad_request(p + ".function", p + ".function must be an object");
    if (get_string(*fn, "name", "", p + ".function").empty())
      bad_request(p + ".function.name", p + ".function.name is required");
    if (auto params = fn->find("parameters"); params != fn->end() && !params->is_null() && !params->is_object())
      bad_request(p + ".function.parameters", p + ".function.parameters must be a JSON schema object");
  }
  return *it;
}

Json template_kwargs(const Json& body, const ModelService& service) {
  Json kwargs = Json::object();
  if (auto it = body.find("chat_template_kwargs"); it != body.end() && !it->is_null()) {
    if (!it->is_object()) bad_request("chat_template_kwargs", "chat_template_kwargs must be an object");
    kwargs = *it;
  }
  const std::string effort = get_string(body, "reasoning_effort", "");
  if (!effort.empty()) {
    static const std::set<std::string> kEfforts = {"none", "minimal", "low", "medium", "high"};
    if (!kEfforts.count(effort))
      bad_request("reasoning_effort", "reasoning_effort must be one of none, minimal, low, medium, high");
    if (!kwargs.contains("enable_thinking")) kwargs["enable_thinking"] = effort != "none" && effort != "minimal";
    if (!kwargs.contains("reasoning_effort") && effort != "none" && effort != "minimal")
      kwargs["reasoning_effort"] = effort;  // gpt-oss style templates read it
  }
  if (!kwargs.contains("enable_thinking") && service.defaults().thinking)
    kwargs["enable_thinking"] = *service.defaults().thinking;
  return kwargs;
}

std::optional<std::string> request_template(const Json& body) {
  auto it = body.find("chat_template");
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_string()) bad_request("chat_template", "chat_template must be a string");
  return it->get<std::string>();
}

ChatRequest parse_chat_request(const Json& body, ModelService& service) {
  ChatRequest r;
  r.common = parse_common(body, service, {"max_completion_tokens", "max_tokens"});
  r.messages = convert_messages(body);
  r.tools = convert_tools(body);
  r.parse_tool_calls = parse_tool_choice(body, r.tools);
  get_bool(body, "parallel_tool_calls", true);  // type-checked; every call the model makes is returned
  r.kwargs = template_kwargs(body, service);
  r.chat_template = request_template(body);
  const bool logprobs = get_bool(body, "logprobs", false);
  auto top = body.find("top_logprobs");
  if (top != body.end() && !top->is_null()) {
    const int64_t n = get_int_in(body, "top_logprobs", 0, 0, kMaxTopLogprobs);
    if (!logprobs && n > 0) bad_request("top_logprobs", "top_logprobs requires logprobs: true");
    if (logprobs) r.top_logprobs = static_cast<int>(n);
  } else if (logprobs) {
    r.top_logprobs = 0;
  }
  return r;
}

}  // namespace bunsen::server::openai
