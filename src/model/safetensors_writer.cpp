// SafetensorsWriter: header first (fixed offsets), then each tensor's bytes appended in order, into PATH.tmp
// renamed to PATH on finish(). Not a reader. Invariants: the bytes written equal 8 + header + the declared
// sizes exactly (finish() checks); any failure removes PATH.tmp and throws Error("safetensors", "<path>: ...").
#include "model/safetensors_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <nlohmann/json.hpp>
#include <system_error>
#include <unordered_set>

#include "core/status.h"

namespace bunsen::model {
namespace {

std::string errno_text(int err) { return std::error_code(err, std::generic_category()).message(); }

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

}  // namespace

uint64_t decl_bytes(const TensorDecl& decl) {
  uint64_t bytes = dtype_size(decl.dtype);
  for (int64_t d : decl.shape) {
    if (d < 0) throw Error("safetensors", "tensor '" + decl.name + "' has a negative dim " + shape_text(decl.shape));
    if (__builtin_mul_overflow(bytes, static_cast<uint64_t>(d), &bytes))
      throw Error("safetensors", "tensor '" + decl.name + "' shape " + shape_text(decl.shape) + " overflows");
  }
  return bytes;
}

std::string safetensors_header(const std::vector<TensorDecl>& tensors,
                               const std::map<std::string, std::string>& metadata, const std::string& path) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    auto& m = header["__metadata__"];
    m = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
  }
  std::unordered_set<std::string> seen;
  uint64_t offset = 0;
  for (const TensorDecl& t : tensors) {
    if (t.name == "__metadata__") throw Error("safetensors", path + ": tensor name '__metadata__' is reserved");
    if (!seen.insert(t.name).second) throw Error("safetensors", path + ": duplicate tensor name '" + t.name + "'");
    if (t.shape.size() > static_cast<size_t>(kMaxDims))
      throw Error("safetensors", strfmt("%s: tensor '%s' has %zu dims, at most %d are supported", path.c_str(),
                                        t.name.c_str(), t.shape.size(), kMaxDims));
    const uint64_t bytes = decl_bytes(t);
    nlohmann::ordered_json entry;
    entry["dtype"] = dtype_safetensors_name(t.dtype);
    entry["shape"] = t.shape;
    entry["data_offsets"] = {offset, offset + bytes};
    header[t.name] = std::move(entry);
    offset += bytes;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::exception& e) {
    throw Error("safetensors", path + ": cannot encode header: " + e.what());
  }
  text.append((8 - text.size() % 8) % 8, ' ');  // the data section starts 8-byte aligned
  return text;
}

SafetensorsWriter::SafetensorsWriter(std::string path, std::vector<TensorDecl> tensors,
                                     const std::map<std::string, std::string>& metadata)
    : path_(std::move(path)), tmp_(path_ + ".tmp"), tensors_(std::move(tensors)) {
  const std::string header = safetensors_header(tensors_, metadata, path_);
  for (const TensorDecl& t : tensors_) {
    sizes_.push_back(decl_bytes(t));
    data_bytes_ += sizes_.back();
  }
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) throw Error("safetensors", tmp_ + ": cannot create: " + errno_text(errno));
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(static_cast<uint64_t>(header.size()) >> (8 * i));
  try {
    write_raw(len, sizeof(len));
    write_raw(header.data(), header.size());
  } catch (...) {
    ::close(fd_);
    fd_ = -1;
    ::unlink(tmp_.c_str());
    throw;
  }
}

SafetensorsWriter::~SafetensorsWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (!finished_) ::unlink(tmp_.c_str());
}

void SafetensorsWriter::fail(const std::string& message) const { throw Error("safetensors", path_ + ": " + message); }

void SafetensorsWriter::write_raw(const void* data, size_t nbytes) {
  const char* c = static_cast<const char*>(data);
  while (nbytes > 0) {
    ssize_t w = ::write(fd_, c, nbytes);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) fail("write failed: " + errno_text(errno));
    c += w;
    nbytes -= static_cast<size_t>(w);
  }
}

void SafetensorsWriter::write_part(const std::string& name, const void* data, size_t nbytes) {
  if (finished_ || fd_ < 0) fail("write of '" + name + "' after finish()");
  // Zero-byte tensors are complete as soon as they are reached.
  while (next_ < tensors_.size() && sizes_[next_] == 0 && tensors_[next_].name != name) ++next_;
  if (next_ >= tensors_.size()) fail("tensor '" + name + "' written past the last declared tensor");
  const TensorDecl& t = tensors_[next_];
  if (t.name != name) fail("tensor '" + name + "' written where '" + t.name + "' is next");
  if (written_of_next_ + nbytes > sizes_[next_])
    fail(strfmt("tensor '%s': %llu bytes written, its declaration %s %s holds %llu", name.c_str(),
                (unsigned long long)(written_of_next_ + nbytes), dtype_safetensors_name(t.dtype),
                shape_text(t.shape).c_str(), (unsigned long long)sizes_[next_]));
  if (nbytes > 0) write_raw(data, nbytes);
  written_of_next_ += nbytes;
  if (written_of_next_ == sizes_[next_]) {
    ++next_;
    written_of_next_ = 0;
  }
}

void SafetensorsWriter::write(const std::string& name, const void* data, size_t nbytes) {
  if (next_ < tensors_.size() && tensors_[next_].name == name && written_of_next_ == 0 && nbytes != sizes_[next_])
    fail(strfmt("tensor '%s': %zu bytes given, its declaration holds %llu", name.c_str(), nbytes,
                (unsigned long long)sizes_[next_]));
  write_part(name, data, nbytes);
}

void SafetensorsWriter::write(const std::string& name, const Tensor& t) {
  if (!t.device.is_cpu()) fail("tensor '" + name + "' is not a CPU tensor");
  if (!t.is_contiguous()) fail("tensor '" + name + "' is not contiguous");
  if (t.nbytes() > 0 && !t.data) fail("tensor '" + name + "' has no data");
  if (next_ < tensors_.size() && tensors_[next_].name == name) {
    const TensorDecl& d = tensors_[next_];
    const std::vector<int64_t> shape(t.shape, t.shape + t.ndim);
    if (d.dtype != t.dtype || d.shape != shape)
      fail("tensor '" + name + "' is " + t.shape_str() + ", declared " + shape_text(d.shape) + " " +
           dtype_name(d.dtype));
  }
  write(name, t.data, t.nbytes());
}

void SafetensorsWriter::finish() {
  if (finished_) return;
  while (next_ < tensors_.size() && sizes_[next_] == 0) ++next_;
  if (next_ < tensors_.size()) fail("finish() before tensor '" + tensors_[next_].name + "' was written");
  if (::fsync(fd_) != 0) fail("fsync failed: " + errno_text(errno));
  const int rc = ::close(fd_);
  fd_ = -1;
  if (rc != 0 || ::rename(tmp_.c_str(), path_.c_str()) != 0) fail("cannot finish writing: " + errno_text(errno));
  finished_ = true;
}

void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  std::vector<TensorDecl> decls;
  for (const auto& [name, t] : tensors) decls.push_back({name, t.dtype, std::vector<int64_t>(t.shape, t.shape + t.ndim)});
  SafetensorsWriter w(path, std::move(decls), metadata);
  for (const auto& [name, t] : tensors) w.write(name, t);
  w.finish();
}

}  // namespace bunsen::model
