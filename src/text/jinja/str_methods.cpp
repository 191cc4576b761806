// Python str methods for templates (`s.strip()`, `s.split('</think>')`, `s.startswith(...)`, ...),
// grouped by kind: strip/split, case, search, edit, layout, predicates. Markup strings keep their
// markup flag on str results (markupsafe wraps these methods the same way). Not the dispatcher for
// other types (methods.cpp). Invariant: every result that can grow is size-checked.
#include <algorithm>

#include "core/status.h"
#include "text/jinja/builtins.h"
#include "text/jinja/interpreter.h"
#include "text/jinja/operators.h"
#include "text/jinja/py_str.h"

namespace bunsen::text::jinja {
namespace {

struct StrCall {
  Interpreter& in;
  const std::string& s;
  bool mk;  // markup flag of self
  std::string_view name;
  ArgReader& r;
  CallArgs& args;  // positional[0] is self
  Value str(std::string v) const { return Value::string(std::move(v), mk); }
};

std::optional<std::string> opt_str(ArgReader& r, size_t i, const char* name) {
  std::optional<Value> v = r.get(i, name);
  if (!v || v->is_none()) return std::nullopt;
  if (!v->is_string()) fail(strfmt("TypeError: %s arg must be None or str", name));
  return v->str();
}

std::string req_str(const StrCall& c, size_t i, const char* name) {
  std::optional<Value> v = c.r.get(i, name);
  const std::string fn(c.name);
  if (!v) fail(strfmt("TypeError: %s() missing required argument '%s'", fn.c_str(), name));
  if (!v->is_string()) fail(strfmt("TypeError: %s() argument must be str, not %s", fn.c_str(), type_name(*v)));
  return v->str();
}

int64_t opt_int(ArgReader& r, size_t i, const char* name, int64_t def) {
  std::optional<Value> v = r.get(i, name);
  if (!v || v->is_none()) return def;
  if (v->kind() != Kind::kInt && v->kind() != Kind::kBool)
    fail(strfmt("TypeError: '%s' object cannot be interpreted as an integer", type_name(*v)));
  return v->as_int();
}

Value str_list(const std::vector<std::string>& parts, bool markup) {
  List out;
  out.reserve(parts.size());
  for (const auto& p : parts) out.push_back(Value::string(p, markup));
  return Value::list(std::move(out));
}

// s[start:end] for the optional start/end arguments of find/count/startswith; *offset = clamped start.
std::string sub_range(const std::string& s, ArgReader& r, size_t i, int64_t* offset) {
  std::optional<Value> b = r.get(i, "start"), e = r.get(i + 1, "end");
  auto idx = [](const std::optional<Value>& v) -> std::optional<int64_t> {
    if (!v || v->is_none()) return std::nullopt;
    return v->as_int();
  };
  std::optional<int64_t> bi = idx(b), ei = idx(e);
  if (offset) {
    const auto n = static_cast<int64_t>(py::length(s));
    *offset = bi ? std::clamp<int64_t>(*bi < 0 ? *bi + n : *bi, 0, n) : 0;
  }
  if (!bi && !ei) return s;
  return py::slice(s, bi, ei, 1);
}

Value strip_split(const StrCall& c) {
  if (c.name == "strip" || c.name == "lstrip" || c.name == "rstrip") {
    std::optional<std::string> chars = opt_str(c.r, 1, "chars");
    c.r.done(2);
    return c.str(py::strip(c.s, chars, c.name != "rstrip", c.name != "lstrip"));
  }
  if (c.name == "splitlines") {
    std::optional<Value> keep = c.r.get(1, "keepends");
    c.r.done(2);
    return str_list(py::splitlines(c.s, keep && truthy(*keep)), c.mk);
  }
  std::optional<std::string> sep = opt_str(c.r, 1, "sep");
  const int64_t maxsplit = opt_int(c.r, 2, "maxsplit", -1);
  c.r.done(3);
  c.in.step(static_cast<int64_t>(c.s.size()) / 64);
  return str_list(c.name == "split" ? py::split(c.s, sep, maxsplit) : py::rsplit(c.s, sep, maxsplit), c.mk);
}

Value change_case(const StrCall& c) {
  c.r.done(1);
  if (c.name == "upper") return c.str(py::upper(c.s));
  if (c.name == "title") return c.str(py::title(c.s));
  if (c.name == "capitalize") return c.str(py::capitalize(c.s));
  if (c.name == "swapcase") return c.str(py::swapcase(c.s));
  return c.str(py::lower(c.s));  // lower, casefold
}

Value affix_test(const StrCall& c) {
  const std::string fn(c.name);
  std::optional<Value> p = c.r.get(1, "prefix");
  if (!p) fail(strfmt("TypeError: %s() takes at least 1 argument (0 given)", fn.c_str()));
  const std::string hay = sub_range(c.s, c.r, 2, nullptr);
  c.r.done(4);
  const bool ends = c.name == "endswith";
  const List options = p->kind() == Kind::kTuple ? p->items() : List{*p};
  for (const auto& o : options) {
    if (!o.is_string()) fail(strfmt("TypeError: %s first arg must be str or a tuple of str, not %s", fn.c_str(), type_name(o)));
    const std::string& x = o.str();
    if (x.size() <= hay.size() &&
        (ends ? hay.compare(hay.size() - x.size(), x.size(), x) == 0 : hay.compare(0, x.size(), x) == 0))
      return Value::boolean(true);
  }
  return Value::boolean(false);
}

Value search(const StrCall& c) {
  if (c.name == "startswith" || c.name == "endswith") return affix_test(c);
  const std::string sub = req_str(c, 1, "sub");
  int64_t offset = 0;
  const std::string hay = sub_range(c.s, c.r, 2, &offset);
  c.r.done(4);
  if (c.name == "count") return Value::integer(py::count(hay, sub));
  const int64_t at = py::find(hay, sub, c.name[0] == 'r');
  if (at < 0 && (c.name == "index" || c.name == "rindex")) fail("ValueError: substring not found");
  return Value::integer(at < 0 ? -1 : at + offset);
}

Value join(const StrCall& c) {
  std::optional<Value> it = c.r.get(1, "iterable");
  c.r.done(2);
  if (!it) fail("TypeError: join() takes exactly one argument (0 given)");
  std::string out;
  size_t i = 0;
  for (const Value& v : c.in.iterate(*it)) {
    if (!v.is_string()) fail(strfmt("TypeError: sequence item %zu: expected str instance, %s found", i, type_name(v)));
    if (i++) out += c.s;
    out += v.str();
    c.in.check_size(out.size());
  }
  return c.str(std::move(out));
}

Value edit(const StrCall& c) {
  if (c.name == "join") return join(c);
  if (c.name == "format") {
    c.args.positional.erase(c.args.positional.begin());
    return c.str(str_format(c.in, c.s, c.args));
  }
  if (c.name == "replace") {
    const std::string old_s = req_str(c, 1, "old"), new_s = req_str(c, 2, "new");
    const int64_t count = opt_int(c.r, 3, "count", -1);
    c.r.done(4);
    if (old_s.empty()) c.in.check_size((py::length(c.s) + 1) * new_s.size() + c.s.size());
    else if (new_s.size() > old_s.size()) c.in.check_size(c.s.size() / old_s.size() * new_s.size() + c.s.size());
    return c.str(py::replace(c.s, old_s, new_s, count));
  }
  const std::string a = req_str(c, 1, c.name.find("partition") != std::string_view::npos ? "sep" : "prefix");
  c.r.done(2);
  const std::string& s = c.s;
  if (c.name == "removeprefix") return c.str(s.compare(0, a.size(), a) == 0 ? s.substr(a.size()) : s);
  if (c.name == "removesuffix") {
    const bool ends = !a.empty() && a.size() <= s.size() && s.compare(s.size() - a.size(), a.size(), a) == 0;
    return c.str(ends ? s.substr(0, s.size() - a.size()) : s);
  }
  if (a.empty()) fail("ValueError: empty separator");
  const bool front = c.name == "partition";
  const size_t at = front ? s.find(a) : s.rfind(a);
  if (at == std::string::npos) return front ? Value::tuple({c.str(s), c.str(""), c.str("")}) : Value::tuple({c.str(""), c.str(""), c.str(s)});
  return Value::tuple({c.str(s.substr(0, at)), c.str(a), c.str(s.substr(at + a.size()))});
}

Value expand_tabs(const StrCall& c) {
  const int64_t tab = opt_int(c.r, 1, "tabsize", 8);
  c.r.done(2);
  std::string out;
  int64_t col = 0;
  for (char32_t ch : py::decode(c.s)) {
    if (ch == U'\t') {
      if (tab > 0) {
        const int64_t n = tab - col % tab;
        out.append(static_cast<size_t>(n), ' ');
        col += n;
      }
    } else {
      py::append_utf8(out, ch);
      col = (ch == U'\n' || ch == U'\r') ? 0 : col + 1;
    }
    c.in.check_size(out.size());
  }
  return c.str(std::move(out));
}

Value layout(const StrCall& c) {
  if (c.name == "expandtabs") return expand_tabs(c);
  const int64_t width = opt_int(c.r, 1, "width", 0);
  std::optional<std::string> fill = c.name == "zfill" ? std::nullopt : opt_str(c.r, 2, "fillchar");
  c.r.done(c.name == "zfill" ? 2 : 3);
  if (fill && py::length(*fill) != 1) fail("TypeError: The fill character must be exactly one character long");
  const auto len = static_cast<int64_t>(py::length(c.s));
  if (width <= len) return c.str(c.s);
  c.in.check_size(static_cast<size_t>(width) * (fill ? fill->size() : 1));
  const auto n = static_cast<size_t>(width - len);
  if (c.name == "zfill") {
    const size_t sign = !c.s.empty() && (c.s[0] == '+' || c.s[0] == '-') ? 1 : 0;
    return c.str(c.s.substr(0, sign) + std::string(n, '0') + c.s.substr(sign));
  }
  const std::string f = fill ? *fill : " ";
  // CPython's center puts the extra space on the left when both n and width are odd.
  const size_t left = c.name == "ljust" ? 0 : c.name == "rjust" ? n : n / 2 + (n & static_cast<size_t>(width) & 1);
  std::string out;
  for (size_t i = 0; i < left; ++i) out += f;
  out += c.s;
  for (size_t i = left; i < n; ++i) out += f;
  return c.str(std::move(out));
}

bool all_chars(const std::string& s, bool (*pred)(char32_t)) {
  std::u32string u = py::decode(s);
  if (u.empty()) return false;
  for (char32_t ch : u)
    if (!pred(ch)) return false;
  return true;
}

Value predicate(const StrCall& c) {
  c.r.done(1);
  const std::string& s = c.s;
  const std::string_view n = c.name;
  if (n == "isalnum") return Value::boolean(all_chars(s, py::is_alnum));
  if (n == "isspace") return Value::boolean(all_chars(s, py::is_space));
  if (n == "isprintable") return Value::boolean(s.empty() || all_chars(s, py::is_printable));
  if (n == "isascii")
    return Value::boolean(std::all_of(s.begin(), s.end(), [](char ch) { return static_cast<unsigned char>(ch) < 0x80; }));
  if (n == "isdigit" || n == "isdecimal" || n == "isnumeric")
    return Value::boolean(all_chars(s, [](char32_t ch) { return ch >= U'0' && ch <= U'9'; }));
  if (n == "isalpha")
    return Value::boolean(all_chars(s, [](char32_t ch) { return py::is_alnum(ch) && !(ch >= U'0' && ch <= U'9'); }));
  if (n == "islower") return Value::boolean(py::is_lower(s));
  if (n == "isupper") return Value::boolean(py::is_upper(s));
  if (n == "istitle") return Value::boolean(!s.empty() && py::title(s) == s && (py::is_upper(s) || py::is_lower(py::lower(s))));
  fail("str." + std::string(n) + "() is not supported by bunsen's template engine");
}

bool one_of(std::string_view n, std::initializer_list<std::string_view> names) {
  return std::find(names.begin(), names.end(), n) != names.end();
}

}  // namespace

Value call_str_method(Interpreter& in, const Value& self, std::string_view name, CallArgs& args) {
  const std::string fname(name);
  ArgReader r(args, fname.c_str());
  args.positional.insert(args.positional.begin(), self);  // index 0 = self, like filters
  const StrCall c{in, self.str(), self.markup(), name, r, args};
  if (one_of(name, {"strip", "lstrip", "rstrip", "split", "rsplit", "splitlines"})) return strip_split(c);
  if (one_of(name, {"upper", "lower", "casefold", "title", "capitalize", "swapcase"})) return change_case(c);
  if (one_of(name, {"find", "rfind", "index", "rindex", "count", "startswith", "endswith"})) return search(c);
  if (one_of(name, {"replace", "join", "format", "partition", "rpartition", "removeprefix", "removesuffix"})) return edit(c);
  if (one_of(name, {"center", "ljust", "rjust", "zfill", "expandtabs"})) return layout(c);
  return predicate(c);
}

}  // namespace bunsen::text::jinja
