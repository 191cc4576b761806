// Synthetic weight generator (spec in synthetic.h; the Python twin is scripts/golden/synth.py).
// Not a random-number library for sampling (see sampling/). Invariants: every value is a pure function of
// (name, shape, seed, element index), independent of thread count and dtype; arithmetic that must match
// numpy's float32 is done in double and rounded once to f32 (exact product / innocuous double rounding), so
// the result cannot depend on FMA contraction.
#include "model/synthetic.h"

#include <cmath>
#include <cstring>

#include "core/status.h"
#include "core/thread_pool.h"

namespace bunsen::model {
namespace {

constexpr uint64_t kFnvPrime = 0x100000001b3ull;
constexpr float kF16MinNormal = 6.103515625e-05f;  // 2^-14
constexpr int64_t kGrain = 1 << 15;

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

float inv_sqrt_f32(int64_t n, double numerator) {
  return static_cast<float>(numerator / std::sqrt(static_cast<double>(n)));
}

// Fills dst[begin, end) (element type T) through `store`.
template <typename T, typename Store>
void fill_range(T* dst, uint64_t key, SyntheticScale s, int64_t begin, int64_t end, Store store) {
  for (int64_t i = begin; i < end; ++i) dst[i] = store(synthetic_value(key, static_cast<uint64_t>(i), s));
}

}  // namespace

uint64_t fnv1a64_bytes(const void* data, size_t n, uint64_t h) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= kFnvPrime;
  }
  return h;
}

uint64_t fnv1a64(std::string_view s) { return fnv1a64_bytes(s.data(), s.size()); }

uint64_t splitmix64(uint64_t x) {
  uint64_t z = x + 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

SyntheticScale synthetic_scale(std::string_view name, std::span<const int64_t> shape) {
  if (name.find("norm") != std::string_view::npos && ends_with(name, ".weight")) return {0.25f, 1.0f};
  if (name.find("layer_scalar") != std::string_view::npos) return {0.25f, 1.0f};  // Gemma 4: multiplies a layer
  if (ends_with(name, ".router.scale")) return {0.25f, 1.0f};  // Gemma 4: multiplies the router input
  if (ends_with(name, ".bias")) return {0.25f, 0.0f};
  if (name.find("embed_tokens") != std::string_view::npos) return {1.0f, 0.0f};
  if (shape.empty()) return {1.0f, 0.0f};
  check(shape.back() > 0, "synthetic", strfmt("tensor '%.*s' has an empty last dim", int(name.size()), name.data()));
  if (name == "lm_head.weight") return {inv_sqrt_f32(shape.back(), 4.0), 0.0f};
  // Gemma 4 routes on rms_norm(x) * d^-0.5: without a wider router the top-k of a random model is a near tie
  // that no bf16 implementation reproduces.
  if (ends_with(name, ".router.proj.weight")) return {inv_sqrt_f32(shape.back(), 8.0), 0.0f};
  return {inv_sqrt_f32(shape.back(), 1.0), 0.0f};
}

float synthetic_value(uint64_t key, uint64_t i, SyntheticScale s) {
  uint64_t h = splitmix64(key + i);
  float x = static_cast<float>(static_cast<int64_t>(h >> 40) - (int64_t{1} << 23)) * (1.0f / 8388608.0f);
  float prod = static_cast<float>(static_cast<double>(x) * static_cast<double>(s.scale));
  float sum = static_cast<float>(static_cast<double>(prod) + static_cast<double>(s.offset));
  float v = bf16_to_f32(f32_to_bf16(sum));
  return std::fabs(v) < kF16MinNormal ? 0.0f : v;
}

OwnedTensor synthetic_tensor(std::string_view name, std::span<const int64_t> shape, DType dtype, uint64_t seed) {
  check(dtype == DType::kF32 || dtype == DType::kF16 || dtype == DType::kBF16, "synthetic",
        strfmt("dtype %s is not f32, f16 or bf16", dtype_name(dtype)));
  OwnedTensor out = OwnedTensor::make(dtype, shape);
  const SyntheticScale s = synthetic_scale(name, shape);
  const uint64_t key = synthetic_key(name, seed);
  const int64_t n = out.tensor.numel();
  void* data = out.tensor.data;
  ThreadPool::global().parallel_for(n, kGrain, [&](int64_t b, int64_t e) {
    switch (dtype) {
      case DType::kF32:
        fill_range(static_cast<float*>(data), key, s, b, e, [](float v) { return v; });
        break;
      case DType::kF16:
        fill_range(static_cast<uint16_t*>(data), key, s, b, e, [](float v) { return f32_to_f16(v); });
        break;
      default:
        fill_range(static_cast<uint16_t*>(data), key, s, b, e, [](float v) { return f32_to_bf16(v); });
        break;
    }
  });
  return out;
}

}  // namespace bunsen::model
