#pragma once
// An independent fp64 GPT-2 forward (naive loops, written from the GPT-2 definition, no engine
// code) used as the reference for gradient checks and forward comparisons.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "trainscope/kernels/DropoutMask.h"

namespace reftest {

struct RefShape {
  int L, NH, C, T, V;
  bool relu = false;
};

using Params = std::map<std::string, std::vector<double>>;

inline void layerNorm(const std::vector<double>& x, int N, int C, const std::vector<double>& w,
                      const std::vector<double>& b, std::vector<double>& out) {
  out.assign(static_cast<size_t>(N) * C, 0.0);
  for (int n = 0; n < N; ++n) {
    double mean = 0, var = 0;
    for (int c = 0; c < C; ++c) mean += x[n * C + c];
    mean /= C;
    for (int c = 0; c < C; ++c) var += (x[n * C + c] - mean) * (x[n * C + c] - mean);
    var /= C;
    const double rstd = 1.0 / std::sqrt(var + 1e-5);
    for (int c = 0; c < C; ++c) out[n * C + c] = (x[n * C + c] - mean) * rstd * w[c] + b[c];
  }
}

// Mean token cross-entropy of N rows of V logits over targets >= 0 (0 when there are none).
inline double meanCrossEntropy(const std::vector<double>& logits,
                               const std::vector<int32_t>& targets, int N, int V) {
  double loss = 0;
  int count = 0;
  for (int n = 0; n < N; ++n) {
    if (targets[n] < 0) continue;
    double mx = -1e300, z = 0;
    for (int v = 0; v < V; ++v) mx = std::max(mx, logits[n * V + v]);
    for (int v = 0; v < V; ++v) z += std::exp(logits[n * V + v] - mx);
    loss += std::log(z) + mx - logits[n * V + targets[n]];
    ++count;
  }
  return count ? loss / count : 0.0;
}

// y (N, OC) = x (N, IC) W^T + b, W stored (OC, IC).
inline void linear(const std::vector<double>& x, int N, int IC, const std::vector<double>& W,
                   const std::vector<double>& b, int OC, std::vector<double>& y) {
  y.assign(static_cast<size_t>(N) * OC, 0.0);
  for (int n = 0; n < N; ++n)
    for (int o = 0; o < OC; ++o) {
      double s = b[o];
      for (int i = 0; i < IC; ++i) s += x[n * IC + i] * W[o * IC + i];
      y[n * OC + o] = s;
    }
}

// Dropout as the model description places it (nanoGPT): on the embeddings' output (layer -1)
// and on each block's attention (site 0) and MLP (site 1) branch before its residual add; the
// mask is the one every backend draws (kernels/DropoutMask.h: a pure function of seed, stream,
// element), the stream as LayerContext.h numbers it.
struct RefDropout {
  double p = 0;
  uint64_t seed = 0, key = 0;
  void apply(std::vector<double>& x, int layer, int site) const {
    const uint64_t stream = key * 1048576ull + uint64_t(layer + 1) * 64ull + uint64_t(site);
    const uint32_t thr = ts::kernels::dropoutThreshold(static_cast<float>(p));
    const double scale = 1.0 / (1.0 - static_cast<double>(static_cast<float>(p)));
    for (size_t i = 0; i < x.size(); ++i)
      x[i] =
          ts::kernels::dropoutKeep(seed, stream, static_cast<int64_t>(i), thr) ? x[i] * scale : 0.0;
  }
};

// Mean cross-entropy over targets >= 0 (and the logits through `logitsOut`).
inline double forward(const RefShape& s, const Params& p, const std::vector<int32_t>& tokens,
                      const std::vector<int32_t>& targets, int B, int T,
                      std::vector<double>* logitsOut = nullptr, const RefDropout* drop = nullptr) {
  const int C = s.C, N = B * T, hs = C / s.NH;
  std::vector<double> x(static_cast<size_t>(N) * C);
  const auto& wte = p.at("wte");
  const auto& wpe = p.at("wpe");
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < T; ++t)
      for (int c = 0; c < C; ++c)
        x[(b * T + t) * C + c] = wte[tokens[b * T + t] * C + c] + wpe[t * C + c];
  if (drop) drop->apply(x, -1, 0);
  std::vector<double> h, qkv, y, a, f;
  for (int l = 0; l < s.L; ++l) {
    const std::string pre = "h." + std::to_string(l) + ".";
    layerNorm(x, N, C, p.at(pre + "ln_1.weight"), p.at(pre + "ln_1.bias"), h);
    linear(h, N, C, p.at(pre + "attn.c_attn.weight"), p.at(pre + "attn.c_attn.bias"), 3 * C, qkv);
    y.assign(static_cast<size_t>(N) * C, 0.0);
    for (int b = 0; b < B; ++b)
      for (int hd = 0; hd < s.NH; ++hd)
        for (int t = 0; t < T; ++t) {
          const double* q = &qkv[(b * T + t) * 3 * C + hd * hs];
          std::vector<double> sc(t + 1);
          double mx = -1e300;
          for (int u = 0; u <= t; ++u) {
            const double* k = &qkv[(b * T + u) * 3 * C + C + hd * hs];
            double d = 0;
            for (int i = 0; i < hs; ++i) d += q[i] * k[i];
            sc[u] = d / std::sqrt(static_cast<double>(hs));
            mx = std::max(mx, sc[u]);
          }
          double z = 0;
          for (int u = 0; u <= t; ++u) z += (sc[u] = std::exp(sc[u] - mx));
          for (int u = 0; u <= t; ++u) {
            const double* v = &qkv[(b * T + u) * 3 * C + 2 * C + hd * hs];
            for (int i = 0; i < hs; ++i) y[(b * T + t) * C + hd * hs + i] += sc[u] / z * v[i];
          }
        }
    linear(y, N, C, p.at(pre + "attn.c_proj.weight"), p.at(pre + "attn.c_proj.bias"), C, a);
    if (drop) drop->apply(a, l, 0);
    for (size_t i = 0; i < x.size(); ++i) x[i] += a[i];
    layerNorm(x, N, C, p.at(pre + "ln_2.weight"), p.at(pre + "ln_2.bias"), h);
    linear(h, N, C, p.at(pre + "mlp.c_fc.weight"), p.at(pre + "mlp.c_fc.bias"), 4 * C, f);
    for (auto& v : f) {
      if (s.relu)
        v = v > 0 ? v : 0;
      else
        v = 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
    }
    linear(f, N, 4 * C, p.at(pre + "mlp.c_proj.weight"), p.at(pre + "mlp.c_proj.bias"), C, a);
    if (drop) drop->apply(a, l, 1);
    for (size_t i = 0; i < x.size(); ++i) x[i] += a[i];
  }
  layerNorm(x, N, C, p.at("ln_f.weight"), p.at("ln_f.bias"), h);
  std::vector<double> zero(static_cast<size_t>(s.V), 0.0), logits;
  linear(h, N, C, wte, zero, s.V, logits);
  if (logitsOut) *logitsOut = logits;
  return meanCrossEntropy(logits, targets, N, s.V);
}

}  // namespace reftest
