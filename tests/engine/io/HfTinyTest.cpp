// Hugging Face folders with their tokenizers (tests/data/hf_tiny, made with save_pretrained by
// tools/make_hf_tiny.py): the folder's own tokenizer gives transformers' ids, evaluate on a text
// gives transformers' loss, the logits of a fixed batch match; text and jsonl training data go
// through the base model's tokenizer; import -> train -> export keeps the tokenizer and a bf16
// export loads back to the rounded weights.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "../../support/TrainerHarness.h"
#include "trainscope/engine/io/Checkpoint.h"
#include "trainscope/engine/data/Dataset.h"
#include "trainscope/engine/train/Evaluate.h"
#include "trainscope/engine/io/HfExport.h"
#include "trainscope/engine/io/HfModel.h"
#include "trainscope/engine/tokenizer/HfTokenizer.h"
#include "trainscope/engine/io/ModelSource.h"
#include "trainscope/kernels/Numeric.h"

using namespace ts::engine;
namespace fs = std::filesystem;
using ts::testsupport::errorOf;
using ts::testsupport::scratchDir;
using json = nlohmann::json;

namespace {

const fs::path kData = fs::path(TRAINSCOPE_TEST_DATA);
const fs::path kTiny = kData / "hf_tiny";

json expectedTiny() {
  return json::parse(std::ifstream(kTiny / "expected.json"));
}

std::string readFile(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

// The folder's tokenizer.json gives transformers' ids for eval.txt; evaluate --text with the
// model's own tokenizer equals transformers' float64 loss over the same windows (1e-5
// relative); the fp32 logits of the first two windows have transformers' sum and sum of squares
// and the same mean cross-entropy.
TEST(HfTiny, OwnTokenizerEvaluateAndLogitsEqualTransformers) {
  const json expected = expectedTiny();
  auto backend = ts::kernels::makeCpuBackend();
  for (const char* name : {"gpt2", "llama"}) {
    SCOPED_TRACE(name);
    const json& e = expected[name];
    const std::string folder = (kTiny / name).string();
    const int seq = e["seq"].get<int>();
    ASSERT_EQ(modelTokenizer(folder), (kTiny / name / "tokenizer.json").string());
    const auto ids = readTextTokens((kTiny / "eval.txt").string(), modelTokenizer(folder));
    EXPECT_EQ(ids, e["ids"].get<std::vector<int32_t>>());

    const EvalResult r = evaluateModel(folder, ids, seq, backend.get(), 8);
    EXPECT_NEAR(r.loss, e["loss"].get<double>(), 1e-5 * e["loss"].get<double>());
    EXPECT_EQ(r.tokens, e["tokens"].get<int64_t>());
    EXPECT_EQ(r.windows, e["windows"].get<int64_t>());

    MemoryTracker tracker;
    LoadedModel lm = loadModelFrom(folder, backend.get(), &tracker);
    Gpt& m = *lm.model;
    std::vector<int32_t> in(2 * seq), tg(2 * seq);
    for (int b = 0; b < 2; ++b)
      for (int t = 0; t < seq; ++t) {
        in[b * seq + t] = ids[b * seq + t];
        tg[b * seq + t] = ids[b * seq + t + 1];
      }
    m.allocate(2);
    m.forward(in.data(), nullptr, 2, seq, 0.f);
    const int V = m.config().vocab;
    std::vector<float> row(V);
    double sum = 0, sumsq = 0, ce = 0;
    for (int b = 0; b < 2; ++b)
      for (int t = 0; t < seq; ++t) {
        m.logitsRow(b, t, row.data());
        double mx = -1e300;
        for (float v : row) mx = std::max(mx, double(v));
        double z = 0;
        for (float v : row) {
          sum += v;
          sumsq += double(v) * v;
          z += std::exp(double(v) - mx);
        }
        ce += mx + std::log(z) - row[tg[b * seq + t]];
      }
    const json& lc = e["logits_check"];
    EXPECT_EQ(lc["shape"][2].get<int>(), V);
    // Sums over 2*16*V fp32 logits of magnitude ~0.5: 1e-4 absolute per logit at most.
    EXPECT_NEAR(sum, lc["logits_sum"].get<double>(), 1e-4 * 2 * seq * V);
    EXPECT_NEAR(sumsq, lc["logits_sumsq"].get<double>(), 1e-5 * lc["logits_sumsq"].get<double>());
    EXPECT_NEAR(ce / (2 * seq), lc["loss"].get<double>(), 1e-5);
    int64_t count = 0;
    const double lossSum = m.forward(in.data(), tg.data(), 2, seq, 0.f, &count);
    EXPECT_EQ(count, 2 * seq);
    EXPECT_NEAR(lossSum / count, lc["loss"].get<double>(), 1e-5);
  }
}

// data.source text tokenizes with the fine-tuning base's tokenizer: every training row is a
// window of transformers' ids; "bytes" forces the byte tokenizer; a data.tokenizer without a
// tokenizer.json is refused naming the key.
TEST(HfTiny, TextDataUsesTheBaseModelsTokenizer) {
  const json expected = expectedTiny();
  ts::core::RunConfig c = ts::testsupport::tinyAdditionConfig();
  c.data.source = "text";
  c.data.path = (kTiny / "eval.txt").string();
  c.data.val_fraction = 0.1;
  c.model.seq_len = 16;
  c.finetune.base_checkpoint = (kTiny / "gpt2").string();
  auto ds = makeDataset(c);
  EXPECT_EQ(ds->vocabSize(), 384);
  EXPECT_NE(ds->describe().find("byte-level BPE, 384 tokens"), std::string::npos) << ds->describe();
  EXPECT_EQ(ds->tokenizerFiles().size(), 2u);  // tokenizer.json, tokenizer_config.json
  const auto ids = expected["gpt2"]["ids"].get<std::vector<int32_t>>();
  const int B = 4, T = 16;
  std::vector<int32_t> in(B * T), tg(B * T);
  for (int step = 0; step < 5; ++step) {
    ds->nextTrainBatch(in.data(), tg.data(), B, T);
    for (int r = 0; r < B; ++r) {
      // The row is ids[k*T .. k*T+T] for some k.
      bool found = false;
      for (size_t k = 0; (k + 1) * T < ids.size() && !found; ++k)
        found = std::equal(in.begin() + r * T, in.begin() + (r + 1) * T, ids.begin() + k * T) &&
                std::equal(tg.begin() + r * T, tg.begin() + (r + 1) * T, ids.begin() + k * T + 1);
      EXPECT_TRUE(found) << "row " << r << " of batch " << step << " is not a window of the ids";
    }
  }
  EXPECT_EQ(ds->decode(std::vector<int32_t>(ids.begin(), ids.begin() + 12)),
            readFile(kTiny / "eval.txt")
                .substr(0, ds->decode(std::vector<int32_t>(ids.begin(), ids.begin() + 12)).size()));

  c.data.tokenizer = "bytes";
  EXPECT_EQ(makeDataset(c)->vocabSize(), 256);
  c.data.tokenizer = (kData / "tokenizers" / "llama3").string();
  EXPECT_EQ(makeDataset(c)->vocabSize(), 400);
  c.data.tokenizer = (kData / "configs").string();
  std::string m = errorOf([&] { makeDataset(c); });
  EXPECT_NE(m.find("data.tokenizer '" + c.data.tokenizer + "' is neither a tokenizer.json"),
            std::string::npos)
      << m;
  // A tokenizer.json that does not parse: the data source says which file and which key.
  c.data.tokenizer = (kData / "configs" / "malformed.json").string();
  m = errorOf([&] { makeDataset(c); });
  EXPECT_NE(m.find("malformed.json': is not valid JSON"), std::string::npos) << m;
  EXPECT_NE(m.find("(data.tokenizer)"), std::string::npos) << m;
}

namespace {

ts::core::RunConfig jsonlConfig(const fs::path& file) {
  ts::core::RunConfig c = ts::testsupport::tinyAdditionConfig();
  c.data.source = "jsonl";
  c.data.path = file.string();
  c.data.tokenizer = (kData / "tokenizers" / "llama2").string();
  c.data.val_fraction = 0.25;
  c.model.seq_len = 24;
  c.model.vocab = 512;
  return c;
}

}  // namespace

// jsonl instruction data: one padded sample per row; the prompt (with <s>) is never a target,
// the completion and </s> are; {"text"} trains every token; the last quarter is validation.
TEST(Jsonl, PromptIsMaskedCompletionAndEosAreTrainedRowsPadded) {
  const fs::path dir = scratchDir("jsonl");
  const fs::path file = dir / "data.jsonl";
  {
    std::ofstream f(file);
    f << R"({"prompt": "Q: 2+2?", "completion": " A: 4", "id": 7})"
      << "\n\n";
    f << R"({"text": "hello world"})"
      << "\r\n";
    f << R"({"prompt": "Say hi", "completion": " hi"})"
      << "\n";
    f << R"({"prompt": "", "completion": "free text"})"
      << "\n";
  }
  auto c = jsonlConfig(file);
  auto ds = makeDataset(c);
  EXPECT_NE(ds->describe().find("4 samples (3 prompt/completion, 1 text), 3 train / 1 val"),
            std::string::npos)
      << ds->describe();
  const HfTokenizer tok = HfTokenizer::load(c.data.tokenizer);
  const int32_t eos = tok.tokenId("</s>");
  // The expected rows, from the tokenizer directly.
  auto sampleOf = [&](const std::string& p, const std::string& comp, bool text) {
    std::vector<int32_t> s = tok.encode(text ? comp : p, true);
    const size_t first = text ? 1 : s.size();
    if (!text) {
      const auto cids = tok.encode(comp, false);
      s.insert(s.end(), cids.begin(), cids.end());
    }
    s.push_back(eos);
    return std::make_pair(s, first);
  };
  const std::vector<std::pair<std::vector<int32_t>, size_t>> want = {
      sampleOf("Q: 2+2?", " A: 4", false), sampleOf("", "hello world", true),
      sampleOf("Say hi", " hi", false), sampleOf("", "free text", false)};
  ASSERT_EQ(want[0].first[0], tok.bosId());
  const int T = c.model.seq_len, B = 3;
  std::vector<int32_t> in(B * T), tg(B * T);
  ds->nextTrainBatch(in.data(), tg.data(), B, T);
  std::set<size_t> seen;
  for (int r = 0; r < B; ++r) {
    const int32_t* ri = in.data() + r * T;
    const int32_t* rt = tg.data() + r * T;
    size_t which = want.size();
    for (size_t k = 0; k + 1 < want.size(); ++k)  // the last sample is the validation one
      if (std::equal(want[k].first.begin(), want[k].first.end() - 1, ri)) which = k;
    ASSERT_LT(which, want.size() - 1) << "row " << r << " is no training sample";
    seen.insert(which);
    const auto& [s, first] = want[which];
    for (int t = 0; t < T; ++t) {
      const bool trained = t + 1 < int(s.size()) && size_t(t + 1) >= first;
      EXPECT_EQ(rt[t], trained ? s[t + 1] : -1) << "sample " << which << " position " << t;
      if (t >= int(s.size())) {
        EXPECT_EQ(ri[t], 0) << "padding";
      }
    }
  }
  EXPECT_EQ(seen.size(), 3u) << "one epoch visits each training sample once";
  ASSERT_EQ(ds->valBatchCount(2, T), 1);
  ds->valBatch(0, in.data(), tg.data(), 2, T);
  EXPECT_TRUE(std::equal(want[3].first.begin(), want[3].first.end() - 1, in.data()));
  EXPECT_EQ(tg[0], want[3].first[1]);  // an empty prompt is <s>: it predicts the completion
  for (int t = 0; t < T; ++t) EXPECT_EQ(tg[T + t], -1) << "padding row";

  // Resume reproduces the order.
  const json st = ds->state();
  std::vector<int32_t> a(B * T), at(B * T), b(B * T), bt(B * T);
  ds->nextTrainBatch(a.data(), at.data(), B, T);
  auto again = makeDataset(c);
  again->restore(st);
  again->nextTrainBatch(b.data(), bt.data(), B, T);
  EXPECT_EQ(a, b);
  EXPECT_EQ(at, bt);
  fs::remove_all(dir);
}

// Every bad line is reported with its number, and a run on such a file does not start.
TEST(Jsonl, BadLinesAreReportedWithTheirNumbersAndTheRunDoesNotStart) {
  const fs::path dir = scratchDir("jsonl_bad");
  const fs::path file = dir / "bad.jsonl";
  {
    std::ofstream f(file);
    f << R"({"prompt": "ok", "completion": "fine"})"
      << "\n";
    f << R"({"prompt": "no completion"})"
      << "\n";
    f << R"({"prompt": "a", "completion": "b")"
      << "\n";  // truncated
    f << R"(["not", "an", "object"])"
      << "\n";
    f << R"({"text": "x", "prompt": "y", "completion": "z"})"
      << "\n";
    f << R"({"prompt": "p", "completion": 3})"
      << "\n";
    f << R"({"other": 1})"
      << "\n";
    f << R"({"text": ""})"
      << "\n";
  }
  auto c = jsonlConfig(file);
  const std::string m = errorOf([&] { makeDataset(c); });
  EXPECT_NE(m.find("jsonl file '" + file.string() + "': 7 bad lines"), std::string::npos) << m;
  EXPECT_NE(m.find("line 2: has \"prompt\" but no \"completion\""), std::string::npos) << m;
  EXPECT_NE(m.find("line 3: not valid JSON"), std::string::npos) << m;
  EXPECT_NE(m.find("line 4: must be a JSON object"), std::string::npos) << m;
  EXPECT_NE(m.find("line 5: has both \"text\" and \"prompt\"/\"completion\""), std::string::npos)
      << m;
  EXPECT_NE(m.find("line 6: \"completion\" must be a non-empty string"), std::string::npos) << m;
  EXPECT_NE(m.find("line 7: has neither"), std::string::npos) << m;
  EXPECT_NE(m.find("line 8: \"text\" must be a non-empty string"), std::string::npos) << m;
  EXPECT_EQ(m.find("line 1:"), std::string::npos) << m;

  ts::testsupport::Recorded rec;
  const auto r = ts::testsupport::runTrainer(c, rec, (dir / "run").string());
  EXPECT_EQ(r.status, "failed");
  // Prompts that fill every row leave nothing to train.
  std::ofstream(file) << json({{"prompt", std::string(200, 'x')}, {"completion", "y"}}).dump()
                      << "\n";
  c.data.val_fraction = 0;
  const std::string full = errorOf([&] { makeDataset(c); });
  EXPECT_NE(full.find("every sample's prompt fills model.seq_len (24) tokens"), std::string::npos)
      << full;
  EXPECT_NE(r.reason.find("line 2:"), std::string::npos) << r.reason;
  EXPECT_TRUE(rec.of(ts::core::EventType::Step).empty());
  fs::remove_all(dir);
}

// A jsonl run trains on the completions: the training loss falls.
TEST(Jsonl, ARunLearnsTheCompletions) {
  const fs::path dir = scratchDir("jsonl_train");
  const fs::path file = dir / "train.jsonl";
  {
    std::ofstream f(file);
    for (int i = 0; i < 40; ++i)
      f << json({{"prompt", "Name " + std::to_string(i % 5) + ":"},
                 {"completion", std::string(" ") + "abcde"[i % 5] + "!"}})
               .dump()
        << "\n";
  }
  auto c = jsonlConfig(file);
  c.train.steps = 60;
  c.train.eval_every = 0;
  c.data.val_fraction = 0;
  c.optimizer.lr = 1e-2;
  ts::testsupport::Recorded rec;
  const auto r = ts::testsupport::runTrainer(c, rec, (dir / "run").string());
  ASSERT_EQ(r.status, "completed") << r.reason;
  const auto steps = rec.of(ts::core::EventType::Step);
  ASSERT_EQ(steps.size(), 60u);
  // Each completion is " x!</s>": one of 5 letters, then two certain tokens; the prompt says
  // which letter. Trained on completions only, the loss falls from ln(512) = 6.2 towards 0.
  EXPECT_LT(steps.back()["loss"].get<double>(), 0.25 * steps.front()["loss"].get<double>());
  // The checkpoint carries the tokenizer it was trained with.
  const auto files = checkpointAttachments(r.lastCheckpoint);
  ASSERT_EQ(files.size(), 2u);
  EXPECT_EQ(readFile(files[0]), readFile(kData / "tokenizers" / "llama2" / "tokenizer.json"));
  fs::remove_all(dir);
}

// import-hf keeps the folder's tokenizer; a run on the imported checkpoint (text through that
// tokenizer) trains 2 steps; export-hf writes it back with the tokenizer files; with --dtype
// bf16 the tensors are the checkpoint's rounded to bf16 and the folder loads and evaluates;
// a damaged tokenizer file in the checkpoint stops the export.
TEST(HfTiny, ImportTrainExportKeepsTheTokenizerAndBf16LoadsBack) {
  const fs::path dir = scratchDir("roundtrip");
  const fs::path imported = dir / "imported";
  importHfModel((kTiny / "gpt2").string(), imported.string());
  ASSERT_EQ(checkpointAttachments(imported.string()).size(), 2u);
  EXPECT_EQ(modelTokenizer(imported.string()), (imported / "tokenizer.json").string());

  ts::core::RunConfig c = ts::testsupport::tinyAdditionConfig();
  c.model = openHfModel((kTiny / "gpt2").string()).model;  // seq_len 64: its position table
  c.finetune.base_checkpoint = imported.string();
  c.data.source = "text";
  c.data.path = (kTiny / "eval.txt").string();
  c.train.steps = 2;
  c.train.eval_every = 0;
  c.data.val_fraction = 0;
  ts::testsupport::Recorded rec;
  const auto r = ts::testsupport::runTrainer(c, rec, (dir / "run").string());
  ASSERT_EQ(r.status, "completed") << r.reason;
  ASSERT_EQ(checkpointAttachments(r.lastCheckpoint).size(), 2u);

  auto backend = ts::kernels::makeCpuBackend();
  MemoryTracker t;
  LoadedModel trained = loadModelFrom(r.lastCheckpoint, backend.get(), &t);
  const auto ids = readTextTokens((kTiny / "eval.txt").string(), modelTokenizer(r.lastCheckpoint));
  const double fp32Loss = evaluateModel(r.lastCheckpoint, ids, 16, backend.get()).loss;

  for (const char* dtype : {"fp32", "bf16"}) {
    SCOPED_TRACE(dtype);
    HfExportOptions o;
    o.dtype = dtype;
    const fs::path out = dir / (std::string("hf_") + dtype);
    const auto res = exportHf(r.lastCheckpoint, out.string(), o);
    for (const char* f :
         {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"})
      EXPECT_TRUE(fs::exists(out / f)) << f;
    EXPECT_EQ(readFile(out / "tokenizer.json"), readFile(kTiny / "gpt2" / "tokenizer.json"));
    const json cfg = json::parse(std::ifstream(out / "config.json"));
    EXPECT_EQ(cfg["torch_dtype"], std::string(dtype) == "bf16" ? "bfloat16" : "float32");
    EXPECT_EQ(cfg["eos_token_id"], 0);  // <|endoftext|> of the tiny tokenizer, not GPT-2's 50256
    const HfModel hf = openHfModel(out.string());
    EXPECT_EQ(hf.files[0].entry("transformer.wte.weight").dtype,
              std::string(dtype) == "bf16" ? "BF16" : "F32");
    Gpt back(trained.model->config(), backend.get(), &t);
    loadHfWeights(hf, back.arena());
    const auto ref = ts::testsupport::hostCopy(trained.model->paramBuffer());
    const auto got = ts::testsupport::hostCopy(back.paramBuffer());
    ASSERT_EQ(ref.size(), got.size());
    size_t differ = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      const float want = std::string(dtype) == "bf16"
                             ? ts::kernels::bf16ToFloat(ts::kernels::floatToBf16(ref[i]))
                             : ref[i];
      differ += got[i] != want;
    }
    EXPECT_EQ(differ, 0u);
    const double loss = evaluateModel(out.string(), ids, 16, backend.get()).loss;
    EXPECT_NEAR(loss, fp32Loss, std::string(dtype) == "bf16" ? 2e-2 : 1e-6);
  }

  HfExportOptions int8;
  int8.dtype = "int8";
  const std::string bad = errorOf([&] { exportHf(r.lastCheckpoint, (dir / "x").string(), int8); });
  EXPECT_NE(bad.find("--dtype 'int8' is unknown: allowed fp32 | bf16 | fp16"), std::string::npos)
      << bad;
  // A damaged tokenizer.json in the checkpoint is caught by its checksum.
  std::ofstream(fs::path(r.lastCheckpoint) / "tokenizer.json", std::ios::app) << " ";
  const std::string m = errorOf([&] { exportHf(r.lastCheckpoint, (dir / "hf_bad").string()); });
  EXPECT_NE(m.find("tokenizer.json is truncated or damaged"), std::string::npos) << m;
  fs::remove_all(dir);
}
