// Gemma 4: <|channel>thought ... <channel|> reasoning and <|tool_call>call:NAME{k:v}<tool_call|> calls
// with <|"|>-delimited strings and bare keys; sentinel tokens dropped.
// Expected events are written by hand from the format (vLLM's gemma4 parser docs), not by the parser.
#include "test_parser_util.h"
#include "text/parsers/gemma4_args.h"

namespace bunsen::text {
namespace {

using namespace testing;
using parsers::OrderedJson;

const std::string Q = "<|\"|>";

TEST(ParserGemma4, ReasoningThenCall) {
  std::string text = "<|channel>thought\nThe user wants the weather.<channel|><|tool_call>call:get_weather{location:" +
                     Q + "Paris, France" + Q + ",days:3,metric:true}<tool_call|><|tool_response>";
  Events want = {R("The user wants the weather."),
                 T("get_weather", R"({"location":"Paris, France","days":3,"metric":true})")};
  EXPECT_EQ(parse_whole("gemma4", text), want);
  EXPECT_EQ(expect_chunking_invariant("gemma4", text), want);
}

TEST(ParserGemma4, NestedValues) {
  std::string text = "<|tool_call>call:plan{opts:{a:" + Q + "x" + Q + ",b:[1,2.5," + Q + "y" + Q +
                     ",[],{}]},n:null,neg:-4,exp:1e3,word:celsius,empty:" + Q + Q + "}<tool_call|>";
  EXPECT_EQ(expect_chunking_invariant("gemma4", text),
            Events{T("plan", R"({"opts":{"a":"x","b":[1,2.5,"y",[],{}]},"n":null,"neg":-4,"exp":1000.0,)"
                             R"("word":"celsius","empty":""})")});
}

TEST(ParserGemma4, MarkupInsideStrings) {
  std::string text = "<|tool_call>call:echo{s:" + Q + "a <tool_call|> b }, c: [d] \"e\"" + Q + "}<tool_call|>";
  EXPECT_EQ(expect_chunking_invariant("gemma4", text), Events{T("echo", R"({"s":"a <tool_call|> b }, c: [d] \"e\""})")});
}

TEST(ParserGemma4, CallEndsThoughtChannelImplicitly) {
  std::string text = "<|channel>thought\nneed data\n<|tool_call>call:f{}<tool_call|><|tool_call>call:g{k:1}<tool_call|>";
  EXPECT_EQ(expect_chunking_invariant("gemma4", text), (Events{R("need data"), T("f", "{}"), T("g", R"({"k":1})")}));
}

TEST(ParserGemma4, ChannelLabel) {
  EXPECT_EQ(expect_chunking_invariant("gemma4", "<|channel>thought<channel|>The answer is 4.<turn|>"),
            Events{C("The answer is 4.")});
  EXPECT_EQ(expect_chunking_invariant("gemma4", "<|channel>thoughtful idea<channel|>ok"),
            (Events{R("thoughtful idea"), C("ok")}));
  EXPECT_EQ(expect_chunking_invariant("gemma4", "<|channel>thought"), Events{});
  EXPECT_EQ(expect_chunking_invariant("gemma4", "<|channel>thou"), Events{R("thou")});
  // Without trimming, only the header line ("thought\n") goes; the reasoning keeps its own whitespace.
  ParserOptions raw;
  raw.trim_whitespace = false;
  EXPECT_EQ(expect_chunking_invariant("gemma4", "<|channel>thought\n\n step \n<channel|>\nok", raw),
            (Events{R("\n step \n"), C("\nok")}));
}

TEST(ParserGemma4, ChannelOpenedByThePrompt) {
  ParserOptions opt;
  opt.reasoning_open_in_prompt = true;
  EXPECT_EQ(expect_chunking_invariant("gemma4", "thought\nsteps<channel|>Done", opt), (Events{R("steps"), C("Done")}));
  EXPECT_EQ(expect_chunking_invariant("gemma4", "<|channel>thought\nsteps<channel|>Done", opt),
            (Events{R("steps"), C("Done")}));
}

TEST(ParserGemma4, SentinelsDropped) {
  EXPECT_EQ(expect_chunking_invariant("gemma4", "Hello<turn|>"), Events{C("Hello")});
  EXPECT_EQ(expect_chunking_invariant("gemma4", "a<channel|>b<eos>"), Events{C("ab")});
}

TEST(ParserGemma4, StreamingLatency) {
  auto p = make_parser("gemma4");
  EXPECT_EQ(p->push("Hello <|tool"), Events{C("Hello ")});
  EXPECT_EQ(p->push("_call>call:f{a:" + Q), Events{});
  EXPECT_EQ(strip_ids(p->push("x" + Q + "}<tool_call|>")), Events{T("f", R"({"a":"x"})")});
  EXPECT_EQ(p->finish(), Events{});
}

TEST(ParserGemma4, MalformedAndUnterminated) {
  std::string no_call = "<|tool_call>get_weather{a:1}<tool_call|>";
  EXPECT_EQ(expect_chunking_invariant("gemma4", no_call), Events{C(no_call)});
  std::string bad_obj = "<|tool_call>call:f{a 1}<tool_call|> rest";
  EXPECT_EQ(expect_chunking_invariant("gemma4", bad_obj), Events{C(bad_obj)});
  std::string trailing = "<|tool_call>call:f{a:1} extra<tool_call|>";
  EXPECT_EQ(parse_whole("gemma4", trailing), Events{C(trailing)});
  std::string open_string = "<|tool_call>call:f{a:" + Q + "x}<tool_call|>";
  EXPECT_EQ(expect_chunking_invariant("gemma4", open_string), Events{C(open_string)});
}

TEST(ParserGemma4, Unicode) {
  std::string text = "\xE0\xB8\xAA\xE0\xB8\xA7\xE0\xB8\xB1\xE0\xB8\xAA\xE0\xB8\x94\xE0\xB8\xB5<|tool_call>call:say{text:" +
                     Q + "\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x92\xBB \xE6\x97\xA5\xE6\x9C\xAC" + Q + "}<tool_call|>";
  EXPECT_EQ(expect_chunking_invariant("gemma4", text),
            (Events{C("\xE0\xB8\xAA\xE0\xB8\xA7\xE0\xB8\xB1\xE0\xB8\xAA\xE0\xB8\x94\xE0\xB8\xB5"),
                    T("say", "{\"text\":\"\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x92\xBB \xE6\x97\xA5\xE6\x9C\xAC\"}")}));
}

TEST(Gemma4Args, ValueGrammar) {
  EXPECT_EQ(*parsers::parse_gemma4_value(" 12 "), OrderedJson(12));
  EXPECT_EQ(*parsers::parse_gemma4_value("false"), OrderedJson(false));
  EXPECT_EQ(*parsers::parse_gemma4_value(Q + " padded " + Q), OrderedJson(" padded "));
  EXPECT_EQ(*parsers::parse_gemma4_value("{" + Q + "quoted key" + Q + ":1,}"), OrderedJson::parse(R"({"quoted key":1})"));
  EXPECT_FALSE(parsers::parse_gemma4_value("{a:1"));
  EXPECT_FALSE(parsers::parse_gemma4_value("[1,,2]"));
  EXPECT_FALSE(parsers::parse_gemma4_value("{:1}"));
  EXPECT_FALSE(parsers::parse_gemma4_value("1 2}"));
  // Hostile nesting ends in a rejection, not a stack overflow.
  EXPECT_FALSE(parsers::parse_gemma4_value(std::string(100000, '[')));
  EXPECT_TRUE(parsers::parse_gemma4_value(std::string(30, '[') + std::string(30, ']')));
}

}  // namespace
}  // namespace bunsen::text
