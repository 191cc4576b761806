// `bunsen tokenize` and `bunsen detokenize`: the tokenizer of a model (or of a directory holding only
// tokenizer.json [+ tokenizer_config.json]) from the command line: ids of a text (one "id<TAB>text" line
// per token, or a JSON array with --ids), JSON lines for scripting (--jsonl), an encode-throughput timer
// (--bench FILE), and ids back to text. Wiring only: the tokenizer is text::Tokenizer.
// Invariants: stdout carries only the requested output; errors are one line on stderr (main.cpp);
// detokenize prints the decoded text exactly, with no newline added.
#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/args.h"
#include "cli/commands.h"
#include "core/status.h"
#include "text/tokenizer.h"

namespace bunsen::cli {
namespace {

using nlohmann::json;

const std::vector<OptionSpec> kTokenizeSpecs = {
    {"model", "DIR", "model or tokenizer directory (tokenizer.json [+ tokenizer_config.json]); required",
     "m"},
    {"ids", "", "print only the ids, as one JSON array"},
    {"special", "", "add the tokenizer's special tokens (bos/eos, post-processor template)"},
    {"jsonl", "", "read one JSON string per line on stdin, write one JSON array of ids per line"},
    {"bench", "FILE", "time encoding FILE single-threaded (as one document and line by line); print JSON"},
    {"repeat", "N", "--bench: timed passes per mode, the best counts (default 3)"},
    {"help", "", "show this help", "h"},
};

const std::vector<OptionSpec> kDetokenizeSpecs = {
    {"model", "DIR", "model or tokenizer directory (tokenizer.json [+ tokenizer_config.json]); required",
     "m"},
    {"skip-special", "", "drop special tokens from the text"},
    {"help", "", "show this help", "h"},
};

std::unique_ptr<text::Tokenizer> open(const Args& a, const std::string& verb) {
  auto dir = a.str("model");
  if (!dir)
    throw Error("cli", "bunsen " + verb + ": --model DIR is required (a model or tokenizer directory)");
  return text::load_tokenizer(*dir);
}

std::string json_text(const std::string& s) {
  return json(s).dump(-1, ' ', false, json::error_handler_t::replace);
}

int run_jsonl(const text::Tokenizer& tok, bool special) {
  std::string line, out;
  for (int64_t n = 1; std::getline(std::cin, line); ++n) {
    if (line.empty()) continue;
    json j;
    try {
      j = json::parse(line);
    } catch (const json::exception& e) {
      throw Error("tokenize",
                  strfmt("stdin line %lld is not valid JSON: %s", static_cast<long long>(n), e.what()));
    }
    if (!j.is_string())
      throw Error("tokenize", strfmt("stdin line %lld must be a JSON string", static_cast<long long>(n)));
    out = json(tok.encode(j.get_ref<const std::string&>(), special)).dump();
    out += '\n';
    std::fwrite(out.data(), 1, out.size(), stdout);
  }
  return 0;
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error("tokenize", "cannot open " + path);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// Best of `repeat` timed passes of encode over `texts`: {strings, bytes, tokens, seconds (wall),
// cpu_seconds (this thread's CPU time, steadier on a shared machine), first_seconds, mb_per_s, tokens_per_s}.
json time_encode(const text::Tokenizer& tok, const std::vector<std::string_view>& texts, bool special,
                 int64_t repeat) {
  size_t bytes = 0, tokens = 0;
  for (auto t : texts) bytes += t.size();
  double best = 0, best_cpu = 0, first = 0;
  for (int64_t r = 0; r < repeat; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    double c0 = thread_cpu_seconds();
    size_t n = 0;
    for (auto t : texts) n += tok.encode(t, special).size();
    double cpu = thread_cpu_seconds() - c0;
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r == 0) first = s;
    best = r == 0 ? s : std::min(best, s);
    best_cpu = r == 0 ? cpu : std::min(best_cpu, cpu);
    tokens = n;
  }
  return {{"strings", texts.size()},
          {"bytes", bytes},
          {"tokens", tokens},
          {"seconds", best},
          {"cpu_seconds", best_cpu},
          {"first_seconds", first},
          {"mb_per_s", bytes / 1e6 / best},
          {"tokens_per_s", tokens / best}};
}

int run_bench(const text::Tokenizer& tok, const std::string& path, bool special, int64_t repeat) {
  check(repeat >= 1, "cli", "bunsen tokenize: --repeat must be >= 1");
  std::string data = read_file(path);
  std::vector<std::string_view> lines;
  for (size_t pos = 0; pos < data.size();) {
    size_t end = data.find('\n', pos);
    if (end == std::string::npos) end = data.size();
    if (end > pos) lines.emplace_back(data.data() + pos, end - pos);
    pos = end + 1;
  }
  json out = {{"file", path},
              {"threads", 1},
              {"document", time_encode(tok, {std::string_view(data)}, special, repeat)},
              {"lines", time_encode(tok, lines, special, repeat)}};
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}

std::vector<int32_t> parse_ids(const std::vector<std::string>& args) {
  std::vector<int32_t> ids;
  for (const std::string& arg : args) {
    std::string item;
    std::stringstream ss(arg);
    while (std::getline(ss, item, ',')) {
      if (item.empty()) continue;  // "1,2," and "1, 2" are fine
      char* end = nullptr;
      long v = std::strtol(item.c_str(), &end, 10);
      if (*end || v < 0 || v > INT32_MAX)
        throw Error("cli", "bunsen detokenize: ids must be non-negative integers separated by commas, got '" +
                               item + "'");
      ids.push_back(static_cast<int32_t>(v));
    }
  }
  return ids;
}

}  // namespace

int cmd_tokenize(int argc, char** argv) {
  Args a("tokenize", kTokenizeSpecs, argc, argv, 2);
  if (a.flag("help")) {
    std::fputs(
        format_help("bunsen tokenize --model DIR [--ids] [--special] TEXT | --jsonl | --bench FILE",
                    "Turn text into token ids with the model's tokenizer (tokenizer.json).", kTokenizeSpecs)
            .c_str(),
        stdout);
    return 0;
  }
  auto tok = open(a, "tokenize");
  const bool special = a.flag("special");
  if (a.flag("jsonl")) return run_jsonl(*tok, special);
  if (auto file = a.str("bench")) return run_bench(*tok, *file, special, a.integer("repeat", 3));
  const auto& pos = a.positional();
  if (pos.size() != 1)
    throw Error("cli",
                "bunsen tokenize: give exactly one TEXT argument (quote it), or --jsonl, or --bench FILE");
  std::vector<int32_t> ids = tok->encode(pos[0], special);
  if (a.flag("ids")) {
    std::printf("%s\n", json(ids).dump().c_str());
    return 0;
  }
  for (int32_t id : ids) std::printf("%d\t%s\n", id, json_text(tok->token_bytes(id)).c_str());
  return 0;
}

int cmd_detokenize(int argc, char** argv) {
  Args a("detokenize", kDetokenizeSpecs, argc, argv, 2);
  if (a.flag("help")) {
    std::fputs(format_help("bunsen detokenize --model DIR [--skip-special] ID[,ID...]",
                           "Turn token ids back into text (printed exactly, without a trailing newline).",
                           kDetokenizeSpecs)
                   .c_str(),
               stdout);
    return 0;
  }
  std::vector<int32_t> ids = parse_ids(a.positional());
  if (a.positional().empty()) throw Error("cli", "bunsen detokenize: give the ids, e.g. 1,2,3");
  auto tok = open(a, "detokenize");
  for (int32_t id : ids)
    if (id >= tok->vocab_size())
      throw Error("detokenize", strfmt("id %d is outside the vocabulary (size %lld)", id,
                                       static_cast<long long>(tok->vocab_size())));
  std::string text = tok->decode(ids, a.flag("skip-special"));
  std::fwrite(text.data(), 1, text.size(), stdout);
  return 0;
}

}  // namespace bunsen::cli
