// StateStorage: the per-sequence state slots of a hybrid model's linear-attention (gated DeltaNet) layers:
// per such layer a conv state [n_slots, channels, conv_len] and a recurrent state [n_slots, heads, k, v],
// both f32, zeroed at creation, in one host allocation or over caller-owned memory on any device (like
// KvStorage). Not bookkeeping (BlockPool hands out the slot ids) and not kernels: contents change only inside
// the model's forward. Invariant: a slot id addresses the same sequence in every layer.
#pragma once
#include <cstdint>
#include <vector>

#include "core/buffer.h"

namespace bunsen::kv {

struct StateLayerShape {
  int64_t conv_channels = 0, conv_len = 0;
  int64_t heads = 0, k_dim = 0, v_dim = 0;
  size_t slot_bytes() const {
    return static_cast<size_t>(conv_channels * conv_len + heads * k_dim * v_dim) * sizeof(float);
  }
};

struct StateLayerView {
  Tensor conv;       // [n_slots, conv_channels, conv_len] f32
  Tensor recurrent;  // [n_slots, heads, k_dim, v_dim] f32
};

class StateStorage {
 public:
  StateStorage() = default;
  // Owning host storage, zeroed.
  StateStorage(const std::vector<StateLayerShape>& layers, int32_t n_slots);
  // Views over `bytes` bytes at `base` (kAlignment-aligned, zeroed by the caller) on `device`.
  StateStorage(const std::vector<StateLayerShape>& layers, int32_t n_slots, void* base, size_t bytes,
               Device device);
  static size_t required_bytes(const std::vector<StateLayerShape>& layers, int32_t n_slots);
  int32_t n_slots() const { return n_slots_; }
  size_t bytes() const { return bytes_; }
  const std::vector<StateLayerView>& layers() const { return views_; }  // one per linear layer, in order

 private:
  void lay_out(const std::vector<StateLayerShape>& layers, char* base, Device device);
  int32_t n_slots_ = 0;
  size_t bytes_ = 0;
  Buffer buffer_;  // empty for external memory
  std::vector<StateLayerView> views_;
};

}  // namespace bunsen::kv
