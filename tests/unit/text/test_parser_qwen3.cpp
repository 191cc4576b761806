// Qwen3 / Hermes parser: <think> reasoning and <tool_call>{json}</tool_call>, whole and streamed.
// Expected events are written by hand from the format, not produced by the parser.
// Every case also runs the chunking property (each split point, byte by byte, random chunk sizes).
#include "test_parser_util.h"

namespace bunsen::text {
namespace {

using namespace testing;

TEST(ParserQwen3, WholeMessageWithReasoningAndParallelCalls) {
  std::string text =
      "<think>\nThe user wants weather and time.\n</think>\n\nI'll check both.\n"
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 3}}\n</tool_call>\n"
      "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>";
  Events want = {R("The user wants weather and time."), C("I'll check both.\n"),
                 T("get_weather", R"({"city":"Paris","days":3})"), T("get_time", "{}")};
  EXPECT_EQ(parse_whole("qwen3", text), want);
  EXPECT_EQ(expect_chunking_invariant("qwen3", text), want);
  EXPECT_EQ(parse_whole("hermes", text), want);
}

TEST(ParserQwen3, TextBeforeMarkupStreamsImmediately) {
  auto p = make_parser("qwen3");
  EXPECT_EQ(p->push("Hello <tool"), Events{C("Hello ")});
  EXPECT_EQ(p->push("_call>{\"name\": \"f\""), Events{});
  Events got = strip_ids(p->push(", \"arguments\": {\"x\": 1}}</tool_call>"));
  EXPECT_EQ(got, Events{T("f", R"({"x":1})")});
  EXPECT_EQ(p->finish(), Events{});
}

TEST(ParserQwen3, LookalikeMarkupIsReleasedAsSoonAsItDiverges) {
  auto p = make_parser("qwen3");
  EXPECT_EQ(p->push("a <tool"), Events{C("a ")});
  EXPECT_EQ(p->push("box> b <thi"), Events{C("<toolbox> b ")});
  EXPECT_EQ(p->push("s"), Events{C("<this")});
  EXPECT_EQ(p->finish(), Events{});
}

TEST(ParserQwen3, MalformedJsonFallsBackToContentVerbatim) {
  std::string text = "Try: <tool_call>{\"name\": \"f\", \"arguments\": {oops}}</tool_call> then more";
  EXPECT_EQ(expect_chunking_invariant("qwen3", text), Events{C(text)});
  // Valid JSON but not a call (no name / arguments not an object).
  std::string no_name = "<tool_call>{\"arguments\": {}}</tool_call>";
  EXPECT_EQ(parse_whole("qwen3", no_name), Events{C(no_name)});
  std::string bad_args = "<tool_call>{\"name\": \"f\", \"arguments\": [1]}</tool_call>";
  EXPECT_EQ(parse_whole("qwen3", bad_args), Events{C(bad_args)});
}

TEST(ParserQwen3, UnterminatedMarkupAtFinishIsContent) {
  std::string text = "Sure. <tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": \"</tool_call>";
  EXPECT_EQ(expect_chunking_invariant("qwen3", text), Events{C(text)});
  EXPECT_EQ(parse_whole("qwen3", "ends with <tool_ca"), Events{C("ends with <tool_ca")});
}

TEST(ParserQwen3, CloseTagInsideJsonStringsAndNestedBraces) {
  std::string text =
      "<tool_call>{\"name\": \"echo\", \"arguments\": {\"text\": \"a </tool_call> b \\\" } {\", "
      "\"nested\": {\"list\": [1, {\"k\": \"]}\"}], \"e\": {}}}}</tool_call>";
  Events want = {T("echo", R"({"text":"a </tool_call> b \" } {","nested":{"list":[1,{"k":"]}"}],"e":{}}})")};
  EXPECT_EQ(expect_chunking_invariant("qwen3", text), want);
}

TEST(ParserQwen3, ArgumentsAsJsonStringAndKeyOrder) {
  std::string text = "<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"z\\\": 1, \\\"a\\\": [true, null]}\"}</tool_call>";
  EXPECT_EQ(parse_whole("qwen3", text), Events{T("f", R"({"z":1,"a":[true,null]})")});
  EXPECT_EQ(parse_whole("qwen3", "<tool_call>{\"name\": \"g\"}</tool_call>"), Events{T("g", "{}")});
  EXPECT_EQ(parse_whole("qwen3", "<tool_call>{\"name\": \"g\", \"parameters\": {\"b\": 2, \"a\": 1}}</tool_call>"),
            Events{T("g", R"({"b":2,"a":1})")});
}

TEST(ParserQwen3, Unicode) {
  std::string text =
      "\xE5\xA5\xBD\xE7\x9A\x84 \xF0\x9F\x98\x80<tool_call>{\"name\": \"weather\", \"arguments\": "
      "{\"city\": \"\xE6\x9D\xB1\xE4\xBA\xAC\", \"note\": \"\\u00e9\"}}</tool_call>";
  Events want = {C("\xE5\xA5\xBD\xE7\x9A\x84 \xF0\x9F\x98\x80"),
                 T("weather", "{\"city\":\"\xE6\x9D\xB1\xE4\xBA\xAC\",\"note\":\"\xC3\xA9\"}")};
  EXPECT_EQ(expect_chunking_invariant("qwen3", text), want);
}

TEST(ParserQwen3, ContentBetweenCallsKeptWhitespaceDropped) {
  std::string text =
      "<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call>\n\n  Between.\n"
      "<tool_call>{\"name\": \"b\", \"arguments\": {}}</tool_call>\n \n";
  Events want = {T("a", "{}"), C("Between.\n"), T("b", "{}")};
  EXPECT_EQ(expect_chunking_invariant("qwen3", text), want);
}

TEST(ParserQwen3, ReasoningOpenedByThePrompt) {
  ParserOptions opt;
  opt.reasoning_open_in_prompt = true;
  std::string text = "I need the forecast.\n</think>\n\nIt is sunny.";
  Events want = {R("I need the forecast."), C("It is sunny.")};
  EXPECT_EQ(expect_chunking_invariant("qwen3", text, opt), want);
  // A model that repeats the opener anyway: the repeated opener is dropped, a lookalike is kept.
  EXPECT_EQ(expect_chunking_invariant("qwen3", "<think>\nabc</think>x", opt), (Events{R("abc"), C("x")}));
  EXPECT_EQ(expect_chunking_invariant("qwen3", "<thinking> abc</think>x", opt), (Events{R("<thinking> abc"), C("x")}));
  EXPECT_EQ(expect_chunking_invariant("qwen3", "<thi", opt), Events{R("<thi")});
  // The model never closes the block: everything is reasoning.
  EXPECT_EQ(parse_whole("qwen3", "still thinking <tool_call>{}", opt), Events{R("still thinking <tool_call>{}")});
}

TEST(ParserQwen3, WithoutTrimmingWhitespaceIsVerbatim) {
  ParserOptions opt;
  opt.trim_whitespace = false;
  std::string text = "<think>\nhmm\n</think>\n\nAnswer.<tool_call>{\"name\": \"f\"}</tool_call>\n";
  Events want = {R("\nhmm\n"), C("\n\nAnswer."), T("f", "{}"), C("\n")};
  EXPECT_EQ(expect_chunking_invariant("qwen3", text, opt), want);
}

TEST(ParserQwen3, DisabledBlocksAreContent) {
  std::string text = "<think>x</think><tool_call>{\"name\": \"f\"}</tool_call>";
  ParserOptions no_tools;
  no_tools.parse_tool_calls = false;
  EXPECT_EQ(parse_whole("qwen3", text, no_tools), (Events{R("x"), C("<tool_call>{\"name\": \"f\"}</tool_call>")}));
  ParserOptions no_reasoning;
  no_reasoning.parse_reasoning = false;
  no_reasoning.reasoning_open_in_prompt = true;  // ignored without reasoning parsing
  EXPECT_EQ(parse_whole("qwen3", text, no_reasoning), (Events{C("<think>x</think>"), T("f", "{}")}));
}

TEST(ParserQwen3, ToolMarkupInsideReasoningIsReasoning) {
  std::string text = "<think>maybe <tool_call>{\"name\": \"f\"}</tool_call>?</think>No.";
  EXPECT_EQ(parse_whole("qwen3", text), (Events{R("maybe <tool_call>{\"name\": \"f\"}</tool_call>?"), C("No.")}));
}

}  // namespace
}  // namespace bunsen::text
