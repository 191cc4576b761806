// DType tables and IEEE half conversions (exact, round-to-nearest-even, handles subnormals/inf/nan).
#include "core/dtype.h"

namespace bunsen {
namespace {

struct DTypeInfo {
  DType type;
  size_t size;
  const char* name;
  const char* st_name;
};

constexpr DTypeInfo kInfo[] = {
    {DType::kF32, 4, "f32", "F32"}, {DType::kF16, 2, "f16", "F16"}, {DType::kBF16, 2, "bf16", "BF16"},
    {DType::kI32, 4, "i32", "I32"}, {DType::kI64, 8, "i64", "I64"}, {DType::kU8, 1, "u8", "U8"},
    {DType::kU32, 4, "u32", "U32"},
};

}  // namespace

size_t dtype_size(DType t) { return kInfo[static_cast<int>(t)].size; }
const char* dtype_name(DType t) { return kInfo[static_cast<int>(t)].name; }
const char* dtype_safetensors_name(DType t) { return kInfo[static_cast<int>(t)].st_name; }

std::optional<DType> dtype_from_safetensors(std::string_view name) {
  for (const auto& i : kInfo)
    if (name == i.st_name) return i.type;
  return std::nullopt;
}

std::optional<DType> dtype_from_name(std::string_view n) {
  for (const auto& i : kInfo)
    if (n == i.name) return i.type;
  if (n == "float32" || n == "float") return DType::kF32;
  if (n == "float16" || n == "half") return DType::kF16;
  if (n == "bfloat16") return DType::kBF16;
  return std::nullopt;
}

float f16_to_f32(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      exp = 127 - 15 + 1;
      while ((mant & 0x400u) == 0) {
        mant <<= 1;
        --exp;
      }
      mant &= 0x3ffu;
      bits = sign | (exp << 23) | (mant << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t f32_to_f16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t absx = x & 0x7fffffffu;
  if (absx > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // nan
  if (absx >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow -> inf
  if (absx < 0x38800000u) {                                                // subnormal or zero
    if (absx < 0x33000000u) return static_cast<uint16_t>(sign);
    uint32_t e = absx >> 23;
    uint32_t m = (absx & 0x7fffffu) | 0x800000u;
    // value = m * 2^(e-150); f16 subnormal unit = 2^-24 -> q = m * 2^(e-126)
    uint32_t s = 126 - e;
    uint32_t q = m >> s;
    uint32_t rem = m & ((1u << s) - 1);
    uint32_t halfway = 1u << (s - 1);
    if (rem > halfway || (rem == halfway && (q & 1u))) ++q;
    return static_cast<uint16_t>(sign | q);
  }
  uint32_t e = (absx >> 23) - 127 + 15;
  uint32_t m = absx & 0x7fffffu;
  uint32_t q = (e << 10) | (m >> 13);
  uint32_t rem = m & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (q & 1u))) ++q;
  return static_cast<uint16_t>(sign | q);
}

}  // namespace bunsen
