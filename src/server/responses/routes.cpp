// Responses routes: POST /v1/responses (JSON or the streaming event sequence), GET and DELETE
// /v1/responses/{id} over the bounded store. Parsing, history lookup, rendering and tokenizing run on the
// IO thread; the generation's sink (the event relay's thread) feeds a ResponseAssembler, stores the finished
// response (before the client sees it complete, so a follow-up previous_response_id always finds it) and
// answers.
#include "server/responses/routes.h"

#include <algorithm>
#include <memory>
#include <optional>

#include "server/api/sse_gate.h"
#include "server/api/error_shapes.h"
#include "server/responses/output.h"
#include "server/responses/request.h"
#include "server/responses/store.h"

namespace bunsen::server {
namespace {

using responses::Json;
using responses::ResponseAssembler;
using responses::ResponsesRequest;
using responses::ResponseStore;
using responses::SseOut;
using Kind = GenerationEvent::Kind;

constexpr const char* kRoute = "/v1/responses";

// The response object before any output: every field the openai client types, in OpenAI's order.
Json base_response(const ResponsesRequest& req, const std::string& id) {
  return Json{{"id", id},
              {"object", "response"},
              {"created_at", unix_now()},
              {"status", "in_progress"},
              {"background", false},
              {"error", nullptr},
              {"incomplete_details", nullptr},
              {"instructions", req.has_instructions ? Json(req.instructions) : Json()},
              {"max_output_tokens", req.max_output_tokens ? Json(*req.max_output_tokens) : Json()},
              {"model", req.model},
              {"output", Json::array()},
              {"parallel_tool_calls", req.parallel_tool_calls},
              {"previous_response_id", req.previous_response_id.empty() ? Json() : Json(req.previous_response_id)},
              {"reasoning", req.reasoning},
              {"store", req.store},
              {"temperature", req.temperature},
              {"text", Json{{"format", Json{{"type", "text"}}}}},
              {"tool_choice", req.tool_choice},
              {"tools", req.tools},
              {"top_p", req.top_p},
              {"truncation", "disabled"},
              {"usage", nullptr},
              {"user", nullptr},
              {"metadata", req.metadata}};
}

// What one generation needs on the event relay's thread.
struct Job {
  Job(ResponseAssembler a, ModelService& s, std::shared_ptr<ResponseStore> st) : assembler(std::move(a)), service(s), store(std::move(st)) {}
  ResponseAssembler assembler;
  ModelService& service;
  std::shared_ptr<ResponseStore> store;
  bool store_it = true;
  responses::Conversation history;  // the previous response's conversation (null when none)
  Json input_items;
  // Streaming:
  SseGate gate;
  // Non-streaming:
  std::optional<http::Responder> responder;

  // Closes the response: usage, status, and the store entry.
  void finish(const GenerationEvent& ev, std::vector<SseOut>* out) {
    const std::string& reasoning = assembler.reasoning_text();
    int64_t reasoning_tokens = 0;
    if (!reasoning.empty())
      reasoning_tokens = std::min<int64_t>(static_cast<int64_t>(service.tokenize(reasoning, false).size()),
                                           ev.usage.generated_tokens);
    assembler.finish(ev, reasoning_tokens, out);
    if (!store_it || ev.cause == FinishCause::kCancelled) return;
    auto node = std::make_shared<responses::ConversationNode>();
    node->parent = history;
    node->items = input_items;
    for (const auto& item : assembler.output()) node->items.push_back(item);
    const Json& r = assembler.response();
    store->put(r["id"].get<std::string>(), responses::StoredResponse{r, std::move(node)});
  }

  void on_event(GenerationEvent&& ev) {
    std::vector<SseOut> out;
    std::vector<SseOut>* sink = responder ? nullptr : &out;
    if (ev.kind == Kind::kHeartbeat) {
      if (!responder) gate.send("", "ping", /*comment=*/true);
      return;
    }
    if (ev.kind == Kind::kFinish) {
      finish(ev, sink);
    } else if (ev.kind == Kind::kError) {
      if (responder) {
        ApiError err(500, ev.error_type.empty() ? "server_error" : ev.error_type, ev.error_message);
        service.metrics().record_request(kRoute, 500);
        responder->send(openai_error_response(err));
        return;
      }
      assembler.fail(ev.error_type.empty() ? "server_error" : ev.error_type, ev.error_message, sink);
    } else {
      assembler.apply(ev, sink);
    }
    const bool terminal = ev.kind == Kind::kFinish || ev.kind == Kind::kError;
    if (responder) {
      if (terminal && ev.cause != FinishCause::kCancelled) {
        service.metrics().record_request(kRoute, 200);
        responder->send(http::Response::json(200, responses::json_text(assembler.response())));
      }
      return;
    }
    for (const SseOut& e : out) gate.send(e.event, e.data);
    if (terminal) gate.close();
  }
};

void cancel_on(const std::shared_ptr<Generation>& gen, auto& handle) {
  std::weak_ptr<Generation> weak = gen;
  handle.on_disconnect([weak] {
    if (auto g = weak.lock()) g->cancel();
  });
}

void handle_create(ModelService& service, const std::shared_ptr<ResponseStore>& store, http::Request& req,
                   http::Responder res) {
  try {
    Json body = parse_json_body(req.body);
    ResponsesRequest rr = responses::parse_responses_request(body, service);
    responses::Conversation history;
    if (!rr.previous_response_id.empty()) {
      auto prev = store->get(rr.previous_response_id);
      if (!prev)
        throw ApiError(404, "invalid_request_error",
                       "Previous response with id '" + rr.previous_response_id + "' not found.",
                       "previous_response_id");
      history = prev->conversation;
    }
    responses::build_prompt(rr, history ? responses::flatten(history) : Json::array(), service);
    auto job = std::make_shared<Job>(ResponseAssembler(base_response(rr, random_id("resp_"))), service, store);
    job->store_it = rr.store;
    job->history = history;
    job->input_items = rr.input_items;
    if (!rr.stream) job->responder = res;
    std::vector<SseOut> preamble;
    job->assembler.start(rr.stream ? &preamble : nullptr);
    for (const SseOut& e : preamble) job->gate.send(e.event, e.data);
    auto gen = service.start(std::move(rr.gen), [job](GenerationEvent&& ev) { job->on_event(std::move(ev)); });
    if (!rr.stream) {
      cancel_on(gen, res);
      return;
    }
    http::SseStream stream = res.start_sse();
    if (!stream.is_open()) {
      gen->cancel();
      job->gate.discard();
      return;
    }
    service.metrics().record_request(kRoute, 200);
    cancel_on(gen, stream);
    job->gate.open(std::move(stream));
  } catch (const std::exception& e) {
    ApiError err = to_api_error(e);
    service.metrics().record_request(kRoute, err.status);
    res.send(openai_error_response(err));
  }
}

http::Response not_found(const std::string& id) {
  return openai_error_response(
      ApiError(404, "invalid_request_error", "Response with id '" + id + "' not found.", "response_id"));
}

}  // namespace

void register_responses_routes(http::Router& router, ModelService& service) {
  auto store = std::make_shared<ResponseStore>();
  router.add("POST", kRoute, http::Handler([&service, store](http::Request& req, http::Responder res) {
               handle_create(service, store, req, res);
             }));
  router.add("GET", "/v1/responses/{id}", http::SyncHandler([&service, store](http::Request& req) {
               const std::string& id = req.params["id"];
               auto found = store->get(id);
               http::Response r = found ? http::Response::json(200, responses::json_text(found->response)) : not_found(id);
               service.metrics().record_request("/v1/responses/{id}", r.status);
               return r;
             }));
  router.add("DELETE", "/v1/responses/{id}", http::SyncHandler([&service, store](http::Request& req) {
               const std::string& id = req.params["id"];
               http::Response r = store->erase(id)
                                      ? http::Response::json(200, responses::json_text(Json{
                                                                      {"id", id}, {"object", "response"}, {"deleted", true}}))
                                      : not_found(id);
               service.metrics().record_request("/v1/responses/{id}", r.status);
               return r;
             }));
}

}  // namespace bunsen::server
