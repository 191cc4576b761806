// StateStorage layout: per layer the conv state then the recurrent state, each kAlignment-aligned.
#include "kv/state_storage.h"

#include <algorithm>
#include <cstring>

#include "core/status.h"

namespace bunsen::kv {
namespace {

size_t align(size_t v) { return (v + kAlignment - 1) / kAlignment * kAlignment; }

void check_shapes(const std::vector<StateLayerShape>& layers, int32_t n_slots) {
  check(n_slots >= 0, "kv", strfmt("state slot count must be >= 0, got %d", n_slots));
  for (size_t i = 0; i < layers.size(); ++i) {
    const StateLayerShape& l = layers[i];
    check(l.conv_channels > 0 && l.conv_len > 0 && l.heads > 0 && l.k_dim > 0 && l.v_dim > 0, "kv",
          strfmt("linear-attention layer %zu: state dims must be > 0", i));
  }
}

}  // namespace

size_t StateStorage::required_bytes(const std::vector<StateLayerShape>& layers, int32_t n_slots) {
  size_t total = 0;
  for (const StateLayerShape& l : layers) {
    total += align(static_cast<size_t>(n_slots * l.conv_channels * l.conv_len) * sizeof(float));
    total += align(static_cast<size_t>(n_slots * l.heads * l.k_dim * l.v_dim) * sizeof(float));
  }
  return total;
}

StateStorage::StateStorage(const std::vector<StateLayerShape>& layers, int32_t n_slots) : n_slots_(n_slots) {
  check_shapes(layers, n_slots);
  bytes_ = required_bytes(layers, n_slots);
  buffer_ = Buffer(std::max<size_t>(bytes_, 1), true);
  lay_out(layers, static_cast<char*>(buffer_.data()), Device::cpu());
}

StateStorage::StateStorage(const std::vector<StateLayerShape>& layers, int32_t n_slots, void* base, size_t bytes,
                           Device device)
    : n_slots_(n_slots) {
  check_shapes(layers, n_slots);
  bytes_ = required_bytes(layers, n_slots);
  check(bytes_ == 0 || (base != nullptr && bytes >= bytes_), "kv",
        strfmt("state storage needs %zu bytes, got %zu", bytes_, bytes));
  lay_out(layers, static_cast<char*>(base), device);
}

void StateStorage::lay_out(const std::vector<StateLayerShape>& layers, char* base, Device device) {
  size_t at = 0;
  for (const StateLayerShape& l : layers) {
    StateLayerView v;
    v.conv = Tensor::view(base + at, DType::kF32, {n_slots_, l.conv_channels, l.conv_len}, device);
    at += align(static_cast<size_t>(n_slots_ * l.conv_channels * l.conv_len) * sizeof(float));
    v.recurrent = Tensor::view(base + at, DType::kF32, {n_slots_, l.heads, l.k_dim, l.v_dim}, device);
    at += align(static_cast<size_t>(n_slots_ * l.heads * l.k_dim * l.v_dim) * sizeof(float));
    views_.push_back(v);
  }
}

}  // namespace bunsen::kv
