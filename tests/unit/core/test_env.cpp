// core/env.h: one parsing rule per kind of switch, against the real process environment.
#include <gtest/gtest.h>

#include <climits>
#include <cstdlib>

#include "core/env.h"

namespace bunsen {
namespace {

constexpr const char* kVar = "BUNSEN_TEST_ENV_SWITCH";

struct EnvTest : ::testing::Test {
  void TearDown() override { unsetenv(kVar); }
  void set(const char* v) { ASSERT_EQ(setenv(kVar, v, 1), 0); }
};

TEST_F(EnvTest, StrIsEmptyWhenUnset) {
  unsetenv(kVar);
  EXPECT_EQ(env_str(kVar), "");
  set("cluster");
  EXPECT_EQ(env_str(kVar), "cluster");
}

TEST_F(EnvTest, FlagFallsBackWhenUnsetOrEmptyAndOnlyZeroIsFalse) {
  unsetenv(kVar);
  EXPECT_TRUE(env_flag(kVar, true));
  EXPECT_FALSE(env_flag(kVar, false));
  set("");
  EXPECT_TRUE(env_flag(kVar, true));
  EXPECT_FALSE(env_flag(kVar, false));
  set("0");
  EXPECT_FALSE(env_flag(kVar, true));
  EXPECT_FALSE(env_flag(kVar, false));
  for (const char* on : {"1", "2", "yes", "00"}) {
    set(on);
    EXPECT_TRUE(env_flag(kVar, false)) << on;
    EXPECT_TRUE(env_flag(kVar, true)) << on;
  }
}

TEST_F(EnvTest, IntFallsBackUnlessTheWholeValueIsAnInteger) {
  unsetenv(kVar);
  EXPECT_EQ(env_int(kVar, -1), -1);
  for (const char* bad : {"", "x", "4x", " ", "1.5"}) {
    set(bad);
    EXPECT_EQ(env_int(kVar, 7), 7) << '"' << bad << '"';
  }
  set("0");
  EXPECT_EQ(env_int(kVar, 7), 0);
  set("16");
  EXPECT_EQ(env_int(kVar, 7), 16);
  set("-3");
  EXPECT_EQ(env_int(kVar, 7), -3);
  set("99999999999");
  EXPECT_EQ(env_int(kVar, 7), INT_MAX);
  set("-99999999999");
  EXPECT_EQ(env_int(kVar, 7), INT_MIN);
}

}  // namespace
}  // namespace bunsen
