// Python string formatting for templates: printf-style `str % args` (the `%` operator and jinja2's
// `format` filter) and str.format() with jinja2's sandboxed formatter (fields by position, name,
// attribute and index; !r/!s conversions; [[fill]align][sign][#][0][width][,][.precision][type] specs).
// Not f-strings. Invariant: output growth is checked against the interpreter's size limit.
#include <cmath>
#include <cstring>

#include "core/status.h"
#include "text/jinja/builtins.h"
#include "text/jinja/interpreter.h"
#include "text/jinja/operators.h"
#include "text/jinja/py_str.h"

namespace bunsen::text::jinja {
namespace {

struct Spec {
  bool left = false, plus = false, space = false, alt = false, zero = false;
  int64_t width = -1, precision = -1;
};

std::string pad(std::string s, const Spec& sp, bool numeric) {
  const auto len = static_cast<int64_t>(py::length(s));
  if (sp.width <= len) return s;
  const auto fill = static_cast<size_t>(sp.width - len);
  if (sp.left) return s + std::string(fill, ' ');
  if (sp.zero && numeric) {
    size_t sign = (!s.empty() && (s[0] == '-' || s[0] == '+' || s[0] == ' ')) ? 1 : 0;
    if (s.size() > sign + 1 && s[sign] == '0' && (s[sign + 1] == 'x' || s[sign + 1] == 'X' || s[sign + 1] == 'o')) sign += 2;
    return s.substr(0, sign) + std::string(fill, '0') + s.substr(sign);
  }
  return std::string(fill, ' ') + s;
}

std::string format_int(int64_t v, char type, const Spec& sp) {
  const bool neg = v < 0;
  const uint64_t mag = neg ? 0 - static_cast<uint64_t>(v) : static_cast<uint64_t>(v);
  char buf[80];
  const char* f = type == 'x' ? "%llx" : type == 'X' ? "%llX" : type == 'o' ? "%llo" : "%llu";
  std::snprintf(buf, sizeof buf, f, static_cast<unsigned long long>(mag));
  std::string digits = buf;
  if (sp.precision >= 0 && static_cast<int64_t>(digits.size()) < sp.precision)
    digits = std::string(static_cast<size_t>(sp.precision) - digits.size(), '0') + digits;
  std::string prefix = neg ? "-" : sp.plus ? "+" : sp.space ? " " : "";
  if (sp.alt && type != 'd') prefix += type == 'o' ? "0o" : type == 'x' ? "0x" : "0X";
  return pad(prefix + digits, sp, true);
}

std::string format_float(double v, char type, const Spec& sp) {
  if (std::isinf(v) || std::isnan(v)) {
    std::string s = std::isnan(v) ? "nan" : "inf";
    if (std::isupper(static_cast<unsigned char>(type))) s = py::upper(s);
    // insert(), not "x" + s: GCC 12 reports a false -Wrestrict on operator+(const char*, string&&).
    if (std::signbit(v) && !std::isnan(v)) s.insert(0, 1, '-');
    else if (sp.plus) s.insert(0, 1, '+');
    else if (sp.space) s.insert(0, 1, ' ');
    return pad(s, sp, false);
  }
  std::string f = "%";
  if (sp.plus) f += '+';
  if (sp.space) f += ' ';
  if (sp.alt) f += '#';
  f += '.';
  f += std::to_string(sp.precision < 0 ? 6 : std::min<int64_t>(sp.precision, 300));
  f += type;
  char buf[512];
  std::snprintf(buf, sizeof buf, f.c_str(), v);
  return pad(buf, sp, true);
}

int64_t to_index(Interpreter& in, const Value& v, const char* what) {
  (void)in;
  if (v.kind() == Kind::kInt || v.kind() == Kind::kBool) return v.as_int();
  fail(strfmt("TypeError: %s must be int, not %s", what, type_name(v)));
}

std::string convert_one(Interpreter& in, char type, const Value& arg, const Spec& sp) {
  switch (type) {
    case 's': case 'r': case 'a': {
      std::string s = type == 's' ? to_str(arg) : repr(arg);
      if (sp.precision >= 0) s = py::slice(s, 0, sp.precision, 1);
      return pad(std::move(s), sp, false);
    }
    case 'd': case 'i': case 'u':
      if (arg.kind() == Kind::kFloat) {
        const double d = std::trunc(arg.as_float());
        if (!std::isfinite(d) || std::fabs(d) > 9.2e18) fail("OverflowError: cannot convert float to integer");
        return format_int(static_cast<int64_t>(d), 'd', sp);
      }
      if (!arg.is_number()) fail(strfmt("TypeError: %%%c format: a real number is required, not %s", type, type_name(arg)));
      return format_int(arg.as_int(), 'd', sp);
    case 'x': case 'X': case 'o':
      if (arg.kind() != Kind::kInt && arg.kind() != Kind::kBool)
        fail(strfmt("TypeError: %%%c format: an integer is required, not %s", type, type_name(arg)));
      return format_int(arg.as_int(), type, sp);
    case 'e': case 'E': case 'f': case 'F': case 'g': case 'G':
      if (!arg.is_number()) fail(strfmt("TypeError: must be real number, not %s", type_name(arg)));
      return format_float(arg.as_float(), type, sp);
    case 'c': {
      std::string s;
      if (arg.is_string() && py::length(arg.str()) == 1) s = arg.str();
      else if (arg.kind() == Kind::kInt && arg.as_int() >= 0 && arg.as_int() <= 0x10FFFF) py::append_utf8(s, static_cast<char32_t>(arg.as_int()));
      else fail("TypeError: %c requires an int or a unicode character");
      return pad(s, sp, false);
    }
    default:
      fail(strfmt("ValueError: unsupported format character '%c'", type));
  }
  (void)in;
}

}  // namespace

std::string percent_format(Interpreter& in, const std::string& fmt, const Value& args) {
  List positional;
  const bool tuple = args.kind() == Kind::kTuple;
  const bool mapping = args.kind() == Kind::kDict || args.kind() == Kind::kList;
  if (tuple) positional = args.items();
  else positional.push_back(args);
  size_t next = 0;
  auto take = [&]() -> const Value& {
    if (next >= positional.size()) fail("TypeError: not enough arguments for format string");
    return positional[next++];
  };
  std::string out;
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%') {
      out.push_back(fmt[i]);
      continue;
    }
    if (++i >= fmt.size()) fail("ValueError: incomplete format");
    std::optional<Value> keyed;
    if (fmt[i] == '(') {
      const size_t close = fmt.find(')', i);
      if (close == std::string::npos) fail("ValueError: incomplete format key");
      if (args.kind() != Kind::kDict) fail("TypeError: format requires a mapping");
      const Value* v = args.dict().find(std::string_view(fmt).substr(i + 1, close - i - 1));
      if (!v) fail("KeyError: '" + fmt.substr(i + 1, close - i - 1) + "'");
      keyed = *v;
      i = close + 1;
    }
    Spec sp;
    for (; i < fmt.size() && std::strchr("-+ #0", fmt[i]); ++i) {
      if (fmt[i] == '-') sp.left = true;
      else if (fmt[i] == '+') sp.plus = true;
      else if (fmt[i] == ' ') sp.space = true;
      else if (fmt[i] == '#') sp.alt = true;
      else sp.zero = true;
    }
    auto number = [&](int64_t& target) {
      if (i < fmt.size() && fmt[i] == '*') {
        target = to_index(in, take(), "* wants int");
        ++i;
        return;
      }
      if (i < fmt.size() && std::isdigit(static_cast<unsigned char>(fmt[i]))) {
        target = 0;
        while (i < fmt.size() && std::isdigit(static_cast<unsigned char>(fmt[i])))
          target = std::min<int64_t>(target * 10 + (fmt[i++] - '0'), 1 << 20);
      }
    };
    number(sp.width);
    if (sp.width < -1) sp.left = true, sp.width = -sp.width;
    if (i < fmt.size() && fmt[i] == '.') {
      ++i;
      sp.precision = 0;
      number(sp.precision);
    }
    while (i < fmt.size() && std::strchr("hlL", fmt[i])) ++i;
    if (i >= fmt.size()) fail("ValueError: incomplete format");
    if (fmt[i] == '%') {
      out.push_back('%');
      continue;
    }
    out += convert_one(in, fmt[i], keyed ? *keyed : take(), sp);
    in.check_size(out.size());
  }
  if (!mapping && next < positional.size()) fail("TypeError: not all arguments converted during string formatting");
  return out;
}

namespace {

// A parsed format-spec mini-language string: [[fill]align][sign][#][0][width][,][.precision][type].
struct FormatSpec {
  Spec sp;
  std::string fill = " ";
  char align = 0;
  bool comma = false;
  char type = 0;
};

FormatSpec parse_spec(const std::string& spec) {
  FormatSpec f;
  size_t i = 0;
  std::u32string u = py::decode(spec);
  auto is_align = [](char32_t c) { return c == U'<' || c == U'>' || c == U'^' || c == U'='; };
  if (u.size() >= 2 && is_align(u[1])) {
    f.fill = py::encode(u.substr(0, 1));
    f.align = static_cast<char>(u[1]);
    i = f.fill.size() + 1;
  } else if (!u.empty() && is_align(u[0])) {
    f.align = static_cast<char>(u[0]);
    i = 1;
  }
  if (i < spec.size() && (spec[i] == '+' || spec[i] == '-' || spec[i] == ' ')) {
    f.sp.plus = spec[i] == '+';
    f.sp.space = spec[i] == ' ';
    ++i;
  }
  if (i < spec.size() && spec[i] == '#') f.sp.alt = true, ++i;
  if (i < spec.size() && spec[i] == '0') {
    if (!f.align) f.fill = "0", f.align = '=';
    ++i;
  }
  auto digits = [&](int64_t& target) {
    if (i < spec.size() && std::isdigit(static_cast<unsigned char>(spec[i]))) {
      target = 0;
      while (i < spec.size() && std::isdigit(static_cast<unsigned char>(spec[i])))
        target = std::min<int64_t>(target * 10 + (spec[i++] - '0'), 1 << 20);
    }
  };
  digits(f.sp.width);
  if (i < spec.size() && (spec[i] == ',' || spec[i] == '_')) f.comma = true, ++i;
  if (i < spec.size() && spec[i] == '.') {
    ++i;
    f.sp.precision = 0;
    digits(f.sp.precision);
  }
  f.type = i < spec.size() ? spec[i++] : 0;
  if (i != spec.size()) fail("ValueError: Invalid format specifier");
  return f;
}

// The formatted value before width/alignment.
std::string format_body(const Value& v, const FormatSpec& f) {  // spec not empty: bool formats as int
  const Spec& sp = f.sp;
  const char type = f.type;
  if (v.is_string() && (type == 0 || type == 's'))
    return sp.precision >= 0 ? py::slice(v.str(), 0, sp.precision, 1) : v.str();
  if (!v.is_number())
    fail(strfmt("ValueError: Unknown format code '%c' for object of type '%s'", type ? type : '?', type_name(v)));
  const bool int_like = v.kind() != Kind::kFloat;
  if (type == 'd' || type == 'x' || type == 'X' || type == 'o' || (type == 0 && int_like)) {
    if (!int_like) fail("ValueError: Unknown format code for object of type 'float'");
    Spec inner = sp;
    inner.width = inner.precision = -1;
    std::string body = format_int(v.as_int(), type ? type : 'd', inner);
    if (f.comma && (type == 0 || type == 'd')) {
      const size_t start = body[0] == '-' || body[0] == '+' || body[0] == ' ' ? 1 : 0;
      for (int64_t k = static_cast<int64_t>(body.size()) - 3; k > static_cast<int64_t>(start); k -= 3)
        body.insert(static_cast<size_t>(k), ",");
    }
    return body;
  }
  if (type != 0 && !std::strchr("eEfFgG%", type))
    fail(strfmt("ValueError: Unknown format code '%c' for object of type '%s'", type, type_name(v)));
  Spec inner = sp;
  inner.width = -1;
  double d = v.as_float();
  if (type == 0 && sp.precision < 0) {
    std::string body = v.kind() == Kind::kFloat ? py::float_repr(d) : to_str(v);
    if (sp.plus && d >= 0) body.insert(0, 1, '+');
    return body;
  }
  if (type == '%') return format_float(d * 100, 'f', inner) + "%";
  return format_float(d, type ? type : 'g', inner);
}

// format(value, spec) for the format-spec mini-language.
std::string format_value(const Value& v, const std::string& spec) {
  if (spec.empty()) return to_str(v);
  const FormatSpec f = parse_spec(spec);
  const std::string body = format_body(v, f);
  const auto len = static_cast<int64_t>(py::length(body));
  if (f.sp.width <= len) return body;
  const auto n = static_cast<size_t>(f.sp.width - len);
  const char align = f.align ? f.align : v.is_number() && !v.is_string() ? '>' : '<';
  std::string pad_l, pad_r;
  for (size_t k = 0; k < n; ++k) {
    if (align == '<' || (align == '^' && k >= n / 2)) pad_r += f.fill;
    else pad_l += f.fill;
  }
  if (align == '=') {
    const size_t sign = !body.empty() && (body[0] == '-' || body[0] == '+' || body[0] == ' ') ? 1 : 0;
    return body.substr(0, sign) + pad_l + body.substr(sign);
  }
  return pad_l + body + pad_r;
}

}  // namespace

std::string str_format(Interpreter& in, const std::string& fmt, CallArgs& args) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    const char c = fmt[i];
    if (c == '}') {
      if (i + 1 < fmt.size() && fmt[i + 1] == '}') {
        out.push_back('}');
        ++i;
        continue;
      }
      fail("ValueError: Single '}' encountered in format string");
    }
    if (c != '{') {
      out.push_back(c);
      continue;
    }
    if (i + 1 < fmt.size() && fmt[i + 1] == '{') {
      out.push_back('{');
      ++i;
      continue;
    }
    const size_t close = fmt.find('}', i);
    if (close == std::string::npos) fail("ValueError: Single '{' encountered in format string");
    std::string field = fmt.substr(i + 1, close - i - 1);
    i = close;
    std::string spec, conv;
    if (size_t colon = field.find(':'); colon != std::string::npos) spec = field.substr(colon + 1), field.resize(colon);
    if (size_t bang = field.find('!'); bang != std::string::npos) conv = field.substr(bang + 1), field.resize(bang);
    size_t end = field.find_first_of(".[");
    std::string head = field.substr(0, end);
    Value v;
    if (head.empty()) {
      if (auto_index >= args.positional.size()) fail("IndexError: Replacement index out of range");
      v = args.positional[auto_index++];
    } else if (std::isdigit(static_cast<unsigned char>(head[0]))) {
      size_t k = std::stoul(head.substr(0, 9));
      if (k >= args.positional.size()) fail("IndexError: Replacement index out of range");
      v = args.positional[k];
    } else {
      bool found = false;
      for (auto& [name, val] : args.kwargs)
        if (name == head) v = val, found = true;
      if (!found) fail("KeyError: '" + head + "'");
    }
    while (end != std::string::npos && end < field.size()) {
      if (field[end] == '.') {
        size_t next = field.find_first_of(".[", end + 1);
        v = in.getattr(v, field.substr(end + 1, next - end - 1));
        end = next;
      } else {
        size_t rb = field.find(']', end);
        if (rb == std::string::npos) fail("ValueError: Missing ']' in format string");
        std::string key = field.substr(end + 1, rb - end - 1);
        Value k = !key.empty() && key.find_first_not_of("0123456789") == std::string::npos
                      ? Value::integer(std::stoll(key.substr(0, 18))) : Value::string(key);
        v = in.getitem(v, k);
        end = rb + 1 < field.size() ? rb + 1 : std::string::npos;
      }
    }
    if (v.is_undefined() && !v.undefined_hint().empty()) raise_undefined(v);
    if (conv == "r" || conv == "a") v = Value::string(repr(v));
    else if (conv == "s") v = Value::string(to_str(v));
    else if (!conv.empty()) fail("ValueError: Unknown conversion specifier " + conv);
    out += format_value(v, spec);
    in.check_size(out.size());
  }
  return out;
}

}  // namespace bunsen::text::jinja
