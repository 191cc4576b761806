// Decode micro-benchmark of the GEMV and the fused decode ops on the Llama-3.1-8B and Llama-3.2-1B shapes
// (bf16 weights and activations, m = 1 unless noted): each op alone (us, GB/s of weights + activations,
// % of the measured device-to-device copy rate), then a whole decode layer chain without attention
// (add_rms_norm, qkv, rope_kv_write, o, add_rms_norm, gate/up+SiLU, down; n_layers distinct weight sets,
// plus the final norm and lm_head) captured in one CUDA graph, as the runner replays decode steps.
// A measurement tool, not a speed assertion: runs only with BUNSEN_BENCH_GEMV=1 and checks only that the
// outputs are finite. Weight sets cycle so that no call reads weights still in the 60 MB L2. The Quant*
// cases do the same for MLX 4/8-bit group-64 weights (linear_q, the fused quantized q/k/v and gate/up, and
// the 8B decode chain on quantized weights).
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>

#include "graph_bench_util.h"
#include "kernels/cuda/quant_ops.h"

namespace bunsen::kernels::test {
namespace {

class FusedDecodeBench : public GraphBench {
 protected:
  void SetUp() override {
    GraphBench::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    copy_gbps_ = measure_copy();
  }

  double measure_copy() {
    const size_t bytes = size_t{2} << 30;
    cuda::DeviceBuffer a(bytes), b(bytes);
    const double us = time_eager_us(
        [&](int) { cudaMemcpyAsync(b.data(), a.data(), bytes, cudaMemcpyDeviceToDevice, (cudaStream_t)stream_); }, 5);
    const double gbps = 2.0 * bytes / us / 1e3;
    std::printf("[bench] d2d copy: %.0f GB/s (read + write): the ceiling below\n", gbps);
    return gbps;
  }

  void report(const std::string& what, double us, double bytes) {
    const double gbps = bytes / us / 1e3;
    std::printf("[bench] %-44s %9.2f us %6.0f GB/s %5.1f%%\n", what.c_str(), us, gbps, 100.0 * gbps / copy_gbps_);
  }

  static int copies_for(int64_t bytes) { return static_cast<int>(std::max<int64_t>(1, (512ll << 20) / bytes)); }

  struct ChainShape {
    const char* name;
    int64_t layers, d, q_dim, kv_dim, f, vocab, head_dim;
  };
  void decode_chain(const ChainShape& c);

  double copy_gbps_ = 1.0;
};

void expect_finite(const Tensor& t, const std::string& what) {
  OwnedTensor h = OwnedTensor::make(t.dtype, std::span<const int64_t>(t.shape, t.ndim));
  cuda::copy_to_host(h.tensor.data, t.data, t.nbytes());
  for (float v : values(h.tensor)) ASSERT_TRUE(std::isfinite(v)) << what;
}

TEST_F(FusedDecodeBench, GemvShapes) {
  struct Shape {
    int64_t n, k, m;
  };
  const Shape shapes[] = {{4096, 4096, 1},  {1024, 4096, 1}, {14336, 4096, 1}, {4096, 14336, 1},
                          {128256, 4096, 1}, {4096, 4096, 4}, {4096, 4096, 8},  {14336, 4096, 8},
                          {2048, 2048, 1},  {512, 2048, 1},  {8192, 2048, 1},  {2048, 8192, 1},
                          {128256, 2048, 1}};
  for (const Shape& s : shapes) {
    const int64_t bytes = s.n * s.k * 2;
    const int copies = copies_for(bytes);
    std::vector<BenchTensor> w;
    for (int c = 0; c < copies; ++c) w.push_back(BenchTensor::make(DType::kBF16, {s.n, s.k}));
    BenchTensor x = BenchTensor::make(DType::kBF16, {s.m, s.k}),
                out = BenchTensor::make(DType::kBF16, {s.m, s.n});
    for (int split : {0, 1, 2, 4, 8}) {  // 0: the shape's own choice, then each forced split
      cuda::set_gemv_split_for_testing(split);
      const double us = time_us([&](int i) { linear(ctx_, out.t, x.t, w[i % copies].t); });
      report(strfmt("linear n=%lld k=%lld m=%lld split %s", (long long)s.n, (long long)s.k, (long long)s.m,
                    split == 0 ? "auto" : std::to_string(split).c_str()),
             us, bytes + s.m * (s.k + s.n) * 2.0);
    }
    cuda::set_gemv_split_for_testing(0);
    expect_finite(out.t, "linear");
  }
}

TEST_F(FusedDecodeBench, FusedOps) {
  struct Model {
    const char* name;
    int64_t d, q_dim, kv_dim, f, heads, kv_heads, head_dim;
  };
  for (const Model& md : {Model{"8B", 4096, 4096, 1024, 14336, 32, 8, 128}, Model{"1B", 2048, 2048, 512, 8192, 32, 8, 64}}) {
    const int64_t d = md.d, qkv_bytes = (md.q_dim + 2 * md.kv_dim) * d * 2, gu_bytes = 2 * md.f * d * 2;
    BenchTensor x = BenchTensor::make(DType::kBF16, {1, d}),
                q = BenchTensor::make(DType::kBF16, {1, md.q_dim});
    BenchTensor k = BenchTensor::make(DType::kBF16, {1, md.kv_dim}),
                v = BenchTensor::make(DType::kBF16, {1, md.kv_dim});
    BenchTensor act = BenchTensor::make(DType::kBF16, {1, md.f});
    const int cq = copies_for(qkv_bytes), cg = copies_for(gu_bytes);
    std::vector<BenchTensor> wq, wk, wv, wg, wu;
    for (int c = 0; c < cq; ++c) {
      wq.push_back(BenchTensor::make(DType::kBF16, {md.q_dim, d}));
      wk.push_back(BenchTensor::make(DType::kBF16, {md.kv_dim, d}));
      wv.push_back(BenchTensor::make(DType::kBF16, {md.kv_dim, d}));
    }
    for (int c = 0; c < cg; ++c) {
      wg.push_back(BenchTensor::make(DType::kBF16, {md.f, d}));
      wu.push_back(BenchTensor::make(DType::kBF16, {md.f, d}));
    }
    const std::string n = md.name;
    report(n + " q,k,v: 3 linears", time_us([&](int i) {
             linear(ctx_, q.t, x.t, wq[i % cq].t);
             linear(ctx_, k.t, x.t, wk[i % cq].t);
             linear(ctx_, v.t, x.t, wv[i % cq].t);
           }),
           qkv_bytes);
    for (int split : {0, 1, 2, 4}) {  // 0: the shapes' own choice, then each forced split
      cuda::set_gemv_split_for_testing(split);
      const std::string sp = split == 0 ? " split auto" : " split " + std::to_string(split);
      report(n + " q,k,v: linear_multi" + sp, time_us([&](int i) {
               const LinearPart parts[] = {{q.t, wq[i % cq].t, {}}, {k.t, wk[i % cq].t, {}}, {v.t, wv[i % cq].t, {}}};
               linear_multi(ctx_, x.t, parts);
             }),
             qkv_bytes);
      report(n + " gate,up: linear_swiglu" + sp, time_us([&](int i) {
               linear_swiglu(ctx_, act.t, x.t, wg[i % cg].t, wu[i % cg].t);
             }),
             gu_bytes);
    }
    cuda::set_gemv_split_for_testing(0);
    expect_finite(act.t, "swiglu");
    BenchTensor res = BenchTensor::make(DType::kF32, {1, d}, 0), y = BenchTensor::make(DType::kBF16, {1, d}),
                nw = BenchTensor::make(DType::kBF16, {d});
    std::printf("[bench] %s rms_norm d=%lld: %.2f us, add_rms_norm: %.2f us\n", md.name, (long long)d,
                time_us([&](int) { rms_norm(ctx_, x.t, res.t, nw.t, 1e-5f); }),
                time_us([&](int) { add_rms_norm(ctx_, x.t, res.t, y.t, nw.t, 1e-5f); }));
    BenchTensor kc = BenchTensor::make(DType::kBF16, {1024, 16, md.kv_heads, md.head_dim}),
                vc = BenchTensor::make(DType::kBF16, {1024, 16, md.kv_heads, md.head_dim});
    OwnedTensor pos_h = OwnedTensor::make(DType::kI32, {1}), slot_h = OwnedTensor::make(DType::kI64, {1});
    pos_h.tensor.ptr<int32_t>()[0] = 1000;
    slot_h.tensor.ptr<int64_t>()[0] = 1000;
    DeviceTensor pos = DeviceTensor::upload(pos_h.tensor), slot = DeviceTensor::upload(slot_h.tensor);
    std::vector<float> inv_freq(static_cast<size_t>(md.head_dim / 2));
    for (size_t i = 0; i < inv_freq.size(); ++i) inv_freq[i] = std::pow(500000.0f, -2.0f * i / md.head_dim);
    const RopeParams rp{inv_freq.data(), static_cast<int>(md.head_dim), 1.0f};
    Tensor q3 = q.t.reshape({1, md.heads, md.head_dim}), k3 = k.t.reshape({1, md.kv_heads, md.head_dim});
    Tensor v3 = v.t.reshape({1, md.kv_heads, md.head_dim});
    const double unfused = time_us([&](int) {
      rope(ctx_, q3, pos.tensor, rp);
      rope(ctx_, k3, pos.tensor, rp);
      kv_write(ctx_, {kc.t, vc.t}, k3, v3, slot.tensor);
    });
    const double fused = time_us([&](int) { rope_kv_write(ctx_, q3, k3, v3, {kc.t, vc.t}, pos.tensor, slot.tensor, rp); });
    std::printf("[bench] %s rope,rope,kv_write: %.2f us; rope_kv_write: %.2f us\n", md.name, unfused, fused);
  }
}

// linear_q on the Llama-3.1-8B decode matrices (4/8 bits, group 64, m = 1 and 4): the tensor-core GEMV with
// its own k split and each forced one, then the CUDA-core kernel; bytes = codes + scales + biases + x + out.
TEST_F(FusedDecodeBench, QuantGemvShapes) {
  struct Shape {
    int64_t n, k;
  };
  const Shape shapes[] = {{4096, 4096}, {1024, 4096}, {14336, 4096}, {4096, 14336}, {128256, 4096}};
  for (int bits : {4, 8})
    for (const Shape& s : shapes) {
      const double wbytes = BenchQuant::bytes(s.n, s.k, bits);
      const int copies = copies_for(static_cast<int64_t>(wbytes));
      std::vector<BenchQuant> w;
      for (int c = 0; c < copies; ++c) w.push_back(BenchQuant::make(s.n, s.k, bits));
      for (int64_t m : {1, 4}) {
        BenchTensor x = BenchTensor::make(DType::kBF16, {m, s.k}),
                    out = BenchTensor::make(DType::kBF16, {m, s.n});
        auto run = [&](int i) { linear_q(ctx_, out.t, x.t, w[i % copies].w); };
        const double bytes = wbytes + m * (s.k + s.n) * 2.0;
        const std::string name = strfmt("q%d n=%lld k=%lld m=%lld", bits, (long long)s.n, (long long)s.k, (long long)m);
        for (int split : {0, 1, 2, 4, 8}) {
          cuda::set_linear_q_split_for_testing(split);
          report(name + " tc split " + (split == 0 ? std::string("auto") : std::to_string(split)), time_us(run), bytes);
        }
        cuda::set_linear_q_split_for_testing(0);
        cuda::set_linear_q_path_for_testing(cuda::LinearQPath::kGemvSimt);
        report(name + " cuda-core kernel", time_us(run), bytes);
        cuda::set_linear_q_path_for_testing(cuda::LinearQPath::kAuto);
        expect_finite(out.t, "linear_q");
      }
    }
}

// The fused quantized q/k/v (linear_q_multi) and gate/up + SiLU (linear_q_swiglu) launches of the 8B shapes
// against the unfused linear_q calls, m = 1.
TEST_F(FusedDecodeBench, QuantFusedOps) {
  const int64_t d = 4096, q_dim = 4096, kv_dim = 1024, f = 14336;
  for (int bits : {4, 8}) {
    const double qkv_bytes = BenchQuant::bytes(q_dim, d, bits) + 2 * BenchQuant::bytes(kv_dim, d, bits);
    const double gu_bytes = 2 * BenchQuant::bytes(f, d, bits);
    const int cq = copies_for(static_cast<int64_t>(qkv_bytes)), cg = copies_for(static_cast<int64_t>(gu_bytes));
    std::vector<BenchQuant> wq, wk, wv, wg, wu;
    for (int c = 0; c < cq; ++c) {
      wq.push_back(BenchQuant::make(q_dim, d, bits));
      wk.push_back(BenchQuant::make(kv_dim, d, bits));
      wv.push_back(BenchQuant::make(kv_dim, d, bits));
    }
    for (int c = 0; c < cg; ++c) {
      wg.push_back(BenchQuant::make(f, d, bits));
      wu.push_back(BenchQuant::make(f, d, bits));
    }
    BenchTensor x = BenchTensor::make(DType::kBF16, {1, d}), q = BenchTensor::make(DType::kBF16, {1, q_dim});
    BenchTensor k = BenchTensor::make(DType::kBF16, {1, kv_dim}),
                v = BenchTensor::make(DType::kBF16, {1, kv_dim});
    BenchTensor g = BenchTensor::make(DType::kBF16, {1, f}), u = BenchTensor::make(DType::kBF16, {1, f}),
                act = BenchTensor::make(DType::kBF16, {1, f});
    const std::string n = strfmt("8B q%d", bits);
    report(n + " q,k,v: 3 linear_q", time_us([&](int i) {
             linear_q(ctx_, q.t, x.t, wq[i % cq].w);
             linear_q(ctx_, k.t, x.t, wk[i % cq].w);
             linear_q(ctx_, v.t, x.t, wv[i % cq].w);
           }),
           qkv_bytes);
    report(n + " q,k,v: linear_q_multi", time_us([&](int i) {
             const QuantLinearPart parts[] = {{q.t, wq[i % cq].w, {}}, {k.t, wk[i % cq].w, {}}, {v.t, wv[i % cq].w, {}}};
             linear_q_multi(ctx_, x.t, parts);
           }),
           qkv_bytes);
    report(n + " gate,up: 2 linear_q + silu_mul", time_us([&](int i) {
             linear_q(ctx_, g.t, x.t, wg[i % cg].w);
             linear_q(ctx_, u.t, x.t, wu[i % cg].w);
             silu_mul(ctx_, act.t, g.t, u.t);
           }),
           gu_bytes);
    report(n + " gate,up: linear_q_swiglu", time_us([&](int i) {
             linear_q_swiglu(ctx_, act.t, x.t, wg[i % cg].w, wu[i % cg].w);
           }),
           gu_bytes);
    expect_finite(act.t, "linear_q_swiglu");
  }
}

// The Llama-3.1-8B decode chain without attention on 4/8-bit group-64 weights (fused q/k/v and gate/up
// launches, as LlamaLike runs them), captured in one graph: the tok/s ceiling the quantized GEMVs allow.
TEST_F(FusedDecodeBench, QuantDecodeChainGraph8B) {
  const int64_t layers = 32, d = 4096, q_dim = 4096, kv_dim = 1024, f = 14336, vocab = 128256;
  for (int bits : {4, 8}) {
    struct LayerW {
      BenchQuant q, k, v, o, g, u, down;
      BenchTensor n1, n2;
    };
    std::vector<LayerW> w;
    for (int64_t l = 0; l < layers; ++l)
      w.push_back({BenchQuant::make(q_dim, d, bits), BenchQuant::make(kv_dim, d, bits),
                   BenchQuant::make(kv_dim, d, bits), BenchQuant::make(d, q_dim, bits),
                   BenchQuant::make(f, d, bits), BenchQuant::make(f, d, bits), BenchQuant::make(d, f, bits),
                   BenchTensor::make(DType::kBF16, {d}), BenchTensor::make(DType::kBF16, {d})});
    BenchQuant head = BenchQuant::make(vocab, d, bits);
    BenchTensor fnorm = BenchTensor::make(DType::kBF16, {d});
    BenchTensor x = BenchTensor::make(DType::kF32, {1, d}, 0), h = BenchTensor::make(DType::kBF16, {1, d}),
                proj = BenchTensor::make(DType::kBF16, {1, d});
    BenchTensor q = BenchTensor::make(DType::kBF16, {1, q_dim}),
                k = BenchTensor::make(DType::kBF16, {1, kv_dim});
    BenchTensor v = BenchTensor::make(DType::kBF16, {1, kv_dim}),
                act = BenchTensor::make(DType::kBF16, {1, f});
    BenchTensor logits = BenchTensor::make(DType::kF32, {1, vocab});
    auto step = [&] {
      rms_norm(ctx_, h.t, x.t, w[0].n1.t, 1e-5f);
      for (int64_t l = 0; l < layers; ++l) {
        const QuantLinearPart qkv[] = {{q.t, w[l].q.w, {}}, {k.t, w[l].k.w, {}}, {v.t, w[l].v.w, {}}};
        linear_q_multi(ctx_, h.t, qkv);
        linear_q(ctx_, proj.t, q.t, w[l].o.w);
        add_rms_norm(ctx_, h.t, x.t, proj.t, w[l].n2.t, 1e-5f);
        linear_q_swiglu(ctx_, act.t, h.t, w[l].g.w, w[l].u.w);
        linear_q(ctx_, proj.t, act.t, w[l].down.w);
        add_rms_norm(ctx_, h.t, x.t, proj.t, l + 1 < layers ? w[l + 1].n1.t : fnorm.t, 1e-5f);
      }
      linear_q(ctx_, logits.t, h.t, head.w);
    };
    step();
    cuda::synchronize(stream_);
    cuda::graph_begin_capture(stream_);
    step();
    void* exec = cuda::graph_end_capture(stream_);
    const double us = time_eager_us([&](int) { cuda::graph_launch(exec, stream_); }, 20);
    cuda::graph_destroy(exec);
    const double bytes = layers * (BenchQuant::bytes(q_dim + 2 * kv_dim, d, bits) +
                                   BenchQuant::bytes(d, q_dim, bits) + 3 * BenchQuant::bytes(f, d, bits)) +
                         BenchQuant::bytes(vocab, d, bits);
    report(strfmt("8B q%d decode chain w/o attention (graph)", bits), us, bytes);
    std::printf("[bench] 8B q%d: %.1f us per token without attention -> %.0f tok/s ceiling before attention\n", bits,
                us, 1e6 / us);
    expect_finite(logits.t, "logits");
  }
}

// One model's decode chain without attention (the attention output is q itself), captured in one graph.
void FusedDecodeBench::decode_chain(const ChainShape& c) {
  const int64_t layers = c.layers, d = c.d, q_dim = c.q_dim, kv_dim = c.kv_dim, f = c.f, vocab = c.vocab,
                head_dim = c.head_dim;
  Context& ctx = ctx_;
  void* stream = stream_;
  struct LayerW {
    BenchTensor q, k, v, o, g, u, down, n1, n2;
  };
  std::vector<LayerW> w;
  for (int64_t l = 0; l < layers; ++l)
    w.push_back({BenchTensor::make(DType::kBF16, {q_dim, d}), BenchTensor::make(DType::kBF16, {kv_dim, d}),
                 BenchTensor::make(DType::kBF16, {kv_dim, d}), BenchTensor::make(DType::kBF16, {d, q_dim}),
                 BenchTensor::make(DType::kBF16, {f, d}), BenchTensor::make(DType::kBF16, {f, d}),
                 BenchTensor::make(DType::kBF16, {d, f}), BenchTensor::make(DType::kBF16, {d}),
                 BenchTensor::make(DType::kBF16, {d})});
  BenchTensor head = BenchTensor::make(DType::kBF16, {vocab, d}),
              fnorm = BenchTensor::make(DType::kBF16, {d});
  BenchTensor x = BenchTensor::make(DType::kF32, {1, d}, 0), h = BenchTensor::make(DType::kBF16, {1, d}),
              proj = BenchTensor::make(DType::kBF16, {1, d});
  BenchTensor q = BenchTensor::make(DType::kBF16, {1, q_dim}),
              k = BenchTensor::make(DType::kBF16, {1, kv_dim});
  BenchTensor v = BenchTensor::make(DType::kBF16, {1, kv_dim}), act = BenchTensor::make(DType::kBF16, {1, f});
  BenchTensor xo = BenchTensor::make(DType::kF32, {1, d}),
              logits = BenchTensor::make(DType::kF32, {1, vocab});
  const int64_t kvh = kv_dim / head_dim;
  BenchTensor kc = BenchTensor::make(DType::kBF16, {64, 16, kvh, head_dim}),
              vc = BenchTensor::make(DType::kBF16, {64, 16, kvh, head_dim});
  OwnedTensor pos_h = OwnedTensor::make(DType::kI32, {1}), slot_h = OwnedTensor::make(DType::kI64, {1});
  pos_h.tensor.ptr<int32_t>()[0] = 1000;
  slot_h.tensor.ptr<int64_t>()[0] = 1000;
  DeviceTensor pos = DeviceTensor::upload(pos_h.tensor), slot = DeviceTensor::upload(slot_h.tensor);
  std::vector<float> inv_freq(static_cast<size_t>(head_dim / 2));
  for (size_t i = 0; i < inv_freq.size(); ++i) inv_freq[i] = std::pow(500000.0f, -2.0f * i / head_dim);
  const RopeParams rp{inv_freq.data(), static_cast<int>(head_dim), 1.0f};
  auto step = [&] {
    rms_norm(ctx, h.t, x.t, w[0].n1.t, 1e-5f);
    for (int64_t l = 0; l < layers; ++l) {
      const LinearPart qkv[] = {{q.t, w[l].q.t, {}}, {k.t, w[l].k.t, {}}, {v.t, w[l].v.t, {}}};
      linear_multi(ctx, h.t, qkv);
      rope_kv_write(ctx, q.t.reshape({1, q_dim / head_dim, head_dim}), k.t.reshape({1, kvh, head_dim}),
                    v.t.reshape({1, kvh, head_dim}), {kc.t, vc.t}, pos.tensor, slot.tensor, rp);
      linear(ctx, proj.t, q.t, w[l].o.t);
      add_rms_norm(ctx, h.t, x.t, proj.t, w[l].n2.t, 1e-5f);
      linear_swiglu(ctx, act.t, h.t, w[l].g.t, w[l].u.t);
      linear(ctx, proj.t, act.t, w[l].down.t);
      add_rms_norm(ctx, h.t, x.t, proj.t, l + 1 < layers ? w[l + 1].n1.t : fnorm.t, 1e-5f);
    }
    linear(ctx, logits.t, h.t, head.t);
  };
  step();
  cuda::synchronize(stream);
  cuda::graph_begin_capture(stream);
  step();
  void* exec = cuda::graph_end_capture(stream);
  const double us = time_eager_us([&](int) { cuda::graph_launch(exec, stream); }, 20);
  cuda::graph_destroy(exec);
  const double bytes = layers * (static_cast<double>(q_dim + 2 * kv_dim) * d + q_dim * d + 3.0 * f * d) * 2 +
                       static_cast<double>(vocab) * d * 2;
  report(strfmt("%s decode chain w/o attention (graph)", c.name), us, bytes);
  std::printf("[bench] %s: %.1f us per token without attention -> %.0f tok/s ceiling before attention\n", c.name,
              us, 1e6 / us);
  expect_finite(logits.t, "logits");
}

TEST_F(FusedDecodeBench, DecodeChainGraph8B) { decode_chain({"8B", 32, 4096, 4096, 1024, 14336, 128256, 128}); }

TEST_F(FusedDecodeBench, DecodeChainGraph1B) { decode_chain({"1B", 16, 2048, 2048, 512, 8192, 128256, 64}); }

}  // namespace
}  // namespace bunsen::kernels::test
