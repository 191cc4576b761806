// Llama 3 JSON tool calls: only a message that is entirely `{"name", "parameters"}` (after an optional
// <|python_tag|>, several joined by ';') is a call; everything else is content, streamed at once.
// Expected events are written by hand from the format, not produced by the parser.
#include "test_parser_util.h"

namespace bunsen::text {
namespace {

using namespace testing;

TEST(ParserLlama3, WholeMessageCall) {
  std::string text = "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\", \"unit\": \"C\"}}";
  Events want = {T("get_weather", R"({"city":"Paris","unit":"C"})")};
  EXPECT_EQ(expect_chunking_invariant("llama3", text), want);
  EXPECT_EQ(parse_whole("llama3", "\n  " + text + "\n"), want);
}

TEST(ParserLlama3, PythonTagAndSeveralCalls) {
  std::string text =
      "<|python_tag|>{\"name\": \"a\", \"parameters\": {\"x\": \"}{;\"}}; {\"name\": \"b\", \"arguments\": {}}";
  EXPECT_EQ(expect_chunking_invariant("llama3", text), (Events{T("a", R"({"x":"}{;"})"), T("b", "{}")}));
  EXPECT_EQ(parse_whole("llama3", "{\"type\": \"function\", \"name\": \"c\", \"parameters\": {\"n\": 1}}"),
            Events{T("c", R"({"n":1})")});
}

TEST(ParserLlama3, PlainTextStreamsImmediately) {
  auto p = make_parser("llama3");
  EXPECT_EQ(p->push("Hel"), Events{C("Hel")});
  EXPECT_EQ(p->push("lo {\"name\": 1}"), Events{C("lo {\"name\": 1}")});
  EXPECT_EQ(p->finish(), Events{});
}

TEST(ParserLlama3, JsonThatIsNotACallIsReleasedEarly) {
  auto p = make_parser("llama3");
  EXPECT_EQ(p->push("  {"), Events{});
  EXPECT_EQ(p->push(" \"na"), Events{});
  EXPECT_EQ(p->push("mes\": [1]}"), Events{C("  { \"names\": [1]}")});
  EXPECT_EQ(p->finish(), Events{});
  EXPECT_EQ(parse_whole("llama3", "{\"result\": 5}"), Events{C("{\"result\": 5}")});
  EXPECT_EQ(parse_whole("llama3", "<|python_t"), Events{C("<|python_t")});
}

TEST(ParserLlama3, HeldMessageThatDoesNotParseIsContentVerbatim) {
  for (std::string text : {
           std::string("{\"name\": \"f\", \"parameters\": {\"a\": 1}} and some words"),
           std::string("{\"name\": \"f\", \"parameters\": {\"a\": }}"),
           std::string("{\"name\": \"f\", \"parameters\": {\"a\": 1}"),
           std::string("<|python_tag|>brave_search.call(query=\"x\")"),
           std::string("{\"name\": \"f\", \"parameters\": [1]}"),
       }) {
    EXPECT_EQ(expect_chunking_invariant("llama3", text), Events{C(text)}) << text;
  }
}

TEST(ParserLlama3, UnicodeArguments) {
  std::string text = "{\"name\": \"translate\", \"parameters\": {\"text\": \"\xD9\x85\xD8\xB1\xD8\xAD\xD8\xA8\xD8\xA7 \xF0\x9F\x91\x8B\xF0\x9F\x8F\xBD\"}}";
  EXPECT_EQ(expect_chunking_invariant("llama3", text),
            Events{T("translate", "{\"text\":\"\xD9\x85\xD8\xB1\xD8\xAD\xD8\xA8\xD8\xA7 \xF0\x9F\x91\x8B\xF0\x9F\x8F\xBD\"}")});
  std::string prose = "\xE0\xA4\xA8\xE0\xA4\xAE\xE0\xA4\xB8\xE0\xA5\x8D\xE0\xA4\xA4\xE0\xA5\x87 {\"name\": 1}";
  EXPECT_EQ(expect_chunking_invariant("llama3", prose), Events{C(prose)});
}

TEST(ParserLlama3, ToolParsingOff) {
  ParserOptions opt;
  opt.parse_tool_calls = false;
  std::string text = "{\"name\": \"f\", \"parameters\": {}}";
  auto p = make_parser("llama3", opt);
  EXPECT_EQ(p->push(text), Events{C(text)});
}

}  // namespace
}  // namespace bunsen::text
