// End finders and body parsers for the JSON (Hermes, Mistral) and XML (Qwen3-Coder, MiniCPM) tool-call
// formats. Not streaming logic: every function here sees a whole body (parsers) or resumes a scan
// (finders). Invariant: finders only stop at ASCII markup, never inside a UTF-8 sequence.
#include "text/parsers/tool_formats.h"

#include <algorithm>

namespace bunsen::text::parsers {
namespace {

enum class Match { kNo, kPartial, kFull };

// Does `m` start at s[i]? kPartial: s ends inside a prefix of m.
Match match_at(std::string_view s, size_t i, std::string_view m) {
  size_t n = std::min(m.size(), s.size() - i);
  if (s.substr(i, n) != m.substr(0, n)) return Match::kNo;
  return n == m.size() ? Match::kFull : Match::kPartial;
}

bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

void skip_ws(std::string_view s, size_t& i) {
  while (i < s.size() && is_ws(s[i])) ++i;
}

std::string_view trim(std::string_view s) {
  size_t i = 0;
  skip_ws(s, i);
  s.remove_prefix(i);
  while (!s.empty() && is_ws(s.back())) s.remove_suffix(1);
  return s;
}

bool eat(std::string_view s, size_t& i, std::string_view lit) {
  if (s.substr(i, lit.size()) != lit) return false;
  i += lit.size();
  return true;
}

OrderedJson parse_json(std::string_view s) {
  return OrderedJson::parse(s.data(), s.data() + s.size(), nullptr, /*allow_exceptions=*/false);
}

// Template convention around XML values: one newline after the opening tag and one before the closing.
std::string_view strip_one_newline(std::string_view v) {
  if (!v.empty() && v.front() == '\n') v.remove_prefix(1);
  if (!v.empty() && v.back() == '\n') v.remove_suffix(1);
  return v;
}

}  // namespace

EndFinder close_outside_regions(std::string close, std::string region_open, std::string region_close,
                                bool backslash_escape) {
  return [=](std::string_view body, ScanState& st) -> std::optional<BodyEnd> {
    size_t i = st.pos;
    while (i < body.size()) {
      char c = body[i];
      if (st.mode == 0) {
        Match m = c == close[0] ? match_at(body, i, close) : Match::kNo;
        if (m == Match::kFull) return BodyEnd{i, i + close.size()};
        Match r = !region_open.empty() && c == region_open[0] ? match_at(body, i, region_open) : Match::kNo;
        if (m == Match::kPartial || r == Match::kPartial) break;
        if (r == Match::kFull) {
          st.mode = 1;
          i += region_open.size();
          continue;
        }
        ++i;
      } else if (st.escape) {
        st.escape = false;
        ++i;
      } else if (backslash_escape && c == '\\') {
        st.escape = true;
        ++i;
      } else {
        Match m = c == region_close[0] ? match_at(body, i, region_close) : Match::kNo;
        if (m == Match::kPartial) break;
        if (m == Match::kFull) {
          st.mode = 0;
          i += region_close.size();
          continue;
        }
        ++i;
      }
    }
    st.pos = i;
    return std::nullopt;
  };
}

namespace {

// Modes: 0 before the payload, 1 in NAME (until [ARGS]), 2 before the arguments, 3 in the JSON value.
std::optional<BodyEnd> mistral_scan(std::string_view body, ScanState& st) {
  static constexpr std::string_view kArgs = "[ARGS]";
  if (st.mode == 0 || st.mode == 2) {
    size_t i = st.pos;
    skip_ws(body, i);
    st.pos = i;
    if (i == body.size()) return std::nullopt;
    if (body[i] == '[' || (st.mode == 2 && body[i] == '{')) {
      st.mode = 3;
    } else if (st.mode == 2) {
      return BodyEnd{i, i};  // [ARGS] not followed by JSON: malformed
    } else {
      st.mode = 1;
    }
  }
  if (st.mode == 1) {
    size_t p = body.find(kArgs, st.pos);
    if (p == std::string_view::npos) {
      st.pos = std::max(st.pos, body.size() - std::min(body.size(), kArgs.size() - 1));
      return std::nullopt;
    }
    st.pos = p + kArgs.size();
    st.mode = 2;
    return mistral_scan(body, st);
  }
  size_t i = st.pos;
  for (; i < body.size(); ++i) {
    char c = body[i];
    if (st.in_string) {
      if (st.escape) st.escape = false;
      else if (c == '\\') st.escape = true;
      else if (c == '"') st.in_string = false;
    } else if (c == '"') {
      st.in_string = true;
    } else if (c == '{' || c == '[') {
      ++st.depth;
    } else if (c == '}' || c == ']') {
      if (--st.depth == 0) return BodyEnd{i + 1, i + 1};
    }
  }
  st.pos = i;
  return std::nullopt;
}

}  // namespace

EndFinder mistral_end() { return mistral_scan; }

std::optional<ToolDraft> call_from_object(const OrderedJson& j) {
  if (!j.is_object()) return std::nullopt;
  auto name = j.find("name");
  if (name == j.end() || !name->is_string() || name->get<std::string>().empty()) return std::nullopt;
  auto args = j.find("arguments");
  if (args == j.end()) args = j.find("parameters");
  OrderedJson a = OrderedJson::object();
  if (args != j.end() && args->is_string()) {
    a = parse_json(args->get<std::string>());
  } else if (args != j.end() && !args->is_null()) {
    a = *args;
  }
  if (!a.is_object()) return std::nullopt;
  return ToolDraft{name->get<std::string>(), dump_json(a)};
}

BodyParser hermes_json_body() {
  return [](std::string_view inner) -> std::optional<std::vector<ToolDraft>> {
    std::optional<ToolDraft> d = call_from_object(parse_json(inner));
    if (!d) return std::nullopt;
    return std::vector<ToolDraft>{std::move(*d)};
  };
}

namespace {

// One <function=NAME>...</function> at s[i]; advances i.
std::optional<ToolDraft> qwen_function(std::string_view s, size_t& i, const ToolSchemas& schemas) {
  if (!eat(s, i, "<function=")) return std::nullopt;
  size_t gt = s.find('>', i);
  if (gt == std::string_view::npos) return std::nullopt;
  std::string name(trim(s.substr(i, gt - i)));
  if (name.empty()) return std::nullopt;
  i = gt + 1;
  OrderedJson args = OrderedJson::object();
  for (;;) {
    skip_ws(s, i);
    if (eat(s, i, "</function>")) break;
    if (!eat(s, i, "<parameter=")) return std::nullopt;
    gt = s.find('>', i);
    if (gt == std::string_view::npos) return std::nullopt;
    std::string param(trim(s.substr(i, gt - i)));
    size_t end = s.find("</parameter>", gt + 1);
    if (param.empty() || end == std::string_view::npos) return std::nullopt;
    std::string value(strip_one_newline(s.substr(gt + 1, end - gt - 1)));
    args[param] = schemas.convert(name, param, value);
    i = end + std::string_view("</parameter>").size();
  }
  return ToolDraft{std::move(name), dump_json(args)};
}

}  // namespace

BodyParser qwen_xml_body(std::shared_ptr<const ToolSchemas> schemas, std::string prefix, std::string suffix) {
  return [=](std::string_view inner) -> std::optional<std::vector<ToolDraft>> {
    std::string whole = prefix + std::string(inner) + suffix;
    std::string_view s(whole);
    std::vector<ToolDraft> calls;
    size_t i = 0;
    for (skip_ws(s, i); i < s.size(); skip_ws(s, i)) {
      std::optional<ToolDraft> d = qwen_function(s, i, *schemas);
      if (!d) return std::nullopt;
      calls.push_back(std::move(*d));
    }
    if (calls.empty()) return std::nullopt;
    return calls;
  };
}

namespace {

// A <param> value up to </param>, CDATA sections unwrapped; advances i past </param>.
std::optional<std::string> minicpm_value(std::string_view s, size_t& i) {
  size_t start = i;
  std::string raw;
  while (i < s.size()) {
    if (eat(s, i, "<![CDATA[")) {
      size_t e = s.find("]]>", i);
      if (e == std::string_view::npos) return std::nullopt;
      i = e + 3;
    } else if (s.substr(i, 8) == "</param>") {
      break;
    } else {
      ++i;
    }
  }
  if (i >= s.size()) return std::nullopt;
  std::string_view v = strip_one_newline(s.substr(start, i - start));
  i += 8;
  for (size_t k = 0; k < v.size();) {
    if (v.substr(k, 9) == "<![CDATA[") {
      size_t e = std::min(v.find("]]>", k + 9), v.size());
      raw.append(v.substr(k + 9, e - k - 9));
      k = std::min(e + 3, v.size());
    } else {
      raw.push_back(v[k++]);
    }
  }
  return raw;
}

}  // namespace

BodyParser minicpm_body(std::shared_ptr<const ToolSchemas> schemas) {
  return [=](std::string_view s) -> std::optional<std::vector<ToolDraft>> {
    size_t q = s.find('"');
    if (q == std::string_view::npos) return std::nullopt;
    std::string name(trim(s.substr(0, q)));
    size_t i = q + 1;
    skip_ws(s, i);
    if (name.empty() || !eat(s, i, ">")) return std::nullopt;
    std::string_view rest = trim(s.substr(i));
    if (!rest.empty() && rest.front() == '{') {
      OrderedJson args = parse_json(rest);
      if (!args.is_object()) return std::nullopt;
      return std::vector<ToolDraft>{{name, dump_json(args)}};
    }
    OrderedJson args = OrderedJson::object();
    for (skip_ws(s, i); i < s.size(); skip_ws(s, i)) {
      if (!eat(s, i, "<param name=\"")) return std::nullopt;
      size_t e = s.find('"', i);
      if (e == std::string_view::npos) return std::nullopt;
      std::string param(s.substr(i, e - i));
      i = e + 1;
      skip_ws(s, i);
      if (param.empty() || !eat(s, i, ">")) return std::nullopt;
      std::optional<std::string> value = minicpm_value(s, i);
      if (!value) return std::nullopt;
      args[param] = schemas->convert(name, param, *value);
    }
    return std::vector<ToolDraft>{{name, dump_json(args)}};
  };
}

BodyParser mistral_body() {
  return [](std::string_view inner) -> std::optional<std::vector<ToolDraft>> {
    std::string_view s = trim(inner);
    std::vector<ToolDraft> calls;
    if (!s.empty() && s.front() == '[') {
      OrderedJson list = parse_json(s);
      if (!list.is_array()) return std::nullopt;
      for (const OrderedJson& item : list) {
        std::optional<ToolDraft> d = call_from_object(item);
        if (!d) return std::nullopt;
        calls.push_back(std::move(*d));
      }
      return calls;
    }
    size_t args = s.find("[ARGS]");
    if (args == std::string_view::npos) return std::nullopt;
    std::string_view head = s.substr(0, args);
    size_t call_id = head.find("[CALL_ID]");
    std::string name(trim(head.substr(0, call_id)));
    if (name.empty() || name.find_first_of(" \t\n[]{}\"") != std::string::npos) return std::nullopt;
    OrderedJson a = parse_json(s.substr(args + 6));
    if (!a.is_object()) return std::nullopt;
    calls.push_back({std::move(name), dump_json(a)});
    return calls;
  };
}

}  // namespace bunsen::text::parsers
