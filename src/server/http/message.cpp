// Implementation of the HTTP value types and text helpers in message.h (no sockets, no Beast).
#include "server/http/message.h"

#include <cstdio>

namespace bunsen::server::http {

namespace {

char ascii_lower(char c) { return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c; }

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (ascii_lower(a[i]) != ascii_lower(b[i])) return false;
  }
  return true;
}

void Headers::add(std::string name, std::string value) {
  fields_.push_back({std::move(name), std::move(value)});
}

void Headers::set(std::string name, std::string value) {
  remove(name);
  add(std::move(name), std::move(value));
}

void Headers::remove(std::string_view name) {
  std::erase_if(fields_, [&](const Field& f) { return iequals(f.name, name); });
}

std::optional<std::string_view> Headers::get(std::string_view name) const {
  for (const Field& f : fields_) {
    if (iequals(f.name, name)) return std::string_view(f.value);
  }
  return std::nullopt;
}

Response Response::json(int status, std::string body) {
  Response r;
  r.status = status;
  r.headers.set("Content-Type", "application/json");
  r.body = std::move(body);
  return r;
}

Response Response::text(int status, std::string body, std::string content_type) {
  Response r;
  r.status = status;
  r.headers.set("Content-Type", std::move(content_type));
  r.body = std::move(body);
  return r;
}

Response default_error_response(const ErrorInfo& info) {
  std::string body = "{\"error\":{\"message\":\"" + json_escape(info.message) + "\",\"type\":\"" +
                     json_escape(info.type) + "\"}}";
  return Response::json(info.status, std::move(body));
}

std::string json_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size() + 8);
  for (char c : text) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out;
}

std::optional<std::string> percent_decode(std::string_view text, bool plus_is_space) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c == '%') {
      if (i + 2 >= text.size()) return std::nullopt;
      int hi = hex_value(text[i + 1]);
      int lo = hex_value(text[i + 2]);
      if (hi < 0 || lo < 0) return std::nullopt;
      char decoded = static_cast<char>(hi * 16 + lo);
      if (decoded == '\0') return std::nullopt;
      out += decoded;
      i += 2;
    } else if (c == '+' && plus_is_space) {
      out += ' ';
    } else {
      out += c;
    }
  }
  return out;
}

std::optional<std::map<std::string, std::string>> parse_query(std::string_view query) {
  std::map<std::string, std::string> out;
  while (!query.empty()) {
    size_t amp = query.find('&');
    std::string_view part = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    if (part.empty()) continue;
    size_t eq = part.find('=');
    auto key = percent_decode(part.substr(0, eq), true);
    auto value = percent_decode(eq == std::string_view::npos ? std::string_view() : part.substr(eq + 1),
                                true);
    if (!key || !value) return std::nullopt;
    out[*key] = std::move(*value);
  }
  return out;
}

}  // namespace bunsen::server::http
