// MiniCPM5: <function name="NAME"><param name="P">VALUE</param>...</function> (CDATA-wrapped values,
// schema-typed), a JSON object body, and <think> reasoning.
// Expected events are written by hand from the MiniCPM5 chat template's format, not by the parser.
#include "test_parser_util.h"

namespace bunsen::text {
namespace {

using namespace testing;

ParserOptions with_tools() {
  ParserOptions o;
  o.tools = nlohmann::json::parse(R"([{"type": "function", "function": {"name": "get_weather", "parameters": {
      "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"},
      "hourly": {"type": "boolean"}}}}},
    {"type": "function", "function": {"name": "py", "parameters": {"type": "object", "properties": {
      "tags": {"type": "array"}, "opts": {"type": "object"}, "flag": {"type": "boolean"}, "n": {"type": "integer"}}}}}])");
  return o;
}

TEST(ParserMiniCpm, ReasoningContentAndCall) {
  std::string text =
      "<think>\nplan\n</think>\n\nchecking\n<function name=\"get_weather\"><param name=\"city\">Beijing</param>"
      "<param name=\"days\">3</param><param name=\"hourly\">false</param></function>";
  Events want = {R("plan"), C("checking\n"), T("get_weather", R"({"city":"Beijing","days":3,"hourly":false})")};
  EXPECT_EQ(parse_whole("minicpm", text, with_tools()), want);
  EXPECT_EQ(expect_chunking_invariant("minicpm", text, with_tools()), want);
}

TEST(ParserMiniCpm, CdataValues) {
  std::string text =
      "<function name=\"write_note\"><param name=\"body\">\n<![CDATA[use </param> and </function> & <b>]]>\n"
      "</param><param name=\"title\"><![CDATA[a]]>b<![CDATA[c]]></param></function>";
  EXPECT_EQ(expect_chunking_invariant("minicpm", text),
            Events{T("write_note", R"({"body":"use </param> and </function> & <b>","title":"abc"})")});
}

TEST(ParserMiniCpm, PythonPrintedValuesAreConvertedBySchema) {
  // The chat template prints non-string arguments with Python's str(): True, None, single quotes.
  std::string text =
      "<function name=\"py\"><param name=\"tags\">['a', \"b'c\", 'd\\'e']</param>"
      "<param name=\"opts\">{'k': True, 'n': None, 'q': 'say \"hi\"'}</param>"
      "<param name=\"flag\">True</param><param name=\"n\">None</param></function>";
  EXPECT_EQ(parse_whole("minicpm", text, with_tools()),
            Events{T("py", R"({"tags":["a","b'c","d'e"],"opts":{"k":true,"n":null,"q":"say \"hi\""},"flag":true,"n":null})")});
}

TEST(ParserMiniCpm, ToolSepPlaceholderDropped) {
  std::string text = "A<tool_sep><function name=\"f\"></function><tool_sep>B";
  EXPECT_EQ(expect_chunking_invariant("minicpm", text), (Events{C("A"), T("f", "{}"), C("B")}));
}

TEST(ParserMiniCpm, JsonBodyAndParallelCalls) {
  std::string text =
      "<function name=\"a\">{\"x\": [1, {\"y\": null}]}</function>\n<function name=\"b\"></function>";
  EXPECT_EQ(expect_chunking_invariant("minicpm", text), (Events{T("a", R"({"x":[1,{"y":null}]})"), T("b", "{}")}));
}

TEST(ParserMiniCpm, StreamingLatency) {
  auto p = make_parser("minicpm");
  EXPECT_EQ(p->push("Hello <func"), Events{C("Hello ")});
  EXPECT_EQ(p->push("tion name=\"f\"><param name=\"a\">1</param>"), Events{});
  EXPECT_EQ(strip_ids(p->push("</function>")), Events{T("f", R"({"a":"1"})")});
  EXPECT_EQ(p->finish(), Events{});
}

TEST(ParserMiniCpm, MalformedAndUnterminated) {
  std::string wrong_tag = "<function name=\"f\"><arg>1</arg></function> more";
  EXPECT_EQ(expect_chunking_invariant("minicpm", wrong_tag), Events{C(wrong_tag)});
  std::string bad_json = "<function name=\"f\">{oops}</function>";
  EXPECT_EQ(parse_whole("minicpm", bad_json), Events{C(bad_json)});
  std::string unterminated = "x <function name=\"f\"><param name=\"a\">1</param>";
  EXPECT_EQ(expect_chunking_invariant("minicpm", unterminated), Events{C(unterminated)});
  std::string open_cdata = "<function name=\"f\"><param name=\"a\"><![CDATA[</function>";
  EXPECT_EQ(expect_chunking_invariant("minicpm", open_cdata), Events{C(open_cdata)});
  // Ordinary HTML with a function tag of another shape is content.
  std::string html = "<function>not a call</function>";
  EXPECT_EQ(parse_whole("minicpm", html), Events{C(html)});
}

TEST(ParserMiniCpm, Unicode) {
  std::string text =
      "\xE5\xA5\xBD<function name=\"get_weather\"><param name=\"city\">\xE5\x8C\x97\xE4\xBA\xAC</param></function>";
  EXPECT_EQ(expect_chunking_invariant("minicpm", text, with_tools()),
            (Events{C("\xE5\xA5\xBD"), T("get_weather", "{\"city\":\"\xE5\x8C\x97\xE4\xBA\xAC\"}")}));
}

}  // namespace
}  // namespace bunsen::text
