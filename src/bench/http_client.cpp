// Blocking POSIX-socket HTTP/1.1 client (see http_client.h).
#include "bench/http_client.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "core/status.h"

namespace bunsen::bench {
namespace {

constexpr size_t kMaxHead = 64 * 1024;
constexpr size_t kReadChunk = 16 * 1024;

class Socket {
 public:
  Socket() = default;
  ~Socket() {
    if (fd_ >= 0) ::close(fd_);
  }
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  int fd() const { return fd_; }
  void reset(int fd) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

std::string where(const HttpTarget& t) { return t.host + ":" + std::to_string(t.port); }

// Waits until fd is ready for `events`; false on timeout.
bool wait_fd(int fd, short events, double timeout_s) {
  pollfd p{fd, events, 0};
  for (;;) {
    const int r = ::poll(&p, 1, static_cast<int>(timeout_s * 1000));
    if (r >= 0) return r > 0;
    if (errno != EINTR) return false;
  }
}

// Connects to the first address of host:port that accepts within the timeout.
void connect_to(Socket& s, const HttpTarget& t, double timeout_s) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const int gai = ::getaddrinfo(t.host.c_str(), std::to_string(t.port).c_str(), &hints, &res);
  if (gai != 0) throw Error("bench", "cannot resolve " + t.host + ": " + ::gai_strerror(gai));
  std::string last = "no address";
  for (addrinfo* a = res; a; a = a->ai_next) {
    s.reset(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol));
    if (s.fd() < 0) continue;
    int r = ::connect(s.fd(), a->ai_addr, a->ai_addrlen);
    if (r != 0 && errno == EINPROGRESS) {
      if (!wait_fd(s.fd(), POLLOUT, timeout_s)) {
        last = "connect timed out";
        continue;
      }
      int err = 0;
      socklen_t len = sizeof err;
      ::getsockopt(s.fd(), SOL_SOCKET, SO_ERROR, &err, &len);
      r = err == 0 ? 0 : -1;
      errno = err;
    }
    if (r == 0) {
      ::fcntl(s.fd(), F_SETFL, ::fcntl(s.fd(), F_GETFL) & ~O_NONBLOCK);
      const int one = 1;
      ::setsockopt(s.fd(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      ::freeaddrinfo(res);
      return;
    }
    last = std::strerror(errno);
  }
  ::freeaddrinfo(res);
  s.reset(-1);
  throw Error("bench", "cannot connect to " + where(t) + ": " + last);
}

void send_all(int fd, std::string_view data, const HttpTarget& t) {
  while (!data.empty()) {
    const ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw Error("bench", "send to " + where(t) + " failed: " + std::strerror(errno));
    data.remove_prefix(static_cast<size_t>(n));
  }
}

// Reads what is available (after waiting up to the timeout); 0 at EOF.
size_t read_some(int fd, char* buf, size_t cap, double timeout_s, const HttpTarget& t) {
  if (!wait_fd(fd, POLLIN, timeout_s))
    throw Error("bench", strfmt("no data from %s for %.0f s", where(t).c_str(), timeout_s));
  for (;;) {
    const ssize_t n = ::recv(fd, buf, cap, 0);
    if (n >= 0) return static_cast<size_t>(n);
    if (errno != EINTR) throw Error("bench", "read from " + where(t) + " failed: " + std::strerror(errno));
  }
}

std::string request_text(const HttpTarget& t, const HttpRequest& req) {
  std::string s = req.method + " " + t.base_path + req.path + " HTTP/1.1\r\nHost: " + t.host_header() +
                  "\r\nConnection: close\r\n";
  if (!req.body.empty() || req.method == "POST") s += "Content-Length: " + std::to_string(req.body.size()) + "\r\n";
  for (const auto& [k, v] : req.headers) s += k + ": " + v + "\r\n";
  s += "\r\n";
  s += req.body;
  return s;
}

}  // namespace

std::string HttpTarget::host_header() const {
  const bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

HttpTarget parse_http_url(const std::string& url) {
  std::string rest = url;
  if (rest.rfind("https://", 0) == 0) throw Error("bench", "https is not supported: '" + url + "'");
  if (rest.rfind("http://", 0) == 0) rest = rest.substr(7);
  HttpTarget t;
  const size_t slash = rest.find('/');
  std::string hostport = rest.substr(0, slash);
  if (slash != std::string::npos) t.base_path = rest.substr(slash);
  while (!t.base_path.empty() && t.base_path.back() == '/') t.base_path.pop_back();
  size_t colon = hostport.rfind(':');
  if (!hostport.empty() && hostport.front() == '[') {  // [v6]:port
    const size_t close = hostport.find(']');
    check(close != std::string::npos, "bench", "bad URL '" + url + "'");
    t.host = hostport.substr(1, close - 1);
    colon = hostport.find(':', close);
  } else {
    t.host = hostport.substr(0, colon);
  }
  if (colon != std::string::npos) {
    const std::string p = hostport.substr(colon + 1);
    char* end = nullptr;
    const long v = std::strtol(p.c_str(), &end, 10);
    check(!p.empty() && *end == '\0' && v > 0 && v < 65536, "bench", "bad port in URL '" + url + "'");
    t.port = static_cast<int>(v);
  }
  check(!t.host.empty(), "bench", "no host in URL '" + url + "'");
  return t;
}

HttpResponseHead http_call(const HttpTarget& target, const HttpRequest& req,
                           const std::function<void(const HttpResponseHead&)>& on_head,
                           const std::function<void(std::string_view)>& on_body, const HttpCallOptions& opts) {
  const std::function<void(std::string_view)> sink = on_body ? on_body : [](std::string_view) {};
  Socket s;
  connect_to(s, target, opts.connect_timeout_s);
  send_all(s.fd(), request_text(target, req), target);
  std::string buf;
  char tmp[kReadChunk];
  size_t head_end = std::string::npos, sep = 0;
  while (head_end == std::string::npos) {
    const size_t n = read_some(s.fd(), tmp, sizeof tmp, opts.read_timeout_s, target);
    if (n == 0) throw Error("bench", "connection to " + where(target) + " closed before a response");
    buf.append(tmp, n);
    if ((head_end = buf.find("\r\n\r\n")) != std::string::npos) sep = 4;
    else if ((head_end = buf.find("\n\n")) != std::string::npos) sep = 2;
    check(head_end != std::string::npos || buf.size() <= kMaxHead, "bench", "response head too large");
  }
  HttpResponseHead head = parse_response_head(std::string_view(buf).substr(0, head_end));
  if (on_head) on_head(head);
  std::string_view rest = std::string_view(buf).substr(head_end + sep);
  if (head.status == 204 || head.status == 304 || req.method == "HEAD") return head;
  if (head.chunked()) {
    ChunkedDecoder dec(sink);
    dec.feed(rest);
    while (!dec.done()) {
      const size_t n = read_some(s.fd(), tmp, sizeof tmp, opts.read_timeout_s, target);
      if (n == 0) throw Error("bench", "connection to " + where(target) + " closed mid-body (chunked)");
      dec.feed(std::string_view(tmp, n));
    }
    return head;
  }
  const int64_t len = head.content_length();
  int64_t left = len;
  auto deliver = [&](std::string_view piece) {
    if (len >= 0 && static_cast<int64_t>(piece.size()) > left) piece = piece.substr(0, static_cast<size_t>(left));
    if (len >= 0) left -= static_cast<int64_t>(piece.size());
    if (!piece.empty()) sink(piece);
  };
  deliver(rest);
  while (len < 0 || left > 0) {
    const size_t n = read_some(s.fd(), tmp, sizeof tmp, opts.read_timeout_s, target);
    if (n == 0) {
      if (len < 0) break;
      throw Error("bench", strfmt("connection to %s closed with %lld of %lld body bytes missing",
                                  where(target).c_str(), static_cast<long long>(left), static_cast<long long>(len)));
    }
    deliver(std::string_view(tmp, n));
  }
  return head;
}

HttpResponse http_fetch(const HttpTarget& target, const HttpRequest& req, const HttpCallOptions& opts) {
  HttpResponse r;
  r.head = http_call(target, req, nullptr, [&](std::string_view p) { r.body.append(p); }, opts);
  return r;
}

}  // namespace bunsen::bench
