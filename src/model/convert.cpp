// convert_checkpoint: plan the output tensors (quantized triples or verbatim copies), cut them into shards,
// stream each shard through SafetensorsWriter (quantizing row blocks in parallel), then write the index,
// config.json and the copied tokenizer files, all inside DST.tmp-PID renamed to DST at the end.
// Not a CLI. Invariants: a quantized weight's three tensors land in one shard; tensor order inside a shard
// is sorted by name (weight_map is sorted too); a failure removes the temp directory.
#include "model/convert.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/status.h"
#include "core/thread_pool.h"
#include "kernels/float_io.h"
#include "model/config.h"
#include "model/safetensors_writer.h"
#include "model/weights.h"

namespace bunsen::model {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr size_t kBlockBytes = size_t{64} << 20;  // f32 bytes of source rows quantized per block

struct OutItem {
  std::string name;  // source tensor name
  Tensor src;        // its view in the source store
  bool quantized = false;
  std::vector<TensorDecl> decls;  // 1 (copy) or 3 (weight, scales, biases)
  uint64_t bytes = 0;             // sum of the decls' sizes
};

std::string base_of(const std::string& weight_name) {
  return weight_name.substr(0, weight_name.size() - std::string(".weight").size());
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// mlx-lm's per-family sanitize drops these before saving: rotary tables and the tied lm_head.
bool dropped(const std::string& name, bool tied) {
  return name.find("rotary_emb.inv_freq") != std::string::npos || (tied && name == "lm_head.weight");
}

OutItem plan_item(const std::string& name, const Tensor& t, const ConvertOptions& o) {
  OutItem it{name, t, false, {}, 0};
  const std::vector<int64_t> shape(t.shape, t.shape + t.ndim);
  it.quantized = o.quantize && is_quantizable(name, shape, is_float(t.dtype), o.spec.group_size);
  if (it.quantized) {
    const std::string base = base_of(name);
    const int64_t rows = shape[0], cols = shape[1];
    it.decls.push_back({base + ".weight", DType::kU32, {rows, packed_cols(cols, o.spec.bits)}});
    it.decls.push_back({base + ".scales", t.dtype, {rows, group_cols(cols, o.spec.group_size)}});
    it.decls.push_back({base + ".biases", t.dtype, {rows, group_cols(cols, o.spec.group_size)}});
  } else {
    it.decls.push_back({name, t.dtype, shape});
  }
  for (const TensorDecl& d : it.decls) it.bytes += decl_bytes(d);
  return it;
}

// Greedy cut in order: a shard closes before the item that would push it past max_bytes (never empty).
std::vector<std::vector<const OutItem*>> make_shards(const std::vector<OutItem>& items, uint64_t max_bytes) {
  std::vector<std::vector<const OutItem*>> shards(1);
  uint64_t size = 0;
  for (const OutItem& it : items) {
    if (!shards.back().empty() && size + it.bytes > max_bytes) {
      shards.emplace_back();
      size = 0;
    }
    shards.back().push_back(&it);
    size += it.bytes;
  }
  return shards;
}

// Quantizes `it.src` [rows, cols] (f32/f16/bf16) block by block: packed rows stream into the writer,
// scales/biases (rounded to the source dtype, as MLX stores them) are written after.
void write_quantized(SafetensorsWriter& w, const OutItem& it, QuantSpec spec) {
  const Tensor& src = it.src;
  const int64_t rows = src.dim(0), cols = src.dim(1);
  const int64_t pc = packed_cols(cols, spec.bits), gc = group_cols(cols, spec.group_size);
  const size_t ds = dtype_size(src.dtype);
  std::vector<uint8_t> scales(static_cast<size_t>(rows * gc) * ds), biases(scales.size());
  const int64_t block = std::clamp<int64_t>(static_cast<int64_t>(kBlockBytes / (4 * std::max<int64_t>(cols, 1))), 1,
                                            std::max<int64_t>(rows, 1));
  std::vector<uint32_t> packed(static_cast<size_t>(block * pc));
  for (int64_t r0 = 0; r0 < rows; r0 += block) {
    const int64_t n = std::min(block, rows - r0);
    ThreadPool::global().parallel_for(n, 16, [&](int64_t b, int64_t e) {
      std::vector<float> wf(static_cast<size_t>((e - b) * cols)), sf(static_cast<size_t>((e - b) * gc)), bf(sf.size());
      for (int64_t r = b; r < e; ++r) kernels::widen_row(src.row_ptr(r0 + r), src.dtype, cols, &wf[(r - b) * cols]);
      quantize_affine(wf.data(), e - b, cols, spec, &packed[b * pc], sf.data(), bf.data());
      const int64_t at = (r0 + b) * gc;
      for (int64_t i = 0; i < (e - b) * gc; ++i) {
        kernels::store_f(scales.data(), src.dtype, at + i, sf[i]);
        kernels::store_f(biases.data(), src.dtype, at + i, bf[i]);
      }
    });
    w.write_part(it.decls[0].name, packed.data(), static_cast<size_t>(n * pc) * sizeof(uint32_t));
  }
  if (rows == 0) w.write_part(it.decls[0].name, nullptr, 0);
  w.write(it.decls[1].name, scales.data(), scales.size());
  w.write(it.decls[2].name, biases.data(), biases.size());
}

std::string shard_name(size_t i, size_t n) {
  return n == 1 ? "model.safetensors" : strfmt("model-%05zu-of-%05zu.safetensors", i + 1, n);
}

json read_json(const fs::path& p) {
  std::ifstream f(p);
  if (!f) throw Error("convert", "cannot read " + p.string());
  std::stringstream ss;
  ss << f.rdbuf();
  try {
    return json::parse(ss.str());
  } catch (const json::exception& e) {
    throw Error("convert", p.string() + ": " + e.what());
  }
}

void write_text(const fs::path& p, const std::string& text) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f << text;
  f.close();
  if (!f) throw Error("convert", "cannot write " + p.string());
}

// config.json as mlx-lm's save_config writes it: _name_or_path and vision_config dropped, the quantization
// block twice, keys sorted, 4-space indent.
void write_config(const fs::path& src, const fs::path& dir, const ConvertOptions& o) {
  json cfg = read_json(src / "config.json");
  check(cfg.is_object(), "convert", (src / "config.json").string() + " is not a JSON object");
  cfg.erase("_name_or_path");
  cfg.erase("vision_config");
  if (o.quantize) {
    const json q = {{"group_size", o.spec.group_size}, {"bits", o.spec.bits}, {"mode", "affine"}};
    cfg["quantization"] = q;
    cfg["quantization_config"] = q;
  }
  write_text(dir / "config.json", cfg.dump(4) + "\n");
}

std::vector<std::string> copy_side_files(const fs::path& src, const fs::path& dir) {
  std::vector<std::string> copied;
  for (const auto& entry : fs::directory_iterator(src)) {
    if (!entry.is_regular_file()) continue;
    const std::string n = entry.path().filename().string();
    const auto& names = convert_copied_names();
    const bool wanted = std::find(names.begin(), names.end(), n) != names.end() || ends_with(n, ".model") ||
                        ends_with(n, ".tiktoken") || ends_with(n, ".py");
    if (!wanted) continue;
    fs::copy_file(entry.path(), dir / n, fs::copy_options::overwrite_existing);
    copied.push_back(n);
  }
  std::sort(copied.begin(), copied.end());
  return copied;
}

std::vector<OutItem> plan(const WeightStore& ws, const ConvertOptions& o, bool tied) {
  std::vector<std::string> names = ws.names();
  std::sort(names.begin(), names.end());
  std::vector<OutItem> items;
  for (const std::string& n : names)
    if (!dropped(n, tied)) items.push_back(plan_item(n, ws.get(n), o));
  return items;
}

void check_inputs(const ConvertOptions& o, const fs::path& src) {
  check(!o.dst.empty(), "convert", "the destination path is empty");
  std::error_code ec;
  check(!fs::exists(o.dst, ec) && !fs::is_symlink(o.dst, ec), "convert",
        "cannot save to the path " + o.dst + " as it already exists; delete it or choose another path");
  check(fs::is_directory(src, ec), "convert", "source " + o.src + " is not a directory");
  check(fs::exists(src / "config.json", ec), "convert", "source " + o.src + " has no config.json");
  if (o.quantize) {
    check_supported(o.spec, "convert");
    const json cfg = read_json(src / "config.json");
    check(!cfg.contains("quantization") && !cfg.contains("quantization_config"), "convert",
          "source " + o.src + " is already quantized (its config.json has a quantization block)");
  }
  check(o.max_shard_bytes > 0, "convert", "the shard size must be positive");
}

// Writes every shard and the index into `dir`; fills the result's tensor/shard counts.
void write_weights(const std::vector<OutItem>& items, const fs::path& dir, const ConvertOptions& o, ConvertResult& r) {
  const auto shards = make_shards(items, o.max_shard_bytes);
  json weight_map = json::object();
  uint64_t params = 0, src_total = 0, src_done = 0;
  for (const OutItem& it : items) src_total += it.src.nbytes();
  size_t index = 0;
  for (size_t s = 0; s < shards.size(); ++s) {
    const std::string file = shard_name(s, shards.size());
    std::vector<TensorDecl> decls;
    for (const OutItem* it : shards[s]) decls.insert(decls.end(), it->decls.begin(), it->decls.end());
    SafetensorsWriter w((dir / file).string(), decls);
    for (const OutItem* it : shards[s]) {
      if (it->quantized) {
        write_quantized(w, *it, o.spec);
        ++r.n_quantized;
      } else {
        w.write(it->name, it->src);
      }
      for (const TensorDecl& d : it->decls) weight_map[d.name] = file;
      params += static_cast<uint64_t>(it->src.numel());
      src_done += it->src.nbytes();
      if (o.progress) o.progress({++index, items.size(), it->name, it->quantized, src_done, src_total});
    }
    w.finish();
    r.total_bytes += w.data_bytes();
    r.n_tensors += decls.size();
    r.shard_files.push_back(file);
  }
  r.n_shards = shards.size();
  const json idx = {{"metadata", {{"total_size", r.total_bytes}, {"total_parameters", params}}},
                    {"weight_map", weight_map}};
  write_text(dir / "model.safetensors.index.json", idx.dump(4) + "\n");
}

}  // namespace

bool is_quantizable(const std::string& name, const std::vector<int64_t>& shape, bool is_float_dtype,
                    int group_size) {
  if (!is_float_dtype || shape.size() != 2 || !ends_with(name, ".weight") || group_size <= 0) return false;
  const std::string base = base_of(name);
  const std::string leaf = base.substr(base.rfind('.') == std::string::npos ? 0 : base.rfind('.') + 1);
  if (leaf.find("norm") != std::string::npos) return false;  // a norm's weight is never a Linear's
  return shape[1] > 0 && shape[1] % group_size == 0;
}

const std::vector<std::string>& convert_copied_names() {
  static const std::vector<std::string> names = {
      "tokenizer.json",     "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
      "chat_template.jinja", "chat_template.json",   "generation_config.json", "vocab.json",
      "merges.txt"};
  return names;
}

ConvertResult convert_checkpoint(const ConvertOptions& o) {
  const fs::path src(o.src), dst(o.dst);
  check_inputs(o, src);
  const ModelConfig cfg = load_config(o.src);
  const WeightStore ws = WeightStore::open(o.src);
  const std::vector<OutItem> items = plan(ws, o, cfg.tie_word_embeddings);

  if (dst.has_parent_path()) fs::create_directories(dst.parent_path());
  const fs::path tmp = dst.string() + ".tmp-" + std::to_string(::getpid());
  std::error_code ec;
  fs::remove_all(tmp, ec);
  fs::create_directories(tmp);
  ConvertResult r;
  try {
    write_weights(items, tmp, o, r);
    write_config(src, tmp, o);
    r.copied_files = copy_side_files(src, tmp);
    fs::rename(tmp, dst);
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }
  return r;
}

}  // namespace bunsen::model
