// Runner, linear-attention state (hybrid models): the per-sequence state slots, the checkpoint slots of the
// same shapes, and the copies between them. Not bookkeeping: kv::BlockPool hands out the state slots and
// kv::StateCheckpoints decides which checkpoint slot holds what. Invariant: both storages are zeroed at
// creation and change only inside forward (state slots) or through save_state/load_state, whose copies are
// enqueued on the runner's stream (plain memcpy on the CPU) and so are ordered with the steps around them;
// the same holds for the checkpoint <-> host copies of the RAM tier.
#include <algorithm>
#include <cstring>

#include "core/status.h"
#include "engine/runner.h"

namespace bunsen::engine {

std::vector<kv::StateLayerShape> state_shapes(const std::vector<model::KvLayerSpec>& layout) {
  std::vector<kv::StateLayerShape> out;
  for (const auto& l : layout)
    if (l.is_linear()) out.push_back({l.conv_channels, l.conv_len, l.state_heads, l.state_k, l.state_v});
  return out;
}

// One state slot per sequence a step can hold (pool_ hands them out) plus the checkpoint slots, all zeroed.
void Runner::init_state(const std::vector<model::KvLayerSpec>& layout) {
  const std::vector<kv::StateLayerShape> shapes = state_shapes(layout);
  if (shapes.empty()) return;
  const int32_t slots = pool_.n_state_slots();
  const int32_t n_ckpt = std::max<int32_t>(opts_.state_checkpoints, 0);
  if (device_.is_cuda()) {
    state_memory_ = kernels::DeviceMemory::allocate(
        device_, std::max<size_t>(kv::StateStorage::required_bytes(shapes, slots), 1), /*zero=*/true);
    state_ = kv::StateStorage(shapes, slots, state_memory_.data(), state_memory_.size(), device_);
    checkpoint_memory_ = kernels::DeviceMemory::allocate(
        device_, std::max<size_t>(kv::StateStorage::required_bytes(shapes, n_ckpt), 1), /*zero=*/true);
    checkpoints_ = kv::StateStorage(shapes, n_ckpt, checkpoint_memory_.data(), checkpoint_memory_.size(), device_);
  } else {
    state_ = kv::StateStorage(shapes, slots);
    checkpoints_ = kv::StateStorage(shapes, n_ckpt);
  }
  size_t next = 0;
  for (const auto& l : layout) {
    if (!l.is_linear()) {
      state_views_.push_back({});
      continue;
    }
    const kv::StateLayerView& v = state_.layers()[next++];
    state_views_.push_back({v.conv, v.recurrent});
  }
}

// Slot i of a [n_slots, ...] f32 tensor is the contiguous range [i * per_slot, (i + 1) * per_slot).
void Runner::copy_state(const kv::StateStorage& from, int32_t from_slot, const kv::StateStorage& to,
                        int32_t to_slot) {
  check(from_slot >= 0 && from_slot < from.n_slots() && to_slot >= 0 && to_slot < to.n_slots(), "engine",
        strfmt("state copy: slot %d of %d -> slot %d of %d out of range", from_slot, from.n_slots(), to_slot,
               to.n_slots()));
  auto copy = [&](const Tensor& src, const Tensor& dst, int32_t i, int32_t j) {
    const size_t per_slot = src.nbytes() / static_cast<size_t>(src.dim(0));
    const char* s = static_cast<const char*>(src.data) + static_cast<size_t>(i) * per_slot;
    char* d = static_cast<char*>(dst.data) + static_cast<size_t>(j) * per_slot;
    if (device_.is_cuda()) kernels::copy_async(ctx_, d, s, per_slot);
    else std::memcpy(d, s, per_slot);
  };
  for (size_t l = 0; l < from.layers().size(); ++l) {
    copy(from.layers()[l].conv, to.layers()[l].conv, from_slot, to_slot);
    copy(from.layers()[l].recurrent, to.layers()[l].recurrent, from_slot, to_slot);
  }
}

void Runner::save_state(int32_t state_slot, int32_t checkpoint_slot) {
  copy_state(state_, state_slot, checkpoints_, checkpoint_slot);
}

void Runner::load_state(int32_t checkpoint_slot, int32_t state_slot) {
  copy_state(checkpoints_, checkpoint_slot, state_, state_slot);
}

std::vector<std::span<std::byte>> Runner::checkpoint_parts(int32_t slot) const {
  check(slot >= 0 && slot < checkpoints_.n_slots(), "engine",
        strfmt("checkpoint_parts: slot %d of %d out of range", slot, checkpoints_.n_slots()));
  std::vector<std::span<std::byte>> out;
  for (const kv::StateLayerView& l : checkpoints_.layers()) {
    for (const Tensor* t : {&l.conv, &l.recurrent}) {
      const size_t per_slot = t->nbytes() / static_cast<size_t>(t->dim(0));
      out.emplace_back(static_cast<std::byte*>(t->data) + static_cast<size_t>(slot) * per_slot, per_slot);
    }
  }
  return out;
}

size_t Runner::checkpoint_bytes() const {
  size_t n = 0;
  for (const kv::StateLayerView& l : checkpoints_.layers())
    for (const Tensor* t : {&l.conv, &l.recurrent})
      if (t->dim(0) > 0) n += t->nbytes() / static_cast<size_t>(t->dim(0));
  return n;
}

void Runner::checkpoint_to_host(int32_t slot, void* host) {
  auto* h = static_cast<std::byte*>(host);
  for (const std::span<std::byte> p : checkpoint_parts(slot)) {
    if (device_.is_cuda()) kernels::copy_async(ctx_, h, p.data(), p.size());
    else std::memcpy(h, p.data(), p.size());
    h += p.size();
  }
}

void Runner::checkpoint_from_host(const void* host, int32_t slot) {
  const auto* h = static_cast<const std::byte*>(host);
  for (const std::span<std::byte> p : checkpoint_parts(slot)) {
    if (device_.is_cuda()) kernels::copy_async(ctx_, p.data(), h, p.size());
    else std::memcpy(p.data(), h, p.size());
    h += p.size();
  }
}

}  // namespace bunsen::engine
