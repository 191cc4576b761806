// Pure-function tests of the HTTP layer: SSE framing, percent/query decoding, JSON escaping, auth compare,
// CORS lookup, head serialization and route matching. No sockets (those are in test_http_server.cpp).
#include <gtest/gtest.h>

#include "core/status.h"
#include "server/http/policy.h"
#include "server/http/router.h"
#include "server/http/sse_format.h"

namespace bunsen::server::http {
namespace {

TEST(SseFormat, EventAndSingleLineData) {
  EXPECT_EQ(format_sse_event("delta", "hello"), "event: delta\ndata: hello\n\n");
  EXPECT_EQ(format_sse_event("", "x"), "data: x\n\n");
  EXPECT_EQ(format_sse_event("", ""), "data: \n\n");
}

TEST(SseFormat, MultiLineDataSplitsOnEveryLineEnding) {
  EXPECT_EQ(format_sse_event("", "a\nb\r\nc\rd"), "data: a\ndata: b\ndata: c\ndata: d\n\n");
  EXPECT_EQ(format_sse_event("", "tail\n"), "data: tail\ndata: \n\n");
}

TEST(SseFormat, EventNameCannotInjectLines) {
  EXPECT_EQ(format_sse_event("a\r\nb", "d"), "event: ab\ndata: d\n\n");
}

TEST(SseFormat, Comment) {
  EXPECT_EQ(format_sse_comment("ping"), ": ping\n\n");
  EXPECT_EQ(format_sse_comment("a\nb"), ": a\n: b\n\n");
}

TEST(HttpText, PercentDecode) {
  EXPECT_EQ(percent_decode("a%20b%2Fc", false), "a b/c");
  EXPECT_EQ(percent_decode("a+b", false), "a+b");
  EXPECT_EQ(percent_decode("a+b", true), "a b");
  EXPECT_FALSE(percent_decode("%2", false).has_value());
  EXPECT_FALSE(percent_decode("%zz", false).has_value());
  EXPECT_FALSE(percent_decode("a%00", false).has_value());
}

TEST(HttpText, ParseQuery) {
  auto q = parse_query("a=1&b=x%20y&&c&a=2");
  ASSERT_TRUE(q.has_value());
  EXPECT_EQ(q->at("a"), "2");
  EXPECT_EQ(q->at("b"), "x y");
  EXPECT_EQ(q->at("c"), "");
  EXPECT_EQ(q->size(), 3u);
  EXPECT_FALSE(parse_query("a=%G1").has_value());
}

TEST(HttpText, JsonEscapeAndDefaultError) {
  EXPECT_EQ(json_escape("a\"b\\c\n\x01"), "a\\\"b\\\\c\\n\\u0001");
  Response r = default_error_response({404, "no \"x\"", "not_found_error", nullptr});
  EXPECT_EQ(r.status, 404);
  EXPECT_EQ(r.body, "{\"error\":{\"message\":\"no \\\"x\\\"\",\"type\":\"not_found_error\"}}");
  EXPECT_EQ(r.headers.get("content-type"), "application/json");
}

TEST(HttpHeaders, CaseInsensitiveGetSetRemove) {
  Headers h;
  h.add("X-Thing", "1");
  h.add("x-thing", "2");
  EXPECT_EQ(h.get("X-THING"), "1");
  h.set("x-Thing", "3");
  EXPECT_EQ(h.size(), 1u);
  EXPECT_EQ(h.get("x-thing"), "3");
  h.remove("X-THING");
  EXPECT_FALSE(h.has("x-thing"));
}

TEST(HttpPolicy, ConstantTimeEquals) {
  EXPECT_TRUE(constant_time_equals("secret", "secret"));
  EXPECT_FALSE(constant_time_equals("secret", "secreT"));
  EXPECT_FALSE(constant_time_equals("secret", "secret2"));
  EXPECT_FALSE(constant_time_equals("", "x"));
  EXPECT_TRUE(constant_time_equals("", ""));
}

TEST(HttpPolicy, ApiKeyForms) {
  Request r;
  EXPECT_FALSE(request_has_api_key(r, "k1"));
  r.headers.set("authorization", "bearer k1");
  EXPECT_TRUE(request_has_api_key(r, "k1"));
  r.headers.set("Authorization", "Basic k1");
  EXPECT_FALSE(request_has_api_key(r, "k1"));
  r.headers.remove("Authorization");
  r.headers.set("X-Api-Key", "k1");
  EXPECT_TRUE(request_has_api_key(r, "k1"));
  EXPECT_FALSE(request_has_api_key(r, "k2"));
}

TEST(HttpPolicy, CorsOnlyForListedOrigins) {
  Request r;
  r.headers.set("Origin", "http://a.test");
  EXPECT_EQ(cors_allow_origin({}, r), "");
  EXPECT_EQ(cors_allow_origin({"http://b.test"}, r), "");
  EXPECT_EQ(cors_allow_origin({"http://b.test", "http://a.test"}, r), "http://a.test");
  EXPECT_EQ(cors_allow_origin({"*"}, r), "*");
  Request no_origin;
  EXPECT_EQ(cors_allow_origin({"*"}, no_origin), "");
}

TEST(HttpPolicy, SerializeHeadOwnsFramingAndDropsInjectedLines) {
  Headers h;
  h.add("Content-Type", "text/plain");
  h.add("Content-Length", "999");
  h.add("X-Bad", "a\r\nInjected: 1");
  HeadFraming f;
  f.content_length = 5;
  f.keep_alive = false;
  std::string head = serialize_head(200, h, f);
  EXPECT_EQ(head, "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\nConnection: close\r\n\r\n");
}

TEST(HttpRouter, LiteralsParamsRestAndMethods) {
  Router router;
  int hit = 0;
  router.add("GET", "/v1/models", [&](Request&) { hit = 1; return Response(); });
  router.add("GET", "/v1/models/{id...}", [&](Request&) { hit = 2; return Response(); });
  router.add("POST", "/items/{a}/sub/{b}", [&](Request&) { hit = 3; return Response(); });
  router.add("DELETE", "/items/{a}/sub/{b}", [&](Request&) { hit = 4; return Response(); });

  auto m = router.match("GET", "/v1/models");
  ASSERT_EQ(m.kind, Router::Match::Kind::kFound);
  EXPECT_TRUE(m.params.empty());

  m = router.match("GET", "/v1/models/Qwen/Qwen3%2D0.6B");
  ASSERT_EQ(m.kind, Router::Match::Kind::kFound);
  EXPECT_EQ(m.params.at("id"), "Qwen/Qwen3-0.6B");

  m = router.match("POST", "/items/x%20y/sub/7");
  ASSERT_EQ(m.kind, Router::Match::Kind::kFound);
  EXPECT_EQ(m.params.at("a"), "x y");
  EXPECT_EQ(m.params.at("b"), "7");

  m = router.match("PUT", "/items/1/sub/2");
  EXPECT_EQ(m.kind, Router::Match::Kind::kMethodNotAllowed);
  EXPECT_EQ(m.allow, "POST, DELETE");

  EXPECT_EQ(router.match("GET", "/v1/model").kind, Router::Match::Kind::kNotFound);
  EXPECT_EQ(router.match("GET", "/items/1/sub").kind, Router::Match::Kind::kNotFound);
  EXPECT_EQ(router.match("POST", "/items//sub/2").kind, Router::Match::Kind::kNotFound);

  m = router.match("HEAD", "/v1/models");  // HEAD falls back to GET
  EXPECT_EQ(m.kind, Router::Match::Kind::kFound);
  EXPECT_EQ(m.allow, "GET, HEAD");
}

TEST(HttpRouter, RejectsBadPatterns) {
  Router router;
  EXPECT_THROW(router.add("GET", "nope", [](Request&) { return Response(); }), Error);
  EXPECT_THROW(router.add("GET", "/a/{x...}/b", [](Request&) { return Response(); }), Error);
}

}  // namespace
}  // namespace bunsen::server::http
