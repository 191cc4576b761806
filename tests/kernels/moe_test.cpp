// MoE ops on the CPU: moe_route against routing computed here (double softmax/sigmoid, a stable sort by
// score), incl. ties, NaN, renormalization, scaling and per-expert scale; moe_experts against ref:: and
// against a dense computation written here, at odd sizes, every weight dtype, MLX-quantized experts,
// both activations, shared and unused experts; batch invariance; and the argument errors.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "kernels/ref/ref_ops.h"
#include "moe_test_util.h"

namespace bunsen::kernels::test {
namespace {

// Expected routing of one row: indices sorted by score descending, ties to the lower index.
void expected_route(const float* logits, int64_t n_experts, const MoeRouteParams& p, const float* expert_scale,
                    std::vector<int32_t>& ids, std::vector<double>& w) {
  std::vector<double> s(static_cast<size_t>(n_experts));
  double mx = -INFINITY, sum = 0;
  for (int64_t e = 0; e < n_experts; ++e) mx = std::max(mx, double(logits[e]));
  for (int64_t e = 0; e < n_experts; ++e)
    sum += s[e] = p.scoring == MoeScoring::kSoftmax ? std::exp(double(logits[e]) - mx) : 1 / (1 + std::exp(-double(logits[e])));
  if (p.scoring == MoeScoring::kSoftmax)
    for (double& v : s) v /= sum;
  std::vector<int32_t> order(static_cast<size_t>(n_experts));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return s[a] > s[b]; });
  ids.assign(order.begin(), order.begin() + p.top_k);
  double total = 0;
  w.clear();
  for (int32_t e : ids) total += s[e], w.push_back(s[e]);
  for (size_t j = 0; j < w.size(); ++j) {
    if (p.norm_topk) w[j] /= total;
    w[j] *= p.scale;
    if (expert_scale) w[j] *= expert_scale[ids[j]];
  }
}

TEST(MoeRoute, MatchesSortedScores) {
  Context ctx;
  std::mt19937 rng(901);
  for (int64_t n_experts : {1, 5, 8, 33, 128})
    for (int k : {1, 2, 3, 8})
      for (MoeScoring sc : {MoeScoring::kSoftmax, MoeScoring::kSigmoid})
        for (bool norm : {false, true}) {
          if (k > n_experts) continue;
          const int64_t n = 7;
          OwnedTensor logits = random_tensor(DType::kF32, {n, n_experts}, rng, -4.0f, 4.0f);
          OwnedTensor es = random_tensor(DType::kF32, {n_experts}, rng, 0.5f, 2.0f);
          MoeRouteParams p;
          p.top_k = k, p.scoring = sc, p.norm_topk = norm, p.scale = norm ? 1.0f : 2.5f;
          if (n_experts == 8) p.expert_scale = es.tensor;
          OwnedTensor ids = OwnedTensor::make(DType::kI32, {n, k}), w = OwnedTensor::make(DType::kF32, {n, k});
          moe_route(ctx, ids.tensor, w.tensor, logits.tensor, p);
          for (int64_t t = 0; t < n; ++t) {
            std::vector<int32_t> want_ids;
            std::vector<double> want_w;
            expected_route(logits.tensor.ptr<float>() + t * n_experts, n_experts, p,
                           p.expert_scale.empty() ? nullptr : es.tensor.ptr<float>(), want_ids, want_w);
            for (int j = 0; j < k; ++j) {
              EXPECT_EQ(ids.tensor.ptr<int32_t>()[t * k + j], want_ids[j]) << n_experts << " k " << k << " t " << t;
              EXPECT_NEAR(w.tensor.ptr<float>()[t * k + j], want_w[j], 1e-5 * std::max(1.0, want_w[j]));
            }
          }
        }
}

TEST(MoeRoute, TiesGoToTheLowerIndexAndNanNeverWins) {
  Context ctx;
  const int64_t e = 6;
  OwnedTensor logits = OwnedTensor::make(DType::kF32, {2, e});
  float* l = logits.tensor.ptr<float>();
  for (int i = 0; i < e; ++i) l[i] = 1.0f;                        // row 0: all equal
  const float row1[e] = {NAN, 0.5f, 3.0f, NAN, 3.0f, -1.0f};      // row 1: NaN and a tie
  std::memcpy(l + e, row1, sizeof(row1));
  MoeRouteParams p;
  p.top_k = 3, p.scoring = MoeScoring::kSigmoid, p.norm_topk = true;
  OwnedTensor ids = OwnedTensor::make(DType::kI32, {2, 3}), w = OwnedTensor::make(DType::kF32, {2, 3});
  moe_route(ctx, ids.tensor, w.tensor, logits.tensor, p);
  const int32_t* id = ids.tensor.ptr<int32_t>();
  EXPECT_EQ(std::vector<int32_t>(id, id + 3), (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(std::vector<int32_t>(id + 3, id + 6), (std::vector<int32_t>{2, 4, 1}));
  for (int j = 0; j < 3; ++j) EXPECT_NEAR(w.tensor.ptr<float>()[j], 1.0f / 3.0f, 1e-6f);
}

// out[t] = sum_j w[t, j] * down_e(act(gate_e x) * up_e x), with the expert matrices read here as f32.
std::vector<double> dense_expected(const Tensor& x, const Routing& r, const ExpertSet& s) {
  const int64_t n = x.shape[0], d = x.shape[1], k = r.ids.tensor.shape[1], f = s.gate.view.rows;
  std::vector<double> out(static_cast<size_t>(n * d), 0.0);
  auto w_at = [](const ExpertProj& p, int64_t e, int64_t i, int64_t c) {
    return double(load_f(p.w.tensor.data, p.w.tensor.dtype, (e * p.view.rows + i) * p.view.cols + c));
  };
  for (int64_t t = 0; t < n; ++t)
    for (int64_t j = 0; j < k; ++j) {
      const int32_t e = r.ids.tensor.ptr<int32_t>()[t * k + j];
      std::vector<double> a(static_cast<size_t>(f));
      for (int64_t i = 0; i < f; ++i) {
        double g = 0, u = 0;
        for (int64_t c = 0; c < d; ++c) {
          g += w_at(s.gate, e, i, c) * x.ptr<float>()[t * d + c];
          u += w_at(s.up, e, i, c) * x.ptr<float>()[t * d + c];
        }
        a[i] = g / (1 + std::exp(-g)) * u;
      }
      for (int64_t c = 0; c < d; ++c) {
        double y = 0;
        for (int64_t i = 0; i < f; ++i) y += w_at(s.down, e, c, i) * a[i];
        out[t * d + c] += r.weights.tensor.ptr<float>()[t * k + j] * y;
      }
    }
  return out;
}

TEST(MoeExperts, RefMatchesADenseComputation) {
  std::mt19937 rng(902);
  const int64_t n = 5, d = 24, f = 13, e = 7, k = 3;
  ExpertSet s = make_experts(e, d, f, DType::kBF16, 0, 0, rng);
  OwnedTensor x = random_tensor(DType::kF32, {n, d}, rng);
  Routing r = make_routing(n, k, 4, rng);
  OwnedTensor out = random_tensor(DType::kF32, {n, d}, rng);
  ref::moe_experts(out.tensor, x.tensor, r.ids.tensor, r.weights.tensor, s.view());
  const std::vector<double> want = dense_expected(x.tensor, r, s);
  expect_close(values(out.tensor), std::vector<float>(want.begin(), want.end()), 1e-5f, "ref vs dense");
}

struct Case {
  int64_t n, d, f, e, k, used;
  int bits, group;
};

TEST(MoeExperts, CpuMatchesRef) {
  Context ctx;
  std::mt19937 rng(903);
  const Case cases[] = {{1, 64, 32, 8, 2, 8, 0, 0},   {3, 37, 19, 5, 3, 5, 0, 0},   {9, 64, 24, 6, 3, 4, 0, 0},
                        {17, 33, 45, 16, 4, 3 + 4, 0, 0}, {4, 64, 96, 8, 2, 3, 4, 32}, {6, 128, 64, 4, 4, 4, 3, 64},
                        {5, 96, 32, 6, 2, 6, 8, 32}};
  for (const Case& c : cases)
    for (DType dt : kWeightDtypes)
      for (MoeActivation act : {MoeActivation::kSilu, MoeActivation::kGeluTanh}) {
        if (c.bits && dt == DType::kF32) continue;
        for_each_isa([&](cpu::Isa) {
          ExpertSet s = make_experts(c.e, c.d, c.f, dt, c.bits, c.group, rng, act);
          OwnedTensor x = random_tensor(DType::kF32, {c.n, c.d}, rng);
          Routing r = make_routing(c.n, c.k, c.used, rng);
          OwnedTensor got = random_tensor(DType::kF32, {c.n, c.d}, rng), want = clone(got.tensor);
          moe_experts(ctx, got.tensor, x.tensor, r.ids.tensor, r.weights.tensor, s.view());
          ref::moe_experts(want.tensor, x.tensor, r.ids.tensor, r.weights.tensor, s.view());
          expect_close(got.tensor, want.tensor, 2e-6f,
                       strfmt("n %lld e %lld k %lld bits %d %s", (long long)c.n, (long long)c.e, (long long)c.k,
                              c.bits, dtype_name(dt)));
        });
      }
}

TEST(MoeExperts, ATokensResultDoesNotDependOnTheBatch) {
  Context ctx;
  std::mt19937 rng(904);
  for (int bits : {0, 4})
    for_each_isa([&](cpu::Isa) {
      const int64_t n = 11, d = 64, f = 32, e = 6, k = 2;
      ExpertSet s = make_experts(e, d, f, DType::kBF16, bits, 32, rng);
      OwnedTensor x = random_tensor(DType::kF32, {n, d}, rng);
      Routing r = make_routing(n, k, e, rng);
      OwnedTensor all = OwnedTensor::make(DType::kF32, {n, d});
      moe_experts(ctx, all.tensor, x.tensor, r.ids.tensor, r.weights.tensor, s.view());
      for (int64_t t : {0, 5, 10}) {
        OwnedTensor one = OwnedTensor::make(DType::kF32, {1, d});
        moe_experts(ctx, one.tensor, x.tensor.slice(0, t, t + 1), r.ids.tensor.slice(0, t, t + 1),
                    r.weights.tensor.slice(0, t, t + 1), s.view());
        EXPECT_EQ(std::memcmp(one.tensor.data, all.tensor.row_ptr(t), d * sizeof(float)), 0) << "token " << t;
      }
    });
}

TEST(MoeOps, RejectBadArguments) {
  Context ctx;
  std::mt19937 rng(905);
  ExpertSet s = make_experts(4, 32, 16, DType::kBF16, 0, 0, rng);
  OwnedTensor x = random_tensor(DType::kF32, {2, 32}, rng), out = OwnedTensor::make(DType::kF32, {2, 32});
  Routing r = make_routing(2, 2, 4, rng);
  r.ids.tensor.ptr<int32_t>()[3] = 4;
  expect_kernel_error([&] { moe_experts(ctx, out.tensor, x.tensor, r.ids.tensor, r.weights.tensor, s.view()); },
                      {"moe_experts", "outside the 4 experts"});
  r.ids.tensor.ptr<int32_t>()[3] = 1;
  OwnedTensor narrow = OwnedTensor::make(DType::kF32, {2, 31});
  expect_kernel_error([&] { moe_experts(ctx, narrow.tensor, x.tensor, r.ids.tensor, r.weights.tensor, s.view()); },
                      {"moe_experts", "out"});
  MoeExperts bad = s.view();
  bad.down.cols = 15;
  expect_kernel_error([&] { moe_experts(ctx, out.tensor, x.tensor, r.ids.tensor, r.weights.tensor, bad); },
                      {"moe_experts", "down"});
  OwnedTensor logits = random_tensor(DType::kF32, {2, 4}, rng);
  MoeRouteParams p;
  p.top_k = 5;
  OwnedTensor ids5 = OwnedTensor::make(DType::kI32, {2, 5}), w5 = OwnedTensor::make(DType::kF32, {2, 5});
  expect_kernel_error([&] { moe_route(ctx, ids5.tensor, w5.tensor, logits.tensor, p); }, {"moe_route", "top_k 5"});
  p.top_k = 2;
  expect_kernel_error([&] { moe_route(ctx, ids5.tensor, r.weights.tensor, logits.tensor, p); },
                      {"moe_route", "ids"});
}

}  // namespace
}  // namespace bunsen::kernels::test
