#pragma once
// What the dataset targets do with a data source that loaded (engine/Dataset.h): a few training
// batches (whole and a rank's rows), every validation batch (capped), decode, the state round
// trip. Invariants checked: inputs are ids in [0, vocab), targets in [-1, vocab); a restored
// state gives the same next batch. Config knobs (seq_len, val_fraction, curriculum) come from
// the input's flag bytes.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "FuzzSupport.h"
#include "trainscope/core/config/Config.h"
#include "trainscope/engine/data/Dataset.h"

namespace ts::fuzz {

// model.seq_len, data.val_fraction and curriculum.type from two flag bytes.
inline void configFromFlags(core::RunConfig& c, uint8_t a, uint8_t b) {
  static constexpr double kVal[4] = {0.0, 0.1, 0.5, 0.9};
  c.model.seq_len = 2 + a % 15;
  c.data.val_fraction = kVal[(a >> 4) & 3];
  c.curriculum.type = (a & 0x40) ? "length" : "none";
  c.train.seed = b;
}

inline void checkIds(const std::vector<int32_t>& in, const std::vector<int32_t>& tg, int vocab) {
  for (size_t i = 0; i < in.size(); ++i) {
    TS_FUZZ_CHECK(in[i] >= 0 && in[i] < vocab,
                  "input id " + std::to_string(in[i]) + " outside [0, " + std::to_string(vocab) + ")");
    TS_FUZZ_CHECK(tg[i] >= -1 && tg[i] < vocab,
                  "target id " + std::to_string(tg[i]) + " outside [-1, " + std::to_string(vocab) +
                      ")");
  }
}

inline void exercise(engine::Dataset& ds, const core::RunConfig& c) {
  const int vocab = ds.vocabSize();
  TS_FUZZ_CHECK(vocab >= 1, "a dataset has a vocabulary");
  (void)ds.describe();
  const int B = 2, T = c.model.seq_len;
  std::vector<int32_t> in(size_t(B) * T), tg(in.size());
  ds.setDifficulty(0.25);
  for (int i = 0; i < 3; ++i) {
    ds.nextTrainBatch(in.data(), tg.data(), B, T);
    checkIds(in, tg, vocab);
  }
  std::vector<int32_t> rin(static_cast<size_t>(T)), rtg(rin.size());
  ds.nextTrainRows(rin.data(), rtg.data(), B, T, 1, 1);
  checkIds(rin, rtg, vocab);
  (void)ds.decode(in);
  const int64_t vb = ds.valBatchCount(B, T);
  TS_FUZZ_CHECK(vb >= 0, "validation batch count");
  for (int64_t i = 0; i < std::min<int64_t>(vb, 8); ++i) {
    ds.valBatch(i, in.data(), tg.data(), B, T);
    checkIds(in, tg, vocab);
  }
  // A checkpoint's data state restores the same stream.
  const nlohmann::json st = ds.state();
  std::vector<int32_t> a(in.size()), at(in.size()), b(in.size()), bt(in.size());
  ds.nextTrainBatch(a.data(), at.data(), B, T);
  ds.restore(st);
  ds.nextTrainBatch(b.data(), bt.data(), B, T);
  TS_FUZZ_CHECK(a == b && at == bt, "restore(state()) replays the same batch");
}

}  // namespace ts::fuzz
