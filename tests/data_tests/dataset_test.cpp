// Data sources: content checked by independent parsing (arithmetic, grammar recognizer, the
// file's bytes), determinism, train/val disjointness, resume, curriculum, bad input.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "trainscope/engine/data/Dataset.h"

using ts::core::RunConfig;
using ts::engine::Dataset;
using ts::engine::DatasetError;
using ts::engine::makeDataset;

namespace {

struct Batch {
  std::vector<int32_t> in, tg;
  bool operator==(const Batch&) const = default;
};

Batch train(Dataset& ds, int B, int T) {
  Batch b{std::vector<int32_t>(B * T), std::vector<int32_t>(B * T)};
  ds.nextTrainBatch(b.in.data(), b.tg.data(), B, T);
  return b;
}

Batch val(const Dataset& ds, int64_t i, int B, int T) {
  Batch b{std::vector<int32_t>(B * T), std::vector<int32_t>(B * T)};
  ds.valBatch(i, b.in.data(), b.tg.data(), B, T);
  return b;
}

RunConfig additionConfig(int digits, uint64_t seed = 7, int T = 32) {
  RunConfig c;
  c.data.source = "synthetic";
  c.data.task = "addition";
  c.data.digits = digits;
  c.train.seed = seed;
  c.model.seq_len = T;
  return c;
}

// Checks "a+b=s\n" lines of a decoded row with plain integer arithmetic; returns (a, b) pairs
// of the complete samples and their operand width.
struct Problem {
  uint64_t a, b;
  int width;
  auto operator<=>(const Problem&) const = default;
};

std::vector<Problem> checkAdditionRow(const Dataset& ds, const int32_t* in, const int32_t* tg,
                                      int T) {
  // Rebuild the T+1 token stream: inputs plus the last target (if any).
  std::vector<int32_t> row(in, in + T);
  std::string text = ds.decode(row);
  std::vector<Problem> out;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    // Every complete line must be a correct sample; a line without '\n' is the row's cut end
    // (only possible when the end token is the row's final target).
    if (lines.eof()) break;
    const size_t plus = line.find('+'), eq = line.find('=');
    EXPECT_NE(plus, std::string::npos) << line;
    EXPECT_NE(eq, std::string::npos) << line;
    if (plus == std::string::npos || eq == std::string::npos) continue;
    const std::string a = line.substr(0, plus), b = line.substr(plus + 1, eq - plus - 1),
                      s = line.substr(eq + 1);
    EXPECT_EQ(a.size(), b.size()) << line;
    EXPECT_EQ(s.size(), a.size() + 1) << line;
    const uint64_t av = std::stoull(a), bv = std::stoull(b);
    const std::string rev(s.rbegin(), s.rend());
    EXPECT_EQ(std::stoull(rev), av + bv) << line;
    out.push_back({av, bv, static_cast<int>(a.size())});
  }
  // Targets: next token exactly on answer positions (after '=' up to and including the end
  // token), -1 elsewhere.
  bool inAnswer = false;
  for (int t = 0; t < T; ++t) {
    const std::string cur = ds.decode({in[t]});
    if (cur == "=") inAnswer = true;
    if (inAnswer) {
      EXPECT_NE(tg[t], -1) << "t=" << t;
      if (t + 1 < T) {
        EXPECT_EQ(tg[t], in[t + 1]);
      }
      if (tg[t] == ds.endToken()) inAnswer = false;
    } else {
      EXPECT_EQ(tg[t], -1) << "t=" << t;
    }
    EXPECT_GE(in[t], 0);
    EXPECT_LT(in[t], ds.vocabSize());
  }
  return out;
}

std::string tempPath(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("trainscope_data_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

std::string writeFile(const std::string& name, const std::string& bytes) {
  const std::string p = tempPath(name);
  std::ofstream(p, std::ios::binary) << bytes;
  return p;
}

std::string expectDatasetError(const RunConfig& c) {
  try {
    makeDataset(c);
  } catch (const DatasetError& e) {
    return e.what();
  }
  ADD_FAILURE() << "no DatasetError";
  return {};
}

}  // namespace

// ---------------------------------------------------------------------------------- addition

TEST(AdditionData, BatchesAreCorrectSumsWithAnswerOnlyTargets) {
  auto ds = makeDataset(additionConfig(3));
  EXPECT_EQ(ds->vocabSize(), 14);
  EXPECT_NE(ds->describe().find("addition"), std::string::npos);
  const int B = 4, T = 32;
  const Batch b = train(*ds, B, T);
  int samples = 0;
  for (int r = 0; r < B; ++r) {
    const auto ps = checkAdditionRow(*ds, &b.in[r * T], &b.tg[r * T], T);
    for (const auto& p : ps) EXPECT_EQ(p.width, 3);
    samples += static_cast<int>(ps.size());
  }
  EXPECT_EQ(samples, B * 2);  // 13-token samples: two fit in 33 tokens
}

TEST(AdditionData, GeneratedSamplesHaveTheDocumentedForm) {
  // docs: "123+45" at 3 digits is "123+045=8610": operands zero-padded to the width, the sum
  // reversed and padded to width + 1. Every complete sample the dataset generates must be
  // exactly that string, rebuilt here from its operands with independent formatting.
  auto ds = makeDataset(additionConfig(3));
  const int B = 8, T = 32;
  int checked = 0, padded = 0;
  for (int batch = 0; batch < 20; ++batch) {
    const Batch b = train(*ds, B, T);
    for (int r = 0; r < B; ++r) {
      std::istringstream lines(ds->decode(std::vector<int32_t>(&b.in[r * T], &b.in[r * T] + T)));
      std::string line;
      while (std::getline(lines, line)) {
        if (lines.eof()) break;  // the row's cut end
        const size_t plus = line.find('+');
        ASSERT_NE(plus, std::string::npos) << line;
        const unsigned a = std::stoul(line.substr(0, plus));
        const unsigned bv = std::stoul(line.substr(plus + 1));
        char expect[32];
        std::snprintf(expect, sizeof expect, "%03u+%03u=", a, bv);
        char sum[8];
        std::snprintf(sum, sizeof sum, "%04u", a + bv);
        std::string rev(sum);
        std::reverse(rev.begin(), rev.end());
        EXPECT_EQ(line, std::string(expect) + rev);
        padded += a < 100 || bv < 100;
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 100);
  EXPECT_GT(padded, 0) << "no sample exercised the zero padding";
}

TEST(AdditionData, SameSeedSameBatchesOtherSeedOther) {
  auto a = makeDataset(additionConfig(3, 1)), b = makeDataset(additionConfig(3, 1)),
       c = makeDataset(additionConfig(3, 2));
  for (int i = 0; i < 5; ++i) {
    const Batch x = train(*a, 3, 32), y = train(*b, 3, 32), z = train(*c, 3, 32);
    EXPECT_EQ(x, y);
    EXPECT_NE(x, z);
  }
  EXPECT_EQ(val(*a, 0, 3, 32), val(*b, 0, 3, 32));
}

TEST(AdditionData, TrainAndValidationProblemsAreDisjointAndCoverAll) {
  // One digit: 100 problems, so the split can be checked exhaustively.
  RunConfig cfg = additionConfig(1, 11, 16);
  cfg.data.val_fraction = 0.2;
  auto ds = makeDataset(cfg);
  const int B = 8, T = 16;
  std::set<std::pair<uint64_t, uint64_t>> valSet, trainSet;
  const int64_t nv = ds->valBatchCount(B, T);
  ASSERT_GT(nv, 0);
  for (int64_t i = 0; i < nv; ++i) {
    const Batch b = val(*ds, i, B, T);
    for (int r = 0; r < B; ++r)
      for (const auto& p : checkAdditionRow(*ds, &b.in[r * T], &b.tg[r * T], T))
        valSet.insert({p.a, p.b});
  }
  for (int i = 0; i < 300; ++i) {
    const Batch b = train(*ds, B, T);
    for (int r = 0; r < B; ++r)
      for (const auto& p : checkAdditionRow(*ds, &b.in[r * T], &b.tg[r * T], T))
        trainSet.insert({p.a, p.b});
  }
  for (const auto& p : valSet) EXPECT_EQ(trainSet.count(p), 0u) << p.first << "+" << p.second;
  EXPECT_EQ(valSet.size() + trainSet.size(), 100u);  // every problem lands on one side
  EXPECT_GT(valSet.size(), 5u);                      // 20% of 100, binomial spread
  EXPECT_LT(valSet.size(), 40u);
}

TEST(AdditionData, LargerDigitsDisjointToo) {
  auto ds = makeDataset(additionConfig(2, 5, 32));
  std::set<std::pair<uint64_t, uint64_t>> valSet;
  const int B = 16, T = 32;
  for (int64_t i = 0; i < ds->valBatchCount(B, T); ++i) {
    const Batch b = val(*ds, i, B, T);
    for (int r = 0; r < B; ++r)
      for (const auto& p : checkAdditionRow(*ds, &b.in[r * T], &b.tg[r * T], T))
        valSet.insert({p.a, p.b});
  }
  EXPECT_GT(valSet.size(), 400u);
  int overlaps = 0, seen = 0;
  for (int i = 0; i < 100; ++i) {
    const Batch b = train(*ds, B, T);
    for (int r = 0; r < B; ++r)
      for (const auto& p : checkAdditionRow(*ds, &b.in[r * T], &b.tg[r * T], T)) {
        overlaps += static_cast<int>(valSet.count({p.a, p.b}));
        ++seen;
      }
  }
  EXPECT_GT(seen, 4000);
  EXPECT_EQ(overlaps, 0);
}

TEST(AdditionData, ExactMatchSamplesAreValidationProblems) {
  auto ds = makeDataset(additionConfig(4, 3, 32));
  ASSERT_TRUE(ds->hasExactMatch());
  const auto samples = ds->exactMatchSamples(50);
  ASSERT_EQ(samples.size(), 50u);
  for (const auto& [prompt, answer] : samples) {
    const std::string p = ds->decode(prompt), a = ds->decode(answer);
    ASSERT_EQ(p.size(), 10u) << p;  // "dddd+dddd="
    EXPECT_EQ(p.back(), '=');
    ASSERT_EQ(answer.size(), 6u);  // 5 sum digits + end
    EXPECT_EQ(answer.back(), ds->endToken());
    const uint64_t x = std::stoull(p.substr(0, 4)), y = std::stoull(p.substr(5, 4));
    const std::string digits = a.substr(0, 5);
    EXPECT_EQ(std::stoull(std::string(digits.rbegin(), digits.rend())), x + y) << p << a;
  }
}

TEST(AdditionData, StateRestoreReproducesBatches) {
  const RunConfig cfg = additionConfig(3, 99);
  auto ds = makeDataset(cfg);
  ds->setDifficulty(1.0);
  for (int i = 0; i < 3; ++i) train(*ds, 4, 32);
  const nlohmann::json st = ds->state();
  const std::string saved = st.dump();  // must survive a round trip through text
  std::vector<Batch> expected;
  for (int i = 0; i < 3; ++i) expected.push_back(train(*ds, 4, 32));

  auto resumed = makeDataset(cfg);
  resumed->restore(nlohmann::json::parse(saved));
  for (int i = 0; i < 3; ++i) EXPECT_EQ(train(*resumed, 4, 32), expected[i]);

  EXPECT_THROW(resumed->restore(nlohmann::json{{"kind", "text"}}), DatasetError);
  EXPECT_THROW(
      resumed->restore(nlohmann::json{{"kind", "addition"}, {"rng", {"zz", "1", "2", "3"}}}),
      DatasetError);
}

TEST(AdditionData, CurriculumUsesFewerDigitsEarly) {
  RunConfig cfg = additionConfig(4, 1, 32);
  cfg.curriculum.type = "difficulty";
  auto ds = makeDataset(cfg);
  const int B = 4, T = 32;
  for (const auto& [fraction, width] :
       std::vector<std::pair<double, int>>{{0.1, 1}, {0.5, 2}, {0.6, 3}, {1.0, 4}}) {
    ds->setDifficulty(fraction);
    const Batch b = train(*ds, B, T);
    int n = 0;
    for (int r = 0; r < B; ++r)
      for (const auto& p : checkAdditionRow(*ds, &b.in[r * T], &b.tg[r * T], T)) {
        EXPECT_EQ(p.width, width) << "fraction " << fraction;
        ++n;
      }
    EXPECT_GT(n, 0);
  }
  // Validation stays at full difficulty whatever the curriculum says.
  ds->setDifficulty(0.1);
  const Batch v = val(*ds, 0, B, T);
  for (const auto& p : checkAdditionRow(*ds, &v.in[0], &v.tg[0], T)) EXPECT_EQ(p.width, 4);

  // Without a curriculum setDifficulty changes nothing.
  auto plain = makeDataset(additionConfig(4, 1, 32));
  plain->setDifficulty(0.1);
  const Batch b = train(*plain, B, T);
  for (const auto& p : checkAdditionRow(*plain, &b.in[0], &b.tg[0], T)) EXPECT_EQ(p.width, 4);
}

TEST(AdditionData, BadConfigIsReported) {
  EXPECT_NE(expectDatasetError(additionConfig(0)).find("data.digits"), std::string::npos);
  EXPECT_NE(expectDatasetError(additionConfig(19)).find("1..18"), std::string::npos);
  const std::string msg = expectDatasetError(additionConfig(5, 1, 12));  // needs 18
  EXPECT_NE(msg.find("model.seq_len"), std::string::npos) << msg;
  EXPECT_NE(msg.find("18"), std::string::npos) << msg;
  RunConfig c = additionConfig(3);
  c.data.val_fraction = 1.0;
  EXPECT_NE(expectDatasetError(c).find("val_fraction"), std::string::npos);
  c = additionConfig(3);
  c.data.task = "poetry";
  EXPECT_NE(expectDatasetError(c).find("poetry"), std::string::npos);
  c = additionConfig(3);
  c.model.vocab = 10;
  EXPECT_NE(expectDatasetError(c).find("model.vocab"), std::string::npos);
}

// ----------------------------------------------------------------------------------- grammar

namespace {

// An independent recognizer for the documented grammar:
// S -> NP[n] (Vt[n] NP | Vi[n] PP?) "." ; NP[n] -> Det[n] Adj? N[n] PP? ; PP -> P NP.
struct GrammarChecker {
  std::map<std::string, int> noun{{"cat", 0},      {"dog", 0},   {"bird", 0},  {"fox", 0},
                                  {"mouse", 0},    {"child", 0}, {"robot", 0}, {"cats", 1},
                                  {"dogs", 1},     {"birds", 1}, {"foxes", 1}, {"mice", 1},
                                  {"children", 1}, {"robots", 1}};
  std::map<std::string, int> vt{{"sees", 0},   {"chases", 0}, {"likes", 0}, {"follows", 0},
                                {"finds", 0},  {"see", 1},    {"chase", 1}, {"like", 1},
                                {"follow", 1}, {"find", 1}};
  std::map<std::string, int> vi{{"sleeps", 0}, {"runs", 0}, {"sings", 0},
                                {"sleep", 1},  {"run", 1},  {"sing", 1}};
  std::map<std::string, int> det{{"a", 0},    {"every", 0}, {"one", 0}, {"some", 1},
                                 {"many", 1}, {"two", 1},   {"the", -1}};
  std::set<std::string> adj{"small", "big", "red", "quick", "lazy", "old"};
  std::set<std::string> prep{"with", "near", "under", "behind"};

  std::vector<std::string> w;
  size_t i = 0;
  int maxDepth = 0;

  // Returns the head noun's number or -2 on failure.
  int np(int depth) {
    if (i >= w.size() || !det.count(w[i])) return -2;
    const int d = det[w[i++]];
    if (i < w.size() && adj.count(w[i])) ++i;
    if (i >= w.size() || !noun.count(w[i])) return -2;
    const int n = noun[w[i++]];
    if (d != -1 && d != n) return -2;
    if (i < w.size() && prep.count(w[i]) && !pp(depth + 1)) return -2;
    return n;
  }
  bool pp(int depth) {
    maxDepth = std::max(maxDepth, depth);
    ++i;
    return np(depth) != -2;
  }
  bool sentence(const std::string& s) {
    std::istringstream in(s);
    w.clear();
    for (std::string x; in >> x;) w.push_back(x);
    i = 0;
    const int n = np(0);
    if (n == -2 || i >= w.size()) return false;
    if (vt.count(w[i])) {
      if (vt[w[i++]] != n || np(0) == -2) return false;
    } else if (vi.count(w[i])) {
      if (vi[w[i++]] != n) return false;
      if (i < w.size() && prep.count(w[i]) && !pp(1)) return false;
    } else {
      return false;
    }
    return i + 1 == w.size() && w[i] == ".";
  }
};

RunConfig grammarConfig(uint64_t seed = 3, int T = 48) {
  RunConfig c;
  c.data.source = "synthetic";
  c.data.task = "grammar";
  c.train.seed = seed;
  c.model.seq_len = T;
  return c;
}

// Complete sentences of a row (the text after the last newline is cut off by the row end).
std::vector<std::string> rowSentences(const Dataset& ds, const int32_t* in, int T) {
  const std::string text = ds.decode(std::vector<int32_t>(in, in + T));
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t nl; (nl = text.find('\n', start)) != std::string::npos; start = nl + 1)
    out.push_back(text.substr(start, nl - start));
  return out;
}

}  // namespace

TEST(GrammarData, SentencesFollowTheGrammarWithAgreement) {
  auto ds = makeDataset(grammarConfig());
  EXPECT_GT(ds->vocabSize(), 40);
  const int B = 8, T = 48;
  GrammarChecker check;
  int n = 0;
  for (int k = 0; k < 10; ++k) {
    const Batch b = train(*ds, B, T);
    for (int r = 0; r < B; ++r) {
      for (int t = 0; t + 1 < T; ++t) EXPECT_EQ(b.tg[r * T + t], b.in[r * T + t + 1]);
      for (const auto& s : rowSentences(*ds, &b.in[r * T], T)) {
        EXPECT_TRUE(check.sentence(s)) << s;
        ++n;
      }
    }
  }
  EXPECT_GT(n, 100);
  EXPECT_GE(check.maxDepth, 2);  // nesting happens
  EXPECT_LE(check.maxDepth, 3);
}

TEST(GrammarData, TrainAndValidationSentencesAreDisjoint) {
  RunConfig cfg = grammarConfig(8, 32);
  cfg.data.val_fraction = 0.3;
  auto ds = makeDataset(cfg);
  const int B = 16, T = 32;
  std::set<std::string> valSet;
  ASSERT_GT(ds->valBatchCount(B, T), 0);
  for (int64_t i = 0; i < ds->valBatchCount(B, T); ++i) {
    const Batch b = val(*ds, i, B, T);
    for (int r = 0; r < B; ++r) {
      // Val rows are cut from one stream: a row's first line may be the tail of a sentence.
      auto sentences = rowSentences(*ds, &b.in[r * T], T);
      if (i + r > 0 && !sentences.empty()) sentences.erase(sentences.begin());
      for (const auto& s : sentences) valSet.insert(s);
    }
  }
  ASSERT_GT(valSet.size(), 100u);
  int overlaps = 0, seen = 0;
  for (int k = 0; k < 100; ++k) {
    const Batch b = train(*ds, B, T);
    for (int r = 0; r < B; ++r)
      for (const auto& s : rowSentences(*ds, &b.in[r * T], T)) {
        overlaps += static_cast<int>(valSet.count(s));
        ++seen;
      }
  }
  EXPECT_GT(seen, 2000);
  // Short sentences repeat a lot, so a broken split would overlap heavily.
  EXPECT_EQ(overlaps, 0);
}

TEST(GrammarData, DifficultyCurriculumRemovesNesting) {
  RunConfig cfg = grammarConfig();
  cfg.curriculum.type = "difficulty";
  auto ds = makeDataset(cfg);
  ds->setDifficulty(0.1);  // depth round(0.3) = 0
  const Batch b = train(*ds, 8, 48);
  GrammarChecker check;
  for (int r = 0; r < 8; ++r)
    for (const auto& s : rowSentences(*ds, &b.in[r * 48], 48)) {
      EXPECT_TRUE(check.sentence(s)) << s;
      for (const char* p : {" with ", " near ", " under ", " behind "})
        EXPECT_EQ(s.find(p), std::string::npos) << s;
    }
}

TEST(GrammarData, LengthCurriculumShortensRows) {
  RunConfig cfg = grammarConfig(3, 40);
  cfg.curriculum.type = "length";
  auto ds = makeDataset(cfg);
  ds->setDifficulty(0.25);  // 10 of 40 positions
  const Batch b = train(*ds, 4, 40);
  for (int r = 0; r < 4; ++r)
    for (int t = 0; t < 40; ++t) EXPECT_EQ(b.tg[r * 40 + t] != -1, t < 10) << t;
  ds->setDifficulty(1.0);
  const Batch full = train(*ds, 4, 40);
  for (int32_t t : full.tg) EXPECT_NE(t, -1);
}

TEST(GrammarData, StateRestoreReproducesBatches) {
  auto ds = makeDataset(grammarConfig(4));
  train(*ds, 4, 48);
  const auto st = ds->state();
  const Batch next = train(*ds, 4, 48);
  auto other = makeDataset(grammarConfig(4));
  other->restore(st);
  EXPECT_EQ(train(*other, 4, 48), next);
}

// -------------------------------------------------------------------------------------- text

namespace {

// Pseudo-random words (no two 16-byte windows alike) with some multibyte UTF-8.
std::string sampleText(size_t n) {
  std::string s;
  uint32_t x = 12345;
  while (s.size() < n) {
    x = x * 1664525u + 1013904223u;
    const int len = 1 + (x >> 28) % 7;
    for (int i = 0; i < len; ++i) {
      x = x * 1664525u + 1013904223u;
      s.push_back(static_cast<char>('a' + (x >> 24) % 26));
    }
    s += (x >> 20) % 9 == 0 ? " \xE2\x9C\x93\n" : " ";
  }
  s.resize(n);
  return s;
}

RunConfig textConfig(const std::string& path, int T = 16, uint64_t seed = 1) {
  RunConfig c;
  c.data.source = "text";
  c.data.path = path;
  c.model.seq_len = T;
  c.train.seed = seed;
  return c;
}

}  // namespace

TEST(TextData, RowsAreFileWindowsVisitedOncePerEpoch) {
  const std::string text = sampleText(2000);
  const std::string path = writeFile("epoch.txt", text);
  auto ds = makeDataset(textConfig(path));
  EXPECT_EQ(ds->vocabSize(), 256);
  const int T = 16;
  const int64_t trainCount = 2000 - 200;  // val_fraction 0.1 at the end
  const int64_t windows = (trainCount - 1) / T;
  std::map<int64_t, int> starts;
  for (int64_t k = 0; k < windows; ++k) {
    const Batch b = train(*ds, 1, T);
    // Locate the row in the file: must be at a multiple of T inside the training part.
    int64_t found = -1;
    for (int64_t s = 0; s + T < trainCount + 1 && found < 0; s += T) {
      bool ok = true;
      for (int t = 0; t < T && ok; ++t)
        ok = b.in[t] == static_cast<unsigned char>(text[s + t]) &&
             b.tg[t] == static_cast<unsigned char>(text[s + t + 1]);
      if (ok) found = s;
    }
    ASSERT_GE(found, 0) << "row " << k << " is not a training window";
    ++starts[found];
  }
  EXPECT_EQ(static_cast<int64_t>(starts.size()), windows);  // a permutation: each window once
  // Shuffled, not file order.
  auto ds2 = makeDataset(textConfig(path));
  int inOrder = 0;
  for (int64_t k = 0; k < 10; ++k) inOrder += train(*ds2, 1, T).in[0] == text[k * T];
  EXPECT_LT(inOrder, 10);
  std::filesystem::remove(path);
}

TEST(TextData, ValidationIsTheTailAndDisjoint) {
  const std::string text = sampleText(1000);
  const std::string path = writeFile("val.txt", text);
  RunConfig cfg = textConfig(path, 16);
  cfg.data.val_fraction = 0.2;  // last 200 bytes
  auto ds = makeDataset(cfg);
  const int B = 4, T = 16;
  const int64_t n = ds->valBatchCount(B, T);
  EXPECT_EQ(n, 3);  // 12 windows of 16 in 200 bytes, in batches of 4
  for (int64_t i = 0; i < n; ++i) {
    const Batch b = val(*ds, i, B, T);
    for (int r = 0; r < B; ++r) {
      const int64_t start = 800 + (i * B + r) * T;
      for (int t = 0; t < T; ++t) {
        EXPECT_EQ(b.in[r * T + t], static_cast<unsigned char>(text[start + t]));
        EXPECT_EQ(b.tg[r * T + t], static_cast<unsigned char>(text[start + t + 1]));
      }
    }
  }
  // Training never reads past byte 800.
  for (int k = 0; k < 100; ++k) {
    const Batch b = train(*ds, 1, T);
    bool inTrain = false;
    for (int64_t s = 0; s + T + 1 <= 800 && !inTrain; s += T)
      inTrain = std::equal(b.tg.begin(), b.tg.end(), text.begin() + s + 1,
                           [](int32_t a, char c) { return a == static_cast<unsigned char>(c); });
    EXPECT_TRUE(inTrain);
  }
  std::filesystem::remove(path);
}

TEST(TextData, DeterministicBySeedAndResumableAcrossEpochs) {
  const std::string path = writeFile("resume.txt", sampleText(800));
  auto a = makeDataset(textConfig(path, 16, 5)), b = makeDataset(textConfig(path, 16, 5)),
       c = makeDataset(textConfig(path, 16, 6));
  EXPECT_EQ(train(*a, 4, 16), train(*b, 4, 16));
  EXPECT_NE(train(*a, 4, 16), train(*c, 4, 16));
  train(*b, 4, 16);
  // 44 windows per epoch: run into the second epoch, save, and compare the continuation.
  for (int i = 0; i < 9; ++i) train(*a, 4, 16);
  const std::string saved = a->state().dump();
  std::vector<Batch> expected;
  for (int i = 0; i < 15; ++i) expected.push_back(train(*a, 4, 16));
  auto resumed = makeDataset(textConfig(path, 16, 5));
  resumed->restore(nlohmann::json::parse(saved));
  for (int i = 0; i < 15; ++i) EXPECT_EQ(train(*resumed, 4, 16), expected[i]) << i;
  std::filesystem::remove(path);
}

TEST(TextData, BadFilesNameTheFileAndProblem) {
  const std::string missing = tempPath("does_not_exist.txt");
  std::string msg = expectDatasetError(textConfig(missing));
  EXPECT_NE(msg.find(missing), std::string::npos) << msg;
  EXPECT_NE(msg.find("does not exist"), std::string::npos) << msg;

  const std::string empty = writeFile("empty.txt", "");
  msg = expectDatasetError(textConfig(empty));
  EXPECT_NE(msg.find(empty), std::string::npos) << msg;
  EXPECT_NE(msg.find("empty"), std::string::npos) << msg;

  const std::string shortFile = writeFile("short.txt", "hello world");  // 11 < 17
  msg = expectDatasetError(textConfig(shortFile, 16));
  EXPECT_NE(msg.find(shortFile), std::string::npos) << msg;
  EXPECT_NE(msg.find("fewer than one sequence"), std::string::npos) << msg;
  EXPECT_NE(msg.find("17"), std::string::npos) << msg;

  // Long enough to train on, but the validation tail is shorter than a sequence.
  const std::string smallVal = writeFile("smallval.txt", sampleText(100));
  msg = expectDatasetError(textConfig(smallVal, 16));
  EXPECT_NE(msg.find("validation part"), std::string::npos) << msg;
  RunConfig noVal = textConfig(smallVal, 16);
  noVal.data.val_fraction = 0.0;
  auto ds = makeDataset(noVal);
  EXPECT_EQ(ds->valBatchCount(4, 16), 0);

  msg = expectDatasetError(textConfig(std::filesystem::temp_directory_path().string()));
  EXPECT_NE(msg.find("directory"), std::string::npos) << msg;
  msg = expectDatasetError(textConfig(""));
  EXPECT_NE(msg.find("data.path"), std::string::npos) << msg;
  for (const auto& p : {empty, shortFile, smallVal}) std::filesystem::remove(p);
}

TEST(TextData, LengthCurriculumMasksTheRowTail) {
  const std::string path = writeFile("len.txt", sampleText(2000));
  RunConfig cfg = textConfig(path, 32);
  cfg.curriculum.type = "length";
  auto ds = makeDataset(cfg);
  ds->setDifficulty(0.5);
  const Batch b = train(*ds, 2, 32);
  for (int r = 0; r < 2; ++r)
    for (int t = 0; t < 32; ++t) EXPECT_EQ(b.tg[r * 32 + t] != -1, t < 16);
  std::filesystem::remove(path);
}

// ------------------------------------------------------------------------------------ tokens

namespace {

std::string uint16File(const std::vector<uint16_t>& ids) {
  std::string bytes;
  for (uint16_t id : ids) {
    bytes.push_back(static_cast<char>(id & 0xFF));
    bytes.push_back(static_cast<char>(id >> 8));
  }
  return bytes;
}

std::string uint32File(const std::vector<uint32_t>& ids) {
  std::string bytes;
  for (uint32_t id : ids)
    for (int b = 0; b < 4; ++b) bytes.push_back(static_cast<char>((id >> (8 * b)) & 0xFF));
  return bytes;
}

RunConfig tokenConfig(const std::string& path, int vocab, int T = 8) {
  RunConfig c;
  c.data.source = "tokens";
  c.data.path = path;
  c.model.vocab = vocab;
  c.model.seq_len = T;
  c.data.val_fraction = 0.0;
  return c;
}

}  // namespace

TEST(TokenData, ReadsLittleEndianUint16) {
  std::vector<uint16_t> ids;
  for (int i = 0; i < 9; ++i) ids.push_back(static_cast<uint16_t>(0x1234 + 0x101 * i));
  const std::string path = writeFile("le.bin", uint16File(ids));
  auto ds = makeDataset(tokenConfig(path, 50257, 8));
  EXPECT_EQ(ds->vocabSize(), 50257);
  const Batch b = train(*ds, 1, 8);  // one window only
  for (int t = 0; t < 8; ++t) {
    EXPECT_EQ(b.in[t], ids[t]);
    EXPECT_EQ(b.tg[t], ids[t + 1]);
  }
  EXPECT_EQ(ds->decode({0x1234, 7}), "4660 7");
  std::filesystem::remove(path);
}

// Above 65,536 ids the file holds little-endian uint32 ids (Qwen's 151,936, Llama 3's 128,256).
TEST(TokenData, ReadsLittleEndianUint32AboveA16BitVocabulary) {
  std::vector<uint32_t> ids;
  for (uint32_t i = 0; i < 9; ++i) ids.push_back(70000 + 9000 * i);
  ids[2] = 7;
  const std::string path = writeFile("le32.bin", uint32File(ids));
  auto ds = makeDataset(tokenConfig(path, 151936, 8));
  EXPECT_EQ(ds->vocabSize(), 151936);
  EXPECT_NE(ds->describe().find("uint32 ids, vocab 151936"), std::string::npos) << ds->describe();
  const Batch b = train(*ds, 1, 8);
  for (int t = 0; t < 8; ++t) {
    EXPECT_EQ(b.in[t], static_cast<int32_t>(ids[t]));
    EXPECT_EQ(b.tg[t], static_cast<int32_t>(ids[t + 1]));
  }
  // The boundary: 65,536 ids still fit uint16, so the same bytes read as twice as many ids.
  const std::string le16 = writeFile("le16.bin", uint16File({1, 2, 3, 4, 5, 6, 7, 8, 9}));
  EXPECT_NE(makeDataset(tokenConfig(le16, 65536, 8))->describe().find("uint16 ids, vocab 65536"),
            std::string::npos);
  // A size that is not a multiple of 4, and an id past the vocabulary (byte offset 4 * index).
  const std::string ragged = writeFile("ragged.bin", uint32File(ids) + "xy");
  std::string msg = expectDatasetError(tokenConfig(ragged, 151936));
  EXPECT_NE(msg.find("token file '" + ragged +
                     "' has a length of 38 bytes: not a whole number "
                     "of uint32 token ids (little-endian, 4 bytes each, for a vocabulary of "
                     "more than 65536 ids; model.vocab is 151936)"),
            std::string::npos)
      << msg;
  ids[5] = 151936;
  const std::string big = writeFile("big32.bin", uint32File(ids));
  msg = expectDatasetError(tokenConfig(big, 151936));
  EXPECT_NE(msg.find("token file '" + big +
                     "': token 5 at byte offset 20 has id 151936, not below model.vocab 151936"),
            std::string::npos)
      << msg;
  ids[5] = 0xFFFFFFFFu;  // ids past INT32_MAX are reported as read, never wrapped
  const std::string huge = writeFile("huge32.bin", uint32File(ids));
  msg = expectDatasetError(tokenConfig(huge, 151936));
  EXPECT_NE(msg.find("has id 4294967295, not below model.vocab 151936"), std::string::npos) << msg;
  for (const auto& p : {path, le16, ragged, big, huge}) std::filesystem::remove(p);
}

TEST(TokenData, BadFilesNameTheFileOffsetAndId) {
  const std::string odd = writeFile("odd.bin", uint16File({1, 2, 3, 4, 5, 6, 7, 8, 9}) + "x");
  std::string msg = expectDatasetError(tokenConfig(odd, 64));
  EXPECT_NE(msg.find(odd), std::string::npos) << msg;
  EXPECT_NE(msg.find("odd length (19 bytes)"), std::string::npos) << msg;

  std::vector<uint16_t> ids{1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  ids[6] = 70;
  const std::string big = writeFile("big.bin", uint16File(ids));
  msg = expectDatasetError(tokenConfig(big, 64));
  EXPECT_NE(msg.find(big), std::string::npos) << msg;
  EXPECT_NE(msg.find("token 6 at byte offset 12 has id 70"), std::string::npos) << msg;
  EXPECT_NE(msg.find("64"), std::string::npos) << msg;

  msg = expectDatasetError(tokenConfig(big, 0));
  EXPECT_NE(msg.find("model.vocab"), std::string::npos) << msg;

  const std::string empty = writeFile("empty.bin", "");
  msg = expectDatasetError(tokenConfig(empty, 64));
  EXPECT_NE(msg.find("empty"), std::string::npos) << msg;

  const std::string shortFile = writeFile("short.bin", uint16File({1, 2, 3}));
  msg = expectDatasetError(tokenConfig(shortFile, 64));
  EXPECT_NE(msg.find("fewer than one sequence"), std::string::npos) << msg;

  const std::string missing = tempPath("missing.bin");
  msg = expectDatasetError(tokenConfig(missing, 64));
  EXPECT_NE(msg.find(missing), std::string::npos) << msg;
  for (const auto& p : {odd, big, empty, shortFile}) std::filesystem::remove(p);
}
