// The OpenAI route handlers register_openai_routes() wires up, one file per area: chat_handler.cpp,
// completions_handler.cpp, models_handler.cpp (models, tokenize, detokenize). Not routing. Invariants: each
// handler runs on an IO thread, parses and validates there, answers every failure before any SSE byte in
// OpenAI's error shape, and records exactly one metrics entry per request.
#pragma once
#include "server/api/service.h"
#include "server/http/message.h"
#include "server/http/responder.h"

namespace bunsen::server::openai {

void handle_chat(ModelService& service, http::Request& request, http::Responder responder);
void handle_completions(ModelService& service, http::Request& request, http::Responder responder);
void handle_list_models(ModelService& service, http::Request& request, http::Responder responder);
void handle_get_model(ModelService& service, http::Request& request, http::Responder responder);
void handle_tokenize(ModelService& service, http::Request& request, http::Responder responder);
void handle_detokenize(ModelService& service, http::Request& request, http::Responder responder);

}  // namespace bunsen::server::openai
