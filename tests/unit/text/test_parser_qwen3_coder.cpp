// Qwen3-Coder XML tool calls: <function=NAME><parameter=P>value</parameter></function> inside
// <tool_call>, string values converted by the tool's JSON schema types.
// Expected events are written by hand from the Qwen3-Coder chat template's format, not by the parser.
#include "test_parser_util.h"

namespace bunsen::text {
namespace {

using namespace testing;

ParserOptions with_tools() {
  ParserOptions o;
  o.tools = nlohmann::json::parse(R"([
    {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {
      "city": {"type": "string"}, "days": {"type": "integer"}}}}},
    {"type": "function", "function": {"name": "typed", "parameters": {"type": "object", "properties": {
      "i": {"type": "integer"}, "n": {"type": "number"}, "b": {"type": "boolean"}, "o": {"type": "object"},
      "a": {"type": "array"}, "s": {"type": "string"}, "opt": {"type": ["integer", "null"]},
      "alt": {"anyOf": [{"type": "boolean"}, {"type": "array"}]}}}}},
    {"name": "bare_function_object", "parameters": {"properties": {"k": {"type": "integer"}}}}
  ])");
  return o;
}

const std::string kCall =
    "<tool_call>\n<function=get_weather>\n<parameter=city>\nSan Francisco\n</parameter>\n"
    "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>";

TEST(ParserQwen3Coder, WholeMessageWithSchema) {
  std::string text = "Let me check.\n" + kCall;
  Events want = {C("Let me check.\n"), T("get_weather", R"({"city":"San Francisco","days":3})")};
  EXPECT_EQ(parse_whole("qwen3_coder", text, with_tools()), want);
  EXPECT_EQ(expect_chunking_invariant("qwen3_coder", text, with_tools()), want);
}

TEST(ParserQwen3Coder, WithoutSchemaValuesAreStrings) {
  EXPECT_EQ(parse_whole("qwen3_coder", kCall), Events{T("get_weather", R"({"city":"San Francisco","days":"3"})")});
}

TEST(ParserQwen3Coder, SchemaTypeConversion) {
  std::string text =
      "<tool_call><function=typed>"
      "<parameter=i>\n42\n</parameter><parameter=n>\n2.5\n</parameter><parameter=b>\nTrue\n</parameter>"
      "<parameter=o>\n{\"k\": [1, 2]}\n</parameter><parameter=a>\n[\"x\", 3]\n</parameter>"
      "<parameter=s>\n007\n</parameter><parameter=opt>\nnull\n</parameter><parameter=alt>\n[1]\n</parameter>"
      "<parameter=unknown>\n5\n</parameter>"
      "</function></tool_call>";
  EXPECT_EQ(parse_whole("qwen3_coder", text, with_tools()),
            Events{T("typed", R"({"i":42,"n":2.5,"b":true,"o":{"k":[1,2]},"a":["x",3],"s":"007","opt":null,)"
                              R"("alt":[1],"unknown":"5"})")});
  // Values that do not parse as the declared type stay strings; "3.0" is an integer.
  std::string bad =
      "<tool_call><function=typed><parameter=i>\nmany\n</parameter><parameter=b>\nyes\n</parameter>"
      "<parameter=o>\n{broken\n</parameter><parameter=opt>\n3.0\n</parameter></function></tool_call>";
  EXPECT_EQ(parse_whole("qwen3_coder", bad, with_tools()),
            Events{T("typed", R"({"i":"many","b":"yes","o":"{broken","opt":3})")});
  // A tools list of bare function objects works too.
  EXPECT_EQ(parse_whole("qwen3_coder",
                        "<tool_call><function=bare_function_object><parameter=k>7</parameter></function></tool_call>",
                        with_tools()),
            Events{T("bare_function_object", R"({"k":7})")});
}

TEST(ParserQwen3Coder, MultilineCodeValuesKeepInnerNewlines) {
  std::string text =
      "<tool_call>\n<function=write_file>\n<parameter=path>\nmain.py\n</parameter>\n<parameter=content>\n"
      "def f():\n    return \"</tool_call>\"\n\n</parameter>\n</function>\n</tool_call>";
  Events want = {T("write_file", R"({"path":"main.py","content":"def f():\n    return \"</tool_call>\"\n"})")};
  EXPECT_EQ(expect_chunking_invariant("qwen3_coder", text), want);
}

TEST(ParserQwen3Coder, ClosingMarkupInsideValues) {
  std::string text =
      "<tool_call><function=note><parameter=text>a </function> b </tool_call> c</parameter></function>"
      "</tool_call>";
  EXPECT_EQ(expect_chunking_invariant("qwen3_coder", text),
            Events{T("note", R"({"text":"a </function> b </tool_call> c"})")});
}

TEST(ParserQwen3Coder, ParallelCallsInOrder) {
  std::string text =
      "<tool_call>\n<function=a>\n<parameter=x>\n1\n</parameter>\n</function>\n<function=b>\n</function>\n"
      "</tool_call>\n<tool_call>\n<function=c>\n</function>\n</tool_call>";
  EXPECT_EQ(expect_chunking_invariant("qwen3_coder", text),
            (Events{T("a", R"({"x":"1"})"), T("b", "{}"), T("c", "{}")}));
}

TEST(ParserQwen3Coder, BareFunctionWithoutWrapper) {
  std::string text = "Ok.\n<function=ping>\n<parameter=host>\nexample.org\n</parameter>\n</function>";
  EXPECT_EQ(expect_chunking_invariant("qwen3_coder", text),
            (Events{C("Ok.\n"), T("ping", R"({"host":"example.org"})")}));
}

TEST(ParserQwen3Coder, StreamingLatency) {
  auto p = make_parser("qwen3_coder");
  EXPECT_EQ(p->push("Hello <tool"), Events{C("Hello ")});
  EXPECT_EQ(p->push("_call><function=f>"), Events{});
  EXPECT_EQ(strip_ids(p->push("</function></tool_call> done")), (Events{T("f", "{}"), C("done")}));
  EXPECT_EQ(p->finish(), Events{});
}

TEST(ParserQwen3Coder, MalformedAndUnterminatedFallBackToContent) {
  std::string junk = "<tool_call><function=f>junk</function></tool_call> after";
  EXPECT_EQ(expect_chunking_invariant("qwen3_coder", junk), Events{C(junk)});
  std::string no_name = "<tool_call><function=>\n</function></tool_call>";
  EXPECT_EQ(parse_whole("qwen3_coder", no_name), Events{C(no_name)});
  // A parameter that is never closed swallows the rest: unterminated at finish, verbatim.
  std::string open_param = "x <tool_call><function=f><parameter=a>1</function></tool_call>";
  EXPECT_EQ(expect_chunking_invariant("qwen3_coder", open_param), Events{C(open_param)});
}

TEST(ParserQwen3Coder, UnicodeAndReasoning) {
  std::string text =
      "<think>\n\xE6\x83\xB3\xE4\xB8\x80\xE4\xB8\x8B\n</think>\n\n<tool_call>\n<function=get_weather>\n"
      "<parameter=city>\n\xE5\x8C\x97\xE4\xBA\xAC \xF0\x9F\x8C\xA7\n</parameter>\n</function>\n</tool_call>";
  EXPECT_EQ(expect_chunking_invariant("qwen3_coder", text, with_tools()),
            (Events{R("\xE6\x83\xB3\xE4\xB8\x80\xE4\xB8\x8B"),
                    T("get_weather", "{\"city\":\"\xE5\x8C\x97\xE4\xBA\xAC \xF0\x9F\x8C\xA7\"}")}));
}

}  // namespace
}  // namespace bunsen::text
