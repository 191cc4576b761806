// Streaming safetensors writer: the header (names, dtypes, shapes, data_offsets) is fixed up front, then the
// tensors' bytes are appended one at a time in header order, so a converter never holds a whole shard in
// memory. Writes what mlx-lm writes: "__metadata__" {"format": "mlx"} by default, header padded with spaces
// to a multiple of 8 bytes (the data section starts 8-byte aligned).
// Not a reader (weights.h parses and validates) and not a sharding policy (model/convert.cpp decides).
// Invariants: a file is complete or absent (PATH.tmp, fsync, rename in finish(); a writer destroyed before
// finish() removes PATH.tmp); each write() must match the next declared tensor's name and byte size.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"

namespace bunsen::model {

// One tensor of a file to write: name, element type and shape (the byte size follows from them).
struct TensorDecl {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
};

// dtype_size(dtype) * prod(shape); Error("safetensors", ...) on a negative dim or 64-bit overflow.
uint64_t decl_bytes(const TensorDecl& decl);

inline const std::map<std::string, std::string>& mlx_metadata() {
  static const std::map<std::string, std::string> m = {{"format", "mlx"}};
  return m;
}

// The header text (JSON, padded with spaces to a multiple of 8) for `tensors` laid out in the given order.
std::string safetensors_header(const std::vector<TensorDecl>& tensors,
                               const std::map<std::string, std::string>& metadata, const std::string& path);

class SafetensorsWriter {
 public:
  // Creates PATH.tmp and writes the 8-byte length and the header. Error("safetensors", "<path>: ...") for a
  // reserved or duplicate name, a bad shape, or an I/O failure.
  SafetensorsWriter(std::string path, std::vector<TensorDecl> tensors,
                    const std::map<std::string, std::string>& metadata = mlx_metadata());
  ~SafetensorsWriter();
  SafetensorsWriter(const SafetensorsWriter&) = delete;
  SafetensorsWriter& operator=(const SafetensorsWriter&) = delete;

  // Appends the next tensor's bytes; `name` and `nbytes` must match its declaration.
  void write(const std::string& name, const void* data, size_t nbytes);
  // Same for a contiguous CPU tensor whose dtype and shape must match the declaration.
  void write(const std::string& name, const Tensor& t);
  // Appends the next tensor in pieces (e.g. a row chunk at a time); the pieces of one tensor must add up
  // to its size before the next tensor starts. `name` must be the tensor being written.
  void write_part(const std::string& name, const void* data, size_t nbytes);
  // Requires every tensor written; fsyncs and renames PATH.tmp to PATH.
  void finish();

  const std::string& path() const { return path_; }
  uint64_t data_bytes() const { return data_bytes_; }  // sum of all declared tensor sizes

 private:
  void write_raw(const void* data, size_t nbytes);
  [[noreturn]] void fail(const std::string& message) const;

  std::string path_, tmp_;
  std::vector<TensorDecl> tensors_;
  std::vector<uint64_t> sizes_;  // [tensors_.size()] bytes of each tensor
  size_t next_ = 0;              // index of the tensor being written
  uint64_t written_of_next_ = 0;  // bytes of tensors_[next_] written so far
  uint64_t data_bytes_ = 0;
  int fd_ = -1;
  bool finished_ = false;
};

// Whole-file convenience: declares `tensors` (contiguous CPU tensors) in order and writes them.
void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata = mlx_metadata());

}  // namespace bunsen::model
