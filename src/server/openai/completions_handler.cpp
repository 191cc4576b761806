// POST /v1/completions: a raw prompt (a string, a token-id array, or a batch of either) generated without
// a chat template, reasoning or tool parsing. Choice index = prompt index * n + choice. `echo` prepends
// the prompt text; `logprobs` (0..5) answers in the legacy shape for the generated tokens (prompt tokens
// get no logprobs: the engine computes none for them); `suffix` is refused. Not chat.
#include <nlohmann/json.hpp>

#include "core/status.h"
#include "server/api/error_shapes.h"
#include "server/openai/handlers.h"
#include "server/openai/multiplex.h"
#include "server/openai/request_fields.h"
#include "server/openai/response_json.h"

namespace bunsen::server::openai {
namespace {

constexpr const char* kRoute = "/v1/completions";
constexpr size_t kMaxPrompts = 32;   // prompts in one batch
constexpr int kMaxLegacyLogprobs = 5;

struct Prompt {
  std::vector<int32_t> ids;
  std::string text;  // what echo prepends
};

std::vector<Prompt> parse_prompts(const Json& body, ModelService& service) {
  auto it = body.find("prompt");
  if (it == body.end() || it->is_null()) bad_request("prompt", "'prompt' is required");
  const bool add_special = get_bool(body, "add_special_tokens", true);
  const int64_t vocab = std::min(service.tokenizer().vocab_size(), service.backend().vocab_size());
  auto from_text = [&](const std::string& s) { return Prompt{service.tokenize(s, add_special), s}; };
  auto from_ids = [&](const Json& arr) {
    Prompt p;
    p.ids = parse_token_ids(arr, vocab, "prompt");
    p.text = service.tokenizer().decode(p.ids);
    return p;
  };
  std::vector<Prompt> out;
  if (it->is_string()) {
    out.push_back(from_text(it->get<std::string>()));
  } else if (!it->is_array() || it->empty()) {
    bad_request("prompt", "'prompt' must be a string, an array of token ids, or a non-empty array of those");
  } else if ((*it)[0].is_number()) {
    out.push_back(from_ids(*it));
  } else {
    if (it->size() > kMaxPrompts) bad_request("prompt", strfmt("at most %zu prompts per request", kMaxPrompts));
    for (const Json& p : *it) {
      if (p.is_string()) {
        out.push_back(from_text(p.get<std::string>()));
      } else if (p.is_array()) {
        out.push_back(from_ids(p));
      } else {
        bad_request("prompt", "each prompt of a batch must be a string or an array of token ids");
      }
    }
  }
  for (const Prompt& p : out)
    if (p.ids.empty()) bad_request("prompt", "the prompt is empty (it has no tokens)");
  return out;
}

struct Meta {
  std::string id = random_id("cmpl-");
  int64_t created = unix_now();
  std::string model;
  int n = 1;
  bool echo = false;
  bool logprobs = false;
  bool include_usage = false;
  bool stream = false;
  std::vector<std::string> echo_text;  // per choice
};

Json envelope(const Meta& m) {
  return Json{{"id", m.id},
              {"object", "text_completion"},
              {"created", m.created},
              {"model", m.model},
              {"system_fingerprint", kSystemFingerprint}};
}

class CompletionStream final : public Multiplex {
 public:
  CompletionStream(ModelService& service, http::Responder responder, Meta meta)
      : service_(service), responder_(std::move(responder)), meta_(std::move(meta)) {}

 private:
  void begin() override {
    offsets_.assign(n_choices(), 0);
    sse_ = responder_.start_sse();
    if (!sse_.is_open()) return fail();
    service_.metrics().record_request(kRoute, 200);
    if (!meta_.echo) return;
    for (size_t i = 0; i < n_choices(); ++i) {
      offsets_[i] = meta_.echo_text[i].size();
      send(chunk(i, meta_.echo_text[i], nullptr, nullptr));
    }
  }

  void on_event(size_t i, GenerationEvent& ev) override {
    if (failed_) return;
    switch (ev.kind) {
      case GenerationEvent::Kind::kHeartbeat:
        if (!sse_.comment("ping")) fail();
        return;
      case GenerationEvent::Kind::kError:
        sse_.send("", openai_error_json(generation_error(ev.error_type, ev.error_message)));
        sse_.close();
        return fail();
      case GenerationEvent::Kind::kFinish: {
        usage_.add(ev.usage, i % static_cast<size_t>(meta_.n) == 0);
        const std::string reason = finish_reason(ev);
        send(chunk(i, "", &ev.logprobs, &reason));
        return;
      }
      default:  // content (nothing else is parsed here); tool calls cannot occur
        send(chunk(i, ev.text, &ev.logprobs, nullptr));
        return;
    }
  }

  void on_complete() override {
    if (failed_) return;
    if (meta_.include_usage) {
      Json u = envelope(meta_);
      u["choices"] = Json::array();
      u["usage"] = usage_.json();
      send(u);
    }
    sse_.send("", "[DONE]");
    sse_.close();
  }

  Json chunk(size_t i, const std::string& text, const std::vector<TokenLogprob>* lps, const std::string* reason) {
    Json logprobs = nullptr;
    if (meta_.logprobs && lps && !lps->empty()) {
      LegacyLogprobs l;
      l.add(*lps, offsets_[i]);
      logprobs = l.json();
    }
    Json c = envelope(meta_);
    c["choices"] = Json::array({Json{{"index", i},
                                     {"text", text},
                                     {"logprobs", std::move(logprobs)},
                                     {"finish_reason", reason ? Json(*reason) : Json(nullptr)}}});
    return c;
  }

  void send(const Json& j) {
    if (!failed_ && !sse_.send("", dump(j))) fail();
  }
  void fail() {
    failed_ = true;
    request_cancel();
  }

  ModelService& service_;
  http::Responder responder_;
  http::SseStream sse_;
  Meta meta_;
  bool failed_ = false;
  std::vector<size_t> offsets_;  // per choice: byte offset of the next token in the choice's text
  UsageTotals usage_;
};

class CompletionCollect final : public Multiplex {
 public:
  CompletionCollect(ModelService& service, http::Responder responder, Meta meta)
      : service_(service), responder_(std::move(responder)), meta_(std::move(meta)) {}

 private:
  void begin() override { results_.resize(n_choices()); }
  void on_event(size_t i, GenerationEvent& ev) override { results_[i].add(ev); }

  void on_complete() override {
    UsageTotals usage;
    Json choices = Json::array();
    for (size_t i = 0; i < results_.size(); ++i) {
      const ChoiceResult& r = results_[i];
      if (r.failed) return answer_error(responder_, service_, kRoute, generation_error(r.error_type, r.error_message));
      usage.add(r.usage, i % static_cast<size_t>(meta_.n) == 0);
      const std::string prefix = meta_.echo ? meta_.echo_text[i] : std::string();
      Json logprobs = nullptr;
      if (meta_.logprobs) {
        LegacyLogprobs l;
        size_t offset = prefix.size();
        l.add(r.logprobs, offset);
        logprobs = l.json();
      }
      // Reasoning markup is not parsed here, but if a family parser reported any, it is still text.
      choices.push_back(Json{{"index", i},
                             {"text", prefix + r.reasoning + r.content},
                             {"logprobs", std::move(logprobs)},
                             {"finish_reason", r.finish_reason()}});
    }
    Json body = envelope(meta_);
    body["choices"] = std::move(choices);
    body["usage"] = usage.json();
    answer_json(responder_, service_, kRoute, body);
  }

  ModelService& service_;
  http::Responder responder_;
  Meta meta_;
  std::vector<ChoiceResult> results_;
};

// Reads the whole request into `meta` (what the answer needs) and the per-choice generation requests.
std::vector<GenerationRequest> parse_completion(const Json& body, ModelService& service, Meta& meta) {
  const CommonParams common = parse_common(body, service, {"max_tokens"});
  if (auto s = body.find("suffix"); s != body.end() && !s->is_null() && !(s->is_string() && s->get<std::string>().empty()))
    bad_request("suffix", "suffix is not supported");
  get_int_in(body, "best_of", common.n, common.n, common.n);  // only best_of == n (no re-ranking)
  const int64_t logprobs = get_int_in(body, "logprobs", -1, 0, kMaxLegacyLogprobs);
  meta.model = common.model;
  meta.n = common.n;
  meta.echo = get_bool(body, "echo", false);
  meta.logprobs = logprobs >= 0;
  meta.include_usage = common.include_usage;
  meta.stream = common.stream;
  std::vector<GenerationRequest> requests;
  for (const Prompt& p : parse_prompts(body, service)) {
    GenerationRequest g;
    g.prompt = p.ids;
    g.sampling = common.sampling;
    g.max_tokens = common.max_tokens.value_or(service.default_max_tokens(static_cast<int64_t>(p.ids.size())));
    g.ignore_eos = common.ignore_eos;
    g.stop = common.stop;
    g.top_logprobs = static_cast<int>(logprobs);
    g.parse_reasoning = false;
    g.parse_tool_calls = false;
    for (GenerationRequest& r : expand_choices(g, common.n)) {
      requests.push_back(std::move(r));
      meta.echo_text.push_back(p.text);
    }
  }
  return requests;
}

}  // namespace

void handle_completions(ModelService& service, http::Request& request, http::Responder responder) {
  try {
    const Json body = parse_json_body(request.body);
    Meta meta;
    std::vector<GenerationRequest> requests = parse_completion(body, service, meta);
    std::shared_ptr<Multiplex> run;
    if (meta.stream) {
      run = std::make_shared<CompletionStream>(service, responder, std::move(meta));
    } else {
      run = std::make_shared<CompletionCollect>(service, responder, std::move(meta));
    }
    run->cancel_on_disconnect(responder);
    run->launch(service, std::move(requests));
  } catch (const std::exception& e) {
    answer_error(responder, service, kRoute, to_api_error(e));
  }
}

}  // namespace bunsen::server::openai
