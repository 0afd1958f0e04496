#include "trainscope/engine/train/Evaluate.h"

#include <cmath>
#include <fstream>
#include <iterator>
#include <stdexcept>

#include "trainscope/engine/data/Dataset.h"
#include "trainscope/engine/io/ModelSource.h"
#include "trainscope/engine/tokenizer/ByteTokenizer.h"
#include "trainscope/engine/tokenizer/HfTokenizer.h"
#include "trainscope/profiler/Tracer.h"

namespace ts::engine {

namespace {
std::string readAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::invalid_argument(path + ": cannot open");
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}
}  // namespace

std::vector<int32_t> readTextTokens(const std::string& path, const std::string& tokenizer) {
  const std::string text = readAll(path);
  if (tokenizer.empty()) return ByteTokenizer::encode(text);
  return HfTokenizer::load(tokenizer).encode(text);
}

std::vector<int32_t> readTokenFile(const std::string& path, int64_t vocab) {
  try {
    // vocab 0: no vocabulary to check against: uint16, every id passes.
    return parseTokenIds(readAll(path), vocab > 0 ? vocab : 65536, path,
                         vocab > 0 ? "the model's vocabulary" : "");
  } catch (const DatasetError& e) {
    throw std::invalid_argument(e.what());
  }
}

namespace {

EvalResult evaluateLoaded(LoadedModel& lm, const std::vector<int32_t>& tokens, int seq, int batch) {
  Gpt& m = *lm.model;
  const int64_t V = m.config().vocab;
  for (size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i] < 0 || tokens[i] >= V)
      throw std::invalid_argument("token " + std::to_string(tokens[i]) + " at position " +
                                  std::to_string(i) + " is outside the model's vocabulary of " +
                                  std::to_string(V));
  const int64_t windows = tokens.size() > 0 ? (int64_t(tokens.size()) - 1) / seq : 0;
  if (windows < 1)
    throw std::invalid_argument("the tokens (" + std::to_string(tokens.size()) +
                                ") are fewer than one window of " + std::to_string(seq) + " + 1");
  const int B = static_cast<int>(std::min<int64_t>(batch, windows));
  m.allocate(B);
  m.setTraining(false);
  std::vector<int32_t> in(size_t(B) * seq), tg(in.size());
  double sum = 0;
  int64_t count = 0;
  for (int64_t w0 = 0; w0 < windows; w0 += B) {
    const int nb = static_cast<int>(std::min<int64_t>(B, windows - w0));
    for (int b = 0; b < nb; ++b)
      for (int t = 0; t < seq; ++t) {
        const size_t at = size_t((w0 + b) * seq + t);
        in[size_t(b) * seq + t] = tokens[at];
        tg[size_t(b) * seq + t] = tokens[at + 1];
      }
    int64_t c = 0;
    sum += m.forward(in.data(), tg.data(), nb, seq, 0.f, &c);
    count += c;
  }
  EvalResult r;
  r.loss = sum / double(count);
  r.tokens = count;
  r.perplexity = std::exp(r.loss);
  r.windows = windows;
  return r;
}

}  // namespace

EvalResult evaluateModel(const std::string& path, const std::vector<int32_t>& tokens, int seq,
                         kernels::Backend* backend, int batch) {
  profiler::ScopedRange range("evaluate", profiler::SpanCategory::Other);
  if (seq < 1) throw std::invalid_argument("--seq must be >= 1");
  LoadedModel lm = loadModelFrom(path, backend, nullptr, seq);
  return evaluateLoaded(lm, tokens, seq, batch);
}

EvalResult evaluateTokenFile(const std::string& path, const std::string& tokenFile, int seq,
                             kernels::Backend* backend, int batch) {
  profiler::ScopedRange range("evaluate", profiler::SpanCategory::Other);
  if (seq < 1) throw std::invalid_argument("--seq must be >= 1");
  LoadedModel lm = loadModelFrom(path, backend, nullptr, seq);
  return evaluateLoaded(lm, readTokenFile(tokenFile, lm.model->config().vocab), seq, batch);
}

}  // namespace ts::engine
