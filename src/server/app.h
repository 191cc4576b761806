// The served application: builds the http::Server for `bunsen serve` from its options and registers every
// route area (OpenAI, Responses, Anthropic, admin), with server-made errors (401/403/404/413/431/503...)
// shaped like the dialect of the request's path. Not the CLI (no flags, no model loading) and not a route
// area itself. Invariant: the ModelService outlives the returned server; when no API key is set the
// DNS-rebinding guard (admin/host_guard.h) refuses foreign Host/Origin with 403.
#pragma once
#include <memory>

#include "server/admin/routes.h"
#include "server/api/service.h"
#include "server/http/server.h"

namespace bunsen::server {

struct AppOptions {
  http::ServerOptions http;  // bind address, limits, api key, origins (the error hooks are set here)
  AdminInfo admin;
};

std::unique_ptr<http::Server> make_server(AppOptions options, ModelService& service);

// A server-made error in the dialect of `info.request`'s path (OpenAI's shape unless is_anthropic_path).
http::Response dialect_error_response(const http::ErrorInfo& info);
// 401 for a missing or wrong key, in the request's dialect (OpenAI's also carries WWW-Authenticate).
http::Response dialect_unauthorized(const http::Request& request);

}  // namespace bunsen::server
