// Helpers for the Jinja/chat-template tests: ordered JSONL reading (key order matters to templates),
// rendering a template string against a JSON context, and printable diffs for failure messages.
// Missing golden files are a test FAILURE naming the script that makes them, never a skip.
#pragma once
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/status.h"
#include "text/jinja/template.h"

namespace bunsen::text::jinja::testing {

using ojson = nlohmann::ordered_json;

inline std::string data_path(const std::string& rel) {
  return std::string(BUNSEN_SOURCE_DIR) + "/tests/unit/text/data/" + rel;
}

// Lines of a JSONL golden; the first line is {"header": ...} and is returned separately.
inline std::vector<ojson> read_golden(const std::string& path, ojson* header) {
  std::vector<ojson> rows;
  std::ifstream f(path, std::ios::binary);
  if (!f.good()) {
    ADD_FAILURE() << "cannot open " << path << ": regenerate it with scripts/text/make_template_goldens.py";
    return rows;
  }
  std::string line;
  while (std::getline(f, line)) {
    if (line.empty()) continue;
    ojson j = ojson::parse(line);
    if (j.contains("header")) {
      if (header) *header = j["header"];
      continue;
    }
    rows.push_back(std::move(j));
  }
  return rows;
}

// Renders `source` with `context` (a JSON object); returns "ERROR: <message>" when it throws.
inline std::string render_or_error(const std::string& source, const ojson& context, const Limits& limits = {}) {
  try {
    Template t(source);
    return t.render_json(context, limits);
  } catch (const Error& e) {
    return "ERROR: " + e.message();
  }
}

inline std::string show(const std::string& s) { return ojson(s).dump(-1, ' ', false, ojson::error_handler_t::replace); }

}  // namespace bunsen::text::jinja::testing
