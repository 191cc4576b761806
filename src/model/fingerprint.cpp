// Weights / tokenizer fingerprints for the prefix-cache namespace (see fingerprint.h).
#include "model/fingerprint.h"

#include <algorithm>
#include <fstream>
#include <iterator>

#include "core/status.h"
#include "model/synthetic.h"

namespace bunsen::model {
namespace {

constexpr size_t kWindow = 64;

uint64_t mix(uint64_t h, uint64_t v) { return fnv1a64_bytes(&v, sizeof v, h); }

uint64_t file_hash(const std::string& path, uint64_t h) {
  h = fnv1a64_bytes(path.data() + path.rfind('/') + 1, path.size() - path.rfind('/') - 1, h);
  std::ifstream in(path, std::ios::binary);
  if (!in) return h;
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return fnv1a64_bytes(bytes.data(), bytes.size(), mix(h, bytes.size()));
}

}  // namespace

uint64_t weights_fingerprint(const WeightStore& weights) {
  check(weights.device().is_cpu(), "model", "weights_fingerprint needs the host copy of the weights");
  std::vector<std::string> names = weights.names();
  std::sort(names.begin(), names.end());
  uint64_t h = fnv1a64("bunsen-weights-v1");
  for (const std::string& n : names) {
    const Tensor t = weights.get(n);
    h = fnv1a64_bytes(n.data(), n.size(), mix(h, n.size()));
    h = mix(h, static_cast<uint64_t>(t.dtype));
    for (int d = 0; d < t.ndim; ++d) h = mix(h, static_cast<uint64_t>(t.dim(d)));
    const size_t bytes = t.nbytes();
    const auto* p = static_cast<const unsigned char*>(t.data);
    const size_t w = std::min(kWindow, bytes);
    for (size_t off : {size_t{0}, (bytes - w) / 2, bytes - w}) h = fnv1a64_bytes(p + off, w, h);
  }
  return h;
}

uint64_t checkpoint_fingerprint(const std::string& dir) {
  return file_hash(dir + "/config.json", weights_fingerprint(WeightStore::open(dir)));
}

uint64_t tokenizer_fingerprint(const std::string& dir) {
  uint64_t h = fnv1a64("bunsen-tokenizer-v1");
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"}) h = file_hash(dir + "/" + f, h);
  return h;
}

}  // namespace bunsen::model
