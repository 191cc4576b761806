// Python str/float semantics the Jinja engine relies on (py_str.h), checked against values CPython
// prints (each expectation is what `python3 -c "print(repr(...))"` shows); the end-to-end versions of
// these run against jinja2 in test_jinja_goldens.cpp.
#include <gtest/gtest.h>

#include <cmath>

#include "text/jinja/py_str.h"

namespace bunsen::text::jinja::py {
namespace {

TEST(PyStr, FloatReprMatchesCPython) {
  EXPECT_EQ(float_repr(1.0), "1.0");
  EXPECT_EQ(float_repr(0.5), "0.5");
  EXPECT_EQ(float_repr(1e16), "1e+16");
  EXPECT_EQ(float_repr(1e15), "1000000000000000.0");
  EXPECT_EQ(float_repr(0.0001), "0.0001");
  EXPECT_EQ(float_repr(1e-5), "1e-05");
  EXPECT_EQ(float_repr(0.1 + 0.2), "0.30000000000000004");
  EXPECT_EQ(float_repr(-0.0), "-0.0");
  EXPECT_EQ(float_repr(5e-324), "5e-324");
  EXPECT_EQ(float_repr(1.7976931348623157e308), "1.7976931348623157e+308");
  EXPECT_EQ(float_repr(123456789.123), "123456789.123");
  EXPECT_EQ(float_repr(1.5e-7), "1.5e-07");
  EXPECT_EQ(float_repr(NAN), "nan");
  EXPECT_EQ(float_repr(-INFINITY), "-inf");
}

TEST(PyStr, ReprQuotingMatchesCPython) {
  EXPECT_EQ(repr("abc"), "'abc'");
  EXPECT_EQ(repr("it's"), "\"it's\"");
  EXPECT_EQ(repr("say \"hi\""), "'say \"hi\"'");
  EXPECT_EQ(repr("both ' and \""), "'both \\' and \"'");
  EXPECT_EQ(repr("tab\tnl\ncr\rbs\\"), "'tab\\tnl\\ncr\\rbs\\\\'");
  EXPECT_EQ(repr(std::string("\x00\x7f", 2)), "'\\x00\\x7f'");
  EXPECT_EQ(repr("\xc2\x85"), "'\\x85'");          // U+0085 NEL is not printable
  EXPECT_EQ(repr("\xe2\x80\x8b"), "'\\u200b'");    // U+200B ZERO WIDTH SPACE (Cf)
  EXPECT_EQ(repr("caf\xc3\xa9 \xf0\x9f\x98\x80"), "'caf\xc3\xa9 \xf0\x9f\x98\x80'");
  EXPECT_EQ(repr("\xc2\xa0"), "'\\xa0'");          // NO-BREAK SPACE (Zs) is escaped
}

TEST(PyStr, SplitFamilyMatchesCPython) {
  using V = std::vector<std::string>;
  EXPECT_EQ(split("  a  b  ", std::nullopt, -1), (V{"a", "b"}));
  EXPECT_EQ(split("  a  b  ", std::nullopt, 1), (V{"a", "b  "}));
  EXPECT_EQ(rsplit("  a  b  ", std::nullopt, 1), (V{"  a", "b"}));
  EXPECT_EQ(split("a,b,,c", std::string(","), -1), (V{"a", "b", "", "c"}));
  EXPECT_EQ(split("", std::string(","), -1), (V{""}));
  EXPECT_EQ(split("", std::nullopt, -1), V{});
  EXPECT_EQ(rsplit("a b c", std::string(" "), 1), (V{"a b", "c"}));
  EXPECT_EQ(splitlines("a\nb\r\nc\rd\x0b" "e", false), (V{"a", "b", "c", "d", "e"}));
  EXPECT_EQ(splitlines("a\nb\n", true), (V{"a\n", "b\n"}));
  EXPECT_EQ(split("a\xe3\x80\x80" "b", std::nullopt, -1), (V{"a", "b"}));  // U+3000 is whitespace
  EXPECT_EQ(split("a\xe2\x80\x8b" "b", std::nullopt, -1), (V{"a\xe2\x80\x8b" "b"}));  // U+200B is not
}

TEST(PyStr, StripReplaceSliceMatchCPython) {
  EXPECT_EQ(strip(" \t x \n", std::nullopt, true, true), "x");
  EXPECT_EQ(strip("xyhixy", std::string("yx"), true, true), "hi");
  EXPECT_EQ(strip("--x--", std::string("-"), false, true), "--x");
  EXPECT_EQ(replace("ab", "", "-", -1), "-a-b-");
  EXPECT_EQ(replace("aaa", "a", "b", 2), "bba");
  EXPECT_EQ(slice("h\xc3\xa9llo", std::nullopt, std::nullopt, -1), "oll\xc3\xa9h");
  EXPECT_EQ(slice("Hello World", 10, 2, -2), "drWo");
  EXPECT_EQ(slice("abc", -100, 100, 1), "abc");
  EXPECT_EQ(slice("abcdef", 0, 6, INT64_MAX), "a");
  EXPECT_EQ(length("\xf0\x9f\x98\x80" "a"), 2u);
}

TEST(PyStr, CaseMappingMatchesCPython) {
  EXPECT_EQ(upper("stra\xc3\x9f" "e"), "STRASSE");  // 'straße'.upper()
  EXPECT_EQ(upper("\xef\xac\x81ne"), "FINE");        // 'ﬁne'.upper()
  EXPECT_EQ(lower("\xc4\xb0"), "i\xcc\x87");         // 'İ'.lower() == 'i̇'
  EXPECT_EQ(title("they're bill's"), "They'Re Bill'S");
  EXPECT_EQ(capitalize("hELLO"), "Hello");
  EXPECT_TRUE(is_lower("abc1"));
  EXPECT_FALSE(is_lower("123"));
  EXPECT_TRUE(is_upper("\xc3\x89"));  // 'É'
}

TEST(PyStr, NumberParsingMatchesCPython) {
  EXPECT_EQ(parse_int(" 12 ", 10), 12);
  EXPECT_EQ(parse_int("1_000", 10), 1000);
  EXPECT_EQ(parse_int("0x1A", 16), 26);
  EXPECT_EQ(parse_int("0x1A", 0), 26);
  EXPECT_EQ(parse_int("-0", 10), 0);
  EXPECT_FALSE(parse_int("1__0", 10));
  EXPECT_FALSE(parse_int("_1", 10));
  EXPECT_FALSE(parse_int("010", 0));
  EXPECT_FALSE(parse_int("1.5", 10));
  EXPECT_EQ(parse_float(" 1e3 "), 1000.0);
  EXPECT_EQ(parse_float(".5"), 0.5);
  EXPECT_EQ(parse_float("5."), 5.0);
  EXPECT_TRUE(std::isinf(*parse_float("-Infinity")));
  EXPECT_TRUE(std::isnan(*parse_float("nan")));
  EXPECT_FALSE(parse_float("1e"));
  EXPECT_FALSE(parse_float("0x10"));
  EXPECT_EQ(parse_float("1e400"), INFINITY);
}

}  // namespace
}  // namespace bunsen::text::jinja::py
