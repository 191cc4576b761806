// Route table and matching (see router.h).
#include "server/http/router.h"

#include "core/status.h"

namespace bunsen::server::http {

namespace {

constexpr std::string_view kComponent = "http";

// "/a/b" -> {"a", "b"}; "/" -> {""}; "/a/" -> {"a", ""}.
std::vector<std::string_view> split_path(std::string_view path) {
  std::vector<std::string_view> parts;
  if (!path.empty() && path.front() == '/') path.remove_prefix(1);
  while (true) {
    size_t slash = path.find('/');
    parts.push_back(path.substr(0, slash));
    if (slash == std::string_view::npos) return parts;
    path.remove_prefix(slash + 1);
  }
}

bool add_method(std::string& allow, std::string_view method) {
  std::string listed = ", " + allow + ",";
  if (listed.find(", " + std::string(method) + ",") != std::string::npos) return false;
  if (!allow.empty()) allow += ", ";
  allow += method;
  return true;
}

}  // namespace

void Router::add(std::string method, std::string_view pattern, Handler handler, RouteOptions options) {
  check(!pattern.empty() && pattern.front() == '/', kComponent,
        "route pattern must start with '/': " + std::string(pattern));
  check(static_cast<bool>(handler), kComponent, "route handler is empty");
  Route route{std::move(method), {}, std::move(handler), options};
  std::vector<std::string_view> parts = split_path(pattern);
  for (size_t i = 0; i < parts.size(); ++i) {
    std::string_view p = parts[i];
    if (p.size() >= 2 && p.front() == '{' && p.back() == '}') {
      std::string_view name = p.substr(1, p.size() - 2);
      bool rest = name.size() > 3 && name.substr(name.size() - 3) == "...";
      check(!rest || i + 1 == parts.size(), kComponent,
            "a {name...} segment must be last: " + std::string(pattern));
      if (rest) name.remove_suffix(3);
      route.segments.push_back({rest ? Segment::Kind::kRest : Segment::Kind::kParam, std::string(name)});
    } else {
      route.segments.push_back({Segment::Kind::kLiteral, std::string(p)});
    }
  }
  routes_.push_back(std::move(route));
}

void Router::add(std::string method, std::string_view pattern, SyncHandler handler,
                 RouteOptions options) {
  check(static_cast<bool>(handler), kComponent, "route handler is empty");
  Handler wrapped = [fn = std::move(handler)](Request& request, Responder responder) {
    responder.send(fn(request));
  };
  add(std::move(method), pattern, std::move(wrapped), options);
}

bool Router::match_route(const Route& route, const std::vector<std::string_view>& parts,
                         std::map<std::string, std::string>* params) {
  const auto& segs = route.segments;
  for (size_t i = 0; i < segs.size(); ++i) {
    if (segs[i].kind == Segment::Kind::kRest) {
      if (i >= parts.size()) return false;
      std::string rest(parts[i]);
      for (size_t j = i + 1; j < parts.size(); ++j) {
        rest += '/';  // two appends: GCC 12 warns (-Wrestrict, a false positive) on "/" + std::string
        rest += parts[j];
      }
      auto decoded = percent_decode(rest, false);
      if (!decoded || decoded->empty()) return false;
      (*params)[segs[i].text] = std::move(*decoded);
      return true;
    }
    if (i >= parts.size()) return false;
    auto decoded = percent_decode(parts[i], false);
    if (!decoded) return false;
    if (segs[i].kind == Segment::Kind::kLiteral) {
      if (*decoded != segs[i].text) return false;
    } else {
      if (decoded->empty()) return false;
      (*params)[segs[i].text] = std::move(*decoded);
    }
  }
  return segs.size() == parts.size();
}

Router::Match Router::match(std::string_view method, std::string_view raw_path) const {
  std::vector<std::string_view> parts = split_path(raw_path);
  Match result;
  const Route* found = nullptr;
  const Route* get_fallback = nullptr;
  for (const Route& route : routes_) {
    std::map<std::string, std::string> params;
    if (!match_route(route, parts, &params)) continue;
    add_method(result.allow, route.method);
    if (route.method == "GET") add_method(result.allow, "HEAD");
    if (!found && route.method == method) {
      found = &route;
      result.params = std::move(params);
    } else if (!get_fallback && method == "HEAD" && route.method == "GET") {
      get_fallback = &route;
      if (!found) result.params = std::move(params);
    }
  }
  if (!found) found = get_fallback;
  if (found) {
    result.kind = Match::Kind::kFound;
    result.handler = &found->handler;
    result.options = found->options;
  } else if (!result.allow.empty()) {
    result.kind = Match::Kind::kMethodNotAllowed;
  }
  return result;
}

}  // namespace bunsen::server::http
