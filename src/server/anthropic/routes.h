// Route registration of the anthropic dialect: /v1/messages and /v1/messages/count_tokens.
// Not the HTTP server and not the generation pipeline (server/api/service.h). Invariant: called once,
// before http::Server::start(); the ModelService outlives the server.
#pragma once
#include "server/api/service.h"
#include "server/http/router.h"

namespace bunsen::server {

void register_anthropic_routes(http::Router& router, ModelService& service);

}  // namespace bunsen::server
