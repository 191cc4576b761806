// Route registration of the openai dialect: chat completions, completions, models, tokenize/detokenize.
// Not the HTTP server and not the generation pipeline (server/api/service.h). Invariant: called once,
// before http::Server::start(); the ModelService outlives the server.
#pragma once
#include "server/api/service.h"
#include "server/http/router.h"

namespace bunsen::server {

void register_openai_routes(http::Router& router, ModelService& service);

}  // namespace bunsen::server
