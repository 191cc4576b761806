// libFuzzer target for the safetensors header parser: any input must either parse into a header that
// satisfies the documented invariants or throw bunsen::Error. Not a WeightStore test (no files, no mmap).
// Invariants checked: tensors sorted and contiguous from 0, every span matches shape x dtype size, and
// the data section ends exactly at the end of the input. Any other exception, crash or abort is a bug.
#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "core/status.h"
#include "model/weights.h"

namespace {

void require(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "fuzz_safetensors: invariant violated: %s\n", what);
    std::abort();
  }
}

void check_invariants(const bunsen::model::SafetensorsHeader& h, size_t size) {
  require(h.data_offset >= 8 && h.data_offset <= size, "data_offset inside the input");
  uint64_t expect = 0;
  for (const auto& t : h.tensors) {
    require(t.begin == expect && t.begin <= t.end, "tensors contiguous and sorted");
    require(t.shape.size() <= static_cast<size_t>(bunsen::kMaxDims), "at most kMaxDims dims");
    uint64_t bytes = bunsen::dtype_size(t.dtype);
    for (int64_t d : t.shape) {
      require(d >= 0, "non-negative dims");
      require(!__builtin_mul_overflow(bytes, static_cast<uint64_t>(d), &bytes), "no size overflow");
    }
    require(bytes == t.end - t.begin, "span matches shape");
    expect = t.end;
  }
  require(expect == size - h.data_offset, "data section ends at the end of the input");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    bunsen::model::SafetensorsHeader h = bunsen::model::parse_safetensors_header(data, size, "fuzz-input");
    check_invariants(h, size);
  } catch (const bunsen::Error&) {
    // Rejected input: the expected outcome for most mutations.
  }
  return 0;
}
