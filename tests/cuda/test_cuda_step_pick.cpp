// Runner::step_pick on CUDA (the serving engine's device sampling): see tests/unit/engine/step_pick_check.h.
// Here the argmax and sample kernels pick the device rows and the host rows are copied back from the device;
// reserve_sampling sized the scratch the sample launches take. Skips without a GPU.
#include "../unit/engine/step_pick_check.h"
#include "cuda_test_util.h"
#include "engine_cuda_util.h"

namespace bunsen::golden {
namespace {

using kernels::test::CudaTest;

TEST_F(CudaTest, StepPickTakesEveryRowAsTheHostDoesFromTheSameLogits) {
  auto m = load_cuda("llama3");
  engine::RunnerOptions ro;
  ro.max_context = 64;
  ro.max_tokens_per_step = 128;
  ro.max_seqs = 7;
  ro.max_logit_rows = 7;
  ro.block_size = 4;
  engine::Runner runner(*m, ro);
  runner.reserve_sampling(7);  // the scratch 7 sampled rows take (4-byte key + 4-byte mass per logit)
  EXPECT_GE(kernels::scratch_capacity(runner.context()), static_cast<size_t>(7 * m->config().vocab_size) * 8);
  engine::test::expect_step_pick_matches_step(runner);
}

}  // namespace
}  // namespace bunsen::golden
