// The built-in demo model: a tiny Qwen3-shaped model with deterministic random weights (model/synthetic.h)
// and the real Qwen3 tokenizer, written on first use into the cache directory so `bunsen generate` and
// `make serve` work on a fresh machine with no download. Its weights are random: it produces gibberish
// by design; real models are Hugging Face snapshot directories. Invariant: the files are byte-identical on
// every machine; an incomplete directory (no DONE marker) is rebuilt.
#pragma once
#include <string>

namespace bunsen::hub {

// $BUNSEN_CACHE, else $XDG_CACHE_HOME/bunsen, else $HOME/.cache/bunsen.
std::string cache_dir();

// Creates (if needed) and returns the demo model directory: <cache_dir>/models/demo-qwen3-tiny, or under
// `root` when given (tests).
std::string ensure_demo_model(const std::string& root = {});

// The demo's config.json text and weight seed (shared with the golden fixture "qwen3_demo").
const char* demo_config_json();
uint64_t demo_seed();

}  // namespace bunsen::hub
