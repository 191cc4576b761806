// Stop-string matcher over streamed text: an Aho-Corasick automaton fed byte by byte, so each byte is
// looked at once whatever the number of stop strings. Not a detokenizer and not a token-id stop list.
// Invariants: push() emits everything except the longest suffix that is a prefix of some stop string
// (plus an incomplete trailing UTF-8 sequence); the first stop string to complete wins (ties: the longer,
// then the lower index) and is excluded with everything after it; the concatenated output for any
// chunking of the input equals the output for the whole input at once.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace bunsen::text {

// Length of the longest prefix of `s` that does not end inside an incomplete UTF-8 sequence: a lead
// byte near the end whose continuation bytes have not all arrived is cut off with its continuations.
// Invalid bytes count as complete (they pass through; sanitising is the detokenizer's job).
size_t utf8_complete_prefix(std::string_view s);

struct StopMatch {
  size_t index = 0;  // position in the list given to the constructor
  std::string stop;  // the stop string itself
  bool operator==(const StopMatch& o) const { return index == o.index && stop == o.stop; }
};

struct StopPushResult {
  std::string emit;                // text that is final: it cannot be part of a stop string
  std::optional<StopMatch> match;  // set once, on the push that completes a stop string
};

class StopMatcher {
 public:
  // Throws Error("stop", ...) when a stop string is empty. An empty list matches nothing.
  explicit StopMatcher(std::vector<std::string> stops);

  // Feeds more generated text. After a match every later push returns nothing.
  StopPushResult push(std::string_view text);
  // End of generation: releases the held text (nothing after a match).
  std::string flush();

  bool matched() const { return matched_; }
  size_t held_bytes() const { return held_.size(); }
  const std::vector<std::string>& stops() const { return stops_; }

 private:
  struct Node {
    std::vector<std::pair<uint8_t, int32_t>> next;  // sorted by byte
    int32_t fail = 0;
    int32_t depth = 0;
    int32_t match = -1;  // longest stop string ending at this state, -1 if none
  };
  int32_t child(int32_t state, uint8_t c) const;
  int32_t step(int32_t state, uint8_t c) const;
  void build();

  std::vector<std::string> stops_;
  std::vector<Node> nodes_;
  int32_t state_ = 0;
  std::string held_;  // not yet emitted: the tail that may begin a stop string, and any split UTF-8
  bool matched_ = false;
};

}  // namespace bunsen::text
