// Identity fingerprints of what a prefix-cache entry depends on besides the architecture: the weights of a
// checkpoint and the tokenizer files. Cheap by design (no full read of a 16 GB checkpoint at startup): the
// weights fingerprint hashes every tensor's name, dtype and shape plus three 64-byte windows of its data
// (start, middle, end), which any fine-tune, re-quantization or conversion changes.
// Not a checksum of the files (the SSD tier checksums its own payloads) and not cryptographic.
#pragma once
#include <cstdint>
#include <string>

#include "model/weights.h"

namespace bunsen::model {

// Over a CPU (mmapped or in-memory) store; order-independent of how shards split the tensors.
uint64_t weights_fingerprint(const WeightStore& weights);
// weights_fingerprint(WeightStore::open(dir)) mixed with config.json's bytes.
uint64_t checkpoint_fingerprint(const std::string& dir);
// FNV-1a over tokenizer.json and tokenizer_config.json of `dir` (each absent file hashes as its name only).
uint64_t tokenizer_fingerprint(const std::string& dir);

}  // namespace bunsen::model
