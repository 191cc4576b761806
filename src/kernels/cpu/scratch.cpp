// Thread-local growing scratch buffers (see scratch.h). Baseline ISA on purpose: allocation code here
// must run on every CPU whichever kernel level calls it.
#include "kernels/cpu/scratch.h"

#include <cstdlib>
#include <new>

namespace bunsen::kernels::cpu {
namespace {

struct Scratch {
  float* data[kScratchSlots] = {};
  size_t capacity[kScratchSlots] = {};
  ~Scratch() {
    for (float* p : data) std::free(p);
  }
};

}  // namespace

float* thread_scratch(ScratchSlot slot, size_t n) {
  thread_local Scratch s;
  if (s.capacity[slot] < n) {
    size_t cap = n < 1024 ? 1024 : n + n / 2;
    size_t bytes = (cap * sizeof(float) + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, bytes);
    if (!p) throw std::bad_alloc();
    std::free(s.data[slot]);
    s.data[slot] = static_cast<float*>(p);
    s.capacity[slot] = bytes / sizeof(float);
  }
  return s.data[slot];
}

}  // namespace bunsen::kernels::cpu
