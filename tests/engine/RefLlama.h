#pragma once
// An independent fp64 LLaMA forward (naive loops, written from the Hugging Face
// LlamaForCausalLM definition, no engine code): RMSNorm, rotate_half RoPE, grouped-query causal
// attention, SwiGLU, untied head, mean cross-entropy over targets >= 0. Parameters by their
// Hugging Face names, weights (out, in).
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "RefGpt.h"  // meanCrossEntropy

namespace reftest {

struct RefLlamaShape {
  int L, NH, KVH, C, F, V;
  double theta = 10000.0;
};

inline double llamaForward(const RefLlamaShape& s, const Params& p,
                           const std::vector<int32_t>& tokens, const std::vector<int32_t>& targets,
                           int B, int T, const RefDropout* drop = nullptr) {
  const int C = s.C, HD = C / s.NH, KV = s.KVH * HD, N = B * T, half = HD / 2;
  auto W = [&](const std::string& n) -> const std::vector<double>& { return p.at(n); };
  auto rms = [&](const std::vector<double>& x, const std::vector<double>& w) {
    std::vector<double> y(x.size());
    for (int n = 0; n < N; ++n) {
      double ms = 0;
      for (int c = 0; c < C; ++c) ms += x[n * C + c] * x[n * C + c];
      const double r = 1.0 / std::sqrt(ms / C + 1e-5);
      for (int c = 0; c < C; ++c) y[n * C + c] = x[n * C + c] * r * w[c];
    }
    return y;
  };
  auto lin = [&](const std::vector<double>& x, int IC, const std::vector<double>& w, int OC) {
    std::vector<double> y(static_cast<size_t>(N) * OC, 0.0);
    for (int n = 0; n < N; ++n)
      for (int o = 0; o < OC; ++o) {
        double a = 0;
        for (int i = 0; i < IC; ++i) a += x[n * IC + i] * w[o * IC + i];
        y[n * OC + o] = a;
      }
    return y;
  };
  // rotate_half RoPE on (N, heads*HD) at positions t = n % T.
  auto rope = [&](std::vector<double>& x, int heads) {
    for (int n = 0; n < N; ++n) {
      const int t = n % T;
      for (int h = 0; h < heads; ++h) {
        double* v = &x[static_cast<size_t>(n) * heads * HD + h * HD];
        for (int i = 0; i < half; ++i) {
          const double ang = t * std::pow(s.theta, -2.0 * i / HD);
          const double a = v[i], b = v[i + half];
          v[i] = a * std::cos(ang) - b * std::sin(ang);
          v[i + half] = b * std::cos(ang) + a * std::sin(ang);
        }
      }
    }
  };
  std::vector<double> x(static_cast<size_t>(N) * C);
  for (int n = 0; n < N; ++n)
    for (int c = 0; c < C; ++c) x[n * C + c] = W("model.embed_tokens.weight")[tokens[n] * C + c];
  if (drop) drop->apply(x, -1, 0);
  for (int l = 0; l < s.L; ++l) {
    const std::string h = "model.layers." + std::to_string(l) + ".";
    const auto a = rms(x, W(h + "input_layernorm.weight"));
    auto q = lin(a, C, W(h + "self_attn.q_proj.weight"), C);
    auto k = lin(a, C, W(h + "self_attn.k_proj.weight"), KV);
    const auto v = lin(a, C, W(h + "self_attn.v_proj.weight"), KV);
    rope(q, s.NH);
    rope(k, s.KVH);
    std::vector<double> att(static_cast<size_t>(N) * C, 0.0);
    for (int b = 0; b < B; ++b)
      for (int hh = 0; hh < s.NH; ++hh) {
        const int kh = hh / (s.NH / s.KVH);
        for (int t = 0; t < T; ++t) {
          std::vector<double> sc(t + 1);
          double mx = -1e300;
          for (int u = 0; u <= t; ++u) {
            double d = 0;
            for (int i = 0; i < HD; ++i)
              d += q[(b * T + t) * C + hh * HD + i] * k[(b * T + u) * KV + kh * HD + i];
            sc[u] = d / std::sqrt(double(HD));
            mx = std::max(mx, sc[u]);
          }
          double z = 0;
          for (auto& e : sc) z += (e = std::exp(e - mx));
          for (int u = 0; u <= t; ++u)
            for (int i = 0; i < HD; ++i)
              att[(b * T + t) * C + hh * HD + i] += sc[u] / z * v[(b * T + u) * KV + kh * HD + i];
        }
      }
    auto o = lin(att, C, W(h + "self_attn.o_proj.weight"), C);
    if (drop) drop->apply(o, l, 0);
    for (size_t i = 0; i < x.size(); ++i) x[i] += o[i];
    const auto m = rms(x, W(h + "post_attention_layernorm.weight"));
    const auto g = lin(m, C, W(h + "mlp.gate_proj.weight"), s.F);
    const auto up = lin(m, C, W(h + "mlp.up_proj.weight"), s.F);
    std::vector<double> act(g.size());
    for (size_t i = 0; i < g.size(); ++i) act[i] = g[i] / (1 + std::exp(-g[i])) * up[i];
    auto d = lin(act, s.F, W(h + "mlp.down_proj.weight"), C);
    if (drop) drop->apply(d, l, 1);
    for (size_t i = 0; i < x.size(); ++i) x[i] += d[i];
  }
  const auto f = rms(x, W("model.norm.weight"));
  const auto logits = lin(f, C, W("lm_head.weight"), s.V);
  return meanCrossEntropy(logits, targets, N, s.V);
}

}  // namespace reftest
