// Thread-local scratch memory for CPU kernels (packed weight panels, per-token tables).
// Not shared between threads and not freed between calls: each (thread, slot) buffer only grows, so
// steady-state calls do not allocate. Implemented in a baseline-ISA file; safe to call from any ISA file.
#pragma once
#include <cstddef>

namespace bunsen::kernels::cpu {

enum ScratchSlot : int { kScratchPanel = 0, kScratchTable = 1, kScratchAttention = 2, kScratchSlots = 3 };

// 64-byte aligned buffer of at least n floats, valid until this thread's next call with the same slot.
float* thread_scratch(ScratchSlot slot, size_t n);

}  // namespace bunsen::kernels::cpu
