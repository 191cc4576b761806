// Server facade and its Core: listener, IO threads, connection registry, graceful stop, signal wiring.
// Connection handling itself lives in connection.cpp.
#include <algorithm>

#include "core/log.h"
#include "core/status.h"
#include "server/http/connection.h"

namespace bunsen::server::http {

namespace detail {

namespace net = boost::asio;
using boost::system::error_code;
using net::ip::tcp;

namespace {
constexpr std::string_view kComponent = "http";
constexpr std::chrono::milliseconds kAcceptRetry{50};      // after EMFILE and friends
constexpr std::chrono::milliseconds kForceCloseWait{2000};  // stop(): after force-closing stragglers
}  // namespace

Core::Core(ServerOptions opts)
    : options(std::move(opts)),
      accept_strand_(net::make_strand(ioc)),
      acceptor_(accept_strand_),
      accept_retry_(accept_strand_) {}

Response Core::error(int status, std::string message, std::string type, const Request* request) const {
  ErrorInfo info{status, std::move(message), std::move(type), request};
  if (options.error_response) return options.error_response(info);
  return default_error_response(info);
}

Response Core::unauthorized(const Request& request) const {
  if (options.unauthorized) return options.unauthorized(request);
  Response r = default_error_response({401, "invalid or missing API key", "authentication_error", &request});
  r.headers.set("WWW-Authenticate", "Bearer");
  return r;
}

void Core::start() {
  {
    std::lock_guard lock(stop_mu_);
    check(!started_, kComponent, "server already started");
    started_ = true;
  }
  check(options.io_threads >= 1, kComponent, "io_threads must be >= 1");
  error_code ec;
  net::ip::address address = net::ip::make_address(options.host, ec);
  check(!ec, kComponent, "invalid bind address '" + options.host + "': " + ec.message());
  tcp::endpoint endpoint(address, options.port);
  std::string where = options.host + ":" + std::to_string(options.port);
  acceptor_.open(endpoint.protocol(), ec);
  if (!ec) acceptor_.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) acceptor_.bind(endpoint, ec);
  if (!ec) acceptor_.listen(net::socket_base::max_listen_connections, ec);
  check(!ec, kComponent, "cannot listen on " + where + ": " + ec.message());
  port_ = acceptor_.local_endpoint().port();
  work_.emplace(net::make_work_guard(ioc));
  net::post(accept_strand_, [this] { do_accept(); });
  for (int i = 0; i < options.io_threads; ++i) {
    threads_.emplace_back([this] {
      while (true) {
        try {
          ioc.run();
          return;
        } catch (const std::exception& e) {  // a bug in a handler must not take the listener down
          log::error("http", std::string("IO thread: ") + e.what());
        }
      }
    });
    thread_ids_.push_back(threads_.back().get_id());
  }
}

void Core::do_accept() {
  acceptor_.async_accept(net::make_strand(ioc), [this](const error_code& ec, tcp::socket socket) {
    on_accept(ec, std::move(socket));
  });
}

void Core::on_accept(const error_code& ec, tcp::socket socket) {
  if (stopping_.load() || !acceptor_.is_open()) return;
  if (ec) {
    log::warn("http", "accept: " + ec.message());
    accept_retry_.expires_after(kAcceptRetry);
    accept_retry_.async_wait([this](const error_code& e) {
      if (!e && !stopping_.load()) do_accept();
    });
    return;
  }
  bool counted = active_.fetch_add(1) < options.max_connections;
  if (!counted) active_.fetch_sub(1);
  std::shared_ptr<Connection> conn;
  {
    std::lock_guard lock(mu_);
    uint64_t id = next_id_++;
    conn = std::make_shared<Connection>(shared_from_this(), std::move(socket), id, counted);
    live_[id] = conn;
  }
  net::post(conn->executor(), [conn, counted] { counted ? conn->start() : conn->start_reject(); });
  do_accept();
}

void Core::unregister(uint64_t id, bool counted) {
  if (counted) active_.fetch_sub(1);
  std::lock_guard lock(mu_);
  live_.erase(id);
  if (live_.empty()) drained_cv_.notify_all();
}

std::vector<std::shared_ptr<Connection>> Core::snapshot() {
  std::vector<std::shared_ptr<Connection>> out;
  std::lock_guard lock(mu_);
  for (auto& [id, weak] : live_) {
    if (auto c = weak.lock()) out.push_back(std::move(c));
  }
  return out;
}

bool Core::wait_drained(std::chrono::steady_clock::time_point deadline) {
  std::unique_lock lock(mu_);
  return drained_cv_.wait_until(lock, deadline, [this] { return live_.empty(); });
}

bool Core::on_io_thread() const {
  return std::find(thread_ids_.begin(), thread_ids_.end(), std::this_thread::get_id()) != thread_ids_.end();
}

void Core::stop() {
  {
    std::lock_guard lock(stop_mu_);
    if (!started_ || stopped_) {
      stopped_ = true;
      stop_cv_.notify_all();
      return;
    }
    check(!on_io_thread(), kComponent, "stop() called from an IO thread (use request_stop())");
    stopped_ = true;
    stop_cv_.notify_all();
  }
  stopping_.store(true);
  net::post(accept_strand_, [this] {
    error_code ignored;
    acceptor_.close(ignored);
    accept_retry_.cancel();
    if (signals_) {
      signals_->cancel(ignored);
      signals_->clear(ignored);  // a second Ctrl-C during the grace period kills at once
    }
  });
  for (auto& conn : snapshot()) net::post(conn->executor(), [conn] { conn->begin_shutdown(); });
  auto now = std::chrono::steady_clock::now();
  if (!wait_drained(now + options.shutdown_grace)) {
    for (auto& conn : snapshot()) net::post(conn->executor(), [conn] { conn->force_close(); });
    if (!wait_drained(std::chrono::steady_clock::now() + kForceCloseWait)) {
      log::warn("http", "stop(): some connections did not close in time");
    }
  }
  {
    std::unique_lock lock(post_mu_);
    accepting_posts_ = false;
  }
  work_.reset();
  for (auto& t : threads_) t.join();
  threads_.clear();
}

void Core::request_stop() {
  std::lock_guard lock(stop_mu_);
  stop_requested_ = true;
  stop_cv_.notify_all();
}

void Core::wait() {
  {
    std::unique_lock lock(stop_mu_);
    stop_cv_.wait(lock, [this] { return stop_requested_ || stopped_; });
  }
  stop();
}

void Core::install_signals() {
  std::lock_guard lock(stop_mu_);  // ordered before stop()'s posted cancel, which reads signals_
  if (stopped_ || signals_) return;
  signals_.emplace(accept_strand_, SIGINT, SIGTERM);
  signals_->async_wait([this](const error_code& ec, int) {
    if (!ec) request_stop();
  });
}

}  // namespace detail

Server::Server(ServerOptions options) : core_(std::make_shared<detail::Core>(std::move(options))) {}

Server::~Server() {
  try {
    stop();
  } catch (const std::exception& e) {
    log::error("http", std::string("~Server: ") + e.what());
  }
}

Router& Server::router() { return core_->router; }
const ServerOptions& Server::options() const { return core_->options; }
void Server::start() { core_->start(); }
uint16_t Server::port() const { return core_->port(); }
void Server::stop() { core_->stop(); }
void Server::request_stop() { core_->request_stop(); }
void Server::wait() { core_->wait(); }
size_t Server::connection_count() const { return core_->active_count(); }

void install_signal_stop(Server& server) { server.core_->install_signals(); }

}  // namespace bunsen::server::http
