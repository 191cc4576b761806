// register_openai_routes: the OpenAI dialect's paths and their handlers (see routes.h, handlers.h).
#include "server/openai/routes.h"

#include "server/openai/handlers.h"

namespace bunsen::server {

void register_openai_routes(http::Router& router, ModelService& service) {
  using Fn = void (*)(ModelService&, http::Request&, http::Responder);
  auto bind = [&service](Fn fn) {
    return http::Handler([&service, fn](http::Request& req, http::Responder res) { fn(service, req, std::move(res)); });
  };
  router.add("POST", "/v1/chat/completions", bind(&openai::handle_chat));
  router.add("POST", "/v1/completions", bind(&openai::handle_completions));
  router.add("GET", "/v1/models", bind(&openai::handle_list_models));
  router.add("GET", "/v1/models/{id...}", bind(&openai::handle_get_model));
  router.add("POST", "/tokenize", bind(&openai::handle_tokenize));
  router.add("POST", "/detokenize", bind(&openai::handle_detokenize));
}

}  // namespace bunsen::server
