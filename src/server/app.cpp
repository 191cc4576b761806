// make_server (see app.h): the one place that knows every route area and the dialect error hooks.
#include "server/app.h"

#include "server/admin/host_guard.h"
#include "server/anthropic/routes.h"
#include "server/api/error_shapes.h"
#include "server/openai/routes.h"
#include "server/responses/routes.h"

namespace bunsen::server {
namespace {

http::Response shaped(const ApiError& e, const http::Request* request) {
  if (request && is_anthropic_path(request->path)) return anthropic_error_response(e);
  return openai_error_response(e);
}

}  // namespace

http::Response dialect_error_response(const http::ErrorInfo& info) {
  std::string type = info.type.empty() ? (info.status >= 500 ? "server_error" : "invalid_request_error") : info.type;
  return shaped(ApiError(info.status, std::move(type), info.message), info.request);
}

http::Response dialect_unauthorized(const http::Request& request) {
  http::Response r = shaped(ApiError(401, "authentication_error", "invalid or missing API key (send "
                                     "'Authorization: Bearer KEY' or 'x-api-key: KEY')", {}, "invalid_api_key"),
                            &request);
  if (!is_anthropic_path(request.path)) r.headers.set("WWW-Authenticate", "Bearer");
  return r;
}

std::unique_ptr<http::Server> make_server(AppOptions options, ModelService& service) {
  http::ServerOptions& o = options.http;
  o.error_response = dialect_error_response;
  o.unauthorized = dialect_unauthorized;
  if (o.api_key.empty()) {
    o.guard = [host = o.host, origins = o.allowed_origins](const http::Request& req) -> std::optional<http::Response> {
      admin::GuardVerdict v = admin::check_request(req, host, origins);
      if (v.allowed) return std::nullopt;
      return shaped(ApiError(403, "permission_error", v.reason, {}, "forbidden_host"), &req);
    };
  }
  auto server = std::make_unique<http::Server>(std::move(o));
  http::Router& router = server->router();
  register_admin_routes(router, service, options.admin);
  register_openai_routes(router, service);
  register_responses_routes(router, service);
  register_anthropic_routes(router, service);
  return server;
}

}  // namespace bunsen::server
