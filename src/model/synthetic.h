// Deterministic synthetic weights, bit-identical to scripts/golden/synth.py, so tests regenerate the exact
// weights Hugging Face transformers ran on, and `bunsen benchmark --synthetic` / the demo model need no file.
// Not random-quality noise: values are bf16-exact so every dtype path sees the same numbers.
// Spec (keep in sync with synth.py):
//   key  = fnv1a64(tensor name) ^ seed
//   h    = splitmix64(key + i)                      (i = flat element index, arithmetic mod 2^64)
//   x    = float(int64(h >> 40) - 2^23) / 2^23       (exact f32 in [-1, 1))
//   v    = bf16_round_nearest_even(x * scale + offset)   (f32 multiply, then f32 add)
//   v    = |v| < 2^-14 ? +0 : v                      (so v is exact in f16 too: no f16 subnormals)
//   splitmix64(x) = mix(x + 0x9e3779b97f4a7c15), mix = Steele et al.'s 30/27/31 xor-shift-multiply.
//   scale/offset by name: "*norm*.weight" -> 0.25 / 1.0; "*layer_scalar*" -> 0.25 / 1.0; "*.router.scale" -> 0.25 / 1.0;
//   "*.bias" -> 0.25 / 0; "embed_tokens" -> 1 / 0; "lm_head.weight" -> float(4 / sqrt(in)) / 0;
//   "*.router.proj.weight" -> float(8 / sqrt(in)) / 0; other 2-D weights [out, in] -> float(1 / sqrt(in)) / 0.
//   (rules tried in that order on the full HF name; "in" = last dim of any other tensor, 1/sqrt in double.)
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "core/buffer.h"

namespace bunsen::model {

uint64_t fnv1a64(std::string_view s);
uint64_t fnv1a64_bytes(const void* data, size_t n, uint64_t h = 0xcbf29ce484222325ull);
uint64_t splitmix64(uint64_t x);

// The per-tensor stream key: fnv1a64(name) ^ seed.
inline uint64_t synthetic_key(std::string_view name, uint64_t seed) { return fnv1a64(name) ^ seed; }

struct SyntheticScale {
  float scale = 1.0f;
  float offset = 0.0f;
};
SyntheticScale synthetic_scale(std::string_view name, std::span<const int64_t> shape);

// Element i of tensor `name` (bf16-exact f32).
float synthetic_value(uint64_t key, uint64_t i, SyntheticScale s);

// Whole tensor in `dtype` (f32, f16 or bf16; the values are identical in all three).
OwnedTensor synthetic_tensor(std::string_view name, std::span<const int64_t> shape, DType dtype, uint64_t seed);

}  // namespace bunsen::model
