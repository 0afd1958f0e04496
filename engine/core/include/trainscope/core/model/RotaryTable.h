#pragma once
// The rotary embedding of every rope type transformers has (modeling_rope_utils: default,
// linear, dynamic NTK, llama3, yarn, longrope) as one table the rope op applies: per position
// the rotated dims' cosines then sines, times the type's attention factor. One table per base
// (Gemma 3's sliding layers have their own), computed once per model on the host.
#include <cstdint>
#include <vector>

#include "trainscope/core/model/ModelSpec.h"

namespace ts::core {

struct RotaryFrequencies {
  std::vector<double> invFreq;   // rotaryDim / 2
  double attentionFactor = 1.0;  // multiplies cos and sin
};
// The inverse frequencies for base `theta` and scaling `rope` over `rotaryDim` dims, as
// transformers computes them for sequences of `seqLen` positions (dynamic and longrope depend
// on it) of a model of `maxPositions`. Throws std::invalid_argument naming what is missing
// (longrope's factor lists of the wrong length).
RotaryFrequencies rotaryFrequencies(double theta, const ModelConfig::RopeScaling& rope,
                                    int64_t rotaryDim, int64_t seqLen, int64_t maxPositions);
// (seqLen, rotaryDim) floats: row t = [cos(t f_i) a ... | sin(t f_i) a ...], angles in double.
std::vector<float> rotaryTable(const RotaryFrequencies& f, int64_t seqLen);
// The table of a layer of `arch` (its sliding layers may have their own base).
std::vector<float> rotaryTableOf(const ArchSpec& arch, bool slidingLayer);
// Whether the sliding layers need a table of their own.
bool separateLocalRotary(const ArchSpec& arch);

}  // namespace ts::core
