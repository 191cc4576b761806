// Run-time ISA detection and the process-wide level the CPU kernels dispatch on.
// Not a feature registry: three levels only. Invariant: the AVX-512 level needs F, BW, VL, DQ and BF16
// (the flags *_avx512.cpp files are compiled with); the AVX2 level needs AVX2, FMA and F16C.
#include <atomic>

#include "core/status.h"
#include "kernels/cpu/cpu_ops.h"

namespace bunsen::kernels::cpu {
namespace {

Isa detect() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("fma") &&
      __builtin_cpu_supports("f16c"))
    return Isa::kAvx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c"))
    return Isa::kAvx2;
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

Isa active_isa() { return level().load(std::memory_order_relaxed); }

bool isa_supported(Isa isa) { return static_cast<int>(isa) <= static_cast<int>(detected_isa()); }

void set_isa_for_testing(Isa isa) {
  check(isa_supported(isa), "kernels",
        strfmt("%s is not supported by this CPU (best: %s)", isa_name(isa), isa_name(detected_isa())));
  level().store(isa, std::memory_order_relaxed);
}

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::kAvx512: return "cpu-avx512";
    case Isa::kAvx2: return "cpu-avx2";
    default: return "cpu-scalar";
  }
}

}  // namespace bunsen::kernels::cpu
