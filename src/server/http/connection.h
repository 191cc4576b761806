// Internal: one accepted TCP connection, driven on its own strand: reads request heads and bodies with
// Beast's parser, applies limits/auth/CORS/routing, runs the handler, writes answers through a bounded
// queue, streams SSE, and watches the socket for the client leaving while an answer is pending.
// Read side in connection.cpp, write side in connection_write.cpp. Not thread-safe except through the
// ExchangeSink posts. Invariants: at most one read and one write are outstanding; a request's answer is
// fully written before the next request is parsed; every exit path goes through fail() (once), which
// closes the socket, frees the connection slot and tells the exchange.
#pragma once
#include <atomic>
#include <chrono>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>

#include "server/http/core.h"
#include "server/http/exchange.h"

namespace bunsen::server::http::detail {

class Connection final : public ExchangeSink, public std::enable_shared_from_this<Connection> {
 public:
  Connection(std::shared_ptr<Core> core, boost::asio::ip::tcp::socket socket, uint64_t id, bool counted);
  ~Connection() override;

  const boost::asio::any_io_executor& executor() const { return executor_; }
  void start();           // serve requests
  void start_reject();    // over the connection cap: 503 + Retry-After, then close
  void begin_shutdown();  // Server::stop(): finish the pending answer, end streams, then close
  void force_close();     // Server::stop() past its grace period

  // ExchangeSink: called from any thread; post to the strand.
  void post_response(Response response) override;
  void post_unanswered() override;
  void post_sse_head(Headers extra) override;
  bool post_sse_bytes(std::string bytes) override;
  void post_sse_end() override;

 private:
  using Clock = std::chrono::steady_clock;
  struct Outgoing {
    std::string bytes;
    bool last = false;   // the final bytes of the current answer
    size_t counted = 0;  // bytes charged to the SSE queue bound
  };

  // Read side.
  void read_header();
  void on_header(const boost::system::error_code& ec);
  void read_body();
  void on_body(const boost::system::error_code& ec);
  void on_read_error(const boost::system::error_code& ec);
  bool build_request();
  void route_request();
  void dispatch();
  void wait_for_data();
  void on_data(const boost::system::error_code& ec, size_t n);

  // Write side.
  void reply(Response response);
  void reply_error(int status, std::string message, std::string type);
  void enqueue(std::string bytes, bool last, size_t counted = 0);
  void write_next();
  void on_write(const boost::system::error_code& ec);
  void finish_answer();
  void deliver_sse_head(Headers extra);
  void deliver_sse_bytes(std::string bytes, size_t counted);
  void deliver_sse_end();

  // Lifetime.
  void arm_read_timer(std::chrono::milliseconds d);
  void on_read_timeout();
  void cancel_read_timer();
  void graceful_close();
  void fail();

  std::shared_ptr<Core> core_;  // first member: destroyed last (the socket needs the io_context)
  boost::asio::ip::tcp::socket socket_;
  boost::asio::any_io_executor executor_;
  boost::asio::steady_timer read_timer_;
  boost::asio::steady_timer write_timer_;
  uint64_t id_;
  bool counted_;
  std::string remote_address_;
  uint16_t remote_port_ = 0;

  boost::beast::flat_buffer buffer_;
  std::optional<boost::beast::http::request_parser<boost::beast::http::string_body>> parser_;
  std::unique_ptr<Request> request_;
  std::string raw_path_;
  Router::Match match_;

  std::weak_ptr<Exchange> exchange_;
  bool in_request_ = false;       // a request head was read and its answer is not fully written
  bool exchange_active_ = false;  // a handler owns the answer
  bool streaming_ = false;
  bool chunked_ = false;
  bool stream_ended_ = false;
  bool keep_alive_ = true;
  bool head_only_ = false;
  int version_ = 11;
  std::string cors_origin_;

  bool reading_ = false;          // a watch/idle read is outstanding
  bool reading_request_ = false;  // a head or body read is outstanding
  bool timed_out_ = false;        // that read was cancelled by the read timer: answer 408
  bool restart_read_ = false;
  bool closing_ = false;
  bool closed_ = false;
  bool shutting_down_ = false;
  size_t drained_bytes_ = 0;
  uint64_t read_gen_ = 0;
  uint64_t write_gen_ = 0;

  std::deque<Outgoing> queue_;
  size_t in_flight_ = 0;  // queue_ items in the current async_write
  std::vector<boost::asio::const_buffer> write_bufs_;
  std::atomic<size_t> queued_bytes_{0};  // SSE bytes accepted but not yet written
};

}  // namespace bunsen::server::http::detail
