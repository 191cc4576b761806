// ResponseStore: the in-memory table behind `store: true` and `previous_response_id` — each stored response
// keeps its full response object (GET /v1/responses/{id}) and its conversation: a persistent list of item
// nodes (the parent's node + this turn's input and output items), so a chain of N turns shares its prefix
// instead of copying it N times. Not persistence (lost on restart) and not request parsing.
// Invariants: at most `capacity` responses; an entry older than `ttl` is never returned; get() refreshes
// the entry's LRU position (not its age); evicting an entry never invalidates a child's conversation
// (children hold their parent's node); every method is thread-safe.
#pragma once
#include <chrono>
#include <cstddef>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <unordered_map>

namespace bunsen::server::responses {

using Json = nlohmann::ordered_json;

struct ConversationNode {
  std::shared_ptr<const ConversationNode> parent;  // earlier turns, or null
  Json items = Json::array();                       // this turn's input items, then its output items
};
using Conversation = std::shared_ptr<const ConversationNode>;

// Every item of the conversation, oldest first.
Json flatten(const Conversation& conversation);

struct StoredResponse {
  Json response;              // the response object as returned to the client
  Conversation conversation;  // input + output items of this response and its ancestors
};

class ResponseStore {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr size_t kDefaultCapacity = 1000;
  static constexpr std::chrono::seconds kDefaultTtl{3600};

  explicit ResponseStore(size_t capacity = kDefaultCapacity, std::chrono::seconds ttl = kDefaultTtl,
                         std::function<Clock::time_point()> now = Clock::now);

  void put(const std::string& id, StoredResponse value);
  std::optional<StoredResponse> get(const std::string& id);
  bool erase(const std::string& id);
  size_t size() const;

 private:
  struct Entry {
    StoredResponse value;
    Clock::time_point stored_at;
    std::list<std::string>::iterator lru;  // position in lru_ (front = most recently used)
  };
  void evict_locked(Clock::time_point now);

  size_t capacity_;
  std::chrono::seconds ttl_;
  std::function<Clock::time_point()> now_;
  mutable std::mutex mu_;
  std::list<std::string> lru_;
  std::unordered_map<std::string, Entry> entries_;
};

}  // namespace bunsen::server::responses
