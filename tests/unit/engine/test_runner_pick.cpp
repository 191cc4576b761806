// Runner::step_pick on the CPU (kernels::argmax / sample's reference pick the runner-side rows; host rows are
// packed within the host logits): see step_pick_check.h.
#include "engine_test_util.h"
#include "step_pick_check.h"

namespace bunsen::engine::test {
namespace {

TEST(Runner, StepPickTakesEveryRowAsTheHostDoesFromTheSameLogits) {
  auto m = tiny_model();
  RunnerOptions ro = runner_opts(7, 128);
  Runner runner(*m, ro, cpu_ctx());
  expect_step_pick_matches_step(runner);
}

}  // namespace
}  // namespace bunsen::engine::test
