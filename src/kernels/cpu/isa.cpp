// Run-time ISA detection and the process-wide level the CPU kernels dispatch on.
// Not a feature registry: three levels only. Invariant: the AVX-512 level needs F, BW, VL, DQ and BF16
// (the flags *_avx512.cpp files are compiled with); the AVX2 level needs AVX2, FMA and F16C.
#include <cpuid.h>

#include <atomic>

#include "core/status.h"
#include "kernels/cpu/cpu_ops.h"

namespace bunsen::kernels::cpu {
namespace {

// CPUID + XGETBV directly (GCC and clang accept different __builtin_cpu_supports names, e.g. clang 14 has
// no "avx512bf16"): the CPU must have the instructions and the OS must save the register state.
bool bit(unsigned reg, int b) { return (reg >> b) & 1u; }

Isa detect() {
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return Isa::kScalar;
  const bool fma = bit(c, 12), f16c = bit(c, 29), osxsave = bit(c, 27), avx = bit(c, 28);
  if (!(osxsave && avx)) return Isa::kScalar;
  unsigned xcr_lo, xcr_hi;
  __asm__("xgetbv" : "=a"(xcr_lo), "=d"(xcr_hi) : "c"(0));
  const bool ymm_state = (xcr_lo & 0x6u) == 0x6u, zmm_state = (xcr_lo & 0xe6u) == 0xe6u;
  unsigned b7 = 0, a71 = 0;
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) b7 = b;
  if (__get_cpuid_count(7, 1, &a, &b, &c, &d)) a71 = a;
  const bool avx2 = bit(b7, 5), avx512 = bit(b7, 16) && bit(b7, 17) && bit(b7, 30) && bit(b7, 31);
  const bool bf16 = bit(a71, 5);
  if (zmm_state && avx512 && bf16 && fma && f16c) return Isa::kAvx512;
  if (ymm_state && avx2 && fma && f16c) return Isa::kAvx2;
  return Isa::kScalar;
}

std::atomic<Isa>& level() {
  static std::atomic<Isa> isa{detected_isa()};
  return isa;
}

}  // namespace

Isa detected_isa() {
  static const Isa isa = detect();
  return isa;
}

Isa active_isa() {
  return level().load(std::memory_order_relaxed);
}

bool isa_supported(Isa isa) {
  return static_cast<int>(isa) <= static_cast<int>(detected_isa());
}

void set_isa_for_testing(Isa isa) {
  check(isa_supported(isa), "kernels",
        strfmt("%s is not supported by this CPU (best: %s)", isa_name(isa), isa_name(detected_isa())));
  level().store(isa, std::memory_order_relaxed);
}

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::kAvx512:
      return "cpu-avx512";
    case Isa::kAvx2:
      return "cpu-avx2";
    default:
      return "cpu-scalar";
  }
}

}  // namespace bunsen::kernels::cpu
