// ResponseStore: LRU + TTL table of stored responses (see store.h).
#include "server/responses/store.h"

#include <vector>

namespace bunsen::server::responses {

Json flatten(const Conversation& conversation) {
  std::vector<const ConversationNode*> chain;
  for (const ConversationNode* n = conversation.get(); n; n = n->parent.get()) chain.push_back(n);
  Json out = Json::array();
  for (auto it = chain.rbegin(); it != chain.rend(); ++it)
    for (const auto& item : (*it)->items) out.push_back(item);
  return out;
}

ResponseStore::ResponseStore(size_t capacity, std::chrono::seconds ttl, std::function<Clock::time_point()> now)
    : capacity_(capacity == 0 ? 1 : capacity), ttl_(ttl), now_(std::move(now)) {}

void ResponseStore::evict_locked(Clock::time_point now) {
  // Every expired entry (age is not LRU order, so all are checked: capacity is small), then the least
  // recently used beyond capacity.
  for (auto it = lru_.begin(); it != lru_.end();) {
    auto e = entries_.find(*it);
    if (now - e->second.stored_at >= ttl_) {
      entries_.erase(e);
      it = lru_.erase(it);
    } else {
      ++it;
    }
  }
  while (entries_.size() > capacity_) {
    entries_.erase(lru_.back());
    lru_.pop_back();
  }
}

void ResponseStore::put(const std::string& id, StoredResponse value) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto now = now_();
  if (auto it = entries_.find(id); it != entries_.end()) {
    lru_.erase(it->second.lru);
    entries_.erase(it);
  }
  lru_.push_front(id);
  entries_.emplace(id, Entry{std::move(value), now, lru_.begin()});
  evict_locked(now);
}

std::optional<StoredResponse> ResponseStore::get(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(id);
  if (it == entries_.end()) return std::nullopt;
  if (now_() - it->second.stored_at >= ttl_) {
    lru_.erase(it->second.lru);
    entries_.erase(it);
    return std::nullopt;
  }
  lru_.splice(lru_.begin(), lru_, it->second.lru);
  return it->second.value;
}

bool ResponseStore::erase(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(id);
  if (it == entries_.end()) return false;
  lru_.erase(it->second.lru);
  entries_.erase(it);
  return true;
}

size_t ResponseStore::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size();
}

}  // namespace bunsen::server::responses
