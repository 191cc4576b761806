// ReplacePattern implementation.
#include "text/replace_pattern.h"

#include <utility>
#include <vector>

#include "core/status.h"
#include "text/json_util.h"
#include "text/utf8.h"

namespace bunsen::text {

ReplacePattern::ReplacePattern(const nlohmann::json& j) : content_(j.at("content").get<std::string>()) {
  const auto& p = j.at("pattern");
  if (p.contains("Regex"))
    regex_ = std::make_unique<Regex>(p.at("Regex").get<std::string>());
  else if (p.contains("String"))
    literal_ = p.at("String").get<std::string>();
  else
    throw Error("tokenizer", "Replace pattern must have a 'Regex' or 'String' key");
}

std::string ReplacePattern::apply(std::string text) const {
  std::vector<std::pair<size_t, size_t>> matches;
  if (regex_) {
    if (utf8::is_valid(text)) regex_->find_all(text, matches);
  } else if (!literal_.empty()) {
    for (size_t pos = text.find(literal_); pos != std::string::npos; pos = text.find(literal_, pos + literal_.size()))
      matches.emplace_back(pos, pos + literal_.size());
  }
  if (matches.empty()) return text;
  json_util::check_growth(text.size(), text.size() + matches.size() * content_.size());
  std::string out;
  out.reserve(text.size() + matches.size() * content_.size());
  size_t prev = 0;
  for (auto [b, e] : matches) {
    out.append(text, prev, b - prev).append(content_);
    prev = e;
  }
  out.append(text, prev, std::string::npos);
  return out;
}

}  // namespace bunsen::text
