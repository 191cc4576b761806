// GET /v1/models, GET /v1/models/{id}, POST /tokenize and POST /detokenize. The server serves one model:
// the list has one entry and /v1/models/{id} answers for every name accepts_model() takes (with the
// canonical id), 404 model_not_found otherwise. /tokenize takes {"prompt"} (add_special_tokens, default
// true) or {"messages"} (+ tools, chat_template_kwargs, reasoning_effort, chat_template: rendered like a
// chat request, add_generation_prompt true). Not generation.
#include <nlohmann/json.hpp>

#include "server/openai/chat_request.h"
#include "server/openai/handlers.h"
#include "server/openai/request_fields.h"
#include "server/openai/response_json.h"

namespace bunsen::server::openai {
namespace {

// The OpenAI fields plus vLLM's max_model_len (what one request may hold: prompt + max_tokens) and the
// vocabulary size, which clients such as benchmark drivers use to build token-id prompts.
Json model_json(ModelService& service) {
  return Json{{"id", service.model_id()},
              {"object", "model"},
              {"created", service.config().created},
              {"owned_by", "bunsen"},
              {"max_model_len", service.backend().max_request_tokens()},
              {"vocab_size", service.backend().vocab_size()}};
}

}  // namespace

void handle_list_models(ModelService& service, http::Request&, http::Responder responder) {
  Json body = {{"object", "list"}, {"data", Json::array({model_json(service)})}};
  answer_json(responder, service, "/v1/models", body);
}

void handle_get_model(ModelService& service, http::Request& request, http::Responder responder) {
  const std::string id = request.params["id"];
  if (!service.accepts_model(id)) {
    answer_error(responder, service, "/v1/models/{id}",
                 ApiError(404, "invalid_request_error", "The model '" + id + "' does not exist", "model",
                          "model_not_found"));
    return;
  }
  answer_json(responder, service, "/v1/models/{id}", model_json(service));
}

void handle_tokenize(ModelService& service, http::Request& request, http::Responder responder) {
  constexpr const char* kRoute = "/tokenize";
  try {
    const Json body = parse_json_body(request.body);
    check_model(body, service);
    std::vector<int32_t> ids;
    const bool has_prompt = body.contains("prompt") && !body["prompt"].is_null();
    const bool has_messages = body.contains("messages") && !body["messages"].is_null();
    if (has_prompt == has_messages) bad_request("prompt", "give exactly one of 'prompt' and 'messages'");
    if (has_prompt) {
      const std::string prompt = get_string(body, "prompt", "");
      ids = service.tokenize(prompt, get_bool(body, "add_special_tokens", true));
    } else {
      const std::string rendered = service.render_chat(convert_messages(body), convert_tools(body),
                                                       template_kwargs(body, service), request_template(body));
      ids = service.tokenize(rendered, get_bool(body, "add_special_tokens", false));
    }
    Json tokens = Json::array();
    for (int32_t id : ids) tokens.push_back(id);
    Json out = {{"tokens", std::move(tokens)},
                {"count", ids.size()},
                {"max_model_len", service.backend().max_request_tokens()}};
    answer_json(responder, service, kRoute, out);
  } catch (const std::exception& e) {
    answer_error(responder, service, kRoute, to_api_error(e));
  }
}

void handle_detokenize(ModelService& service, http::Request& request, http::Responder responder) {
  constexpr const char* kRoute = "/detokenize";
  try {
    const Json body = parse_json_body(request.body);
    check_model(body, service);
    auto it = body.find("tokens");
    if (it == body.end() || !it->is_array()) bad_request("tokens", "'tokens' must be an array of token ids");
    const std::vector<int32_t> ids = parse_token_ids(*it, service.tokenizer().vocab_size(), "tokens");
    answer_json(responder, service, kRoute, Json{{"prompt", service.tokenizer().decode(ids)}});
  } catch (const std::exception& e) {
    answer_error(responder, service, kRoute, to_api_error(e));
  }
}

}  // namespace bunsen::server::openai
