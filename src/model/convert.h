// Checkpoint conversion as mlx_lm.convert does it: a Hugging Face safetensors snapshot in, an MLX-layout
// directory out (same tensor names; with quantization every Linear/Embedding weight whose input dim the group
// size divides becomes <path>.weight u32 + <path>.scales + <path>.biases in the source dtype; config.json
// gains "quantization" and "quantization_config"; shards of at most ~5 GiB with model.safetensors.index.json;
// tokenizer and generation files copied). Not a CLI (cli/cmd_convert.cpp parses flags) and not a loader.
// Invariants: the destination appears complete or not at all (built in DST.tmp-PID, renamed at the end);
// the source is never written; non-quantized tensors keep their dtype and bytes.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "model/quant.h"

namespace bunsen::model {

struct ConvertProgress {
  size_t index = 0;  // 1-based index of the tensor just written
  size_t count = 0;  // tensors in the source that are written
  std::string name;
  bool quantized = false;
  uint64_t bytes_done = 0;   // source bytes processed so far
  uint64_t bytes_total = 0;  // source bytes of all written tensors
};

struct ConvertOptions {
  std::string src;  // HF snapshot directory (config.json + safetensors)
  std::string dst;  // must not exist
  bool quantize = false;
  QuantSpec spec;                                // bits / group_size when quantize
  uint64_t max_shard_bytes = uint64_t{5} << 30;  // mlx-lm's MAX_FILE_SIZE_GB = 5 (GiB)
  std::function<void(const ConvertProgress&)> progress;  // after each source tensor
};

struct ConvertResult {
  size_t n_tensors = 0;    // tensors written (a quantized weight counts 3)
  size_t n_quantized = 0;  // source weights that were quantized
  size_t n_shards = 0;
  uint64_t total_bytes = 0;  // index metadata total_size
  std::vector<std::string> shard_files;
  std::vector<std::string> copied_files;  // tokenizer/generation files copied from the source
};

// True when mlx-lm would quantize this tensor: a 2-D float "<module>.weight" (Linear or Embedding: norms
// and biases are never 2-D ".weight" of a Linear) whose last dim group_size divides.
bool is_quantizable(const std::string& name, const std::vector<int64_t>& shape, bool is_float_dtype,
                    int group_size);

// Runs the conversion. Errors: Error("convert", ...) for a destination that exists, an already quantized
// source with quantize set, or unsupported bits/group size; loader errors pass through.
ConvertResult convert_checkpoint(const ConvertOptions& opts);

// The file names copied from the source when present (besides any "*.model", "*.tiktoken" and "*.py").
const std::vector<std::string>& convert_copied_names();

}  // namespace bunsen::model
