// Response head, chunked coding and SSE decoding (see http_wire.h).
#include "bench/http_wire.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>

#include "core/status.h"

namespace bunsen::bench {
namespace {

constexpr size_t kMaxLine = 8192;  // a chunk-size or trailer line longer than this is malformed

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

}  // namespace

int64_t HttpResponseHead::content_length() const {
  auto it = headers.find("content-length");
  if (it == headers.end()) return -1;
  char* end = nullptr;
  const long long v = std::strtoll(it->second.c_str(), &end, 10);
  check(end != it->second.c_str() && *end == '\0' && v >= 0, "bench", "bad Content-Length '" + it->second + "'");
  return v;
}

bool HttpResponseHead::chunked() const {
  auto it = headers.find("transfer-encoding");
  if (it == headers.end()) return false;
  const std::string v = lower(trim(it->second));
  return v.size() >= 7 && v.compare(v.size() - 7, 7, "chunked") == 0;
}

HttpResponseHead parse_response_head(std::string_view head) {
  HttpResponseHead h;
  size_t at = 0;
  bool first = true;
  while (at < head.size()) {
    size_t nl = head.find('\n', at);
    if (nl == std::string_view::npos) nl = head.size();
    const std::string_view l = trim(head.substr(at, nl - at));
    at = nl + 1;
    if (first) {
      first = false;
      // HTTP/1.x SP 3DIGIT [SP reason]
      check(l.size() >= 12 && l.substr(0, 7) == "HTTP/1." && l[8] == ' ', "bench",
            "bad HTTP status line '" + std::string(l.substr(0, 80)) + "'");
      const std::string code(l.substr(9, 3));
      check(std::all_of(code.begin(), code.end(), [](char c) { return c >= '0' && c <= '9'; }), "bench",
            "bad HTTP status code in '" + std::string(l.substr(0, 80)) + "'");
      h.status = std::atoi(code.c_str());
      h.reason = std::string(trim(l.substr(12)));
      continue;
    }
    if (l.empty()) break;
    const size_t colon = l.find(':');
    check(colon != std::string_view::npos && colon > 0, "bench", "bad HTTP header line '" + std::string(l) + "'");
    h.headers[lower(trim(l.substr(0, colon)))] = std::string(trim(l.substr(colon + 1)));
  }
  check(h.status != 0, "bench", "empty HTTP response head");
  return h;
}

size_t ChunkedDecoder::feed(std::string_view in) {
  size_t at = 0;
  while (at < in.size() && state_ != State::kDone) {
    if (state_ == State::kData) {
      const size_t n = static_cast<size_t>(std::min<uint64_t>(remaining_, in.size() - at));
      sink_(in.substr(at, n));
      at += n;
      remaining_ -= n;
      if (remaining_ == 0) state_ = State::kDataCrlf, crlf_seen_ = 0;
      continue;
    }
    if (state_ == State::kDataCrlf) {
      const char c = in[at++];
      const char want = crlf_seen_ == 0 ? '\r' : '\n';
      if (c != want && !(crlf_seen_ == 0 && c == '\n'))
        throw Error("bench", "chunked body: missing CRLF after chunk data");
      if (c == '\n') state_ = State::kSize;
      else crlf_seen_ = 1;
      continue;
    }
    // kSize or kTrailer: collect a line.
    const char c = in[at++];
    if (c != '\n') {
      line_ += c;
      check(line_.size() <= kMaxLine, "bench", "chunked body: line too long");
      continue;
    }
    const std::string_view l = trim(line_);
    if (state_ == State::kTrailer) {
      if (l.empty()) state_ = State::kDone;
    } else {
      const std::string_view size = l.substr(0, l.find(';'));  // chunk extensions are ignored
      char* end = nullptr;
      const std::string s(trim(size));
      const unsigned long long v = std::strtoull(s.c_str(), &end, 16);
      check(!s.empty() && *end == '\0' && s.size() <= 15, "bench", "chunked body: bad chunk size '" + s + "'");
      remaining_ = v;
      state_ = v == 0 ? State::kTrailer : State::kData;
    }
    line_.clear();
  }
  return at;
}

void SseParser::feed(std::string_view in) {
  size_t at = 0;
  while (at < in.size()) {
    const size_t nl = in.find('\n', at);
    if (nl == std::string_view::npos) {
      partial_.append(in.substr(at));
      check(partial_.size() <= (size_t{64} << 20), "bench", "SSE line longer than 64 MiB");
      return;
    }
    if (partial_.empty()) {
      line(in.substr(at, nl - at));
    } else {
      partial_.append(in.substr(at, nl - at));
      line(partial_);
      partial_.clear();
    }
    at = nl + 1;
  }
}

void SseParser::line(std::string_view l) {
  if (!l.empty() && l.back() == '\r') l.remove_suffix(1);
  if (l.empty()) {
    if (has_data_) sink_(data_);
    data_.clear();
    has_data_ = false;
    return;
  }
  if (l.substr(0, 5) != "data:" ) return;  // comments, event:, id:, retry:
  l.remove_prefix(5);
  if (!l.empty() && l.front() == ' ') l.remove_prefix(1);
  if (has_data_) data_ += '\n';
  data_.append(l);
  has_data_ = true;
}

}  // namespace bunsen::bench
