// Route registration of the responses dialect: /v1/responses and its stored-response table.
// Not the HTTP server and not the generation pipeline (server/api/service.h). Invariant: called once,
// before http::Server::start(); the ModelService outlives the server.
#pragma once
#include "server/api/service.h"
#include "server/http/router.h"

namespace bunsen::server {

void register_responses_routes(http::Router& router, ModelService& service);

}  // namespace bunsen::server
