// One connection's read side and lifetime on its strand (see connection.h). Read path: head (header
// timeout) -> policies and routing -> body (read timeout) -> handler; while an answer is pending or
// streaming a "watch" read keeps the socket armed so a client that leaves is noticed at once (a client
// that half-closes its side counts as gone). The write side is in connection_write.cpp.
#include "server/http/connection.h"

#include <boost/beast/http/error.hpp>
#include <boost/beast/http/read.hpp>

#include "core/log.h"
#include "server/http/policy.h"

namespace bunsen::server::http::detail {

namespace net = boost::asio;
namespace bhttp = boost::beast::http;
using boost::system::error_code;

namespace {

constexpr size_t kReadChunk = 4096;
constexpr size_t kMaxDrainBytes = 1 << 20;          // bytes discarded while closing gracefully
constexpr std::chrono::milliseconds kLinger{1000};  // graceful close: wait for the client's FIN

}  // namespace

Connection::Connection(std::shared_ptr<Core> core, net::ip::tcp::socket socket, uint64_t id,
                       bool counted)
    : core_(std::move(core)),
      socket_(std::move(socket)),
      executor_(socket_.get_executor()),
      read_timer_(executor_),
      write_timer_(executor_),
      id_(id),
      counted_(counted) {
  error_code ec;
  auto ep = socket_.remote_endpoint(ec);
  if (!ec) {
    remote_address_ = ep.address().to_string();
    remote_port_ = ep.port();
  }
  socket_.set_option(net::ip::tcp::no_delay(true), ec);
}

Connection::~Connection() = default;

void Connection::start() {
  if (core_->stopping()) return fail();  // accepted while stop() was taking its snapshot
  read_header();
}

void Connection::start_reject() {
  if (core_->stopping()) return fail();
  in_request_ = true;
  keep_alive_ = false;
  Response r = core_->error(503, "too many connections", "overloaded_error", nullptr);
  r.headers.set("Retry-After", "1");
  reply(std::move(r));
}

// ---- read side ----

void Connection::read_header() {
  if (closed_ || closing_) return;
  parser_.emplace();
  parser_->header_limit(static_cast<std::uint32_t>(core_->options.max_header_bytes));
  parser_->body_limit(core_->options.max_body_bytes);
  arm_read_timer(core_->options.header_timeout);
  reading_request_ = true;
  bhttp::async_read_header(socket_, buffer_, *parser_,
                           [self = shared_from_this()](const error_code& ec, size_t) { self->on_header(ec); });
}

void Connection::on_header(const error_code& ec) {
  cancel_read_timer();
  reading_request_ = false;
  if (closed_) return;
  if (ec || timed_out_) return on_read_error(ec);
  in_request_ = true;
  if (!build_request()) return;
  route_request();
}

void Connection::read_body() {
  arm_read_timer(core_->options.read_timeout);
  reading_request_ = true;
  bhttp::async_read(socket_, buffer_, *parser_,
                    [self = shared_from_this()](const error_code& ec, size_t) { self->on_body(ec); });
}

void Connection::on_body(const error_code& ec) {
  cancel_read_timer();
  reading_request_ = false;
  if (closed_) return;
  if (ec || timed_out_) return on_read_error(ec);
  dispatch();
}

void Connection::on_read_error(const error_code& ec) {
  keep_alive_ = false;
  if (timed_out_) {
    timed_out_ = false;
    in_request_ = true;
    return reply_error(408, "request not received in time", "invalid_request_error");
  }
  if (ec == bhttp::error::header_limit) {
    in_request_ = true;
    return reply_error(431, "request headers too large", "invalid_request_error");
  }
  if (ec == bhttp::error::body_limit) {
    in_request_ = true;
    // A declared Content-Length over the cap fails at the head: give the error hook the path anyway so
    // the 413 comes in the route's dialect.
    if (!request_ && parser_) {
      const auto& msg = parser_->get();
      std::string target(msg.target());
      auto path = percent_decode(target.substr(0, target.find('?')), false);
      if (path && !path->empty() && path->front() == '/') {
        request_ = std::make_unique<Request>();
        request_->method = std::string(msg.method_string());
        request_->target = std::move(target);
        request_->path = std::move(*path);
      }
    }
    return reply_error(413, "request body too large", "invalid_request_error");
  }
  bool parse_error = ec.category() == make_error_code(bhttp::error::bad_method).category();
  if (parse_error && ec != bhttp::error::end_of_stream && ec != bhttp::error::partial_message) {
    in_request_ = true;
    return reply_error(400, "malformed request: " + ec.message(), "invalid_request_error");
  }
  fail();  // EOF, reset, or a timeout closed the socket
}

bool Connection::build_request() {
  const auto& msg = parser_->get();
  request_ = std::make_unique<Request>();
  Request& req = *request_;
  req.method = std::string(msg.method_string());
  req.target = std::string(msg.target());
  req.version = static_cast<int>(msg.version());
  req.remote_address = remote_address_;
  req.remote_port = remote_port_;
  for (const auto& field : msg) req.headers.add(std::string(field.name_string()), std::string(field.value()));
  version_ = req.version;
  keep_alive_ = msg.keep_alive();
  head_only_ = req.method == "HEAD";
  cors_origin_ = cors_allow_origin(core_->options.allowed_origins, req);

  std::string_view target = req.target;
  size_t scheme = target.find("://");
  if (!target.empty() && target.front() != '/' && scheme != std::string_view::npos) {  // absolute-form
    size_t slash = target.find('/', scheme + 3);
    target = slash == std::string_view::npos ? std::string_view("/") : target.substr(slash);
  }
  size_t q = target.find('?');
  raw_path_ = std::string(target.substr(0, q));
  auto path = percent_decode(raw_path_, false);
  auto query = parse_query(q == std::string_view::npos ? std::string_view() : target.substr(q + 1));
  bool asterisk = req.method == "OPTIONS" && raw_path_ == "*";
  if (!asterisk && (raw_path_.empty() || raw_path_.front() != '/' || !path || !query)) {
    keep_alive_ = false;
    reply_error(400, "malformed request target", "invalid_request_error");
    return false;
  }
  req.path = asterisk ? "*" : std::move(*path);
  if (query) req.query = std::move(*query);
  return true;
}

void Connection::route_request() {
  Request& req = *request_;
  const ServerOptions& opts = core_->options;
  // An answer given before the body is read leaves unread bytes behind: that connection cannot be reused.
  if (!parser_->is_done()) keep_alive_ = false;
  if (opts.guard) {
    if (std::optional<Response> refusal = opts.guard(req)) return reply(std::move(*refusal));
  }
  if (req.path == "*") return reply(preflight_response(req, "GET, POST, HEAD", ""));
  match_ = core_->router.match(req.method, raw_path_);
  bool preflight = req.method == "OPTIONS" && match_.kind != Router::Match::Kind::kFound;
  if (preflight && match_.kind == Router::Match::Kind::kMethodNotAllowed) {
    return reply(preflight_response(req, match_.allow, cors_origin_));
  }
  bool needs_key = !opts.api_key.empty() &&
                   !(match_.kind == Router::Match::Kind::kFound && !match_.options.requires_auth);
  if (needs_key && !request_has_api_key(req, opts.api_key)) return reply(core_->unauthorized(req));
  if (match_.kind == Router::Match::Kind::kNotFound) {
    return reply_error(404, "no route for " + req.method + " " + req.path, "not_found_error");
  }
  if (match_.kind == Router::Match::Kind::kMethodNotAllowed) {
    Response r = core_->error(405, "method " + req.method + " not allowed for " + req.path,
                              "invalid_request_error", &req);
    r.headers.set("Allow", match_.allow);
    return reply(std::move(r));
  }
  req.params = std::move(match_.params);
  if (parser_->is_done()) return dispatch();
  keep_alive_ = parser_->get().keep_alive();  // the body will be read after all
  auto expect = req.header("Expect");
  if (expect && iequals(*expect, "100-continue")) enqueue("HTTP/1.1 100 Continue\r\n\r\n", false);
  read_body();
}

void Connection::dispatch() {
  request_->body = std::move(parser_->get().body());
  parser_.reset();
  auto exchange = std::make_shared<Exchange>(shared_from_this());
  exchange_ = exchange;
  exchange_active_ = true;
  streaming_ = false;
  stream_ended_ = false;
  try {
    (*match_.handler)(*request_, Responder(exchange));
  } catch (const std::exception& e) {
    log::warn("http", request_->method + " " + request_->path + ": handler threw: " + e.what());
    Request* req = request_.get();
    if (!exchange->respond(core_->error(500, std::string("internal error: ") + e.what(), "server_error", req))) {
      exchange->sse_close();
    }
  }
  exchange.reset();  // if the handler kept no handle, the exchange answers 500 or ends the stream now
  request_.reset();
  wait_for_data();
}

void Connection::wait_for_data() {
  if (reading_ || closed_) return;
  // While an answer is pending, buffer at most one head's worth of pipelined bytes, then stop watching.
  if (!closing_ && in_request_ && buffer_.size() >= core_->options.max_header_bytes) return;
  reading_ = true;
  socket_.async_read_some(buffer_.prepare(kReadChunk),
                          [self = shared_from_this()](const error_code& ec, size_t n) { self->on_data(ec, n); });
}

void Connection::on_data(const error_code& ec, size_t n) {
  reading_ = false;
  bool restart = restart_read_;
  restart_read_ = false;
  if (closed_) return;
  if (closing_) {  // graceful close: discard until the client's FIN, a cap or the linger timer
    drained_bytes_ += n;
    buffer_.consume(buffer_.size());
    if (ec || drained_bytes_ > kMaxDrainBytes) return fail();
    return wait_for_data();
  }
  if (ec == net::error::operation_aborted && restart) return read_header();
  if (ec) return fail();  // the client left: fail() tells a pending exchange
  buffer_.commit(n);
  if (in_request_) return wait_for_data();
  read_header();  // idle keep-alive connection: the next request has begun
}

void Connection::finish_answer() {
  in_request_ = false;
  exchange_active_ = false;
  streaming_ = false;
  exchange_.reset();
  if (!keep_alive_ || shutting_down_) return graceful_close();
  if (reading_) {
    if (buffer_.size() > 0) {  // a pipelined request is already buffered: stop watching, parse it
      restart_read_ = true;
      error_code ignored;
      socket_.cancel(ignored);
    } else {
      arm_read_timer(core_->options.idle_timeout);
    }
    return;
  }
  if (buffer_.size() > 0) return read_header();
  arm_read_timer(core_->options.idle_timeout);
  wait_for_data();
}

// ---- lifetime ----

void Connection::begin_shutdown() {
  if (closed_) return;
  shutting_down_ = true;
  if (closing_) return;
  if (!in_request_ || (!exchange_active_ && queue_.empty() && in_flight_ == 0)) return fail();
  keep_alive_ = false;
  if (exchange_active_ && streaming_) {
    if (auto ex = exchange_.lock()) ex->notify_disconnect();
    deliver_sse_end();
  }
}

void Connection::force_close() { fail(); }

void Connection::arm_read_timer(std::chrono::milliseconds d) {
  uint64_t gen = ++read_gen_;
  read_timer_.expires_after(d);
  read_timer_.async_wait([self = shared_from_this(), gen](const error_code& ec) {
    if (!ec && gen == self->read_gen_) self->on_read_timeout();
  });
}

void Connection::on_read_timeout() {
  // A request that has begun gets a 408 (e.g. a chunked body that never ends); anything else (a silent
  // socket, an idle keep-alive connection, a graceful close) is just closed.
  if (reading_request_ && parser_ && parser_->got_some()) {
    timed_out_ = true;
    error_code ignored;
    socket_.cancel(ignored);  // the pending read completes with operation_aborted
    return;
  }
  fail();
}

void Connection::cancel_read_timer() {
  ++read_gen_;
  read_timer_.cancel();
}

void Connection::graceful_close() {
  if (closed_ || closing_) return;
  closing_ = true;
  error_code ignored;
  socket_.shutdown(net::ip::tcp::socket::shutdown_send, ignored);
  buffer_.consume(buffer_.size());
  arm_read_timer(kLinger);
  wait_for_data();
}

void Connection::fail() {
  if (closed_) return;
  closed_ = true;
  error_code ignored;
  socket_.close(ignored);
  cancel_read_timer();
  ++write_gen_;
  write_timer_.cancel();
  core_->unregister(id_, counted_);
  if (exchange_active_) {
    exchange_active_ = false;
    if (auto ex = exchange_.lock()) ex->notify_disconnect();
  }
}

}  // namespace bunsen::server::http::detail
