// Shared OpenAI request fields (see request_fields.h). Ranges follow OpenAI's documented ones where it has
// them (temperature 0..2, penalties -2..2, logit_bias -100..100) and the sampler's otherwise.
#include "server/openai/request_fields.h"

#include <cmath>
#include <limits>

#include "core/status.h"
#include "server/api/api_error.h"

namespace bunsen::server::openai {
namespace {

bool present(const Json& body, const char* key) {
  auto it = body.find(key);
  return it != body.end() && !it->is_null();
}

// A finite number in [lo, hi] (the bounds say which side is open through `lo_open`).
float get_float_in(const Json& body, const char* key, float def, double lo, double hi, bool lo_open = false) {
  const double v = get_number(body, key, def);
  if (!present(body, key)) return def;
  if (v < lo || v > hi || (lo_open && v == lo)) {
    bad_request(key, strfmt("%s must be %s %g and <= %g, got %g", key, lo_open ? ">" : ">=", lo, hi, v));
  }
  return static_cast<float>(v);
}

sampling::SamplingParams parse_sampling(const Json& body, ModelService& service) {
  const ServiceDefaults& d = service.defaults();
  sampling::SamplingParams p;
  p.temperature = get_float_in(body, "temperature", d.temperature, 0.0, 2.0);
  p.top_p = get_float_in(body, "top_p", d.top_p, 0.0, 1.0);
  const int64_t vocab = service.backend().vocab_size();  // the model's rows (>= the tokenizer's)
  int64_t top_k = get_int_in(body, "top_k", d.top_k, -1, std::numeric_limits<int32_t>::max());
  p.top_k = static_cast<int>(top_k < 0 ? 0 : std::min<int64_t>(top_k, vocab));  // -1: off (vLLM)
  if (p.top_p == 0.0f) {  // OpenAI accepts top_p 0: only the most likely token survives
    p.top_p = 1.0f;
    p.top_k = 1;
  }
  p.min_p = get_float_in(body, "min_p", d.min_p, 0.0, 1.0);
  p.presence_penalty = get_float_in(body, "presence_penalty", 0.0f, -2.0, 2.0);
  p.frequency_penalty = get_float_in(body, "frequency_penalty", 0.0f, -2.0, 2.0);
  p.repetition_penalty = get_float_in(body, "repetition_penalty", 1.0f, 0.0, 100.0, /*lo_open=*/true);
  p.xtc_probability = get_float_in(body, "xtc_probability", 0.0f, 0.0, 1.0);
  p.xtc_threshold = get_float_in(body, "xtc_threshold", 0.1f, 0.0, 1.0);
  if (auto it = body.find("seed"); it != body.end() && !it->is_null()) {
    if (it->is_number_unsigned()) {
      p.seed = it->get<uint64_t>();
    } else {
      p.seed = static_cast<uint64_t>(get_int(body, "seed", 0));  // negative seeds wrap (any int64 is a seed)
    }
  }
  p.logit_bias = parse_logit_bias(body, vocab);
  return p;
}

}  // namespace

int64_t get_int_in(const Json& body, const char* key, int64_t def, int64_t lo, int64_t hi) {
  if (!present(body, key)) return def;
  const Json& v = body.at(key);
  if (v.is_boolean() || !v.is_number()) bad_request(key, strfmt("%s must be an integer, got %s", key, v.type_name()));
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (!(d >= static_cast<double>(lo) && d <= static_cast<double>(hi)))
      bad_request(key, strfmt("%s must be an integer in [%lld, %lld], got %g", key, static_cast<long long>(lo),
                              static_cast<long long>(hi), d));
  }
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    bad_request(key, strfmt("%s must be an integer in [%lld, %lld]", key, static_cast<long long>(lo),
                            static_cast<long long>(hi)));
  const int64_t x = get_int(body, key, def);
  if (x < lo || x > hi)
    bad_request(key, strfmt("%s must be an integer in [%lld, %lld], got %lld", key, static_cast<long long>(lo),
                            static_cast<long long>(hi), static_cast<long long>(x)));
  return x;
}

std::string check_model(const Json& body, const ModelService& service) {
  const std::string model = get_string(body, "model", "");
  if (!model.empty() && !service.accepts_model(model))
    throw ApiError(404, "invalid_request_error",
                   "The model '" + model + "' does not exist; this server serves '" + service.model_id() + "'",
                   "model", "model_not_found");
  return service.model_id();
}

std::vector<std::string> parse_stop(const Json& body) {
  auto it = body.find("stop");
  if (it == body.end() || it->is_null()) return {};
  std::vector<std::string> out;
  if (it->is_string()) {
    out.push_back(it->get<std::string>());
  } else if (it->is_array()) {
    if (it->size() > kMaxStopStrings)
      bad_request("stop", strfmt("stop may hold at most %zu strings, got %zu", kMaxStopStrings, it->size()));
    for (size_t i = 0; i < it->size(); ++i) {
      if (!(*it)[i].is_string()) bad_request("stop", strfmt("stop[%zu] must be a string", i));
      out.push_back((*it)[i].get<std::string>());
    }
  } else {
    bad_request("stop", std::string("stop must be a string or an array of strings, got ") + it->type_name());
  }
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i].empty()) bad_request("stop", strfmt("stop[%zu] is an empty string", i));
    if (out[i].size() > kMaxStopBytes)
      bad_request("stop", strfmt("stop[%zu] is longer than %zu bytes", i, kMaxStopBytes));
  }
  return out;
}

std::vector<std::pair<int32_t, float>> parse_logit_bias(const Json& body, int64_t vocab_size) {
  auto it = body.find("logit_bias");
  if (it == body.end() || it->is_null()) return {};
  if (!it->is_object()) bad_request("logit_bias", "logit_bias must be an object mapping token ids to numbers");
  if (static_cast<int64_t>(it->size()) > vocab_size)
    bad_request("logit_bias", "logit_bias has more entries than the vocabulary");
  std::vector<std::pair<int32_t, float>> out;
  for (auto kv = it->begin(); kv != it->end(); ++kv) {
    const std::string& key = kv.key();
    size_t used = 0;
    long long id = -1;
    try {
      id = std::stoll(key, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != key.size())
      bad_request("logit_bias", "logit_bias key '" + key + "' is not a token id");
    if (id < 0 || id >= vocab_size)
      bad_request("logit_bias", strfmt("logit_bias token id %lld is outside the vocabulary [0, %lld)", id,
                                       static_cast<long long>(vocab_size)));
    if (!kv.value().is_number() || kv.value().is_boolean())
      bad_request("logit_bias", "logit_bias['" + key + "'] must be a number");
    const double v = kv.value().get<double>();
    if (!std::isfinite(v) || std::fabs(v) > kMaxLogitBias)
      bad_request("logit_bias", strfmt("logit_bias['%s'] must be in [-100, 100]", key.c_str()));
    out.emplace_back(static_cast<int32_t>(id), static_cast<float>(v));
  }
  return out;
}

CommonParams parse_common(const Json& body, ModelService& service, const std::vector<const char*>& max_tokens_keys) {
  CommonParams c;
  c.model = check_model(body, service);
  c.stream = get_bool(body, "stream", false);
  if (auto it = body.find("stream_options"); it != body.end() && !it->is_null()) {
    if (!it->is_object()) bad_request("stream_options", "stream_options must be an object");
    c.include_usage = get_bool(*it, "include_usage", false, "stream_options");
  }
  c.n = static_cast<int>(get_int_in(body, "n", 1, 1, kMaxChoices));
  const int64_t limit = service.backend().max_request_tokens();
  for (const char* key : max_tokens_keys) {
    if (!present(body, key)) continue;
    const int64_t v = get_int_in(body, key, 0, 1, std::numeric_limits<int64_t>::max());
    if (v >= limit)
      bad_request(key, strfmt("%s = %lld leaves no room for a prompt: this server's context is %lld tokens", key,
                              static_cast<long long>(v), static_cast<long long>(limit)));
    if (!c.max_tokens) c.max_tokens = v;
  }
  c.stop = parse_stop(body);
  c.sampling = parse_sampling(body, service);
  c.ignore_eos = get_bool(body, "ignore_eos", false);
  return c;
}

std::vector<GenerationRequest> expand_choices(const GenerationRequest& base, int n) {
  std::vector<GenerationRequest> out(static_cast<size_t>(n), base);
  if (base.sampling.seed) {
    for (int i = 0; i < n; ++i) out[static_cast<size_t>(i)].sampling.seed = *base.sampling.seed + static_cast<uint64_t>(i);
  }
  return out;
}

std::vector<int32_t> parse_token_ids(const Json& arr, int64_t vocab_size, const std::string& param) {
  std::vector<int32_t> ids;
  ids.reserve(arr.size());
  for (size_t i = 0; i < arr.size(); ++i) {
    const Json& v = arr[i];
    if (!v.is_number_integer())
      bad_request(param, strfmt("%s[%zu] must be an integer token id", param.c_str(), i));
    const bool negative = v.is_number_integer() && !v.is_number_unsigned() && v.get<int64_t>() < 0;
    if (negative || (v.is_number_unsigned() ? v.get<uint64_t>() >= static_cast<uint64_t>(vocab_size)
                                            : v.get<int64_t>() >= vocab_size))
      bad_request(param, strfmt("%s[%zu] = %s is not a token id of this model (vocabulary size %lld)", param.c_str(),
                                i, v.dump().c_str(), static_cast<long long>(vocab_size)));
    ids.push_back(static_cast<int32_t>(v.get<int64_t>()));
  }
  return ids;
}

}  // namespace bunsen::server::openai
