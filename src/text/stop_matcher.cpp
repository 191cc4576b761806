// Aho-Corasick stop-string matcher: sparse trie, BFS failure links, per-state longest match.
// Not a regex engine. Invariant: held_ always covers the automaton's current depth, so a match that
// completes inside a push always starts inside held_ and its prefix can be cut exactly.
#include "text/stop_matcher.h"

#include <algorithm>
#include <deque>

#include "core/status.h"

namespace bunsen::text {

size_t utf8_complete_prefix(std::string_view s) {
  size_t n = s.size();
  // Walk back over at most 3 continuation bytes to the lead byte of the last sequence.
  size_t p = n;
  for (int k = 0; k < 4 && p > 0; ++k) {
    --p;
    uint8_t b = static_cast<uint8_t>(s[p]);
    if ((b & 0xC0) != 0x80) {
      size_t len = b < 0x80 ? 1 : (b & 0xE0) == 0xC0 ? 2 : (b & 0xF0) == 0xE0 ? 3 : (b & 0xF8) == 0xF0 ? 4 : 1;
      return p + len > n ? p : n;
    }
  }
  return n;  // only continuation bytes (invalid): nothing to wait for
}

StopMatcher::StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {
  for (size_t i = 0; i < stops_.size(); ++i)
    check(!stops_[i].empty(), "stop", strfmt("stop string %zu is empty", i));
  build();
}

int32_t StopMatcher::child(int32_t state, uint8_t c) const {
  const auto& next = nodes_[state].next;
  auto it = std::lower_bound(next.begin(), next.end(), c,
                             [](const std::pair<uint8_t, int32_t>& e, uint8_t v) { return e.first < v; });
  return it != next.end() && it->first == c ? it->second : -1;
}

int32_t StopMatcher::step(int32_t state, uint8_t c) const {
  for (;;) {
    int32_t to = child(state, c);
    if (to >= 0) return to;
    if (state == 0) return 0;
    state = nodes_[state].fail;
  }
}

void StopMatcher::build() {
  nodes_.assign(1, Node{});
  for (size_t i = 0; i < stops_.size(); ++i) {
    int32_t s = 0;
    for (char ch : stops_[i]) {
      uint8_t c = static_cast<uint8_t>(ch);
      int32_t to = child(s, c);
      if (to < 0) {
        to = static_cast<int32_t>(nodes_.size());
        Node n;
        n.depth = nodes_[s].depth + 1;
        nodes_.push_back(std::move(n));
        auto& next = nodes_[s].next;
        auto it = std::lower_bound(next.begin(), next.end(), c,
                                   [](const std::pair<uint8_t, int32_t>& e, uint8_t v) { return e.first < v; });
        next.insert(it, {c, to});
      }
      s = to;
    }
    if (nodes_[s].match < 0) nodes_[s].match = static_cast<int32_t>(i);  // duplicates: lowest index
  }
  // BFS: a node's failure link is the longest proper suffix of its string that is also a trie path;
  // a node that ends no stop string inherits the longest match of its failure link.
  std::deque<int32_t> queue;
  for (auto [c, to] : nodes_[0].next) {
    nodes_[to].fail = 0;
    queue.push_back(to);
  }
  while (!queue.empty()) {
    int32_t s = queue.front();
    queue.pop_front();
    if (nodes_[s].match < 0) nodes_[s].match = nodes_[nodes_[s].fail].match;
    for (auto [c, to] : nodes_[s].next) {
      nodes_[to].fail = step(nodes_[s].fail, c);
      queue.push_back(to);
    }
  }
}

StopPushResult StopMatcher::push(std::string_view text) {
  StopPushResult out;
  if (matched_ || text.empty()) return out;
  size_t base = held_.size();
  held_.append(text);
  for (size_t i = base; i < held_.size(); ++i) {
    state_ = step(state_, static_cast<uint8_t>(held_[i]));
    int32_t m = nodes_[state_].match;
    if (m < 0) continue;
    size_t start = i + 1 - stops_[m].size();
    out.emit = held_.substr(0, start);
    out.match = StopMatch{static_cast<size_t>(m), stops_[m]};
    matched_ = true;
    held_.clear();
    return out;
  }
  size_t cut = held_.size() - static_cast<size_t>(nodes_[state_].depth);
  cut = utf8_complete_prefix(std::string_view(held_).substr(0, cut));
  out.emit = held_.substr(0, cut);
  held_.erase(0, cut);
  return out;
}

std::string StopMatcher::flush() {
  std::string out;
  out.swap(held_);
  state_ = 0;
  return out;
}

}  // namespace bunsen::text
