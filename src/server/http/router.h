// Maps (method, path pattern) to a handler. Patterns are literal segments plus `{name}` (one segment) and
// a final `{name...}` (the non-empty rest of the path, slashes included: a prefix route). Not the server:
// no auth, CORS or I/O here. Invariants: routes are added before Server::start() and never change after;
// the first added route that matches wins; HEAD falls back to the GET route when no HEAD route exists; a
// path matched under other methods only gives kMethodNotAllowed with the allowed methods listed.
#pragma once
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "server/http/message.h"
#include "server/http/responder.h"

namespace bunsen::server::http {

// Called on an IO thread: answer quickly or hand the Responder to another thread. The Request reference
// is valid only during the call (move what you keep out of it).
using Handler = std::function<void(Request& request, Responder responder)>;
using SyncHandler = std::function<Response(Request& request)>;

struct RouteOptions {
  bool requires_auth = true;  // false: reachable without the API key (e.g. /health)
};

class Router {
 public:
  struct Match {
    enum class Kind { kFound, kNotFound, kMethodNotAllowed };
    Kind kind = Kind::kNotFound;
    const Handler* handler = nullptr;  // kFound only
    RouteOptions options;
    std::map<std::string, std::string> params;
    std::string allow;  // "GET, POST": methods the path accepts (kFound and kMethodNotAllowed)
  };

  void add(std::string method, std::string_view pattern, Handler handler, RouteOptions options = {});
  void add(std::string method, std::string_view pattern, SyncHandler handler, RouteOptions options = {});

  // `raw_path` is the undecoded path (no query); captures are percent-decoded.
  Match match(std::string_view method, std::string_view raw_path) const;

 private:
  struct Segment {
    enum class Kind { kLiteral, kParam, kRest };
    Kind kind;
    std::string text;  // literal text or parameter name
  };
  struct Route {
    std::string method;
    std::vector<Segment> segments;
    Handler handler;
    RouteOptions options;
  };

  static bool match_route(const Route& route, const std::vector<std::string_view>& parts,
                          std::map<std::string, std::string>* params);

  std::vector<Route> routes_;
};

}  // namespace bunsen::server::http
