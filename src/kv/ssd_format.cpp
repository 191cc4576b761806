// SSD snapshot header encoding/decoding and the checksum. Pure functions over byte spans: no I/O.
// Every read from a span is bounds-checked against its size before it happens.
#include "kv/ssd_format.h"

#include <bit>
#include <cstring>

namespace bunsen::kv {
namespace {

static_assert(std::endian::native == std::endian::little, "ssd format assumes a little-endian host");

constexpr char kMagic[8] = {'B', 'S', 'N', 'K', 'V', 'S', 'S', 'D'};
constexpr uint64_t kMulA = 0x9E3779B97F4A7C15ull;
constexpr uint64_t kMulB = 0xD6E8FEB86659FD93ull;
constexpr uint64_t kFinA = 0xBF58476D1CE4E5B9ull;
constexpr uint64_t kFinB = 0x94D049BB133111EBull;

uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= kFinA;
  x ^= x >> 27;
  x *= kFinB;
  x ^= x >> 31;
  return x;
}

// Bijective in `s` for a fixed word, and injective in `w` for a fixed state (odd multipliers).
inline uint64_t lane_step(uint64_t s, uint64_t w) { return std::rotl(s ^ (w * kMulA), 29) * kMulB; }

uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

template <typename T>
void put_le(std::vector<std::byte>& out, size_t at, T v) {
  std::memcpy(out.data() + at, &v, sizeof(T));
}

template <typename T>
T get_le(std::span<const std::byte> in, size_t at) {
  T v;
  std::memcpy(&v, in.data() + at, sizeof(T));
  return v;
}

}  // namespace

uint64_t ssd_checksum64(std::span<const std::byte> data) {
  uint64_t lanes[4] = {kMulA, kMulB, kFinA, kFinB};
  const std::byte* p = data.data();
  size_t n = data.size();
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    uint64_t w[4];
    std::memcpy(w, p + i, 32);
    lanes[0] = lane_step(lanes[0], w[0]);
    lanes[1] = lane_step(lanes[1], w[1]);
    lanes[2] = lane_step(lanes[2], w[2]);
    lanes[3] = lane_step(lanes[3], w[3]);
  }
  for (int lane = 0; i < n; ++lane) {  // tail: whole words, then one zero-padded partial word
    uint64_t w = 0;
    size_t take = n - i < 8 ? n - i : 8;
    std::memcpy(&w, p + i, take);
    lanes[lane] = lane_step(lanes[lane], w);
    i += take;
  }
  uint64_t h = mix64(static_cast<uint64_t>(n) * kMulA + kMulB);
  for (uint64_t l : lanes) h = mix64(h ^ mix64(l)) * kMulA + kFinB;
  return mix64(h);
}

void ssd_plan_offsets(SsdFileHeader& h) {
  uint64_t n_tensors = h.layout.tensor_bytes.size();
  const uint64_t ext = h.layout.state.n_tensors > 0     ? kSsdSlidingExtBytes + kSsdStateExtBytes
                       : h.layout.sliding.n_tensors > 0 ? kSsdSlidingExtBytes
                                                        : 0;
  h.header_bytes = kSsdFixedHeaderBytes + 16 * n_tensors + ext + 8;
  h.payload_offset = align_up(h.header_bytes + 4 * h.n_tokens, kSsdPayloadAlign);
  h.tensor_offsets.resize(n_tensors);
  uint64_t at = h.payload_offset;
  for (size_t t = 0; t < n_tensors; ++t) {
    at = align_up(at, kSsdTensorAlign);
    h.tensor_offsets[t] = at;
    at += h.layout.tensor_bytes[t];
  }
  h.file_bytes = at;
}

std::vector<std::byte> ssd_encode_header(const SsdFileHeader& h) {
  std::vector<std::byte> out(h.header_bytes);
  std::memcpy(out.data(), kMagic, 8);
  const bool state = h.layout.state.n_tensors > 0;
  const bool sliding = h.layout.sliding.n_tensors > 0;
  put_le<uint32_t>(out, 8, state ? kSsdFormatVersionState : sliding ? kSsdFormatVersion : kSsdFormatVersionNoSliding);
  put_le<uint32_t>(out, 12, static_cast<uint32_t>(h.header_bytes));
  put_le<uint64_t>(out, 16, h.key.name_space);
  put_le<uint64_t>(out, 24, h.key.prefix_hash);
  put_le<uint64_t>(out, 32, h.seq);
  put_le<uint64_t>(out, 40, h.n_tokens);
  put_le<int32_t>(out, 48, h.layout.n_layers);
  put_le<int32_t>(out, 52, h.layout.block_size);
  put_le<int32_t>(out, 56, h.layout.n_kv_heads);
  put_le<int32_t>(out, 60, h.layout.head_dim);
  put_le<uint32_t>(out, 64, static_cast<uint32_t>(h.layout.dtype));
  put_le<uint32_t>(out, 68, static_cast<uint32_t>(h.layout.tensor_bytes.size()));
  put_le<uint64_t>(out, 72, h.tokens_checksum);
  put_le<uint64_t>(out, 80, h.payload_offset);
  put_le<uint64_t>(out, 88, h.file_bytes);
  for (size_t t = 0; t < h.layout.tensor_bytes.size(); ++t) {
    put_le<uint64_t>(out, kSsdFixedHeaderBytes + 16 * t, h.layout.tensor_bytes[t]);
    put_le<uint64_t>(out, kSsdFixedHeaderBytes + 16 * t + 8, h.tensor_checksums[t]);
  }
  if (sliding || state) {  // version 3 always carries version 2's extension (all zero without sliding blocks)
    const size_t at = kSsdFixedHeaderBytes + 16 * h.layout.tensor_bytes.size();
    put_le<uint32_t>(out, at, h.layout.sliding.n_tensors);
    put_le<int32_t>(out, at + 4, h.layout.sliding.window);
    put_le<uint64_t>(out, at + 8, h.layout.sliding.first_block);
    put_le<uint64_t>(out, at + 16, h.layout.sliding.n_blocks);
    if (state) put_le<uint32_t>(out, at + kSsdSlidingExtBytes, h.layout.state.n_tensors);  // then a zero u32
  }
  size_t body = h.header_bytes - 8;
  put_le<uint64_t>(out, body, ssd_checksum64(std::span<const std::byte>(out.data(), body)));
  return out;
}

uint64_t ssd_peek_header_bytes(std::span<const std::byte> fixed) {
  if (fixed.size() < kSsdFixedHeaderBytes || std::memcmp(fixed.data(), kMagic, 8) != 0) return 0;
  uint64_t hb = get_le<uint32_t>(fixed, 12);
  if (hb < kSsdFixedHeaderBytes + 8 ||
      hb > kSsdFixedHeaderBytes + 16ull * kSsdMaxTensors + kSsdSlidingExtBytes + kSsdStateExtBytes + 8)
    return 0;
  return hb;
}

std::optional<SsdFileHeader> ssd_decode_header(std::span<const std::byte> bytes, uint64_t file_size,
                                               std::string* why) {
  auto fail = [&](const char* reason) -> std::optional<SsdFileHeader> {
    if (why) *why = reason;
    return std::nullopt;
  };
  uint64_t hb = ssd_peek_header_bytes(bytes);
  if (hb == 0) return fail(bytes.size() < kSsdFixedHeaderBytes ? "truncated header" : "bad magic");
  if (bytes.size() < hb || file_size < hb) return fail("truncated header");
  uint64_t stored = get_le<uint64_t>(bytes, hb - 8);
  if (ssd_checksum64(bytes.first(hb - 8)) != stored) return fail("header checksum mismatch");
  const uint32_t version = get_le<uint32_t>(bytes, 8);
  if (version != kSsdFormatVersionState && version != kSsdFormatVersion && version != kSsdFormatVersionNoSliding)
    return fail("other format version");
  const uint64_t ext = version == kSsdFormatVersionState ? kSsdSlidingExtBytes + kSsdStateExtBytes
                       : version == kSsdFormatVersion    ? kSsdSlidingExtBytes
                                                         : 0;
  SsdFileHeader h;
  h.key.name_space = get_le<uint64_t>(bytes, 16);
  h.key.prefix_hash = get_le<uint64_t>(bytes, 24);
  h.seq = get_le<uint64_t>(bytes, 32);
  h.n_tokens = get_le<uint64_t>(bytes, 40);
  h.layout.n_layers = get_le<int32_t>(bytes, 48);
  h.layout.block_size = get_le<int32_t>(bytes, 52);
  h.layout.n_kv_heads = get_le<int32_t>(bytes, 56);
  h.layout.head_dim = get_le<int32_t>(bytes, 60);
  uint32_t dtype = get_le<uint32_t>(bytes, 64);
  if (dtype > static_cast<uint32_t>(DType::kU32)) return fail("bad dtype");
  h.layout.dtype = static_cast<DType>(dtype);
  uint32_t n_tensors = get_le<uint32_t>(bytes, 68);
  if (kSsdFixedHeaderBytes + 16ull * n_tensors + ext + 8 != hb) return fail("bad tensor count");
  if (h.n_tokens > file_size / 4) return fail("bad token count");
  h.tokens_checksum = get_le<uint64_t>(bytes, 72);
  for (uint32_t t = 0; t < n_tensors; ++t) {
    h.layout.tensor_bytes.push_back(get_le<uint64_t>(bytes, kSsdFixedHeaderBytes + 16 * t));
    h.tensor_checksums.push_back(get_le<uint64_t>(bytes, kSsdFixedHeaderBytes + 16 * t + 8));
    if (h.layout.tensor_bytes.back() > file_size) return fail("bad tensor size");
  }
  if (ext > 0) {  // versions 2, 3: the sliding part must name real tensors and blocks inside the prefix
    const size_t at = kSsdFixedHeaderBytes + 16ull * n_tensors;
    SsdSlidingPart& sp = h.layout.sliding;
    sp.n_tensors = get_le<uint32_t>(bytes, at);
    sp.window = get_le<int32_t>(bytes, at + 4);
    sp.first_block = get_le<uint64_t>(bytes, at + 8);
    sp.n_blocks = get_le<uint64_t>(bytes, at + 16);
    const uint64_t prefix_blocks =
        h.layout.block_size > 0 ? h.n_tokens / static_cast<uint64_t>(h.layout.block_size) : 0;
    const bool none = version == kSsdFormatVersionState && sp == SsdSlidingPart{};  // v3 without sliding blocks
    if (!none && (sp.n_tensors == 0 || sp.n_tensors > n_tensors || sp.window <= 0 || sp.n_blocks == 0 ||
                  sp.first_block > prefix_blocks || sp.n_blocks > prefix_blocks - sp.first_block))
      return fail("bad sliding part");
    if (version == kSsdFormatVersionState) {  // version 3: state tensors sit between the K/V and the sliding part
      h.layout.state.n_tensors = get_le<uint32_t>(bytes, at + kSsdSlidingExtBytes);
      if (h.layout.state.n_tensors == 0 || get_le<uint32_t>(bytes, at + kSsdSlidingExtBytes + 4) != 0 ||
          uint64_t{h.layout.state.n_tensors} + sp.n_tensors > n_tensors)
        return fail("bad state part");
    }
  }
  uint64_t payload_offset = get_le<uint64_t>(bytes, 80);
  uint64_t file_bytes = get_le<uint64_t>(bytes, 88);
  ssd_plan_offsets(h);
  if (h.payload_offset != payload_offset || h.file_bytes != file_bytes) return fail("inconsistent offsets");
  if (file_size != h.file_bytes) return fail(file_size < h.file_bytes ? "truncated file" : "oversized file");
  return h;
}

}  // namespace bunsen::kv
