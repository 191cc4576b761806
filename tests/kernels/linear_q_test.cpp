// Quantized ops (MLX affine): dequantize and embedding_q bit for bit against values computed here from the
// codes (packed by this file's own bit-by-bit packer), linear_q against ref::linear on the dequantized
// matrix (1e-5 relative; bit for bit at the scalar and AVX2 levels, where the sum orders coincide), batch
// invariance for every m from 1 to 9, every bits × group size, odd n, strided x/out, row slices, and errors.
#include "kernel_test_util.h"
#include "kernels/ref/ref_ops.h"

namespace bunsen::kernels::test {
namespace {

constexpr int kBits[] = {2, 3, 4, 5, 6, 8};
constexpr int kGroups[] = {32, 64, 128};

// A quantized matrix built from known codes, with its storage.
struct QuantFixture {
  OwnedTensor packed, scales, biases;
  std::vector<uint8_t> codes;  // [n, k]
  QuantWeight w;
  int64_t n = 0, k = 0;
};

// Packs codes bit by bit: bit b of code c of a row is bit (c * bits + b) of the row's little-endian stream.
void pack_bitwise(const uint8_t* codes, int64_t k, int bits, uint32_t* words) {
  for (int64_t c = 0; c < k; ++c)
    for (int b = 0; b < bits; ++b)
      if ((codes[c] >> b) & 1) {
        const int64_t at = c * bits + b;
        words[at / 32] |= 1u << (at % 32);
      }
}

QuantFixture make_quant(int64_t n, int64_t k, int bits, int group, DType sb, std::mt19937& rng) {
  QuantFixture f;
  f.n = n;
  f.k = k;
  const int64_t words = k * bits / 32, groups = k / group;
  f.packed = OwnedTensor::make(DType::kU32, {n, words});
  std::memset(f.packed.tensor.data, 0, f.packed.tensor.nbytes());
  std::uniform_int_distribution<int> code(0, (1 << bits) - 1);
  f.codes.resize(static_cast<size_t>(n * k));
  for (auto& c : f.codes) c = static_cast<uint8_t>(code(rng));
  for (int64_t r = 0; r < n; ++r)
    pack_bitwise(f.codes.data() + r * k, k, bits, f.packed.tensor.ptr<uint32_t>() + r * words);
  f.scales = random_tensor(sb, {n, groups}, rng, 0.001f, 0.05f);
  f.biases = random_tensor(sb, {n, groups}, rng, -0.5f, 0.5f);
  f.w = QuantWeight{f.packed.tensor, f.scales.tensor, f.biases.tensor, bits, group};
  return f;
}

// The dequantized matrix from the known codes: fmaf(scale, code, bias).
OwnedTensor expected_dequant(const QuantFixture& f) {
  OwnedTensor out = OwnedTensor::make(DType::kF32, {f.n, f.k});
  const std::vector<float> s = values(f.scales.tensor), b = values(f.biases.tensor);
  const int64_t groups = f.k / f.w.group_size;
  for (int64_t r = 0; r < f.n; ++r)
    for (int64_t c = 0; c < f.k; ++c) {
      const size_t g = static_cast<size_t>(r * groups + c / f.w.group_size);
      out.tensor.ptr<float>()[r * f.k + c] =
          std::fma(s[g], static_cast<float>(f.codes[static_cast<size_t>(r * f.k + c)]), b[g]);
    }
  return out;
}

void expect_bits_equal(const Tensor& got, const Tensor& want, const std::string& what) {
  const std::vector<float> g = values(got), w = values(want);
  ASSERT_EQ(g.size(), w.size()) << what;
  for (size_t i = 0; i < g.size(); ++i)
    ASSERT_EQ(std::memcmp(&g[i], &w[i], 4), 0) << what << " at " << i << ": " << g[i] << " vs " << w[i];
}

TEST(QuantDequantize, BitExactForEveryBitsGroupAndScaleDtype) {
  ThreadPool pool(3);
  Context ctx{&pool};
  std::mt19937 rng(7);
  for (int bits : kBits)
    for (int group : kGroups)
      for (DType sb : kWeightDtypes) {
        QuantFixture f = make_quant(5, group * 3, bits, group, sb, rng);
        const OwnedTensor want = expected_dequant(f);
        OwnedTensor got = OwnedTensor::make(DType::kF32, {f.n, f.k});
        OwnedTensor got_ref = OwnedTensor::make(DType::kF32, {f.n, f.k});
        const std::string what = strfmt("bits=%d group=%d %s", bits, group, dtype_name(sb));
        dequantize(ctx, got.tensor, f.w);
        ref::dequantize(got_ref.tensor, f.w);
        expect_bits_equal(got.tensor, want.tensor, "cpu " + what);
        expect_bits_equal(got_ref.tensor, want.tensor, "ref " + what);
      }
}

TEST(QuantEmbedding, RowsEqualTheDequantizedTableTimesScale) {
  ThreadPool pool(2);
  Context ctx{&pool};
  std::mt19937 rng(8);
  for (int bits : kBits) {
    QuantFixture f = make_quant(11, 96, bits, 32, DType::kBF16, rng);
    const OwnedTensor table = expected_dequant(f);
    const int32_t id_vals[] = {3, 0, 10, 3, 7};
    OwnedTensor ids = OwnedTensor::make(DType::kI32, {5});
    std::memcpy(ids.tensor.data, id_vals, sizeof(id_vals));
    OwnedTensor got = OwnedTensor::make(DType::kF32, {5, 96}), want = OwnedTensor::make(DType::kF32, {5, 96});
    embedding_q(ctx, got.tensor, f.w, ids.tensor, 1.5f);
    ref::embedding(want.tensor, table.tensor, ids.tensor, 1.5f);
    expect_bits_equal(got.tensor, want.tensor, strfmt("embedding_q bits=%d", bits));
    ref::embedding_q(got.tensor, f.w, ids.tensor, 1.5f);
    expect_bits_equal(got.tensor, want.tensor, strfmt("ref::embedding_q bits=%d", bits));
  }
}

struct Case {
  int64_t m, n, k;
  int bits, group;
};

// cpu::linear_q on (possibly strided) x/out against ref::linear on the dequantized matrix; at the scalar
// and AVX2 levels (and for 4/8-bit at the AVX-512 level) also bit for bit against cpu::linear on it.
void check_linear_q(ThreadPool& pool, cpu::Isa isa, const Case& c, DType sb, bool strided, bool with_bias,
                    std::mt19937& rng) {
  const int64_t pad = strided ? 3 : 0;
  QuantFixture f = make_quant(c.n, c.k, c.bits, c.group, sb, rng);
  const OwnedTensor wd = expected_dequant(f);
  OwnedTensor x_full = random_tensor(DType::kF32, {c.m, c.k + pad}, rng);
  OwnedTensor out_full = random_tensor(DType::kF32, {c.m, c.n + pad}, rng);
  OwnedTensor bias = random_tensor(DType::kBF16, {c.n}, rng);
  OwnedTensor want = OwnedTensor::make(DType::kF32, {c.m, c.n}),
              same = OwnedTensor::make(DType::kF32, {c.m, c.n});
  const Tensor x = x_full.tensor.slice(1, pad, pad + c.k), got = out_full.tensor.slice(1, 0, c.n);
  const Tensor b = with_bias ? bias.tensor : Tensor{};
  const std::string what = strfmt("m=%lld n=%lld k=%lld bits=%d group=%d %s", (long long)c.m, (long long)c.n,
                                  (long long)c.k, c.bits, c.group, dtype_name(sb));
  cpu::linear_q(pool, got, x, f.w, b);
  ref::linear(want.tensor, x, wd.tensor, b);
  expect_close(got, want.tensor, 1e-5f, "linear_q vs ref " + what);
  if (isa != cpu::Isa::kAvx512 || c.bits == 4 || c.bits == 8) {  // AVX-512 has 4/8-bit kernels of its own
    cpu::linear(pool, same.tensor, x, wd.tensor, b);
    expect_bits_equal(got, same.tensor, "linear_q vs linear(dequantized) " + what);
  }
  ref::linear_q(same.tensor, x, f.w, b);  // the reference pair sums in one order: equal bits
  expect_bits_equal(same.tensor, want.tensor, "ref::linear_q vs ref::linear " + what);
}

TEST(LinearQ, EveryRowCountFrom1To9AtOddSizes) {
  ThreadPool pool(3);
  std::mt19937 rng(9);
  for_each_isa([&](cpu::Isa isa) {
    for (int64_t m = 1; m <= 9; ++m)
      for (const Case& c :
           {Case{m, 37, 64 * 3, 4, 64}, Case{m, 19, 32 * 5, 3, 32}, Case{m, 33, 128 * 3, 8, 128},
            Case{m, 5, 96, 5, 32}, Case{m, 23, 192, 6, 64}, Case{m, 41, 128, 2, 128},
            Case{m, 13, 32 * 37, 4, 32}})  // 37 groups: the AVX-512 4-bit kernel stages 16 at a time
        check_linear_q(pool, isa, c, m % 3 == 0 ? DType::kF32 : DType::kBF16, m % 2 == 0, m % 4 != 1, rng);
  });
}

TEST(LinearQ, EveryBitsGroupAndScaleDtype) {
  ThreadPool pool(2);
  std::mt19937 rng(10);
  for_each_isa([&](cpu::Isa isa) {
    for (int bits : kBits)
      for (int group : kGroups)
        for (DType sb : kWeightDtypes)
          check_linear_q(pool, isa, {3, 17, group * 2, bits, group}, sb, true, true, rng);
  });
}

// Row i of an m-row call equals, bit for bit, the same row computed alone (any thread count).
TEST(LinearQ, BatchInvariantForEveryM) {
  std::mt19937 rng(11);
  for_each_isa([&](cpu::Isa) {
    for (int threads : {1, 3}) {
      ThreadPool pool(threads);
      for (int bits : {3, 4, 8}) {
        QuantFixture f = make_quant(75, 256, bits, 64, DType::kBF16, rng);
        OwnedTensor x = random_tensor(DType::kF32, {9, 256}, rng);
        OwnedTensor alone = OwnedTensor::make(DType::kF32, {9, 75});
        for (int64_t i = 0; i < 9; ++i)
          cpu::linear_q(pool, alone.tensor.slice(0, i, i + 1), x.tensor.slice(0, i, i + 1), f.w, {});
        for (int64_t m = 1; m <= 9; ++m) {
          OwnedTensor got = OwnedTensor::make(DType::kF32, {m, 75});
          cpu::linear_q(pool, got.tensor, x.tensor.slice(0, 0, m), f.w, {});
          expect_bits_equal(got.tensor, alone.tensor.slice(0, 0, m),
                            strfmt("m=%lld bits=%d threads=%d", (long long)m, bits, threads));
        }
      }
    }
  });
}

TEST(LinearQ, RowSlicesActLikeTheirRows) {
  ThreadPool pool(2);
  Context ctx{&pool};
  std::mt19937 rng(12);
  QuantFixture f = make_quant(40, 128, 4, 32, DType::kF16, rng);
  OwnedTensor x = random_tensor(DType::kF32, {3, 128}, rng);
  OwnedTensor full = OwnedTensor::make(DType::kF32, {3, 40}), part = OwnedTensor::make(DType::kF32, {3, 15});
  linear_q(ctx, full.tensor, x.tensor, f.w);
  linear_q(ctx, part.tensor, x.tensor, f.w.slice_rows(20, 35));
  expect_bits_equal(part.tensor, full.tensor.slice(1, 20, 35), "slice_rows(20, 35)");
}

TEST(LinearQ, MalformedWeightsAreErrors) {
  Context ctx;
  std::mt19937 rng(13);
  QuantFixture f = make_quant(8, 64, 4, 32, DType::kBF16, rng);
  OwnedTensor x = random_tensor(DType::kF32, {2, 64}, rng), out = OwnedTensor::make(DType::kF32, {2, 8});
  QuantWeight bad = f.w;
  bad.bits = 7;
  expect_kernel_error([&] { linear_q(ctx, out.tensor, x.tensor, bad); }, {"linear_q", "bits=7"});
  bad = f.w;
  bad.group_size = 48;
  expect_kernel_error([&] { linear_q(ctx, out.tensor, x.tensor, bad); }, {"linear_q", "group_size=48"});
  bad = f.w;
  bad.scales = f.scales.tensor.slice(1, 0, 1);
  expect_kernel_error([&] { linear_q(ctx, out.tensor, x.tensor, bad); }, {"w.scales", "must be [8, 2]"});
  bad = f.w;
  bad.biases = f.scales.tensor.slice(0, 0, 7);
  expect_kernel_error([&] { linear_q(ctx, out.tensor, x.tensor, bad); }, {"w.biases"});
  bad = f.w;
  bad.packed.dtype = DType::kI32;
  expect_kernel_error([&] { linear_q(ctx, out.tensor, x.tensor, bad); }, {"w.packed", "u32"});
  bad = f.w;
  bad.packed = f.packed.tensor.slice(1, 0, 6);  // 48 codes: not whole groups of 32
  expect_kernel_error([&] { linear_q(ctx, out.tensor, x.tensor, bad); }, {"whole groups"});
  OwnedTensor x_wide = random_tensor(DType::kF32, {2, 96}, rng);
  expect_kernel_error([&] { linear_q(ctx, out.tensor, x_wide.tensor, f.w); }, {"disagree on k"});
  bad = f.w;
  bad.packed.device = Device::cuda(0);  // a CUDA weight with CPU activations
  expect_kernel_error([&] { linear_q(ctx, out.tensor, x.tensor, bad); }, {"linear_q", "different devices"});
  OwnedTensor ids = OwnedTensor::make(DType::kI32, {2});
  ids.tensor.ptr<int32_t>()[0] = 1;
  ids.tensor.ptr<int32_t>()[1] = 8;
  expect_kernel_error([&] { embedding_q(ctx, out.tensor.slice(1, 0, 8), f.w, ids.tensor); }, {"embedding_q"});
  OwnedTensor emb = OwnedTensor::make(DType::kF32, {2, 64});
  expect_kernel_error([&] { embedding_q(ctx, emb.tensor, f.w, ids.tensor); }, {"id 8 at 1 is out of range"});
}

}  // namespace
}  // namespace bunsen::kernels::test
