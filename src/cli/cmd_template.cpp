// `bunsen template`: render a model's chat template for a conversation, exactly as Hugging Face's
// apply_chat_template(tokenize=False) does. Prints the prompt verbatim (no newline added), or with
// --jsonl reads one JSON object per line on stdin ({messages, tools?, add_generation_prompt?,
// enable_thinking?, kwargs?}) and writes one JSON string per line, or {"error": ...} when it fails.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/args.h"
#include "cli/commands.h"
#include "core/status.h"
#include "hub/demo_model.h"
#include "text/chat_template.h"

namespace bunsen::cli {
namespace {

using ojson = nlohmann::ordered_json;

const std::vector<OptionSpec> kSpecs = {
    {"model", "DIR", "model or tokenizer directory (chat_template.jinja or tokenizer_config.json); default: the demo model", "m"},
    {"messages", "FILE", "JSON file with the list of messages"},
    {"tools", "FILE", "JSON file with the list of tool schemas"},
    {"no-generation-prompt", "", "do not append the assistant turn header (add_generation_prompt=False)"},
    {"enable-thinking", "BOOL", "pass enable_thinking=true|false to the template"},
    {"kwargs", "JSON", "extra template variables as a JSON object (chat_template_kwargs)"},
    {"jsonl", "", "read one JSON request per line on stdin, write one JSON string (or {\"error\": ...}) per line"},
    {"help", "", "show this help", "h"},
};

ojson read_json_file(const std::string& path, const char* flag) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cli", std::string("bunsen template: cannot read ") + flag + " file '" + path + "'");
  std::stringstream ss;
  ss << in.rdbuf();
  try {
    return ojson::parse(ss.str());
  } catch (const nlohmann::json::exception& e) {
    throw Error("cli", std::string("bunsen template: ") + flag + " file '" + path + "' is not valid JSON: " + e.what());
  }
}

bool parse_bool(const std::string& s) {
  if (s == "true" || s == "1") return true;
  if (s == "false" || s == "0") return false;
  throw Error("cli", "bunsen template: --enable-thinking must be true or false, got '" + s + "'");
}

std::string dump(const ojson& j) { return j.dump(-1, ' ', false, ojson::error_handler_t::replace); }

// One --jsonl request -> one output line.
std::string render_line(const text::ChatTemplate& tpl, const std::string& line) {
  try {
    ojson req = ojson::parse(line);
    if (!req.is_object() || !req.contains("messages")) throw Error("cli", "each line must be an object with \"messages\"");
    ojson kwargs = req.contains("kwargs") && !req["kwargs"].is_null() ? req["kwargs"] : ojson::object();
    if (!kwargs.is_object()) throw Error("cli", "\"kwargs\" must be an object");
    if (req.contains("enable_thinking") && !req["enable_thinking"].is_null()) kwargs["enable_thinking"] = req["enable_thinking"];
    const bool gen = !req.contains("add_generation_prompt") || req["add_generation_prompt"].is_null() ||
                     req["add_generation_prompt"].get<bool>();
    const ojson tools = req.contains("tools") ? req["tools"] : ojson();
    return dump(ojson(tpl.render(req["messages"], tools, gen, kwargs)));
  } catch (const Error& e) {
    return dump(ojson{{"error", e.message()}});
  } catch (const nlohmann::json::exception& e) {
    return dump(ojson{{"error", std::string("invalid request: ") + e.what()}});
  }
}

}  // namespace

int cmd_template(int argc, char** argv) {
  Args a("template", kSpecs, argc, argv, 2);
  if (a.flag("help")) {
    std::fputs(format_help("bunsen template [--model DIR] (--messages FILE.json | --jsonl) [options]",
                           "Render a model's chat template like Hugging Face apply_chat_template(tokenize=False).",
                           kSpecs).c_str(), stdout);
    return 0;
  }
  check(a.has("messages") != a.flag("jsonl"), "cli", "bunsen template: give exactly one of --messages or --jsonl");
  const std::string dir = a.has("model") ? *a.str("model") : hub::ensure_demo_model();
  const text::ChatTemplate tpl = text::ChatTemplate::load(dir);
  if (a.flag("jsonl")) {
    std::ios::sync_with_stdio(false);
    std::string line;
    while (std::getline(std::cin, line)) {
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      std::string out = render_line(tpl, line);
      std::fwrite(out.data(), 1, out.size(), stdout);
      std::fputc('\n', stdout);
    }
    std::fflush(stdout);
    return 0;
  }
  ojson kwargs = ojson::object();
  if (a.has("kwargs")) {
    try {
      kwargs = ojson::parse(*a.str("kwargs"));
    } catch (const nlohmann::json::exception& e) {
      throw Error("cli", std::string("bunsen template: --kwargs is not valid JSON: ") + e.what());
    }
    check(kwargs.is_object(), "cli", "bunsen template: --kwargs must be a JSON object");
  }
  if (a.has("enable-thinking")) kwargs["enable_thinking"] = parse_bool(*a.str("enable-thinking"));
  const ojson messages = read_json_file(*a.str("messages"), "--messages");
  const ojson tools = a.has("tools") ? read_json_file(*a.str("tools"), "--tools") : ojson();
  const std::string out = tpl.render(messages, tools, !a.flag("no-generation-prompt"), kwargs);
  std::fwrite(out.data(), 1, out.size(), stdout);
  std::fflush(stdout);
  return 0;
}

}  // namespace bunsen::cli
