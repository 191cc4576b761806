// Args parsing and help formatting.
#include "cli/args.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include "core/status.h"

namespace bunsen::cli {
namespace {

const OptionSpec* find(const std::vector<OptionSpec>& specs, const std::string& name) {
  for (const auto& s : specs)
    if (s.name == name || (!s.short_name.empty() && s.short_name == name)) return &s;
  return nullptr;
}

constexpr size_t kHelpIndent = 30;  // the column option help starts at
constexpr size_t kHelpWidth = 100;  // help lines wrap at word boundaries before this column

// `text` starting at column `indent`, wrapped at spaces into lines of at most kHelpWidth columns (a word
// longer than a line stays whole), continuation lines indented to `indent`.
std::string wrap_help(const std::string& text, size_t indent) {
  std::string out;
  size_t col = indent, at = 0;
  while (at < text.size()) {
    const size_t end = std::min(text.find(' ', at), text.size());
    const size_t len = end - at;
    if (col > indent && col + 1 + len > kHelpWidth) {
      out += '\n' + std::string(indent, ' ');
      col = indent;
    } else if (col > indent) {
      out += ' ';
      ++col;
    }
    out.append(text, at, len);
    col += len;
    at = end + 1;
  }
  return out;
}

}  // namespace

Args::Args(const std::string& verb, const std::vector<OptionSpec>& specs, int argc, char** argv, int first)
    : verb_(verb) {
  for (int i = first; i < argc; ++i) {
    std::string a = argv[i];
    if (a.size() < 2 || a[0] != '-' || a == "--") {
      if (a == "--") {
        for (++i; i < argc; ++i) positional_.emplace_back(argv[i]);
        break;
      }
      positional_.push_back(a);
      continue;
    }
    std::string name = a.substr(a[1] == '-' ? 2 : 1);
    std::optional<std::string> inline_value;
    if (auto eq = name.find('='); eq != std::string::npos) {
      inline_value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    const OptionSpec* spec = find(specs, name);
    if (!spec) throw Error("cli", "bunsen " + verb + ": unknown option '" + a + "' (see bunsen " + verb + " --help)");
    if (spec->value_name.empty()) {
      if (inline_value) throw Error("cli", "bunsen " + verb + ": --" + spec->name + " takes no value");
      values_[spec->name] = "1";
    } else if (inline_value) {
      values_[spec->name] = *inline_value;
    } else {
      if (i + 1 >= argc) throw Error("cli", "bunsen " + verb + ": --" + spec->name + " needs a value " + spec->value_name);
      values_[spec->name] = argv[++i];
    }
  }
}

std::optional<std::string> Args::str(const std::string& name) const {
  auto it = values_.find(name);
  if (it == values_.end()) return std::nullopt;
  return it->second;
}

std::string Args::str(const std::string& name, const std::string& def) const { return str(name).value_or(def); }

int64_t Args::integer(const std::string& name, int64_t def) const {
  auto v = str(name);
  if (!v) return def;
  errno = 0;
  char* end = nullptr;
  long long x = std::strtoll(v->c_str(), &end, 10);
  if (errno || end == v->c_str() || *end)
    throw Error("cli", "bunsen " + verb_ + ": --" + name + " expects an integer, got '" + *v + "'");
  return x;
}

std::optional<double> Args::number(const std::string& name) const {
  auto v = str(name);
  if (!v) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  double x = std::strtod(v->c_str(), &end);
  if (errno || end == v->c_str() || *end)
    throw Error("cli", "bunsen " + verb_ + ": --" + name + " expects a number, got '" + *v + "'");
  return x;
}

double Args::number(const std::string& name, double def) const { return number(name).value_or(def); }

std::string format_help(const std::string& usage, const std::string& summary, const std::vector<OptionSpec>& specs) {
  std::string out = "usage: " + usage + "\n\n" + wrap_help(summary, 0) + "\n\noptions:\n";
  for (const auto& s : specs) {
    std::string left = "  ";
    if (!s.short_name.empty()) left += "-" + s.short_name + ", ";
    left += "--" + s.name;
    if (!s.value_name.empty()) left += " " + s.value_name;
    if (left.size() < kHelpIndent)
      left.resize(kHelpIndent, ' ');
    else
      left += "\n" + std::string(kHelpIndent, ' ');
    out += left + wrap_help(s.help, kHelpIndent) + "\n";
  }
  return out;
}

}  // namespace bunsen::cli
