// Element types and scalar conversions (f16/bf16 <-> f32) shared by every module.
// Not a tensor: see tensor.h. Invariant: dtype_size() is the storage size of one element in bytes.
#pragma once
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace bunsen {

enum class DType : uint8_t { kF32, kF16, kBF16, kI32, kI64, kU8, kU32 };

size_t dtype_size(DType t);
// Canonical lowercase name ("f32", "bf16", ...), used in messages and CLI flags.
const char* dtype_name(DType t);
// safetensors spelling ("F32", "BF16", ...).
const char* dtype_safetensors_name(DType t);
std::optional<DType> dtype_from_safetensors(std::string_view name);
std::optional<DType> dtype_from_name(std::string_view name);  // "f32", "float32", "bf16", "bfloat16", ...
inline bool is_float(DType t) { return t == DType::kF32 || t == DType::kF16 || t == DType::kBF16; }

inline float bf16_to_f32(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Round-to-nearest-even, NaN stays NaN (as torch does).
inline uint16_t f32_to_bf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);
  uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

}  // namespace bunsen
