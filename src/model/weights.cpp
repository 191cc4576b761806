// WeightStore: name -> Tensor views over mmap'd safetensors files (single file or an HF sharded index),
// plus in-memory tensors for synthetic models and tests.
// Not a format parser (safetensors.cpp) and not model-specific (arch/ maps names). Invariants: every file
// is fully validated before any view is created; a tensor name maps to exactly one shard; views stay valid
// for the store's lifetime (mappings and owned buffers are heap objects that moves do not relocate).
#include "model/weights.h"

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "core/status.h"

namespace bunsen::model {
namespace {

namespace fs = std::filesystem;

constexpr const char* kIndexName = "model.safetensors.index.json";
constexpr const char* kSingleName = "model.safetensors";

bool path_exists(const fs::path& p) {
  std::error_code ec;
  return fs::exists(p, ec);
}

std::string dims_str(const int64_t* dims, size_t n) {
  std::string s = "[";
  for (size_t i = 0; i < n; ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + "]";
}

// Shard names come from a downloaded file: keep them inside the snapshot directory.
bool is_safe_relative(const std::string& name) {
  fs::path p(name);
  if (name.empty() || p.is_absolute()) return false;
  for (const auto& part : p)
    if (part == "..") return false;
  return true;
}

// weight_map of the index: tensor name -> shard file name.
std::map<std::string, std::string> read_weight_map(const std::string& index_path) {
  MappedFile file(index_path);
  nlohmann::json root;
  try {
    const char* text = reinterpret_cast<const char*>(file.data());
    root = nlohmann::json::parse(text, text + file.size());
  } catch (const nlohmann::json::exception& e) {
    throw Error("weights", index_path + ": not valid JSON: " + e.what());
  }
  auto wm = root.is_object() ? root.find("weight_map") : root.end();
  if (!root.is_object() || wm == root.end() || !wm->is_object())
    throw Error("weights", index_path + ": no \"weight_map\" object");
  std::map<std::string, std::string> out;
  for (const auto& [tensor, shard] : wm->items()) {
    if (!shard.is_string())
      throw Error("weights", index_path + ": weight_map entry for '" + tensor + "' is not a string");
    const auto& name = shard.get_ref<const std::string&>();
    if (!is_safe_relative(name))
      throw Error("weights",
                  index_path + ": shard '" + name + "' is not a relative path inside the directory");
    out.emplace(tensor, name);
  }
  check(!out.empty(), "weights", index_path + ": weight_map is empty");
  return out;
}

}  // namespace

WeightStore WeightStore::open_file(const std::string& path) {
  WeightStore store;
  store.root_ = path;
  auto file = std::make_unique<MappedFile>(path);
  SafetensorsHeader header = parse_safetensors_header(file->data(), file->size(), path);
  store.sources_.push_back(path);
  for (const auto& t : header.tensors) {
    // The mapping is PROT_READ; callers never write weights, Tensor just has no const view type.
    void* p = const_cast<uint8_t*>(file->data() + header.data_offset + t.begin);
    store.entries_.emplace(t.name, Entry{Tensor::view(p, t.dtype, t.shape), 0});
  }
  store.files_.push_back(std::move(file));
  return store;
}

WeightStore WeightStore::open(const std::string& dir) {
  const fs::path root(dir);
  if (!path_exists(root / kIndexName)) {
    if (!path_exists(root / kSingleName))
      throw Error("weights", "no model.safetensors or model.safetensors.index.json in " + dir);
    WeightStore store = open_file((root / kSingleName).string());
    store.root_ = dir;
    return store;
  }
  const std::string index_path = (root / kIndexName).string();
  const std::map<std::string, std::string> weight_map = read_weight_map(index_path);
  std::set<std::string> shards;
  for (const auto& [tensor, shard] : weight_map) shards.insert(shard);

  WeightStore store;
  store.root_ = dir;
  for (const auto& shard : shards) {
    const std::string path = (root / shard).string();
    if (!path_exists(path))
      throw Error("weights", index_path + ": shard '" + shard + "' listed in the index does not exist");
    WeightStore part = open_file(path);
    const int source = static_cast<int>(store.sources_.size());
    store.sources_.push_back(path);
    store.files_.push_back(std::move(part.files_.front()));
    for (const auto& [name, entry] : part.entries_) {
      auto [it, inserted] = store.entries_.emplace(name, Entry{entry.tensor, source});
      if (!inserted)
        throw Error("weights", "tensor '" + name + "' appears in two shards: " +
                                   store.sources_[it->second.source] + " and " + path);
    }
  }
  for (const auto& [tensor, shard] : weight_map) {
    auto it = store.entries_.find(tensor);
    const std::string path = (root / shard).string();
    if (it == store.entries_.end() || store.sources_[it->second.source] != path)
      throw Error("weights", index_path + ": tensor '" + tensor + "' is missing from its shard " + path);
  }
  return store;
}

bool WeightStore::has(std::string_view name) const {
  return entries_.count(std::string(name)) > 0;
}

Tensor WeightStore::get(std::string_view name) const {
  auto it = entries_.find(std::string(name));
  if (it == entries_.end())
    throw Error("weights", "missing tensor '" + std::string(name) + "' in " +
                               (root_.empty() ? std::string("in-memory weights") : root_));
  return it->second.tensor;
}

Tensor WeightStore::get(std::string_view name, std::initializer_list<int64_t> shape) const {
  Tensor t = get(name);
  const bool same =
      static_cast<size_t>(t.ndim) == shape.size() && std::equal(shape.begin(), shape.end(), t.shape);
  if (!same)
    throw Error("weights", "tensor '" + std::string(name) + "' in " + source_of(name) + " has shape " +
                               dims_str(t.shape, static_cast<size_t>(t.ndim)) + ", expected " +
                               dims_str(shape.begin(), shape.size()));
  return t;
}

std::string WeightStore::source_of(std::string_view name) const {
  auto it = entries_.find(std::string(name));
  if (it == entries_.end()) get(name);  // throws the "missing tensor" error
  return it->second.source < 0 ? std::string("<in-memory>") : sources_[it->second.source];
}

std::vector<std::string> WeightStore::names() const {
  std::vector<std::string> out;
  out.reserve(entries_.size());
  for (const auto& [name, entry] : entries_) out.push_back(name);
  std::sort(out.begin(), out.end());
  return out;
}

size_t WeightStore::total_bytes() const {
  size_t n = 0;
  for (const auto& [name, entry] : entries_) n += entry.tensor.nbytes();
  return n;
}

void WeightStore::add(const std::string& name, OwnedTensor t) {
  // A replaced tensor's buffer is kept alive: views handed out earlier must stay valid (header invariant).
  owned_.push_back(std::make_unique<OwnedTensor>(std::move(t)));
  entries_[name] = Entry{owned_.back()->tensor, -1};
}

}  // namespace bunsen::model
