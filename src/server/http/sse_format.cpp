// SSE block formatting (see sse_format.h).
#include "server/http/sse_format.h"

namespace bunsen::server::http {

namespace {

// Appends `prefix + line + "\n"` for every line of `text` (CRLF, CR and LF all end a line).
void append_lines(std::string& out, std::string_view prefix, std::string_view text) {
  size_t start = 0;
  while (true) {
    size_t end = text.find_first_of("\r\n", start);
    out += prefix;
    out += text.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start);
    out += '\n';
    if (end == std::string_view::npos) return;
    start = end + 1;
    if (text[end] == '\r' && start < text.size() && text[start] == '\n') ++start;
  }
}

}  // namespace

std::string format_sse_event(std::string_view event, std::string_view data) {
  std::string out;
  out.reserve(event.size() + data.size() + 16);
  if (!event.empty()) {
    out += "event: ";
    for (char c : event) {
      if (c != '\r' && c != '\n') out += c;
    }
    out += '\n';
  }
  append_lines(out, "data: ", data);
  out += '\n';
  return out;
}

std::string format_sse_comment(std::string_view text) {
  std::string out;
  append_lines(out, ": ", text);
  out += '\n';
  return out;
}

}  // namespace bunsen::server::http
