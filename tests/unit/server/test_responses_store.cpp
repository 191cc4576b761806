// ResponseStore: LRU bound, TTL expiry (fake clock), conversations that outlive their evicted parents, and
// concurrent use; plus the Responses item -> template message mapping.
#include <gtest/gtest.h>

#include <thread>

#include "server/api/api_error.h"
#include "server/responses/request.h"
#include "server/responses/store.h"

namespace bunsen::server::responses {
namespace {

using Clock = ResponseStore::Clock;

StoredResponse entry(const std::string& text, Conversation parent = nullptr) {
  auto node = std::make_shared<ConversationNode>();
  node->parent = std::move(parent);
  node->items = Json::array({Json{{"type", "message"}, {"role", "user"}, {"content", text}}});
  return StoredResponse{Json{{"id", text}}, node};
}

TEST(ResponseStore, EvictsTheLeastRecentlyUsed) {
  ResponseStore store(2, std::chrono::seconds(3600));
  store.put("a", entry("a"));
  store.put("b", entry("b"));
  ASSERT_TRUE(store.get("a"));  // a is now more recent than b
  store.put("c", entry("c"));
  EXPECT_EQ(store.size(), 2u);
  EXPECT_TRUE(store.get("a"));
  EXPECT_FALSE(store.get("b"));
  EXPECT_TRUE(store.get("c"));
  EXPECT_TRUE(store.erase("a"));
  EXPECT_FALSE(store.erase("a"));
  EXPECT_EQ(store.size(), 1u);
}

TEST(ResponseStore, ExpiresAfterTheTtl) {
  Clock::time_point now = Clock::now();
  ResponseStore store(10, std::chrono::seconds(60), [&now] { return now; });
  store.put("a", entry("a"));
  now += std::chrono::seconds(59);
  EXPECT_TRUE(store.get("a"));  // a read does not extend the age
  now += std::chrono::seconds(1);
  EXPECT_FALSE(store.get("a"));
  EXPECT_EQ(store.size(), 0u);
}

TEST(ResponseStore, ConversationSurvivesItsParentsEviction) {
  ResponseStore store(1, std::chrono::seconds(3600));
  StoredResponse first = entry("one");
  store.put("1", first);
  store.put("2", entry("two", first.conversation));  // evicts "1"
  EXPECT_FALSE(store.get("1"));
  auto second = store.get("2");
  ASSERT_TRUE(second);
  Json items = flatten(second->conversation);
  ASSERT_EQ(items.size(), 2u);
  EXPECT_EQ(items[0]["content"], "one");
  EXPECT_EQ(items[1]["content"], "two");
}

TEST(ResponseStore, ConcurrentPutsAndGetsStayBounded) {
  ResponseStore store(50, std::chrono::seconds(3600));
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&store, t] {
      for (int i = 0; i < 500; ++i) {
        std::string id = std::to_string(t) + "-" + std::to_string(i);
        store.put(id, entry(id));
        store.get(std::to_string(t) + "-" + std::to_string(i / 2));
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(store.size(), 50u);
}

TEST(ResponsesItems, FunctionCallsJoinTheAssistantTurnAndOutputsBecomeToolMessages) {
  Json items = Json::parse(R"([
    {"role": "developer", "content": "Use tools."},
    {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Weather?"}]},
    {"type": "reasoning", "id": "rs_1", "summary": [], "content": [{"type": "reasoning_text", "text": "call it"}]},
    {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Checking.", "annotations": []}]},
    {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{\"city\":\"Paris\"}"},
    {"type": "function_call", "call_id": "call_2", "name": "get_time", "arguments": "not json"},
    {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
    {"type": "function_call_output", "call_id": "call_2", "output": [{"type": "input_text", "text": "noon"}]}
  ])");
  Json m = items_to_messages(items, "Be brief.", true);
  Json expected = Json::parse(R"([
    {"role": "system", "content": "Be brief.\nUse tools."},
    {"role": "user", "content": "Weather?"},
    {"role": "assistant", "content": "Checking.", "reasoning_content": "call it", "tool_calls": [
      {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}},
      {"id": "call_2", "type": "function", "function": {"name": "get_time", "arguments": "not json"}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
    {"role": "tool", "tool_call_id": "call_2", "content": "noon"}
  ])");
  EXPECT_EQ(m, expected);
}

std::string rejected_param(const Json& items, size_t n_history = 0) {
  try {
    items_to_messages(items, "", false, n_history);
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 400);
    return e.param;
  }
  return "<accepted>";
}

TEST(ResponsesItems, UnsupportedItemsAreRejectedNamingTheField) {
  Json image = Json::parse(R"([{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}])");
  EXPECT_EQ(rejected_param(image), "input[0].content[0].type");
  EXPECT_EQ(rejected_param(Json::parse(R"([{"type": "item_reference", "id": "x"}])")), "input[0].type");
  EXPECT_EQ(rejected_param(Json::parse(R"([{"role": "robot", "content": "x"}])")), "input[0].role");
  EXPECT_EQ(rejected_param(Json::parse(R"([{"type": "function_call", "name": "f", "arguments": "{}"}])")),
            "input[0].call_id");
  EXPECT_EQ(rejected_param(Json::parse(R"([{"role": "system", "content": "only a system prompt"}])")), "input");
  // Indexes count from the request's own items, after the stored history.
  Json with_history = Json::parse(R"([{"role": "user", "content": "old"}, {"role": "user", "content": 7}])");
  EXPECT_EQ(rejected_param(with_history, 1), "input[0].content");
}

}  // namespace
}  // namespace bunsen::server::responses
