// Helpers for the output-parser tests: feed chunks, merge deltas, check tool-call ids, and the chunking
// property (every split of the text gives the same merged events as the whole text).
// Not a test itself; ids are checked for shape and then cleared so expectations need none.
#pragma once
#include <gtest/gtest.h>

#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "text/parsers/output_parser.h"
#include "text/utf8.h"

namespace bunsen::text {

inline void PrintTo(const ParsedEvent& e, std::ostream* os) {
  switch (e.kind) {
    case ParsedEvent::Kind::kContent: *os << "C(" << ::testing::PrintToString(e.text) << ")"; break;
    case ParsedEvent::Kind::kReasoning: *os << "R(" << ::testing::PrintToString(e.text) << ")"; break;
    case ParsedEvent::Kind::kToolCall:
      *os << "T(" << e.tool_call.id << ", " << e.tool_call.name << ", " << e.tool_call.arguments << ")";
      break;
  }
}

namespace testing {

using Events = std::vector<ParsedEvent>;

inline ParsedEvent C(std::string t) { return ParsedEvent::content(std::move(t)); }
inline ParsedEvent R(std::string t) { return ParsedEvent::reasoning(std::move(t)); }
// Expected tool call; ids are checked separately (strip_ids), so expectations carry none.
inline ParsedEvent T(std::string name, std::string args) {
  return ParsedEvent::tool(ToolCall{"", std::move(name), std::move(args)});
}

// Checks every id has the documented shape, then clears ids so events compare on content only.
inline Events strip_ids(Events events) {
  for (ParsedEvent& e : events) {
    if (e.kind != ParsedEvent::Kind::kToolCall) continue;
    const std::string& id = e.tool_call.id;
    EXPECT_TRUE(id.size() == 21 && id.rfind("call_", 0) == 0 &&
                id.find_first_not_of("0123456789abcdef", 5) == std::string::npos)
        << id;
    e.tool_call.id.clear();
  }
  return events;
}

// Feeds the chunks then finishes; returns merged events with ids (raw) and checks every delta is UTF-8
// when `utf8_input` (the text being valid UTF-8).
inline Events run_raw(std::string_view family, const ParserOptions& opt, const std::vector<std::string>& chunks,
                      bool utf8_input = true) {
  std::unique_ptr<OutputParser> p = make_parser(family, opt);
  Events all;
  auto take = [&](Events ev) {
    for (ParsedEvent& e : ev) {
      if (utf8_input) {
        EXPECT_TRUE(utf8::is_valid(e.text)) << "delta splits UTF-8: " << ::testing::PrintToString(e.text);
      }
      all.push_back(std::move(e));
    }
  };
  for (const std::string& c : chunks) take(p->push(c));
  take(p->finish());
  return merge_events(all);
}

inline Events run(std::string_view family, const ParserOptions& opt, const std::vector<std::string>& chunks) {
  return strip_ids(run_raw(family, opt, chunks));
}

inline Events parse_whole(std::string_view family, const std::string& text, const ParserOptions& opt = {}) {
  return run(family, opt, {text});
}

inline std::vector<std::string> split_at(const std::string& s, std::vector<size_t> cuts) {
  std::vector<std::string> out;
  size_t prev = 0;
  for (size_t c : cuts) {
    out.push_back(s.substr(prev, c - prev));
    prev = c;
  }
  out.push_back(s.substr(prev));
  return out;
}

// The chunking property: two-piece splits at every byte, one byte at a time, and `n_random` random
// chunkings (fixed seed) all give the whole-text events (ids included). Returns the whole-text events.
inline Events expect_chunking_invariant(std::string_view family, const std::string& text,
                                        const ParserOptions& opt = {}, int n_random = 20, bool utf8_input = true) {
  Events whole = run_raw(family, opt, {text}, utf8_input);
  for (size_t i = 0; i <= text.size(); ++i) {
    Events got = run_raw(family, opt, split_at(text, {i}), utf8_input);
    if (got != whole) {
      ADD_FAILURE() << "split at " << i << " of " << ::testing::PrintToString(text) << "\n got "
                    << ::testing::PrintToString(got) << "\nwant " << ::testing::PrintToString(whole);
      return whole;
    }
  }
  std::vector<std::string> bytes;
  for (char c : text) bytes.push_back(std::string(1, c));
  EXPECT_EQ(run_raw(family, opt, bytes, utf8_input), whole) << "byte-by-byte " << ::testing::PrintToString(text);
  std::mt19937 rng(static_cast<uint32_t>(text.size() * 2654435761u));
  for (int r = 0; r < n_random; ++r) {
    std::vector<size_t> cuts;
    for (size_t pos = 0;;) {
      pos += 1 + rng() % 7;
      if (pos >= text.size()) break;
      cuts.push_back(pos);
    }
    EXPECT_EQ(run_raw(family, opt, split_at(text, cuts), utf8_input), whole) << ::testing::PrintToString(text);
  }
  return strip_ids(whole);
}

}  // namespace testing
}  // namespace bunsen::text
