// Generic stand-in for libFuzzer's main(), linked into every fuzz_* target when not building with clang's
// -fsanitize=fuzzer: replays each file of the corpus directories given, then N deterministic mutations
// (xorshift PRNG with a fixed seed: bit flips, byte sets, truncations, insertions, splices between corpus
// files). Not a coverage-guided fuzzer. Invariant: the same corpus and -runs=N always give the same inputs.
// A crash ends the process (ctest fails); an escaping exception is reported, saved and makes exit code 1.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) __attribute__((weak));

namespace {

using Bytes = std::vector<uint8_t>;
constexpr size_t kMaxInputBytes = 1 << 16;

struct XorShift {
  uint64_t s = 0x9e3779b97f4a7c15ull;
  uint64_t next() {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return s;
  }
  size_t below(size_t n) { return n == 0 ? 0 : static_cast<size_t>(next() % n); }
};

std::vector<Bytes> load_corpus(const std::vector<std::string>& dirs) {
  std::vector<std::filesystem::path> files;
  for (const auto& d : dirs) {
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(d, ec))
      if (e.is_regular_file()) files.push_back(e.path());
    if (ec) std::fprintf(stderr, "fuzz smoke: cannot read corpus %s: %s\n", d.c_str(), ec.message().c_str());
  }
  std::sort(files.begin(), files.end());  // directory order is not deterministic
  std::vector<Bytes> corpus;
  for (const auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    corpus.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  return corpus;
}

// Interesting byte values: boundaries of integer and ASCII ranges, JSON punctuation, digits.
constexpr uint8_t kMagic[] = {0, 1, 0x7f, 0x80, 0xff, '"', '{', '}', '[', ']', ',', ':', '0', '9', '-', ' '};

void mutate(Bytes& b, const std::vector<Bytes>& corpus, XorShift& rng) {
  switch (rng.below(6)) {
    case 0:  // bit flip
      if (!b.empty()) b[rng.below(b.size())] ^= static_cast<uint8_t>(1u << rng.below(8));
      break;
    case 1:  // byte set (random or "interesting")
      if (!b.empty())
        b[rng.below(b.size())] =
            rng.below(2) ? static_cast<uint8_t>(rng.next()) : kMagic[rng.below(sizeof(kMagic))];
      break;
    case 2:  // truncation
      b.resize(rng.below(b.size() + 1));
      break;
    case 3: {  // insertion of 1..8 bytes
      size_t at = rng.below(b.size() + 1), n = 1 + rng.below(8);
      for (size_t i = 0; i < n; ++i)
        b.insert(b.begin() + static_cast<ptrdiff_t>(at), kMagic[rng.below(sizeof(kMagic))]);
      break;
    }
    case 4: {  // splice: our prefix + a suffix of another corpus file
      if (corpus.empty()) break;
      const Bytes& other = corpus[rng.below(corpus.size())];
      size_t cut = rng.below(b.size() + 1), from = rng.below(other.size() + 1);
      b.resize(cut);
      b.insert(b.end(), other.begin() + static_cast<ptrdiff_t>(from), other.end());
      break;
    }
    default: {  // overwrite a little-endian u64 (length fields, offsets) with a boundary value
      if (b.size() < 8) break;
      const uint64_t values[] = {0, 1, 7, 8, 0xffffffffull, ~0ull, 1ull << 63, b.size() - 8ull};
      uint64_t v = values[rng.below(std::size(values))];
      std::memcpy(b.data() + rng.below(b.size() - 7), &v, 8);
    }
  }
  if (b.size() > kMaxInputBytes) b.resize(kMaxInputBytes);
}

bool run_one(const Bytes& b, size_t index) {
  try {
    LLVMFuzzerTestOneInput(b.data(), b.size());
    return true;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz smoke: input %zu threw %s\n", index, e.what());
  } catch (...) {
    std::fprintf(stderr, "fuzz smoke: input %zu threw a non-std exception\n", index);
  }
  std::string name = "fuzz-smoke-crash-" + std::to_string(index);
  std::ofstream(name, std::ios::binary)
      .write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  std::fprintf(stderr, "fuzz smoke: input saved to %s\n", name.c_str());
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
  long runs = 0;
  std::vector<std::string> dirs;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "-runs=", 6) == 0)
      runs = std::strtol(argv[i] + 6, nullptr, 10);
    else if (argv[i][0] != '-')
      dirs.push_back(argv[i]);
  }
  const std::vector<Bytes> corpus = load_corpus(dirs);
  size_t n = 0, failures = 0;
  for (const auto& b : corpus) failures += !run_one(b, n++);
  XorShift rng;
  for (long r = 0; r < runs; ++r) {
    Bytes b = corpus.empty() ? Bytes{} : corpus[rng.below(corpus.size())];
    for (size_t k = 1 + rng.below(4); k > 0; --k) mutate(b, corpus, rng);
    failures += !run_one(b, n++);
  }
  std::printf("fuzz smoke: %zu inputs, %zu crashes\n", n, failures);
  return failures == 0 ? 0 : 1;
}
