// bunsen-specific properties of the Jinja engine that Python cannot check for us: bounded work (steps,
// recursion, output size, parse depth, value depth) ending in Error("template") instead of a hang or a
// stack overflow, thread-safe rendering of one Template, reference cycles released, raise_exception's
// message passed through verbatim, strftime_now. Expected values here are Python facts stated in comments.
#include <gtest/gtest.h>

#include <chrono>
#include <ctime>
#include <thread>

#include "jinja_test_util.h"
#include "text/jinja/json.h"

namespace bunsen::text::jinja::testing {
namespace {

// Renders and returns the error message; fails the test if it rendered.
std::string error_of(const std::string& src, const ojson& ctx = ojson::object(), const Limits& limits = {}) {
  std::string out = render_or_error(src, ctx, limits);
  EXPECT_EQ(out.rfind("ERROR: ", 0), 0u) << "rendered instead of failing: " << show(out.substr(0, 200));
  return out;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

TEST(JinjaLimits, StepLimitEndsHugeLoops) {
  const auto t0 = std::chrono::steady_clock::now();
  Limits l;
  l.max_steps = 2'000'000;
  std::string e = error_of("{% for i in range(100000) %}{% for j in range(100000) %}{{ j }}{% endfor %}{% endfor %}",
                           ojson::object(), l);
  EXPECT_NE(e.find("steps"), std::string::npos) << e;
  EXPECT_LT(seconds_since(t0), 10.0);
}

TEST(JinjaLimits, DefaultLimitsStopNestedRangesQuickly) {
  const auto t0 = std::chrono::steady_clock::now();
  error_of("{% for a in range(100000) %}{% for b in range(100000) %}{% for c in range(100000) %}{% endfor %}"
           "{% endfor %}{% endfor %}");
  EXPECT_LT(seconds_since(t0), 30.0);
}

TEST(JinjaLimits, RecursionIsBounded) {
  std::string e = error_of("{% macro r(k) %}{{ r(k + 1) }}{% endmacro %}{{ r(0) }}");
  EXPECT_NE(e.find("recursion"), std::string::npos) << e;
  error_of("{% for x in [1] recursive %}{{ loop([x]) }}{% endfor %}");
  error_of("{% macro a() %}{% call a() %}x{% endcall %}{% endmacro %}{{ a() }}");
}

TEST(JinjaLimits, OutputAndStringSizesAreBounded) {
  EXPECT_NE(error_of("{{ 'x' * 100000000 }}").find("bytes"), std::string::npos);
  error_of("{% set ns = namespace(s='xy') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}");
  error_of("{% set ns = namespace(s='xy') %}{% for i in range(64) %}{% set ns.s = ns.s + ns.s %}{% endfor %}");
  error_of("{% set ns = namespace(l=[1]) %}{% for i in range(64) %}{% set ns.l = ns.l + ns.l %}{% endfor %}");
  error_of("{% set ns = namespace(l=[1, 2]) %}{% for i in range(64) %}{% set ns.l = ns.l * 2 %}{% endfor %}");
  error_of("{% for i in range(100000) %}{{ 'y' * 1000 }}{% endfor %}");
  Limits small;
  small.max_output_bytes = 1000;
  error_of("{% for i in range(2000) %}x{% endfor %}", ojson::object(), small);
}

TEST(JinjaLimits, DeepSyntaxIsRejectedNotOverflowed) {
  error_of("{{ " + std::string(100000, '(') + "1" + std::string(100000, ')') + " }}");
  error_of("{{ " + std::string(100000, '[') + std::string(100000, ']') + " }}");
  error_of("{{ " + std::string(100000, '-') + "1 }}");
  std::string nots;
  for (int i = 0; i < 50000; ++i) nots += "not ";
  error_of("{{ " + nots + "1 }}");
  std::string chain = "{{ 1";
  for (int i = 0; i < 100000; ++i) chain += " + 1";
  error_of(chain + " }}");
  std::string filters = "{{ x";
  for (int i = 0; i < 100000; ++i) filters += "|trim";
  error_of(filters + " }}");
  std::string ifs;
  for (int i = 0; i < 20000; ++i) ifs += "{% if true %}";
  error_of(ifs);
  // A realistic nesting depth stays fine.
  EXPECT_EQ(render_or_error("{{ " + std::string(20, '(') + "1" + std::string(20, ')') + " }}", ojson::object()), "1");
}

TEST(JinjaLimits, DeepValuesAreRejected) {
  error_of("{% set ns = namespace(l=[]) %}{% for i in range(5000) %}{% set ns.l = [ns.l] %}{% endfor %}{{ ns.l }}");
  ojson deep = ojson::array();
  ojson* cur = &deep;
  for (int i = 0; i < 10000; ++i) {
    cur->push_back(ojson::array());
    cur = &(*cur)[0];
  }
  EXPECT_THROW(from_json(deep), Error);
}

TEST(JinjaLimits, SelfReferencesPrintLikePython) {
  // Python: repr of a namespace holding itself prints the inner one as {...}.
  EXPECT_EQ(render_or_error("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns }}", ojson::object()),
            "<Namespace {'me': <Namespace {...}>}>");
  // A macro stored in the scope it closes over, and a loop object kept after its loop: both freed.
  EXPECT_EQ(render_or_error("{% macro m() %}{{ m is defined }}{% endmacro %}{% set ns = namespace() %}"
                            "{% for x in [1] %}{% set ns.loop = loop %}{% endfor %}{{ m() }}{{ ns.loop.length }}",
                            ojson::object()),
            "True1");
}

TEST(JinjaEngine, RenderIsThreadSafe) {
  const Template t("{% for m in messages %}<{{ m.role }}>{{ m.content|trim|upper }}{{ loop.index }}{% endfor %}"
                   "{% set ns = namespace(n=0) %}{% for i in range(200) %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}");
  const ojson ctx = {{"messages", {{{"role", "user"}, {"content", " hi "}}, {{"role", "assistant"}, {"content", "yo"}}}}};
  const std::string want = "<user>HI1<assistant>YO219900";  // sum(range(200)) == 19900
  ASSERT_EQ(t.render_json(ctx), want);
  std::vector<std::thread> threads;
  std::atomic<int> bad{0};
  for (int k = 0; k < 8; ++k)
    threads.emplace_back([&] {
      for (int i = 0; i < 200; ++i)
        if (t.render_json(ctx) != want) ++bad;
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
}

TEST(JinjaEngine, RaiseExceptionMessageIsVerbatim) {
  try {
    Template("{{ raise_exception('Conversation roles must alternate user/assistant') }}").render_json(ojson::object());
    FAIL() << "no exception";
  } catch (const Error& e) {
    EXPECT_EQ(e.component(), "template");
    EXPECT_EQ(e.message(), "Conversation roles must alternate user/assistant");
  }
}

TEST(JinjaEngine, StrftimeNowUsesLocalTime) {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char want[16];
  std::strftime(want, sizeof want, "%Y", &tm);
  EXPECT_EQ(render_or_error("{{ strftime_now('%Y') }}", ojson::object()), want);
  error_of("{{ strftime_now(5) }}");
}

TEST(JinjaEngine, SyntaxErrorsNameTheLine) {
  std::string e = error_of("line1\n{{ ok }}\n{% if %}");
  EXPECT_NE(e.find("line 3"), std::string::npos) << e;
  EXPECT_NE(e.find("TemplateSyntaxError"), std::string::npos) << e;
}

TEST(JinjaEngine, ContextKeyOrderIsKept) {
  // Python dicts keep insertion order, and so does tojson/str of a context dict.
  const ojson ctx = ojson::parse(R"({"d": {"zeta": 1, "alpha": {"y": 2, "b": 3}}})");
  EXPECT_EQ(render_or_error("{{ d }}|{{ d|tojson }}", ctx),
            "{'zeta': 1, 'alpha': {'y': 2, 'b': 3}}|{\"zeta\": 1, \"alpha\": {\"y\": 2, \"b\": 3}}");
}

TEST(JinjaEngine, InvalidUtf8NeverCrashes) {
  const std::string bad = "\xff\xfe{{ '\xc3' ~ x }}\xe2\x82{% if \xf0 %}";
  render_or_error(bad, ojson::object());
  render_or_error(std::string("{{ '\xed\xa0\x80'|upper|length }}"), ojson::object());
  SUCCEED();
}

}  // namespace
}  // namespace bunsen::text::jinja::testing
