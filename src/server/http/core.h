// Internal: the state shared by the Server facade, its acceptor and every Connection: options, routes,
// the io_context with its threads, and the registry of live connections that stop() walks. Not public
// API (it exposes Boost). Invariants: a Connection holds a shared_ptr<Core>, so the io_context outlives
// every socket; posts from outside the IO threads go through post_external(), which refuses once the
// threads have been joined, so no handler is ever queued on a context nobody runs.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>

#include "server/http/server.h"

namespace bunsen::server::http::detail {

class Connection;

class Core : public std::enable_shared_from_this<Core> {
 public:
  explicit Core(ServerOptions opts);

  ServerOptions options;
  Router router;
  boost::asio::io_context ioc;

  // Server-made error answers, shaped by options.error_response / options.unauthorized when set.
  Response error(int status, std::string message, std::string type, const Request* request) const;
  Response unauthorized(const Request& request) const;

  // Posts `fn` to `executor` unless the server has finished stopping; false when refused.
  template <typename Executor, typename Fn>
  bool post_external(const Executor& executor, Fn&& fn) {
    std::shared_lock lock(post_mu_);
    if (!accepting_posts_) return false;
    boost::asio::post(executor, std::forward<Fn>(fn));
    return true;
  }

  void start();  // bind + listen + threads (Server::start)
  void stop();   // Server::stop
  void request_stop();
  void wait();
  void install_signals();
  uint16_t port() const { return port_; }
  size_t active_count() const { return active_.load(); }
  bool stopping() const { return stopping_.load(); }

  // Connection bookkeeping. `counted` connections take a slot under max_connections.
  void unregister(uint64_t id, bool counted);

 private:
  void do_accept();
  void on_accept(const boost::system::error_code& ec, boost::asio::ip::tcp::socket socket);
  std::vector<std::shared_ptr<Connection>> snapshot();
  bool wait_drained(std::chrono::steady_clock::time_point deadline);
  bool on_io_thread() const;

  boost::asio::strand<boost::asio::io_context::executor_type> accept_strand_;
  boost::asio::ip::tcp::acceptor acceptor_;
  boost::asio::steady_timer accept_retry_;
  std::optional<boost::asio::signal_set> signals_;
  std::optional<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> work_;
  std::vector<std::thread> threads_;
  std::vector<std::thread::id> thread_ids_;
  uint16_t port_ = 0;

  std::mutex mu_;  // guards live_, next_id_
  std::condition_variable drained_cv_;
  std::unordered_map<uint64_t, std::weak_ptr<Connection>> live_;
  uint64_t next_id_ = 1;
  std::atomic<size_t> active_{0};
  std::atomic<bool> stopping_{false};

  std::shared_mutex post_mu_;
  bool accepting_posts_ = true;  // under post_mu_

  std::mutex stop_mu_;  // guards started_, stopped_, stop_requested_
  std::condition_variable stop_cv_;
  bool started_ = false;
  bool stopped_ = false;
  bool stop_requested_ = false;
};

}  // namespace bunsen::server::http::detail
