// compute_rope(): every RoPE scaling variant reduced to inverse frequencies + a cos/sin scale, computed the
// way Hugging Face transformers computes them (f32 tensors where HF uses f32, Python doubles where HF uses
// Python floats), so goldens match to the last bits that matter.
#include <cmath>

#include "model/config.h"

namespace bunsen::model {
namespace {

// HF: 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim)) — exponent and power in f32.
std::vector<float> default_inv_freq(double base, int64_t dim) {
  std::vector<float> inv(static_cast<size_t>(dim / 2));
  for (int64_t i = 0; i < dim / 2; ++i) {
    float e = static_cast<float>(2 * i) / static_cast<float>(dim);
    float p = std::pow(static_cast<float>(base), e);
    inv[static_cast<size_t>(i)] = 1.0f / p;
  }
  return inv;
}

// HF defaults original_max_position_embeddings to max_position_embeddings for llama3 and yarn.
double original_max(const ModelConfig& cfg) {
  return static_cast<double>(cfg.rope.original_max_position_embeddings > 0 ? cfg.rope.original_max_position_embeddings
                                                                           : cfg.max_position_embeddings);
}

void apply_llama3(const RopeConfig& r, double old_len, std::vector<float>& inv) {
  const double low_wavelen = old_len / r.low_freq_factor;
  const double high_wavelen = old_len / r.high_freq_factor;
  const float factor = static_cast<float>(r.factor);
  for (float& f : inv) {
    const float wavelen = static_cast<float>(2.0 * M_PI) / f;
    float scaled = wavelen > static_cast<float>(low_wavelen) ? f / factor : f;
    const bool medium = !(wavelen < static_cast<float>(high_wavelen)) && !(wavelen > static_cast<float>(low_wavelen));
    if (medium) {
      const float smooth = (static_cast<float>(old_len) / wavelen - static_cast<float>(r.low_freq_factor)) /
                           static_cast<float>(r.high_freq_factor - r.low_freq_factor);
      scaled = (1.0f - smooth) * scaled / factor + smooth * scaled;
    }
    f = scaled;
  }
}

double yarn_mscale(double scale, double mscale) {
  if (scale <= 1.0) return 1.0;
  return 0.1 * mscale * std::log(scale) + 1.0;
}

float apply_yarn(const ModelConfig& cfg, int64_t dim, std::vector<float>& inv) {
  const RopeConfig& r = cfg.rope;
  const double base = r.theta;
  double factor = r.factor;
  const double orig = original_max(cfg);
  double attention_factor;
  if (r.attention_factor) {
    attention_factor = *r.attention_factor;
  } else if (r.mscale && r.mscale_all_dim && *r.mscale && *r.mscale_all_dim) {
    attention_factor = yarn_mscale(factor, *r.mscale) / yarn_mscale(factor, *r.mscale_all_dim);
  } else {
    attention_factor = yarn_mscale(factor, 1.0);
  }
  auto correction_dim = [&](double rotations) {
    return (static_cast<double>(dim) * std::log(orig / (rotations * 2.0 * M_PI))) / (2.0 * std::log(base));
  };
  double low = correction_dim(r.beta_fast);
  double high = correction_dim(r.beta_slow);
  if (r.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(dim - 1));
  if (low == high) high += 0.001;  // HF: prevent a singular ramp
  for (size_t i = 0; i < inv.size(); ++i) {
    const float pos_freq = std::pow(static_cast<float>(base), static_cast<float>(2 * i) / static_cast<float>(dim));
    const float extrapolation = 1.0f / pos_freq;
    const float interpolation = 1.0f / (static_cast<float>(factor) * pos_freq);
    float ramp = (static_cast<float>(i) - static_cast<float>(low)) / static_cast<float>(high - low);
    ramp = std::min(std::max(ramp, 0.0f), 1.0f);
    const float extrapolation_factor = 1.0f - ramp;
    inv[i] = interpolation * (1.0f - extrapolation_factor) + extrapolation * extrapolation_factor;
  }
  return static_cast<float>(attention_factor);
}

}  // namespace

RopeTable compute_rope(const ModelConfig& cfg, int64_t seq_len) {
  const RopeConfig& r = cfg.rope;
  RopeTable t;
  const int64_t dim = cfg.rotary_dim();
  t.rotary_dim = static_cast<int>(dim);
  switch (r.type) {
    case RopeType::kDefault:
      t.inv_freq = default_inv_freq(r.theta, dim);
      break;
    case RopeType::kLinear:
      t.inv_freq = default_inv_freq(r.theta, dim);
      for (float& f : t.inv_freq) f /= static_cast<float>(r.factor);
      break;
    case RopeType::kDynamic: {
      const double max_pos = static_cast<double>(
          r.original_max_position_embeddings > 0 ? r.original_max_position_embeddings : cfg.max_position_embeddings);
      const double len = static_cast<double>(seq_len) > max_pos ? static_cast<double>(seq_len) : max_pos;
      const double base = r.theta * std::pow((r.factor * len / max_pos) - (r.factor - 1.0),
                                             static_cast<double>(dim) / static_cast<double>(dim - 2));
      t.inv_freq = default_inv_freq(base, dim);
      break;
    }
    case RopeType::kLlama3:
      t.inv_freq = default_inv_freq(r.theta, dim);
      apply_llama3(r, original_max(cfg), t.inv_freq);
      break;
    case RopeType::kYarn:
      t.inv_freq.resize(static_cast<size_t>(dim / 2));
      t.attention_scaling = apply_yarn(cfg, dim, t.inv_freq);
      break;
  }
  return t;
}

}  // namespace bunsen::model
