// POST /v1/chat/completions: parse (chat_request.h), render + tokenize, then n generations through a
// Multiplex that either streams chat.completion.chunk events or answers one chat.completion body.
// Stream grammar per choice: a role chunk {role:"assistant", content:""}, content / reasoning_content /
// tool_calls deltas (one chunk per tool call, whole), a chunk with finish_reason; after every choice
// ended: an optional usage chunk (empty choices), then `data: [DONE]`. Prefill heartbeats are SSE comments.
#include <nlohmann/json.hpp>

#include "server/api/error_shapes.h"
#include "server/openai/chat_request.h"
#include "server/openai/handlers.h"
#include "server/openai/multiplex.h"
#include "server/openai/response_json.h"

namespace bunsen::server::openai {
namespace {

constexpr const char* kRoute = "/v1/chat/completions";

struct Meta {
  std::string id = random_id("chatcmpl-");
  int64_t created = unix_now();
  std::string model;
};

Json tool_call_json(const text::ToolCall& call, size_t index, bool with_index) {
  Json j = Json::object();
  if (with_index) j["index"] = index;
  j["id"] = call.id;
  j["type"] = "function";
  j["function"] = {{"name", call.name}, {"arguments", call.arguments}};
  return j;
}

class ChatStream final : public Multiplex {
 public:
  ChatStream(ModelService& service, http::Responder responder, Meta meta, bool include_usage, bool logprobs)
      : service_(service), responder_(std::move(responder)), meta_(std::move(meta)), include_usage_(include_usage),
        logprobs_(logprobs) {}

 private:
  void begin() override {
    tool_index_.assign(n_choices(), 0);
    sse_ = responder_.start_sse();
    if (!sse_.is_open()) {
      failed_ = true;
      request_cancel();
      return;
    }
    service_.metrics().record_request(kRoute, 200);
    for (size_t i = 0; i < n_choices(); ++i) send(chunk(i, Json{{"role", "assistant"}, {"content", ""}}));
  }

  void on_event(size_t i, GenerationEvent& ev) override {
    if (failed_) return;
    switch (ev.kind) {
      case GenerationEvent::Kind::kHeartbeat:
        if (!sse_.comment("ping")) fail_quietly();
        return;
      case GenerationEvent::Kind::kContent:
        send(chunk(i, Json{{"content", ev.text}}, &ev.logprobs));
        return;
      case GenerationEvent::Kind::kReasoning:
        send(chunk(i, Json{{"reasoning_content", ev.text}}, &ev.logprobs));
        return;
      case GenerationEvent::Kind::kToolCall: {
        Json calls = Json::array({tool_call_json(ev.tool_call, tool_index_[i]++, true)});
        send(chunk(i, Json{{"tool_calls", std::move(calls)}}, &ev.logprobs));
        return;
      }
      case GenerationEvent::Kind::kFinish: {
        usage_.add(ev.usage, i == 0);
        Json c = chunk(i, Json::object(), ev.logprobs.empty() ? nullptr : &ev.logprobs);
        c["choices"][0]["finish_reason"] = finish_reason(ev);
        send(c);
        return;
      }
      case GenerationEvent::Kind::kError:
        sse_.send("", openai_error_json(generation_error(ev.error_type, ev.error_message)));
        sse_.close();
        fail_quietly();
        return;
    }
  }

  void on_complete() override {
    if (failed_) return;
    if (include_usage_) {
      Json u = envelope();
      u["choices"] = Json::array();
      u["usage"] = usage_.json();
      send(u);
    }
    sse_.send("", "[DONE]");
    sse_.close();
  }

  Json envelope() const {
    return Json{{"id", meta_.id},
                {"object", "chat.completion.chunk"},
                {"created", meta_.created},
                {"model", meta_.model},
                {"system_fingerprint", kSystemFingerprint}};
  }

  Json chunk(size_t i, Json delta, const std::vector<TokenLogprob>* lps = nullptr) const {
    Json choice = {{"index", i}, {"delta", std::move(delta)}, {"logprobs", nullptr}, {"finish_reason", nullptr}};
    if (logprobs_ && lps) choice["logprobs"] = chat_logprobs(*lps);
    Json c = envelope();
    c["choices"] = Json::array({std::move(choice)});
    return c;
  }

  void send(const Json& j) {
    if (!failed_ && !sse_.send("", dump(j))) fail_quietly();
  }
  void fail_quietly() {  // the client is gone or the stream is over: stop every choice
    failed_ = true;
    request_cancel();
  }

  ModelService& service_;
  http::Responder responder_;
  http::SseStream sse_;
  Meta meta_;
  bool include_usage_, logprobs_;
  bool failed_ = false;
  std::vector<size_t> tool_index_;  // per choice: the next tool_calls[].index
  UsageTotals usage_;
};

class ChatCollect final : public Multiplex {
 public:
  ChatCollect(ModelService& service, http::Responder responder, Meta meta, bool logprobs)
      : service_(service), responder_(std::move(responder)), meta_(std::move(meta)), logprobs_(logprobs) {}

 private:
  void begin() override { results_.resize(n_choices()); }
  void on_event(size_t i, GenerationEvent& ev) override { results_[i].add(ev); }

  void on_complete() override {
    UsageTotals usage;
    Json choices = Json::array();
    for (size_t i = 0; i < results_.size(); ++i) {
      const ChoiceResult& r = results_[i];
      if (r.failed) {
        answer_error(responder_, service_, kRoute, generation_error(r.error_type, r.error_message));
        return;
      }
      usage.add(r.usage, i == 0);
      choices.push_back(choice_json(i, r));
    }
    Json body = {{"id", meta_.id},
                 {"object", "chat.completion"},
                 {"created", meta_.created},
                 {"model", meta_.model},
                 {"system_fingerprint", kSystemFingerprint},
                 {"choices", std::move(choices)},
                 {"usage", usage.json()}};
    answer_json(responder_, service_, kRoute, body);
  }

  Json choice_json(size_t i, const ChoiceResult& r) const {
    Json message = {{"role", "assistant"}};
    // OpenAI sends content null on a pure tool-call turn.
    message["content"] = r.content.empty() && !r.tool_calls.empty() ? Json(nullptr) : Json(r.content);
    if (!r.reasoning.empty()) message["reasoning_content"] = r.reasoning;
    if (!r.tool_calls.empty()) {
      Json calls = Json::array();
      for (size_t k = 0; k < r.tool_calls.size(); ++k) calls.push_back(tool_call_json(r.tool_calls[k], k, false));
      message["tool_calls"] = std::move(calls);
    }
    return Json{{"index", i},
                {"message", std::move(message)},
                {"logprobs", logprobs_ ? chat_logprobs(r.logprobs) : Json(nullptr)},
                {"finish_reason", r.finish_reason()}};
  }

  ModelService& service_;
  http::Responder responder_;
  Meta meta_;
  bool logprobs_;
  std::vector<ChoiceResult> results_;
};

GenerationRequest build_request(ModelService& service, const ChatRequest& cr) {
  const std::string rendered = service.render_chat(cr.messages, cr.tools, cr.kwargs, cr.chat_template);
  GenerationRequest g;
  g.prompt = service.tokenize(rendered, /*add_special=*/false);
  if (g.prompt.empty()) bad_request("messages", "the rendered prompt is empty");
  g.sampling = cr.common.sampling;
  g.max_tokens = cr.common.max_tokens.value_or(service.default_max_tokens(static_cast<int64_t>(g.prompt.size())));
  g.ignore_eos = cr.common.ignore_eos;
  g.stop = cr.common.stop;
  g.top_logprobs = cr.top_logprobs;
  g.parse_reasoning = true;
  g.reasoning_open_in_prompt = ModelService::reasoning_open_at_end(rendered);
  g.parse_tool_calls = cr.parse_tool_calls;
  if (cr.tools.is_array()) g.tools = nlohmann::json::parse(dump(cr.tools));
  return g;
}

}  // namespace

void handle_chat(ModelService& service, http::Request& request, http::Responder responder) {
  try {
    const Json body = parse_json_body(request.body);
    const ChatRequest cr = parse_chat_request(body, service);
    GenerationRequest g = build_request(service, cr);
    Meta meta;
    meta.model = cr.common.model;
    const bool logprobs = cr.top_logprobs >= 0;
    std::shared_ptr<Multiplex> run;
    if (cr.common.stream) {
      run = std::make_shared<ChatStream>(service, responder, std::move(meta), cr.common.include_usage, logprobs);
    } else {
      run = std::make_shared<ChatCollect>(service, responder, std::move(meta), logprobs);
    }
    run->cancel_on_disconnect(responder);
    run->launch(service, expand_choices(g, cr.common.n));
  } catch (const std::exception& e) {
    answer_error(responder, service, kRoute, to_api_error(e));
  }
}

}  // namespace bunsen::server::openai
