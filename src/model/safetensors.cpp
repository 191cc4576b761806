// Safetensors format: header parsing + validation, read-only file mapping, and writing.
// Not a tensor store (weights.cpp) and not model-specific. Invariants: the parser reads only bytes
// [0, 8 + header_len) and only after checking they lie inside the file; every failure is a one-line
// Error("safetensors", "<file>: ...") naming the tensor where there is one; written files are
// complete or absent (PATH.tmp + fsync + rename).
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <limits>
#include <nlohmann/json.hpp>
#include <system_error>
#include <tuple>
#include <unordered_set>

#include "core/status.h"
#include "model/weights.h"

namespace bunsen::model {
namespace {

using json = nlohmann::json;

[[noreturn]] void fail(const std::string& source, const std::string& message) {
  throw Error("safetensors", source + ": " + message);
}

std::string errno_text(int err) {
  return std::error_code(err, std::generic_category()).message();
}

// Quoted name for messages: control characters escaped and long names cut, so an error stays one line.
std::string quote(std::string_view name) {
  constexpr size_t kMaxShown = 200;
  std::string out = "'";
  for (size_t i = 0; i < name.size() && i < kMaxShown; ++i) {
    unsigned char c = static_cast<unsigned char>(name[i]);
    if (c < 0x20 || c == 0x7f)
      out += strfmt("\\x%02x", c);
    else
      out += static_cast<char>(c);
  }
  if (name.size() > kMaxShown) out += "...";
  return out + "'";
}

uint64_t read_le64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// Offset of the first byte that does not start a well-formed UTF-8 sequence (overlong forms,
// surrogates and code points past U+10FFFF are rejected), or npos when all of `s` is valid.
size_t find_invalid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    size_t len = 0;
    uint32_t cp = 0, min_cp = 0;
    if ((c & 0xe0) == 0xc0) {
      len = 2, cp = c & 0x1fu, min_cp = 0x80;
    } else if ((c & 0xf0) == 0xe0) {
      len = 3, cp = c & 0x0fu, min_cp = 0x800;
    } else if ((c & 0xf8) == 0xf0) {
      len = 4, cp = c & 0x07u, min_cp = 0x10000;
    } else {
      return i;
    }
    if (s.size() - i < len) return i;
    for (size_t k = 1; k < len; ++k) {
      unsigned char cc = static_cast<unsigned char>(s[i + k]);
      if ((cc & 0xc0) != 0x80) return i;
      cp = (cp << 6) | (cc & 0x3fu);
    }
    if (cp < min_cp || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return i;
    i += len;
  }
  return std::string_view::npos;
}

// A valid header nests 3 deep (root -> entry -> shape); the cap keeps hostile input from costing
// gigabytes of DOM nodes.
constexpr int kMaxJsonDepth = 16;

// Parses JSON, rejecting duplicate keys in any object (nlohmann would silently keep the last one) and
// nesting deeper than kMaxJsonDepth.
json parse_json_strict(std::string_view text, const std::string& source) {
  std::vector<std::unordered_set<std::string>> open_objects;  // keys seen, one set per open object
  std::string duplicate;
  bool duplicate_is_tensor = false;
  json::parser_callback_t callback = [&](int depth, json::parse_event_t event, json& parsed) {
    const bool opens =
        event == json::parse_event_t::object_start || event == json::parse_event_t::array_start;
    if (opens && depth >= kMaxJsonDepth)
      fail(source, strfmt("header JSON nests deeper than %d levels", kMaxJsonDepth));
    if (event == json::parse_event_t::object_start) {
      open_objects.emplace_back();
    } else if (event == json::parse_event_t::object_end) {
      open_objects.pop_back();
    } else if (event == json::parse_event_t::key && !open_objects.empty()) {
      const auto& key = parsed.get_ref<const std::string&>();
      if (!open_objects.back().insert(key).second && duplicate.empty()) {
        duplicate = key;
        duplicate_is_tensor = open_objects.size() == 1;
      }
    }
    return true;
  };
  json root;
  try {
    root = json::parse(text.begin(), text.end(), callback);
  } catch (const json::exception& e) {
    fail(source, std::string("header is not valid JSON: ") + e.what());
  }
  if (!duplicate.empty())
    fail(source, duplicate_is_tensor ? "duplicate tensor name " + quote(duplicate) + " in header"
                                     : "duplicate key " + quote(duplicate) + " in header");
  return root;
}

// A JSON integer in [0, max], or nullopt (negative, fractional, too large, or not a number).
std::optional<uint64_t> as_count(const json& v, uint64_t max) {
  if (!v.is_number_integer()) return std::nullopt;  // true for both signed and unsigned integers
  if (v.is_number_unsigned()) {
    uint64_t u = v.get<uint64_t>();
    return u <= max ? std::optional<uint64_t>(u) : std::nullopt;
  }
  int64_t i = v.get<int64_t>();
  return i >= 0 && static_cast<uint64_t>(i) <= max ? std::optional<uint64_t>(static_cast<uint64_t>(i))
                                                   : std::nullopt;
}

std::string dims_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

TensorInfo parse_entry(const std::string& name, const json& v, const std::string& source) {
  auto bad = [&](const std::string& what) { fail(source, "tensor " + quote(name) + ": " + what); };
  if (!v.is_object()) bad("header entry is not an object");
  TensorInfo info;
  info.name = name;

  auto dt = v.find("dtype");
  if (dt == v.end() || !dt->is_string()) bad("missing or non-string \"dtype\"");
  auto dtype = dtype_from_safetensors(dt->get_ref<const std::string&>());
  if (!dtype) bad("unsupported dtype " + quote(dt->get_ref<const std::string&>()));
  info.dtype = *dtype;

  auto sh = v.find("shape");
  if (sh == v.end() || !sh->is_array()) bad("missing or non-array \"shape\"");
  if (sh->size() > static_cast<size_t>(kMaxDims))
    bad(strfmt("shape has %zu dims, at most %d are supported", sh->size(), kMaxDims));
  for (const auto& d : *sh) {
    auto n = as_count(d, static_cast<uint64_t>(std::numeric_limits<int64_t>::max()));
    if (!n) bad("shape " + sh->dump() + " is not a list of non-negative integers");
    info.shape.push_back(static_cast<int64_t>(*n));
  }

  auto off = v.find("data_offsets");
  if (off == v.end() || !off->is_array() || off->size() != 2)
    bad("\"data_offsets\" is not a [begin, end] pair");
  auto begin = as_count((*off)[0], std::numeric_limits<uint64_t>::max());
  auto end = as_count((*off)[1], std::numeric_limits<uint64_t>::max());
  if (!begin || !end) bad("data_offsets " + off->dump() + " are not non-negative integers");
  if (*begin > *end)
    bad(strfmt("data_offsets begin %llu > end %llu", (unsigned long long)*begin, (unsigned long long)*end));
  info.begin = *begin;
  info.end = *end;

  uint64_t bytes = dtype_size(info.dtype);
  for (int64_t d : info.shape)
    if (__builtin_mul_overflow(bytes, static_cast<uint64_t>(d), &bytes))
      bad("shape " + dims_str(info.shape) + " overflows a 64-bit byte count");
  if (bytes != info.end - info.begin)
    bad(strfmt("shape %s of %s needs %llu bytes but data_offsets [%llu, %llu] span %llu",
               dims_str(info.shape).c_str(), dtype_safetensors_name(info.dtype), (unsigned long long)bytes,
               (unsigned long long)info.begin, (unsigned long long)info.end,
               (unsigned long long)(info.end - info.begin)));
  return info;
}

std::map<std::string, std::string> parse_metadata(const json& v, const std::string& source) {
  if (!v.is_object()) fail(source, "\"__metadata__\" is not an object");
  std::map<std::string, std::string> out;
  for (const auto& [key, value] : v.items()) {
    if (!value.is_string()) fail(source, "\"__metadata__\" value for key " + quote(key) + " is not a string");
    out.emplace(key, value.get<std::string>());
  }
  return out;
}

// Tensors sorted by begin must tile the data section exactly: no gap, overlap, or trailing bytes.
void check_layout(const std::vector<TensorInfo>& tensors, uint64_t data_size, const std::string& source) {
  using ull = unsigned long long;
  uint64_t expect = 0;
  const TensorInfo* prev = nullptr;
  for (const auto& t : tensors) {
    if (t.begin != expect) {
      if (!prev)
        fail(source, strfmt("gap: first tensor %s begins at byte %llu, expected 0", quote(t.name).c_str(),
                            (ull)t.begin));
      if (t.begin > expect)
        fail(source,
             strfmt("gap of %llu bytes between tensor %s (ends at %llu) and tensor %s (begins at %llu)",
                    (ull)(t.begin - expect), quote(prev->name).c_str(), (ull)expect, quote(t.name).c_str(),
                    (ull)t.begin));
      fail(source,
           strfmt("tensor %s [%llu, %llu) overlaps tensor %s [%llu, %llu)", quote(t.name).c_str(),
                  (ull)t.begin, (ull)t.end, quote(prev->name).c_str(), (ull)prev->begin, (ull)prev->end));
    }
    expect = t.end;
    prev = &t;
  }
  if (expect > data_size)
    fail(source,
         strfmt("file is truncated: tensor %s ends at byte %llu of the data section, which has only %llu",
                quote(prev->name).c_str(), (ull)expect, (ull)data_size));
  if (expect < data_size)
    fail(source,
         strfmt("%llu trailing bytes after the last tensor (data section is %llu bytes, tensors cover %llu)",
                (ull)(data_size - expect), (ull)data_size, (ull)expect));
}

// Writes all of [p, p + n) to fd, retrying short writes and EINTR.
void write_all(int fd, const void* p, size_t n, const std::string& path) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    ssize_t w = ::write(fd, c, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) throw Error("safetensors", path + ": write failed: " + errno_text(errno));
    c += w;
    n -= static_cast<size_t>(w);
  }
}

}  // namespace

SafetensorsHeader parse_safetensors_header(const uint8_t* data, size_t file_size, const std::string& source) {
  using ull = unsigned long long;
  if (file_size < 8)
    fail(source, strfmt("file is %zu bytes, shorter than the 8-byte header length", file_size));
  uint64_t header_len = read_le64(data);
  if (header_len == 0) fail(source, "header length is 0");
  if (header_len > kMaxSafetensorsHeaderBytes)
    fail(source, strfmt("header length %llu exceeds the %llu-byte limit", (ull)header_len,
                        (ull)kMaxSafetensorsHeaderBytes));
  if (header_len > file_size - 8)
    fail(source,
         strfmt("header length %llu goes past the end of the file (%zu bytes)", (ull)header_len, file_size));

  std::string_view text(reinterpret_cast<const char*>(data + 8), header_len);
  size_t bad = find_invalid_utf8(text);
  if (bad != std::string_view::npos)
    fail(source, strfmt("header is not valid UTF-8 (byte %zu of the header)", bad));
  json root = parse_json_strict(text, source);
  if (!root.is_object()) fail(source, "header is not a JSON object");

  SafetensorsHeader out;
  out.data_offset = 8 + header_len;
  for (const auto& [key, value] : root.items()) {
    if (key == "__metadata__")
      out.metadata = parse_metadata(value, source);
    else
      out.tensors.push_back(parse_entry(key, value, source));
  }
  std::sort(out.tensors.begin(), out.tensors.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
  });
  check_layout(out.tensors, file_size - out.data_offset, source);
  return out;
}

MappedFile::MappedFile(const std::string& path) : path_(path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error("io", path + ": cannot open: " + errno_text(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    throw Error("io", path + ": cannot stat: " + errno_text(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error("io", path + ": not a regular file");
  }
  size_ = static_cast<size_t>(st.st_size);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    int err = errno;
    ::close(fd);
    if (p == MAP_FAILED)
      throw Error("io",
                  strfmt("%s: cannot mmap %zu bytes: %s", path.c_str(), size_, errno_text(err).c_str()));
    data_ = static_cast<const uint8_t*>(p);
  } else {
    ::close(fd);
  }
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    auto& m = header["__metadata__"];
    m = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
  }
  uint64_t offset = 0;
  std::unordered_set<std::string> seen;
  for (const auto& item : tensors) {
    const std::string& name = item.first;  // not a structured binding: clang 14 cannot capture those
    const Tensor& t = item.second;
    auto bad = [&](const char* what) { fail(path, "cannot write tensor " + quote(name) + ": " + what); };
    if (name == "__metadata__") bad("reserved name");
    if (!seen.insert(name).second) bad("duplicate name");
    if (!t.device.is_cpu()) bad("not a CPU tensor");
    if (!t.is_contiguous()) bad("not contiguous");
    if (t.nbytes() > 0 && !t.data) bad("no data");
    nlohmann::ordered_json entry;
    entry["dtype"] = dtype_safetensors_name(t.dtype);
    entry["shape"] = std::vector<int64_t>(t.shape, t.shape + t.ndim);
    entry["data_offsets"] = {offset, offset + t.nbytes()};
    header[name] = std::move(entry);
    offset += t.nbytes();
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::exception& e) {
    fail(path, std::string("cannot encode header: ") + e.what());
  }
  text.append((8 - text.size() % 8) % 8, ' ');  // keeps the data section 8-byte aligned

  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(static_cast<uint64_t>(text.size()) >> (8 * i));
  const std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw Error("safetensors", tmp + ": cannot create: " + errno_text(errno));
  try {
    write_all(fd, len, sizeof(len), tmp);
    write_all(fd, text.data(), text.size(), tmp);
    for (const auto& [name, t] : tensors)
      if (t.nbytes() > 0) write_all(fd, t.data, t.nbytes(), tmp);
    if (::fsync(fd) != 0) throw Error("safetensors", tmp + ": fsync failed: " + errno_text(errno));
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  if (::close(fd) != 0 || ::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    throw Error("safetensors", path + ": cannot finish writing: " + errno_text(err));
  }
}

}  // namespace bunsen::model
