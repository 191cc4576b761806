// `bunsen serve` model selection (mlx-bun semantics): --model > positional > --query; a directory holding
// config.json loads from that path; anything else is a query matched against the local Hugging Face cache
// (models--org--name/snapshots/<rev>) and bunsen's own model cache; no model at all -> the demo model.
// Also the display id ("org/name" for an HF-cache snapshot, else the directory name). Not a downloader.
// Invariant: every failure is one line (Error("cli", "bunsen serve: ...")).
#pragma once
#include <optional>
#include <string>
#include <vector>

namespace bunsen::cli {

struct ServeModel {
  std::string dir;  // the model directory
  std::string id;   // what /v1/models lists
  bool demo = false;
};

// `model_flag`, `positional`, `query` as given on the command line (in precedence order).
ServeModel resolve_serve_model(const std::optional<std::string>& model_flag,
                               const std::optional<std::string>& positional,
                               const std::optional<std::string>& query);

// "org/name" when `dir` is …/models--org--name/snapshots/<rev>, else the directory's own name.
std::string model_display_id(const std::string& dir);

// Throws the one-line error when `dir` is not a loadable model directory (no config.json, no weights).
void check_model_dir(const std::string& dir, const std::string& what);

// Total bytes of DIR's *.safetensors files.
int64_t weights_file_bytes(const std::string& dir);

// Where Hugging Face keeps its hub cache: $HF_HUB_CACHE, $HF_HOME/hub, $XDG_CACHE_HOME/huggingface/hub,
// ~/.cache/huggingface/hub (existing ones, in that order).
std::vector<std::string> hf_cache_roots();

}  // namespace bunsen::cli
