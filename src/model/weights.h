// Weights: safetensors parsing/validation, read-only mmap, sharded checkpoints, a name -> Tensor store, and
// its copy on a device (to_device, streamed with a progress bar). Not model-specific (arch/ resolves names
// and quirks). Invariants: a header is fully validated before any tensor data is touched (so a truncated or
// corrupt file is an Error naming the file and tensor, never a crash or SIGBUS); tensors returned by
// WeightStore::get stay valid as long as the store lives; all tensors of one store live on one device.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/buffer.h"
#include "core/tensor.h"
#include "kernels/device.h"

namespace bunsen::model {

constexpr uint64_t kMaxSafetensorsHeaderBytes = 100ull * 1000 * 1000;  // 100 MB

struct TensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // byte offsets relative to the start of the data section
  uint64_t end = 0;
};

struct SafetensorsHeader {
  std::vector<TensorInfo> tensors;  // sorted by begin offset
  std::map<std::string, std::string> metadata;
  uint64_t data_offset = 0;  // 8 + header length
};

// Parses and validates the header of a safetensors file whose full contents (or at least its first
// `file_size` bytes' worth of header) are `data`. Checks: 8-byte length present; header length <= 100 MB
// and inside the file; valid UTF-8 JSON object; known dtypes; integer shapes and offsets; shape × dtype
// size == byte span (checked arithmetic); names unique; offsets contiguous from 0 with no gap, overlap or
// duplicate; last end offset == file size - data_offset. Errors: Error("safetensors", "<source>: ...").
SafetensorsHeader parse_safetensors_header(const uint8_t* data, size_t file_size, const std::string& source);

// Read-only memory map of a whole file.
class MappedFile {
 public:
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

struct UploadOptions {
  bool progress = false;                  // a progress line on stderr (percent, GB, GB/s)
  size_t chunk_bytes = size_t{64} << 20;  // pinned staging: two chunks of this size
};

class WeightStore {
 public:
  WeightStore() = default;
  WeightStore(WeightStore&&) = default;
  WeightStore& operator=(WeightStore&&) = default;

  // Opens DIR/model.safetensors, or the shards listed in DIR/model.safetensors.index.json (every shard
  // validated; every tensor in the index's weight_map must exist in the shard it names).
  static WeightStore open(const std::string& dir);
  // Opens one .safetensors file.
  static WeightStore open_file(const std::string& path);

  bool has(std::string_view name) const;
  // Throws Error("weights", "missing tensor 'NAME' in <source>").
  Tensor get(std::string_view name) const;
  // Also checks the shape: Error("weights", "tensor 'NAME' in <file> has shape [a, b], expected [c, d]").
  Tensor get(std::string_view name, std::initializer_list<int64_t> shape) const;
  // Source file of a tensor (for messages).
  std::string source_of(std::string_view name) const;
  std::vector<std::string> names() const;
  size_t total_bytes() const;

  // In-memory tensors (synthetic models, tests). Replaces an existing entry of the same name.
  void add(const std::string& name, OwnedTensor t);

  // Where the tensors live (cpu for files and in-memory tensors).
  Device device() const { return device_; }
  // A store with the same names whose tensors are copies on `device` (a CUDA device), packed into one
  // device allocation (each tensor 256-byte aligned) and streamed from the mmap/host memory through pinned
  // staging buffers. The copy needs neither this store nor its files afterwards. Throws Error("weights", ...)
  // when this store is already on a device, Error("cuda"/"kernels", ...) when the device cannot take it.
  WeightStore to_device(Device device, const UploadOptions& opts = {}) const;

 private:
  struct Entry {
    Tensor tensor;
    int source = -1;  // index into sources_, -1 = in-memory
  };
  std::string root_;  // dir or file the store was opened from (messages)
  std::vector<std::unique_ptr<MappedFile>> files_;
  std::vector<std::string> sources_;
  std::vector<std::unique_ptr<OwnedTensor>> owned_;
  std::unordered_map<std::string, Entry> entries_;
  Device device_{};
  kernels::DeviceMemory device_memory_;  // backs every tensor of a to_device() store
};

// Writes a safetensors file (tensors in the given order, contiguous CPU tensors only). `metadata` goes to
// "__metadata__". Writes to PATH.tmp then renames.
void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace bunsen::model
