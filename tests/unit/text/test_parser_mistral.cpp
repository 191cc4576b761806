// Mistral tool calls: [TOOL_CALLS][{...}, ...] (tokenizer v3) and [TOOL_CALLS]NAME[ARGS]{...} (v11+),
// plus [THINK]...[/THINK] reasoning (Magistral).
// Expected events are written by hand from the format, not produced by the parser.
#include "test_parser_util.h"

namespace bunsen::text {
namespace {

using namespace testing;

TEST(ParserMistral, ListFormat) {
  std::string text =
      "[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}, "
      "{\"name\": \"get_time\", \"arguments\": {\"tz\": \"CET\"}, \"id\": \"abc123XYZ\"}]";
  EXPECT_EQ(expect_chunking_invariant("mistral", text),
            (Events{T("get_weather", R"({"city":"Paris"})"), T("get_time", R"({"tz":"CET"})")}));
}

TEST(ParserMistral, NameArgsFormatSeveralCalls) {
  std::string text =
      "Checking.[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\", \"days\": 2}"
      "[TOOL_CALLS]get_time[ARGS]{}";
  EXPECT_EQ(expect_chunking_invariant("mistral", text),
            (Events{C("Checking."), T("get_weather", R"({"city":"Paris","days":2})"), T("get_time", "{}")}));
}

TEST(ParserMistral, CallIdVariant) {
  std::string text = "[TOOL_CALLS]lookup[CALL_ID]a1b2c3d4e[ARGS]{\"q\": \"x\"}";
  EXPECT_EQ(expect_chunking_invariant("mistral", text), Events{T("lookup", R"({"q":"x"})")});
}

TEST(ParserMistral, BracketsAndMarkersInsideStrings) {
  std::string text = "[TOOL_CALLS]echo[ARGS]{\"s\": \"a } ] [TOOL_CALLS] { \\\" [\", \"n\": [{\"k\": []}]} tail";
  EXPECT_EQ(expect_chunking_invariant("mistral", text),
            (Events{T("echo", R"({"s":"a } ] [TOOL_CALLS] { \" [","n":[{"k":[]}]})"), C("tail")}));
}

TEST(ParserMistral, StreamingLatency) {
  auto p = make_parser("mistral");
  EXPECT_EQ(p->push("Hi [TOOL"), Events{C("Hi ")});
  EXPECT_EQ(p->push("_CALLS]f[AR"), Events{});
  EXPECT_EQ(p->push("GS]{\"a\": "), Events{});
  EXPECT_EQ(strip_ids(p->push("1}")), Events{T("f", R"({"a":1})")});
  EXPECT_EQ(p->finish(), Events{});
}

TEST(ParserMistral, MalformedAndUnterminated) {
  std::string bad_json = "[TOOL_CALLS]get_weather[ARGS]{\"city\": Paris}";
  EXPECT_EQ(expect_chunking_invariant("mistral", bad_json), Events{C(bad_json)});
  std::string not_json = "[TOOL_CALLS]f[ARGS]oops";
  EXPECT_EQ(expect_chunking_invariant("mistral", not_json), Events{C(not_json)});
  std::string unterminated = "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Par";
  EXPECT_EQ(expect_chunking_invariant("mistral", unterminated), Events{C(unterminated)});
  std::string no_args = "[TOOL_CALLS]just text";
  EXPECT_EQ(expect_chunking_invariant("mistral", no_args), Events{C(no_args)});
  std::string bad_item = "[TOOL_CALLS][{\"name\": \"a\", \"arguments\": {}}, {\"arguments\": {}}]";
  EXPECT_EQ(parse_whole("mistral", bad_item), Events{C(bad_item)});
}

TEST(ParserMistral, ThinkBlocksAndUnicode) {
  std::string text =
      "[THINK]R\xC3\xA9" "fl\xC3\xA9" "chissons.[/THINK]\n\nVoil\xC3\xA0 [TOOL_CALLS]f[ARGS]{\"v\": \"\xE2\x82\xAC\"}";
  EXPECT_EQ(expect_chunking_invariant("mistral", text),
            (Events{R("R\xC3\xA9" "fl\xC3\xA9" "chissons."), C("Voil\xC3\xA0 "), T("f", "{\"v\":\"\xE2\x82\xAC\"}")}));
}

}  // namespace
}  // namespace bunsen::text
