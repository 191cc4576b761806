// Model selection for `bunsen serve` (see serve_model.h).
#include "cli/serve_model.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "core/env.h"
#include "core/status.h"
#include "hub/demo_model.h"

namespace bunsen::cli {
namespace fs = std::filesystem;
namespace {

std::string lower(std::string s) {
  for (char& c : s)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return s;
}

std::string env(const char* name) {
  return std::string(env_str(name));
}

bool looks_like_path(const std::string& s) {
  return s.starts_with("/") || s.starts_with("./") || s.starts_with("../") || s.starts_with("~") || s == "." ||
         s == "..";
}

// The snapshot an HF cache repo directory points at: refs/main when it names an existing snapshot, else the
// most recently modified snapshot; "" when there is none.
std::string pick_snapshot(const fs::path& repo_dir) {
  std::error_code ec;
  std::ifstream ref(repo_dir / "refs" / "main");
  std::string rev;
  if (ref && std::getline(ref, rev) && !rev.empty() && fs::is_directory(repo_dir / "snapshots" / rev, ec))
    return (repo_dir / "snapshots" / rev).string();
  fs::path best;
  fs::file_time_type best_time{};
  for (const auto& e : fs::directory_iterator(repo_dir / "snapshots", ec)) {
    if (!e.is_directory(ec)) continue;
    auto t = e.last_write_time(ec);
    if (best.empty() || t > best_time) best = e.path(), best_time = t;
  }
  return best.string();
}

struct Candidate {
  std::string name;  // org/name (HF cache) or the directory name (bunsen cache)
  std::string dir;
};

std::vector<Candidate> local_models() {
  std::vector<Candidate> out;
  std::error_code ec;
  for (const std::string& root : hf_cache_roots()) {
    for (const auto& e : fs::directory_iterator(root, ec)) {
      std::string base = e.path().filename().string();
      if (!base.starts_with("models--")) continue;
      std::string snap = pick_snapshot(e.path());
      if (!snap.empty()) out.push_back({model_display_id(snap), snap});
    }
  }
  for (const auto& e : fs::directory_iterator(hub::cache_dir() + "/models", ec)) {
    if (e.is_directory(ec) && fs::exists(e.path() / "config.json", ec))
      out.push_back({e.path().filename().string(), e.path().string()});
  }
  return out;
}

ServeModel from_query(const std::string& query) {
  std::vector<Candidate> all = local_models();
  const std::string q = lower(query);
  std::vector<Candidate> hits;
  for (const Candidate& c : all)
    if (lower(c.name) == q) return {c.dir, c.name, false};  // an exact name wins over substrings
  for (const Candidate& c : all)
    if (lower(c.name).find(q) != std::string::npos) hits.push_back(c);
  if (hits.empty())
    throw Error("cli", "bunsen serve: no local model matches '" + query +
                           "' (give a model directory, or download the model into the Hugging Face cache first)");
  if (hits.size() > 1) {
    std::string names;
    for (const Candidate& c : hits) names += (names.empty() ? "" : ", ") + c.name;
    throw Error("cli", "bunsen serve: '" + query + "' matches several local models (" + names + "); be more specific");
  }
  return {hits[0].dir, hits[0].name, false};
}

}  // namespace

std::vector<std::string> hf_cache_roots() {
  std::vector<std::string> roots;
  if (!env("HF_HUB_CACHE").empty()) roots.push_back(env("HF_HUB_CACHE"));
  if (!env("HF_HOME").empty()) roots.push_back(env("HF_HOME") + "/hub");
  if (!env("XDG_CACHE_HOME").empty()) roots.push_back(env("XDG_CACHE_HOME") + "/huggingface/hub");
  if (!env("HOME").empty()) roots.push_back(env("HOME") + "/.cache/huggingface/hub");
  std::vector<std::string> out;
  std::error_code ec;
  for (const std::string& r : roots)
    if (fs::is_directory(r, ec) && std::find(out.begin(), out.end(), r) == out.end()) out.push_back(r);
  return out;
}

std::string model_display_id(const std::string& dir) {
  fs::path p = fs::path(dir).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();  // trailing slash
  fs::path snapshots = p.parent_path();
  std::string repo = snapshots.parent_path().filename().string();
  if (snapshots.filename() == "snapshots" && repo.starts_with("models--")) {
    std::string rest = repo.substr(8);
    size_t sep = rest.find("--");
    if (sep != std::string::npos) return rest.substr(0, sep) + "/" + rest.substr(sep + 2);
    return rest;
  }
  std::string name = p.filename().string();
  return name.empty() ? dir : name;
}

int64_t weights_file_bytes(const std::string& dir) {
  int64_t total = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (e.path().extension() == ".safetensors") total += static_cast<int64_t>(e.file_size(ec));
  }
  return total;
}

void check_model_dir(const std::string& dir, const std::string& what) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) throw Error("cli", "bunsen serve: " + what + " " + dir + ": no such directory");
  if (!fs::is_directory(dir, ec)) throw Error("cli", "bunsen serve: " + what + " " + dir + ": not a directory");
  if (!fs::exists(fs::path(dir) / "config.json", ec))
    throw Error("cli", "bunsen serve: " + what + " " + dir + ": not a model directory (no config.json)");
  bool weights = false;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().extension() == ".safetensors") weights = true;
  if (!weights) throw Error("cli", "bunsen serve: " + what + " " + dir + ": no weights (*.safetensors) in that directory");
}

ServeModel resolve_serve_model(const std::optional<std::string>& model_flag, const std::optional<std::string>& positional,
                               const std::optional<std::string>& query) {
  std::optional<std::string> chosen = model_flag ? model_flag : positional ? positional : query;
  const std::string what = model_flag ? "--model" : positional ? "model" : "--query";
  if (!chosen) {
    ServeModel m;
    m.dir = hub::ensure_demo_model();
    m.id = model_display_id(m.dir);
    m.demo = true;
    return m;
  }
  check(!chosen->empty(), "cli", "bunsen serve: " + what + " is empty");
  std::error_code ec;
  if (fs::exists(*chosen, ec) || looks_like_path(*chosen)) {
    check_model_dir(*chosen, what);
    return {*chosen, model_display_id(*chosen), false};
  }
  ServeModel m = from_query(*chosen);
  check_model_dir(m.dir, what);
  return m;
}

}  // namespace bunsen::cli
