// Black-box tests of http::Server over real sockets on 127.0.0.1 (ephemeral ports) with the blocking
// test client: routing, keep-alive, pipelining, HEAD, 100-continue, error defaults, size caps, malformed
// input, auth, CORS and the connection cap. Streams are in test_http_stream.cpp, timeouts and shutdown in
// test_http_lifecycle.cpp.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "core/status.h"
#include "http_test_client.h"
#include "server/http/server.h"

namespace bunsen::server::http {
namespace {

using testing::ClientResponse;
using testing::fetch;
using testing::TestClient;

ServerOptions test_options() {
  ServerOptions o;
  o.io_threads = 2;
  o.header_timeout = std::chrono::milliseconds(2000);
  o.idle_timeout = std::chrono::milliseconds(2000);
  o.shutdown_grace = std::chrono::milliseconds(500);
  return o;
}

// GET /echo/{a}/x/{rest...}: reports what the server parsed, as "key=value" lines.
void add_echo_route(Server& server) {
  auto echo = [](Request& r) {
    std::string out = "method=" + r.method + "\npath=" + r.path + "\n";
    for (const auto& [k, v] : r.params) out += "param." + k + "=" + v + "\n";
    for (const auto& [k, v] : r.query) out += "query." + k + "=" + v + "\n";
    out += "hdr=" + std::string(r.header("x-test-header").value_or("<none>")) + "\n";
    out += "remote=" + r.remote_address + ":" + std::to_string(r.remote_port) + "\n";
    out += "body=" + r.body;
    return Response::text(200, out);
  };
  server.router().add("GET", "/echo/{a}/x/{rest...}", echo);
  server.router().add("POST", "/echo/{a}/x/{rest...}", echo);
}

int status_of(const std::optional<ClientResponse>& r) { return r ? r->status : -1; }

std::string line_value(const std::string& body, const std::string& key) {
  size_t p = body.find(key + "=");
  if (p == std::string::npos) return "<missing>";
  p += key.size() + 1;
  return body.substr(p, body.find('\n', p) - p);
}

TEST(HttpServer, RoutesWithParamsQueryAndHeaders) {
  Server server(test_options());
  add_echo_route(server);
  server.start();
  auto r = fetch(server.port(), "GET", "/echo/one%20two/x/a/b%2Fc?q=1&w=x+y",
                 {{"X-TEST-HEADER", "hello"}});
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(line_value(r->body, "method"), "GET");
  EXPECT_EQ(line_value(r->body, "path"), "/echo/one two/x/a/b/c");
  EXPECT_EQ(line_value(r->body, "param.a"), "one two");
  EXPECT_EQ(line_value(r->body, "param.rest"), "a/b/c");
  EXPECT_EQ(line_value(r->body, "query.q"), "1");
  EXPECT_EQ(line_value(r->body, "query.w"), "x y");
  EXPECT_EQ(line_value(r->body, "hdr"), "hello");
  EXPECT_EQ(line_value(r->body, "remote").rfind("127.0.0.1:", 0), 0u);

  auto post = fetch(server.port(), "POST", "/echo/p/x/q", {}, "payload bytes");
  ASSERT_TRUE(post.has_value());
  EXPECT_EQ(line_value(post->body, "body"), "payload bytes");
}

TEST(HttpServer, KeepAliveServesTwoRequestsOnOneConnection) {
  Server server(test_options());
  add_echo_route(server);
  server.start();
  TestClient c(server.port());
  ASSERT_TRUE(c.send_request("GET", "/echo/1/x/a"));
  auto r1 = c.read_response();
  ASSERT_TRUE(c.send_request("GET", "/echo/2/x/b"));
  auto r2 = c.read_response();
  ASSERT_TRUE(r1 && r2);
  EXPECT_EQ(line_value(r1->body, "param.a"), "1");
  EXPECT_EQ(line_value(r2->body, "param.a"), "2");
  EXPECT_EQ(line_value(r1->body, "remote"), line_value(r2->body, "remote"));  // same client port
  EXPECT_FALSE(r1->headers.has("Connection"));
}

TEST(HttpServer, ConnectionCloseIsHonoured) {
  Server server(test_options());
  add_echo_route(server);
  server.start();
  TestClient c(server.port());
  ASSERT_TRUE(c.send_request("GET", "/echo/1/x/a", {{"Connection", "close"}}));
  auto r = c.read_response();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->headers.get("Connection"), "close");
  EXPECT_TRUE(c.wait_closed(2000));
}

TEST(HttpServer, PipelinedRequestsAnswerInOrder) {
  Server server(test_options());
  add_echo_route(server);
  server.start();
  TestClient c(server.port());
  std::string two = "GET /echo/first/x/a HTTP/1.1\r\nHost: h\r\n\r\n"
                    "POST /echo/second/x/b HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nabc";
  ASSERT_TRUE(c.send_raw(two));
  auto r1 = c.read_response();
  auto r2 = c.read_response();
  ASSERT_TRUE(r1 && r2);
  EXPECT_EQ(line_value(r1->body, "param.a"), "first");
  EXPECT_EQ(line_value(r2->body, "param.a"), "second");
  EXPECT_EQ(line_value(r2->body, "body"), "abc");
}

TEST(HttpServer, HeadUsesGetRouteWithoutBody) {
  Server server(test_options());
  server.router().add("GET", "/hello", [](Request&) { return Response::text(200, "hello"); });
  server.start();
  TestClient c(server.port());
  ASSERT_TRUE(c.send_request("HEAD", "/hello"));
  auto h = c.read_response(/*head_request=*/true);
  ASSERT_TRUE(h.has_value());
  EXPECT_EQ(h->status, 200);
  EXPECT_EQ(h->headers.get("Content-Length"), "5");
  ASSERT_TRUE(c.send_request("GET", "/hello"));  // no stray body bytes before this answer
  auto g = c.read_response();
  ASSERT_TRUE(g.has_value());
  EXPECT_EQ(g->body, "hello");
}

TEST(HttpServer, ExpectContinueGetsInterimResponse) {
  Server server(test_options());
  add_echo_route(server);
  server.start();
  TestClient c(server.port());
  ASSERT_TRUE(c.send_raw("POST /echo/c/x/d HTTP/1.1\r\nHost: h\r\nContent-Length: 4\r\n"
                         "Expect: 100-continue\r\n\r\n"));
  auto interim = c.read_head();
  ASSERT_TRUE(interim.has_value());
  EXPECT_EQ(interim->status, 100);
  ASSERT_TRUE(c.send_raw("data"));
  auto r = c.read_response();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(line_value(r->body, "body"), "data");
}

TEST(HttpServer, AnswersFromAnotherThread) {
  Server server(test_options());
  std::vector<std::thread> workers;
  std::mutex mu;
  server.router().add("POST", "/later", [&](Request& r, Responder res) {
    std::lock_guard lock(mu);
    workers.emplace_back([res, body = std::move(r.body)]() mutable {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      EXPECT_TRUE(res.send(Response::text(201, "got " + body)));
      EXPECT_FALSE(res.send(Response::text(200, "twice")));  // one answer per request
    });
  });
  server.start();
  auto r = fetch(server.port(), "POST", "/later", {}, "x");
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->status, 201);
  EXPECT_EQ(r->body, "got x");
  for (auto& t : workers) t.join();
}

TEST(HttpServer, NotFoundAndMethodNotAllowedDefaults) {
  Server server(test_options());
  server.router().add("POST", "/only-post", [](Request&) { return Response::text(200, "ok"); });
  server.start();
  auto nf = fetch(server.port(), "GET", "/nope");
  ASSERT_TRUE(nf.has_value());
  EXPECT_EQ(nf->status, 404);
  EXPECT_EQ(nf->headers.get("Content-Type"), "application/json");
  EXPECT_NE(nf->body.find("\"type\":\"not_found_error\""), std::string::npos);
  auto na = fetch(server.port(), "GET", "/only-post");
  ASSERT_TRUE(na.has_value());
  EXPECT_EQ(na->status, 405);
  EXPECT_EQ(na->headers.get("Allow"), "POST");
  EXPECT_EQ(na->body.rfind("{\"error\":{\"message\":", 0), 0u);
}

TEST(HttpServer, ErrorBodiesCanBeReshaped) {
  ServerOptions o = test_options();
  o.error_response = [](const ErrorInfo& e) {
    return Response::json(e.status, "{\"type\":\"error\",\"error\":{\"type\":\"" + e.type + "\"}}");
  };
  Server server(o);
  server.start();
  auto r = fetch(server.port(), "GET", "/missing");
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->status, 404);
  EXPECT_EQ(r->body, "{\"type\":\"error\",\"error\":{\"type\":\"not_found_error\"}}");
}

TEST(HttpServer, HandlerFailuresBecome500) {
  Server server(test_options());
  server.router().add("GET", "/throws", [](Request&) -> Response { throw std::runtime_error("boom"); });
  server.router().add("GET", "/drops", [](Request&, Responder) {});
  server.start();
  TestClient c(server.port());
  ASSERT_TRUE(c.send_request("GET", "/throws"));
  auto r1 = c.read_response();
  ASSERT_TRUE(r1.has_value());
  EXPECT_EQ(r1->status, 500);
  EXPECT_NE(r1->body.find("boom"), std::string::npos);
  ASSERT_TRUE(c.send_request("GET", "/drops"));  // the connection survives a failed handler
  auto r2 = c.read_response();
  ASSERT_TRUE(r2.has_value());
  EXPECT_EQ(r2->status, 500);
}

TEST(HttpServer, BodyOverCapIs413BeforeReadingIt) {
  ServerOptions o = test_options();
  o.max_body_bytes = 1000;
  Server server(o);
  add_echo_route(server);
  server.start();
  TestClient c(server.port());  // declares 100 MB, sends none of it
  ASSERT_TRUE(c.send_raw("POST /echo/a/x/b HTTP/1.1\r\nHost: h\r\nContent-Length: 100000000\r\n\r\n"));
  auto r = c.read_response();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->status, 413);
  EXPECT_EQ(r->headers.get("Connection"), "close");

  TestClient chunked(server.port());  // undeclared size: cut off while reading
  std::string req = "POST /echo/a/x/b HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n";
  for (int i = 0; i < 4; ++i) req += "190\r\n" + std::string(400, 'z') + "\r\n";
  req += "0\r\n\r\n";
  ASSERT_TRUE(chunked.send_raw(req));
  auto rc = chunked.read_response();
  ASSERT_TRUE(rc.has_value());
  EXPECT_EQ(rc->status, 413);

  auto ok = fetch(server.port(), "POST", "/echo/a/x/b", {}, std::string(1000, 'k'));  // exactly the cap
  ASSERT_TRUE(ok.has_value());
  EXPECT_EQ(ok->status, 200);
}

TEST(HttpServer, HeaderOverCapIs431) {
  Server server(test_options());  // 64 KiB default
  add_echo_route(server);
  server.start();
  auto r = fetch(server.port(), "GET", "/echo/a/x/b", {{"X-Big", std::string(70 * 1024, 'h')}});
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->status, 431);
  auto ok = fetch(server.port(), "GET", "/echo/a/x/b", {{"X-Big", std::string(60 * 1024, 'h')}});
  ASSERT_TRUE(ok.has_value());
  EXPECT_EQ(ok->status, 200);
}

TEST(HttpServer, MalformedRequestsAre400) {
  Server server(test_options());
  add_echo_route(server);
  server.start();
  for (std::string raw : {std::string("GET /echo/a/x/b HTTP/1.1\r\nBad Header Line\r\n\r\n"),
                          std::string("GET /echo/a/x/b HTTP/9Z\r\n\r\n"),
                          std::string("GET /echo/a%zz/x/b HTTP/1.1\r\nHost: h\r\n\r\n"),
                          std::string("POST /echo/a/x/b HTTP/1.1\r\nContent-Length: 12x\r\n\r\n"),
                          std::string("GET relative/path HTTP/1.1\r\nHost: h\r\n\r\n"),
                          std::string("POST /echo/a/x/b HTTP/1.1\r\nContent-Length: 3\r\n"
                                      "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n"),
                          std::string("POST /echo/a/x/b HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"
                                      "zz\r\n")}) {
    TestClient c(server.port());
    ASSERT_TRUE(c.send_raw(raw));
    auto r = c.read_response();
    ASSERT_TRUE(r.has_value()) << raw;
    EXPECT_EQ(r->status, 400) << raw;
    EXPECT_NE(r->body.find("invalid_request_error"), std::string::npos);
    EXPECT_TRUE(c.wait_closed(2000)) << raw;
  }
  auto ok = fetch(server.port(), "GET", "/echo/a/x/b");  // still serving
  ASSERT_TRUE(ok.has_value());
  EXPECT_EQ(ok->status, 200);
}

TEST(HttpServer, ApiKeyAuthBothHeaderForms) {
  ServerOptions o = test_options();
  o.api_key = "sekrit";
  Server server(o);
  server.router().add("GET", "/private", [](Request&) { return Response::text(200, "in"); });
  server.router().add("GET", "/health", [](Request&) { return Response::text(200, "up"); },
                      RouteOptions{.requires_auth = false});
  server.start();
  uint16_t port = server.port();
  auto missing = fetch(port, "GET", "/private");
  ASSERT_TRUE(missing.has_value());
  EXPECT_EQ(missing->status, 401);
  EXPECT_EQ(missing->headers.get("WWW-Authenticate"), "Bearer");
  EXPECT_NE(missing->body.find("authentication_error"), std::string::npos);
  EXPECT_EQ(status_of(fetch(port, "GET", "/private", {{"Authorization", "Bearer wrong"}})), 401);
  EXPECT_EQ(status_of(fetch(port, "GET", "/private", {{"x-api-key", "sekri"}})), 401);
  EXPECT_EQ(status_of(fetch(port, "GET", "/private", {{"Authorization", "Bearer sekrit"}})), 200);
  EXPECT_EQ(status_of(fetch(port, "GET", "/private", {{"X-Api-Key", "sekrit"}})), 200);
  EXPECT_EQ(status_of(fetch(port, "GET", "/health")), 200);
  EXPECT_EQ(status_of(fetch(port, "GET", "/unknown")), 401);  // no probing routes without the key
  EXPECT_EQ(status_of(fetch(port, "GET", "/unknown", {{"x-api-key", "sekrit"}})), 404);
}

TEST(HttpServer, UnauthorizedCallbackShapesTheBody) {
  ServerOptions o = test_options();
  o.api_key = "k";
  o.unauthorized = [](const Request& r) {
    return Response::json(401, "{\"type\":\"error\",\"path\":\"" + r.path + "\"}");
  };
  Server server(o);
  server.router().add("POST", "/v1/messages", [](Request&) { return Response::text(200, "ok"); });
  server.start();
  auto r = fetch(server.port(), "POST", "/v1/messages", {}, "{}");
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->status, 401);
  EXPECT_EQ(r->body, "{\"type\":\"error\",\"path\":\"/v1/messages\"}");
}

TEST(HttpServer, CorsPreflightOnlyForListedOrigins) {
  ServerOptions o = test_options();
  o.allowed_origins = {"http://good.test"};
  o.api_key = "k";  // preflights carry no credentials and must not need them
  Server server(o);
  server.router().add("POST", "/v1/chat", [](Request&) { return Response::text(200, "ok"); });
  server.start();
  uint16_t port = server.port();
  auto good = fetch(port, "OPTIONS", "/v1/chat",
                    {{"Origin", "http://good.test"}, {"Access-Control-Request-Method", "POST"},
                     {"Access-Control-Request-Headers", "authorization, content-type"}});
  ASSERT_TRUE(good.has_value());
  EXPECT_EQ(good->status, 204);
  EXPECT_EQ(good->headers.get("Access-Control-Allow-Origin"), "http://good.test");
  EXPECT_NE(std::string(good->headers.get("Access-Control-Allow-Methods").value_or("")).find("POST"),
            std::string::npos);
  EXPECT_EQ(good->headers.get("Access-Control-Allow-Headers"), "authorization, content-type");

  auto evil = fetch(port, "OPTIONS", "/v1/chat",
                    {{"Origin", "http://evil.test"}, {"Access-Control-Request-Method", "POST"}});
  ASSERT_TRUE(evil.has_value());
  EXPECT_FALSE(evil->headers.has("Access-Control-Allow-Origin"));
  EXPECT_FALSE(evil->headers.has("Access-Control-Allow-Methods"));

  auto real = fetch(port, "POST", "/v1/chat", {{"Origin", "http://good.test"}, {"x-api-key", "k"}}, "{}");
  ASSERT_TRUE(real.has_value());
  EXPECT_EQ(real->status, 200);
  EXPECT_EQ(real->headers.get("Access-Control-Allow-Origin"), "http://good.test");
  auto foreign = fetch(port, "POST", "/v1/chat", {{"Origin", "http://evil.test"}, {"x-api-key", "k"}}, "{}");
  ASSERT_TRUE(foreign.has_value());
  EXPECT_FALSE(foreign->headers.has("Access-Control-Allow-Origin"));
}

TEST(HttpServer, ConnectionCapAnswers503WithRetryAfter) {
  ServerOptions o = test_options();
  o.max_connections = 2;
  Server server(o);
  server.router().add("GET", "/x", [](Request&) { return Response::text(200, "x"); });
  server.start();
  auto a = std::make_unique<TestClient>(server.port());
  TestClient b(server.port());
  for (TestClient* c : {a.get(), &b}) {  // both admitted and kept alive
    ASSERT_TRUE(c->send_request("GET", "/x"));
    ASSERT_EQ(status_of(c->read_response()), 200);
  }
  EXPECT_EQ(server.connection_count(), 2u);
  TestClient c(server.port());
  ASSERT_TRUE(c.send_request("GET", "/x"));
  auto r = c.read_response();
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->status, 503);
  EXPECT_EQ(r->headers.get("Retry-After"), "1");
  EXPECT_TRUE(c.wait_closed(2000));

  a.reset();  // frees a slot once the server sees the close
  bool admitted = false;
  for (int i = 0; i < 40 && !admitted; ++i) {
    auto again = fetch(server.port(), "GET", "/x");
    admitted = again && again->status == 200;
    if (!admitted) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_TRUE(admitted);
}

TEST(HttpServer, BindingABusyPortFails) {
  Server first(test_options());
  first.start();
  ServerOptions o = test_options();
  o.port = first.port();
  Server second(o);
  EXPECT_THROW(second.start(), Error);
}

}  // namespace
}  // namespace bunsen::server::http
