// StopMatcher: hand-written cases (overlaps, stop at the start, across many chunks, UTF-8) and a seeded
// property test that compares every chunking of random inputs with a brute-force reference matcher.
// Not a test of the detokenizer: inputs are byte strings fed straight to the matcher.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "core/status.h"
#include "text/stop_matcher.h"
#include "text/utf8.h"

namespace bunsen::text {
namespace {

struct Outcome {
  std::string text;
  std::optional<StopMatch> match;
};

// Feeds the chunks, then flushes; returns the concatenated output and the match.
Outcome feed(const std::vector<std::string>& stops, const std::vector<std::string>& chunks) {
  StopMatcher m(stops);
  Outcome o;
  for (const auto& c : chunks) {
    StopPushResult r = m.push(c);
    o.text += r.emit;
    if (r.match) {
      EXPECT_FALSE(o.match.has_value()) << "two matches";
      o.match = r.match;
    }
  }
  o.text += m.flush();
  return o;
}

// Reference: the stop that ends first in `text` (ties: longest, then lowest index), by brute force.
Outcome reference(const std::vector<std::string>& stops, const std::string& text) {
  for (size_t end = 1; end <= text.size(); ++end) {
    int best = -1;
    for (size_t i = 0; i < stops.size(); ++i) {
      const std::string& s = stops[i];
      if (s.size() > end || text.compare(end - s.size(), s.size(), s) != 0) continue;
      if (best < 0 || s.size() > stops[best].size()) best = static_cast<int>(i);
    }
    if (best >= 0) return {text.substr(0, end - stops[best].size()), StopMatch{size_t(best), stops[best]}};
  }
  return {text, std::nullopt};
}

TEST(StopMatcher, EmptyStopStringIsAnError) {
  EXPECT_THROW(StopMatcher({"ok", ""}), Error);
  try {
    StopMatcher m({"a", "", "b"});
  } catch (const Error& e) {
    EXPECT_EQ(e.component(), "stop");
    EXPECT_NE(std::string(e.what()).find("1"), std::string::npos);
  }
}

TEST(StopMatcher, NoStopsPassesEverythingThrough) {
  StopMatcher m({});
  EXPECT_EQ(m.push("hello").emit, "hello");
  EXPECT_EQ(m.flush(), "");
}

TEST(StopMatcher, HoldsOnlyAPossibleStopPrefix) {
  StopMatcher m({"</s>", "STOP"});
  StopPushResult r = m.push("Hello </");
  EXPECT_EQ(r.emit, "Hello ");
  EXPECT_FALSE(r.match);
  EXPECT_EQ(m.held_bytes(), 2u);
  r = m.push("b> and ST");
  EXPECT_EQ(r.emit, "</b> and ");
  EXPECT_EQ(m.held_bytes(), 2u);
  r = m.push("OP tail");
  EXPECT_EQ(r.emit, "");
  ASSERT_TRUE(r.match);
  EXPECT_EQ(r.match->index, 1u);
  EXPECT_EQ(r.match->stop, "STOP");
  EXPECT_TRUE(m.matched());
  EXPECT_EQ(m.push("more").emit, "");
  EXPECT_EQ(m.flush(), "");
}

TEST(StopMatcher, StopAtVeryStart) {
  Outcome o = feed({"###"}, {"###", "rest"});
  EXPECT_EQ(o.text, "");
  ASSERT_TRUE(o.match);
  EXPECT_EQ(o.match->stop, "###");
}

TEST(StopMatcher, StopSpanningManyChunks) {
  std::vector<std::string> chunks = {"ab", "c<", "|e", "n", "d", "_of", "_te", "xt|", ">zzz"};
  Outcome o = feed({"<|end_of_text|>"}, chunks);
  EXPECT_EQ(o.text, "abc");
  ASSERT_TRUE(o.match);
  EXPECT_EQ(o.match->index, 0u);
}

TEST(StopMatcher, OverlappingStops) {
  // "bc" completes before "abcd": the first stop to complete wins.
  Outcome o = feed({"abcd", "bc"}, {"xxabcd"});
  EXPECT_EQ(o.text, "xxa");
  ASSERT_TRUE(o.match);
  EXPECT_EQ(o.match->stop, "bc");
  // Same end position: the longer stop wins, whatever the list order.
  o = feed({"bc", "abc"}, {"xabc"});
  EXPECT_EQ(o.text, "x");
  EXPECT_EQ(o.match->stop, "abc");
  // Self-overlapping stop: "aab" inside "aaab" after a failed partial match.
  o = feed({"aab"}, {"a", "a", "a", "b", "c"});
  EXPECT_EQ(o.text, "a");
  EXPECT_EQ(o.match->stop, "aab");
  // A partial match that fails is released.
  o = feed({"abab"}, {"aba", "c"});
  EXPECT_EQ(o.text, "abac");
  EXPECT_FALSE(o.match);
  // Duplicate stop strings report the lowest index.
  o = feed({"x", "end", "end"}, {"the end"});
  EXPECT_EQ(o.match->index, 1u);
}

TEST(StopMatcher, NeverSplitsUtf8) {
  // "日" = E6 97 A5. A chunk ending mid-character is held even with no stop prefix pending.
  StopMatcher m({"STOP"});
  StopPushResult r = m.push("a\xE6\x97");
  EXPECT_EQ(r.emit, "a");
  r = m.push("\xA5" "b");
  EXPECT_EQ(r.emit, "\xE6\x97\xA5" "b");
  // A stop string that is a UTF-8 character prefix-shares bytes with another character.
  Outcome o = feed({"\xE6\x97\xA5\xE6\x9C\xAC"}, {"x\xE6\x97", "\xA5\xE6", "\x9C", "\xAD"});  // 日本 vs 日札
  EXPECT_EQ(o.text, "x\xE6\x97\xA5\xE6\x9C\xAD");
  EXPECT_FALSE(o.match);
}

TEST(StopMatcher, UnicodeStopString) {
  Outcome o = feed({"\xE3\x80\x82"}, {"\xE4\xBD\xA0\xE5\xA5\xBD\xE3", "\x80", "\x82\xE5\x86\x8D"});  // 你好。再
  EXPECT_EQ(o.text, "\xE4\xBD\xA0\xE5\xA5\xBD");
  ASSERT_TRUE(o.match);
}

TEST(StopMatcher, CompletePrefixHelper) {
  EXPECT_EQ(utf8_complete_prefix(""), 0u);
  EXPECT_EQ(utf8_complete_prefix("abc"), 3u);
  EXPECT_EQ(utf8_complete_prefix("a\xC3"), 1u);
  EXPECT_EQ(utf8_complete_prefix("a\xC3\xA9"), 3u);
  EXPECT_EQ(utf8_complete_prefix("a\xF0\x9F\x98"), 1u);
  EXPECT_EQ(utf8_complete_prefix("a\xF0\x9F\x98\x80"), 5u);
  EXPECT_EQ(utf8_complete_prefix("\x80\x80"), 2u);  // stray continuation bytes are not waited for
}

// Random text over a tiny alphabet (ASCII and multi-byte characters) so stops overlap a lot.
std::string random_text(std::mt19937& rng, const std::vector<std::string>& alphabet, int max_len) {
  std::string s;
  int n = std::uniform_int_distribution<int>(0, max_len)(rng);
  for (int i = 0; i < n; ++i) s += alphabet[rng() % alphabet.size()];
  return s;
}

TEST(StopMatcher, PropertyEveryChunkingMatchesReference) {
  std::mt19937 rng(20240607);
  const std::vector<std::string> alphabet = {"a", "b", "c", "\xC3\xA9", "\xE6\x97\xA5", "\xF0\x9F\x98\x80"};
  int checked = 0;
  for (int iter = 0; iter < 400; ++iter) {
    std::vector<std::string> stops;
    int n_stops = 1 + static_cast<int>(rng() % 5);
    for (int i = 0; i < n_stops; ++i) {
      std::string s = random_text(rng, alphabet, 4);
      stops.push_back(s.empty() ? "a" : s);
    }
    std::string text = random_text(rng, alphabet, 24);
    Outcome want = reference(stops, text);
    Outcome whole = feed(stops, {text});
    ASSERT_EQ(whole.text, want.text) << "iter " << iter;
    ASSERT_EQ(whole.match, want.match) << "iter " << iter;
    // Every split into two pieces, and every split into three pieces.
    for (size_t i = 0; i <= text.size(); ++i) {
      for (size_t j = i; j <= text.size(); ++j) {
        Outcome o = feed(stops, {text.substr(0, i), text.substr(i, j - i), text.substr(j)});
        ASSERT_EQ(o.text, want.text) << "iter " << iter << " split " << i << "," << j;
        ASSERT_EQ(o.match, want.match);
        ++checked;
      }
    }
    // One byte at a time: each emitted piece is valid UTF-8 (the input is).
    StopMatcher m(stops);
    std::string acc;
    for (char c : text) {
      StopPushResult r = m.push(std::string(1, c));
      ASSERT_TRUE(utf8::is_valid(r.emit)) << "iter " << iter;
      acc += r.emit;
    }
    acc += m.flush();
    ASSERT_EQ(acc, want.text);
  }
  EXPECT_GT(checked, 10000);
}

TEST(StopMatcher, PropertyHeldBytesAreTheLongestStopPrefix) {
  // ASCII only, so the UTF-8 rule adds nothing: after each push, exactly the longest suffix of the text
  // so far that is a proper prefix of a stop string is held.
  std::mt19937 rng(7);
  const std::vector<std::string> alphabet = {"a", "b", "c"};
  for (int iter = 0; iter < 300; ++iter) {
    std::vector<std::string> stops = {random_text(rng, alphabet, 5) + "c", random_text(rng, alphabet, 3) + "b"};
    std::string text = random_text(rng, alphabet, 30);
    StopMatcher m(stops);
    std::string seen;
    for (char c : text) {
      StopPushResult r = m.push(std::string(1, c));
      seen += c;
      if (r.match) break;
      size_t want = 0;
      for (size_t k = 1; k <= seen.size(); ++k) {
        std::string_view suffix = std::string_view(seen).substr(seen.size() - k);
        for (const auto& s : stops)
          if (s.size() > k && s.compare(0, k, suffix) == 0) want = k;
      }
      ASSERT_EQ(m.held_bytes(), want) << "iter " << iter << " text " << seen;
    }
  }
}

TEST(StopMatcher, ManyStopStringsStayLinear) {
  // 2,000 stop strings; 1 MB of text that never matches but keeps partial matches alive.
  std::vector<std::string> stops;
  for (int i = 0; i < 2000; ++i) stops.push_back("tok" + std::to_string(i) + "#");
  StopMatcher m(stops);
  std::string chunk;
  for (int i = 0; i < 1000; ++i) chunk += "tok" + std::to_string(i % 3000) + " ";
  size_t out = 0;
  for (int rep = 0; out < (1u << 20); ++rep) out += m.push(chunk).emit.size();
  out += m.flush().size();
  EXPECT_FALSE(m.matched());
  StopPushResult r = m.push("xx tok1999#");
  ASSERT_TRUE(r.match);
  EXPECT_EQ(r.match->index, 1999u);
  EXPECT_EQ(r.emit, "xx ");
}

}  // namespace
}  // namespace bunsen::text
