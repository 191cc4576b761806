// OpenAI streams during a long prefill: every prefill chunk the engine reports becomes an SSE `:` comment
// (so proxies and clients do not time out before the first token), and an engine failure after streaming
// began becomes an OpenAI-shaped error event, with no [DONE].
#include <gtest/gtest.h>

#include "dialect_rig.h"

namespace bunsen::server::dialect_testing {
namespace {

TEST(OpenAiHeartbeat, PrefillChunksBecomeCommentsThenErrorEvent) {
  Rig rig(std::make_unique<FailingBackend>("Hello there"));
  const Json body = {{"model", kModel},
                     {"stream", true},
                     {"messages", Json::array({{{"role", "user"}, {"content", "hi"}}})}};
  int status = 0;
  bool ended = false;
  const std::vector<SseEvent> events = rig.stream("/v1/chat/completions", body, &status, &ended);
  ASSERT_EQ(status, 200);
  size_t pings = 0;
  for (const SseEvent& e : events) pings += e.comment.find("ping") != std::string::npos ? 1 : 0;
  EXPECT_EQ(pings, 2u);  // FailingBackend reports two prefill chunks
  ASSERT_FALSE(events.empty());
  const std::string& last = events.back().data;
  EXPECT_NE(last, "[DONE]");
  const Json err = Json::parse(last, nullptr, false);
  ASSERT_TRUE(err.contains("error")) << last;
  EXPECT_FALSE(err["error"]["message"].get<std::string>().empty());
}

}  // namespace
}  // namespace bunsen::server::dialect_testing
