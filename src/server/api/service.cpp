// ModelService: prompt rendering/tokenization for the dialects and the token → text pipeline
// (StreamDecoder → StopMatcher → OutputParser) that turns engine events into GenerationEvents.
#include "server/api/service.h"

#include <chrono>
#include <mutex>
#include <random>

#include "core/env.h"
#include "core/status.h"
#include "server/api/api_error.h"
#include "text/stop_matcher.h"
#include "text/utf8.h"

namespace bunsen::server {
namespace {

using Clock = std::chrono::steady_clock;

std::string basename_of(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  auto slash = p.rfind('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}

std::vector<uint8_t> to_bytes(const std::string& s) { return {s.begin(), s.end()}; }

// A token's raw bytes and their printable form (invalid UTF-8 → U+FFFD, as OpenAI's `token` field does).
void describe_token(const text::Tokenizer& tok, int32_t id, std::string& text, std::vector<uint8_t>& bytes) {
  std::string raw = tok.token_bytes(id);
  bytes = to_bytes(raw);
  text = text::utf8::sanitize(raw);
}

class PipelineGeneration final : public Generation, public std::enable_shared_from_this<PipelineGeneration> {
 public:
  PipelineGeneration(ModelService& svc, GenerationRequest& req, GenerationSink sink)
      : svc_(svc), tok_(svc.tokenizer()), decoder_(svc.tokenizer(), /*skip_special=*/true),
        sink_(std::move(sink)), want_logprobs_(req.top_logprobs >= 0), n_prompt_(static_cast<int64_t>(req.prompt.size())) {
    if (!req.stop.empty()) stop_.emplace(req.stop);
    text::ParserOptions po;
    po.reasoning_open_in_prompt = req.reasoning_open_in_prompt;
    po.parse_reasoning = req.parse_reasoning;
    po.parse_tool_calls = req.parse_tool_calls;
    po.tools = req.tools;
    po.id_seed = std::random_device{}() ^ (static_cast<uint64_t>(std::random_device{}()) << 32);
    const std::string& family = svc.config().parser_family;
    parser_ = text::make_parser(family.empty() ? "none" : family, po);
  }

  void set_id(engine::RequestId id) {
    std::lock_guard<std::mutex> lock(mu_);
    id_ = id;
    bool cancel_now = cancel_requested_;
    if (cancel_now) svc_.backend().cancel(id_);
  }

  void cancel() override {
    std::lock_guard<std::mutex> lock(mu_);
    cancel_requested_ = true;
    if (id_ != 0) svc_.backend().cancel(id_);
  }

  // The event relay's thread.
  void on_event(engine::EngineEvent&& ev) {
    if (done_) return;
    switch (ev.kind) {
      case engine::EngineEvent::Kind::kPrefill: {
        GenerationEvent g;
        g.kind = GenerationEvent::Kind::kHeartbeat;
        sink_(std::move(g));
        break;
      }
      case engine::EngineEvent::Kind::kTokens:
        for (auto& t : ev.tokens) {
          on_token(t);
          if (done_) return;
        }
        break;
      case engine::EngineEvent::Kind::kFinish: on_finish(ev); break;
      case engine::EngineEvent::Kind::kError: {
        GenerationEvent g;
        g.kind = GenerationEvent::Kind::kError;
        g.error_type = "server_error";
        g.error_message = ev.error;
        g.usage = usage(ev.usage.cached_tokens);
        done_ = true;
        sink_(std::move(g));
        break;
      }
    }
  }

 private:
  void on_token(const engine::TokenOut& t) {
    const auto now = Clock::now();
    if (output_ids_.empty()) {
      svc_.metrics().ttft().observe(std::chrono::duration<double>(now - start_).count());
    } else {
      svc_.metrics().inter_token().observe(std::chrono::duration<double>(now - last_token_).count());
    }
    last_token_ = now;
    output_ids_.push_back(t.token);
    if (want_logprobs_) pending_logprobs_.push_back(make_logprob(t));
    feed_text(decoder_.push(t.token));
  }

  TokenLogprob make_logprob(const engine::TokenOut& t) const {
    TokenLogprob lp;
    describe_token(tok_, t.token, lp.token, lp.bytes);
    lp.logprob = t.logprob;
    lp.top.reserve(t.top.size());
    for (const auto& e : t.top) {
      TokenLogprob::Top top;
      describe_token(tok_, e.token, top.token, top.bytes);
      top.logprob = e.logprob;
      lp.top.push_back(std::move(top));
    }
    return lp;
  }

  // Decoded text → stop matcher → parser → events. Ends the generation when a stop string matches.
  void feed_text(const std::string& text) {
    if (text.empty()) return;
    if (!stop_) {
      emit_parsed(parser_->push(text));
      return;
    }
    text::StopPushResult r = stop_->push(text);
    emit_parsed(parser_->push(r.emit));
    if (r.match) {
      stop_sequence_ = r.match->stop;
      finish(FinishCause::kStopString, 0);
      std::lock_guard<std::mutex> lock(mu_);
      if (id_ != 0) svc_.backend().cancel(id_);
    }
  }

  void emit_parsed(std::vector<text::ParsedEvent> events) {
    for (auto& pe : events) {
      GenerationEvent g;
      switch (pe.kind) {
        case text::ParsedEvent::Kind::kContent: g.kind = GenerationEvent::Kind::kContent; break;
        case text::ParsedEvent::Kind::kReasoning: g.kind = GenerationEvent::Kind::kReasoning; break;
        case text::ParsedEvent::Kind::kToolCall: g.kind = GenerationEvent::Kind::kToolCall; break;
      }
      if (g.kind == GenerationEvent::Kind::kToolCall) {
        g.tool_call = std::move(pe.tool_call);
        ++n_tool_calls_;
      } else {
        if (pe.text.empty()) continue;
        g.text = std::move(pe.text);
      }
      g.logprobs = std::move(pending_logprobs_);
      pending_logprobs_.clear();
      sink_(std::move(g));
    }
  }

  void on_finish(const engine::EngineEvent& ev) {
    feed_text(decoder_.flush());
    if (done_) return;  // the flushed text completed a stop string
    FinishCause cause = FinishCause::kEos;
    switch (ev.finish) {
      case engine::FinishReason::kStop: cause = FinishCause::kEos; break;
      case engine::FinishReason::kLength: cause = FinishCause::kLength; break;
      case engine::FinishReason::kCancelled: cause = FinishCause::kCancelled; break;
    }
    finish(cause, ev.usage.cached_tokens);
  }

  void finish(FinishCause cause, int64_t cached) {
    if (stop_ && cause != FinishCause::kStopString) emit_parsed(parser_->push(stop_->flush()));
    emit_parsed(parser_->finish());
    GenerationEvent g;
    g.kind = GenerationEvent::Kind::kFinish;
    g.cause = cause;
    g.stop_sequence = stop_sequence_;
    g.n_tool_calls = n_tool_calls_;
    g.usage = usage(cached);
    g.output_ids = output_ids_;
    g.logprobs = std::move(pending_logprobs_);
    pending_logprobs_.clear();
    done_ = true;
    Metrics& m = svc_.metrics();
    m.add_prompt_tokens(n_prompt_);
    m.add_generated_tokens(static_cast<int64_t>(output_ids_.size()));
    m.add_cached_tokens(cached);
    m.e2e().observe(std::chrono::duration<double>(Clock::now() - start_).count());
    sink_(std::move(g));
  }

  engine::Usage usage(int64_t cached) const {
    engine::Usage u;
    u.prompt_tokens = n_prompt_;
    u.cached_tokens = cached;
    u.generated_tokens = static_cast<int64_t>(output_ids_.size());
    return u;
  }

  ModelService& svc_;
  const text::Tokenizer& tok_;
  text::StreamDecoder decoder_;
  std::optional<text::StopMatcher> stop_;
  std::unique_ptr<text::OutputParser> parser_;
  GenerationSink sink_;
  bool want_logprobs_;
  int64_t n_prompt_;
  std::mutex mu_;  // guards id_ and cancel_requested_ (IO threads vs the relay's thread)
  engine::RequestId id_ = 0;
  bool cancel_requested_ = false;
  // The relay's thread only:
  bool done_ = false;
  int n_tool_calls_ = 0;
  std::string stop_sequence_;
  std::vector<int32_t> output_ids_;
  std::vector<TokenLogprob> pending_logprobs_;
  Clock::time_point start_ = Clock::now();
  Clock::time_point last_token_ = start_;
};

}  // namespace

ModelService::ModelService(ModelServiceConfig config, const text::Tokenizer& tokenizer,
                           std::optional<text::ChatTemplate> chat_template, engine::Backend& backend)
    : config_(std::move(config)),
      tokenizer_(tokenizer),
      chat_template_(std::move(chat_template)),
      backend_(backend) {
  // BUNSEN_EVENT_RELAY=0 (read once): the pipeline runs on the engine thread, as before the relay (A/B runs).
  static const bool relay_on = env_flag("BUNSEN_EVENT_RELAY", true);
  if (relay_on) relay_ = std::make_shared<EventRelay>();
  if (config_.created == 0) config_.created = unix_now();
  if (config_.parser_family.empty()) config_.parser_family = "none";
}

ModelService::~ModelService() {
  if (relay_) relay_->close();
}

bool ModelService::accepts_model(const std::string& name) const {
  if (name == config_.model_id || name == "default") return true;
  if (!config_.model_dir.empty() && name == basename_of(config_.model_dir)) return true;
  return name == basename_of(config_.model_id);
}

std::string ModelService::render_chat(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                                      const nlohmann::ordered_json& kwargs,
                                      const std::optional<std::string>& request_template) const {
  try {
    if (request_template) {
      if (!config_.defaults.allow_request_templates)
        throw ApiError(400, "invalid_request_error",
                       "request-supplied chat templates are disabled; start the server with --allow-request-templates",
                       "chat_template");
      nlohmann::ordered_json special =
          chat_template_ ? chat_template_->special_tokens() : nlohmann::ordered_json::object();
      text::ChatTemplate tpl(*request_template, special);
      return tpl.render(messages, tools, /*add_generation_prompt=*/true, kwargs);
    }
    if (!chat_template_)
      throw ApiError(400, "invalid_request_error",
                     "model '" + config_.model_id + "' has no chat template; use /v1/completions with a raw prompt",
                     "messages");
    return chat_template_->render(messages, tools, /*add_generation_prompt=*/true, kwargs);
  } catch (const ApiError&) {
    throw;
  } catch (const Error& e) {
    throw ApiError(400, "invalid_request_error", std::string("chat template failed: ") + e.what(), "messages");
  }
}

std::vector<int32_t> ModelService::tokenize(const std::string& text, bool add_special) const {
  return tokenizer_.encode(text, add_special);
}

bool ModelService::reasoning_open_at_end(const std::string& rendered) {
  const auto open = rendered.rfind("<think>");
  if (open == std::string::npos) return false;
  const auto close = rendered.rfind("</think>");
  return close == std::string::npos || close < open;
}

int64_t ModelService::default_max_tokens(int64_t n_prompt) const {
  const int64_t room = backend_.max_request_tokens() - n_prompt;
  return std::max<int64_t>(1, std::min(config_.defaults.max_tokens, room));
}

std::shared_ptr<Generation> ModelService::start(GenerationRequest request, GenerationSink sink) {
  for (size_t i = 0; i < request.stop.size(); ++i)
    if (request.stop[i].empty()) bad_request("stop", strfmt("stop[%zu] is an empty string", i));
  auto gen = std::make_shared<PipelineGeneration>(*this, request, std::move(sink));
  engine::EngineRequest er;
  er.prompt = std::move(request.prompt);
  er.sampling = std::move(request.sampling);
  er.max_tokens = request.max_tokens;
  er.ignore_eos = request.ignore_eos;
  er.top_logprobs = request.top_logprobs;
  try {
    // The engine holds the pipeline alive until its terminal event (the sink owns a strong reference). The
    // engine thread only queues the event: the pipeline runs on the relay's thread (see event_relay.h).
    engine::EventSink sink_of_gen;
    if (relay_)
      sink_of_gen = [gen, relay = relay_](engine::EngineEvent&& ev) {
        relay->post([gen, ev = std::move(ev)]() mutable { gen->on_event(std::move(ev)); });
      };
    else
      sink_of_gen = [gen](engine::EngineEvent&& ev) { gen->on_event(std::move(ev)); };
    engine::RequestId id = backend_.submit(std::move(er), std::move(sink_of_gen));
    gen->set_id(id);
  } catch (const std::exception& e) {
    throw to_api_error(e);
  }
  return gen;
}

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string random_id(const std::string& prefix, size_t hex_chars) {
  thread_local std::mt19937_64 rng{std::random_device{}() ^ (static_cast<uint64_t>(std::random_device{}()) << 32)};
  static const char* kHex = "0123456789abcdef";
  std::string out = prefix;
  out.reserve(prefix.size() + hex_chars);
  uint64_t bits = 0;
  for (size_t i = 0; i < hex_chars; ++i) {
    if (i % 16 == 0) bits = rng();
    out.push_back(kHex[bits & 15]);
    bits >>= 4;
  }
  return out;
}

}  // namespace bunsen::server
