// Command-line parsing for the bunsen verbs: declared options (--name VALUE, --name=VALUE, flags), typed
// getters that name the flag in their errors, and generated help text. Wiring only: no business logic.
#pragma once
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace bunsen::cli {

struct OptionSpec {
  std::string name;  // without leading dashes, e.g. "max-tokens"
  std::string value_name;  // empty: a flag without a value
  std::string help;
  std::string short_name = {};  // e.g. "m" for -m
};

class Args {
 public:
  // Throws Error("cli", ...) for unknown options or missing values.
  Args(const std::string& verb, const std::vector<OptionSpec>& specs, int argc, char** argv, int first);
  bool has(const std::string& name) const { return values_.count(name) > 0; }
  bool flag(const std::string& name) const { return has(name); }
  std::optional<std::string> str(const std::string& name) const;
  std::string str(const std::string& name, const std::string& def) const;
  int64_t integer(const std::string& name, int64_t def) const;
  double number(const std::string& name, double def) const;
  std::optional<double> number(const std::string& name) const;
  const std::vector<std::string>& positional() const { return positional_; }

 private:
  std::string verb_;
  std::map<std::string, std::string> values_;
  std::vector<std::string> positional_;
};

// "usage: ...", the summary, then one entry per option: its names from column 2, its help from column 30;
// the summary and the help wrapped at word boundaries before column 100.
std::string format_help(const std::string& usage, const std::string& summary, const std::vector<OptionSpec>& specs);

}  // namespace bunsen::cli
