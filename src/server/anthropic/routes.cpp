// Anthropic routes: POST /v1/messages (JSON or the SSE grammar) and POST /v1/messages/count_tokens.
// Parsing, rendering and tokenizing happen on the IO thread; the generation's sink (the event relay's thread)
// feeds a MessageAssembler and either the SseGate or, at the end, the Responder.
#include "server/anthropic/routes.h"

#include <memory>

#include "server/anthropic/message.h"
#include "server/anthropic/request.h"
#include "server/api/sse_gate.h"
#include "server/api/error_shapes.h"

namespace bunsen::server {
namespace {

using anthropic::Json;
using anthropic::json_text;
using anthropic::MessageAssembler;
using anthropic::SseOut;
using Kind = GenerationEvent::Kind;

constexpr const char* kMessagesRoute = "/v1/messages";
constexpr const char* kCountRoute = "/v1/messages/count_tokens";

std::string ping_json() { return R"({"type": "ping"})"; }

void fail(ModelService& service, const char* route, http::Responder& res, const std::exception& e) {
  ApiError err = to_api_error(e);
  service.metrics().record_request(route, err.status);
  res.send(anthropic_error_response(err));
}

void cancel_on_disconnect(http::Responder& res, const std::shared_ptr<Generation>& gen) {
  std::weak_ptr<Generation> weak = gen;
  res.on_disconnect([weak] {
    if (auto g = weak.lock()) g->cancel();
  });
}

void run_plain(ModelService& service, anthropic::MessagesRequest mr, http::Responder res) {
  struct State {
    MessageAssembler assembler;
    http::Responder res;
    ModelService& service;
  };
  const auto n_prompt = static_cast<int64_t>(mr.gen.prompt.size());
  auto st = std::make_shared<State>(State{MessageAssembler(random_id("msg_"), mr.model, n_prompt), res, service});
  auto gen = service.start(std::move(mr.gen), [st](GenerationEvent&& ev) {
    if (ev.kind == Kind::kFinish) {
      if (ev.cause == FinishCause::kCancelled && !st->res.is_open()) return;  // the client left
      st->assembler.finish(ev, nullptr);
      st->service.metrics().record_request(kMessagesRoute, 200);
      st->res.send(http::Response::json(200, json_text(st->assembler.message())));
    } else if (ev.kind == Kind::kError) {
      ApiError err(500, ev.error_type.empty() ? "server_error" : ev.error_type, ev.error_message);
      st->service.metrics().record_request(kMessagesRoute, err.status);
      st->res.send(anthropic_error_response(err));
    } else if (ev.kind != Kind::kHeartbeat) {
      st->assembler.apply(ev, nullptr);
    }
  });
  cancel_on_disconnect(res, gen);
}

void run_stream(ModelService& service, anthropic::MessagesRequest mr, http::Responder res) {
  struct State {
    explicit State(MessageAssembler a) : assembler(std::move(a)) {}
    MessageAssembler assembler;
    SseGate gate;
    void send_all(const std::vector<SseOut>& events) {
      for (const SseOut& e : events) gate.send(e.event, e.data);
    }
  };
  const auto n_prompt = static_cast<int64_t>(mr.gen.prompt.size());
  auto st = std::make_shared<State>(MessageAssembler(random_id("msg_"), mr.model, n_prompt));
  SseOut start = st->assembler.message_start();
  st->gate.send(start.event, start.data);
  st->gate.send("ping", ping_json());  // Anthropic sends one right after message_start
  auto gen = service.start(std::move(mr.gen), [st](GenerationEvent&& ev) {
    std::vector<SseOut> out;
    switch (ev.kind) {
      case Kind::kHeartbeat: st->gate.send("ping", ping_json()); return;
      case Kind::kFinish:
        st->assembler.finish(ev, &out);
        st->send_all(out);
        st->gate.close();
        return;
      case Kind::kError: {
        ApiError err(500, ev.error_type.empty() ? "server_error" : ev.error_type, ev.error_message);
        st->gate.send("error", anthropic_error_json(err));
        st->gate.close();
        return;
      }
      default:
        st->assembler.apply(ev, &out);
        st->send_all(out);
        return;
    }
  });
  http::SseStream stream = res.start_sse();
  if (!stream.is_open()) {
    gen->cancel();
    st->gate.discard();
    return;
  }
  service.metrics().record_request(kMessagesRoute, 200);
  std::weak_ptr<Generation> weak = gen;
  stream.on_disconnect([weak] {
    if (auto g = weak.lock()) g->cancel();
  });
  st->gate.open(std::move(stream));
}

void handle_messages(ModelService& service, http::Request& req, http::Responder res) {
  try {
    Json body = parse_json_body(req.body);
    anthropic::MessagesRequest mr = anthropic::parse_messages_request(body, service);
    if (mr.stream) {
      run_stream(service, std::move(mr), res);
    } else {
      run_plain(service, std::move(mr), res);
    }
  } catch (const std::exception& e) {
    fail(service, kMessagesRoute, res, e);
  }
}

void handle_count_tokens(ModelService& service, http::Request& req, http::Responder res) {
  try {
    Json body = parse_json_body(req.body);
    anthropic::check_model(body, service);
    anthropic::Prompt prompt = anthropic::parse_prompt(body, service.defaults());
    anthropic::RenderedPrompt rendered = anthropic::render_prompt(prompt, service);
    service.metrics().record_request(kCountRoute, 200);
    res.send(http::Response::json(200, json_text(Json{{"input_tokens", rendered.ids.size()}})));
  } catch (const std::exception& e) {
    fail(service, kCountRoute, res, e);
  }
}

}  // namespace

void register_anthropic_routes(http::Router& router, ModelService& service) {
  router.add("POST", kMessagesRoute,
             http::Handler([&service](http::Request& req, http::Responder res) { handle_messages(service, req, res); }));
  router.add("POST", kCountRoute, http::Handler([&service](http::Request& req, http::Responder res) {
               handle_count_tokens(service, req, res);
             }));
}

}  // namespace bunsen::server
