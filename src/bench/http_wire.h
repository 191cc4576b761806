// Incremental HTTP/1.1 response decoding for the serving benchmark's client: the response head, the
// chunked transfer coding and Server-Sent Events `data:` fields. Pure byte processing (no sockets), so
// every split of the input can be tested. Invariant: feeding the same bytes in any fragmentation gives
// the same output; malformed input is an Error("bench", ...), never undefined behaviour.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>

namespace bunsen::bench {

struct HttpResponseHead {
  int status = 0;
  std::string reason;
  std::map<std::string, std::string> headers;  // names lowercased; a repeated name keeps the last value
  // Content-Length when given, else -1.
  int64_t content_length() const;
  bool chunked() const;  // Transfer-Encoding ends with "chunked"
};

// Parses "HTTP/1.1 200 OK\r\nName: value\r\n...\r\n\r\n" (the text before the blank line, CRLF or LF).
HttpResponseHead parse_response_head(std::string_view head);

// Decodes a chunked body: feed() returns how many of `in`'s bytes were consumed (always all of them
// until the terminal chunk and its trailers end, after which done() is true and the rest is left over).
class ChunkedDecoder {
 public:
  using Sink = std::function<void(std::string_view)>;
  explicit ChunkedDecoder(Sink sink) : sink_(std::move(sink)) {}
  size_t feed(std::string_view in);
  bool done() const { return state_ == State::kDone; }

 private:
  enum class State { kSize, kData, kDataCrlf, kTrailer, kDone };
  Sink sink_;
  State state_ = State::kSize;
  std::string line_;      // the size line or trailer line being collected
  uint64_t remaining_ = 0;  // data bytes left in the current chunk
  int crlf_seen_ = 0;       // bytes of the CRLF after a chunk's data consumed so far
};

// Splits an event stream into events and hands each event's data (its `data:` lines joined by "\n",
// one optional space after the colon removed) to the sink when the blank line that ends the event
// arrives. Comments (":...") and other fields are ignored; lines may end in LF, CRLF or CR+LF split
// across feeds.
class SseParser {
 public:
  using Sink = std::function<void(std::string_view)>;
  explicit SseParser(Sink sink) : sink_(std::move(sink)) {}
  void feed(std::string_view in);

 private:
  void line(std::string_view l);
  Sink sink_;
  std::string partial_;  // an unterminated line
  std::string data_;     // the current event's data so far
  bool has_data_ = false;
};

}  // namespace bunsen::bench
