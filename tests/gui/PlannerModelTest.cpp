// Memory planner page: model choices, technique application, the suggestions table (under
// QAbstractItemModelTester), the worker-thread controller and the exports.
#include <cmath>

#include <gtest/gtest.h>
#include <QAbstractItemModelTester>
#include <QComboBox>
#include <QDir>
#include <QFile>
#include <QPushButton>
#include <QSignalSpy>
#include <QStyle>
#include <QStyleOptionComboBox>
#include <QTableView>
#include <QTemporaryDir>
#include <QTest>

#include "GuiTestUtil.h"
#include "MainWindow.h"
#include "PlannerPage.h"
#include "trainscope/core/config/ConfigExport.h"
#include "trainscope/core/model/HfConfig.h"
#include "trainscope/gui/PlannerModel.h"

using namespace ts::gui;
namespace core = ts::core;

namespace {

const PlannerModelChoice* findChoice(const std::vector<PlannerModelChoice>& cs, const QString& id) {
  for (const auto& c : cs)
    if (c.id == id) return &c;
  return nullptr;
}

core::RunConfig gpt2() {
  const auto cs = plannerModelChoices(TRAINSCOPE_PRESET_DIR);
  const auto* c = findChoice(cs, "shape:gpt2");
  EXPECT_NE(c, nullptr);
  return c ? c->base : core::RunConfig{};
}

// What a rank keeps between steps (current): under ZeRO-3 the peak adds the weights gathered
// for the step (the embeddings and two blocks), which the paper's division leaves out.
int64_t modelStates(const core::MemoryEstimate& e) {
  const auto& r = e.report.ranks.at(0);
  int64_t s = 0;
  for (auto c : {core::MemoryCategory::Parameters, core::MemoryCategory::Gradients,
                 core::MemoryCategory::OptimizerState})
    s += r.at(core::MemoryTier::Device, c).current;
  return s;
}

constexpr int64_t GiB = int64_t{1} << 30;

}  // namespace

TEST(PlannerModel, ChoicesHoldPresetsAndPublishedShapes) {
  const auto cs = plannerModelChoices(TRAINSCOPE_PRESET_DIR);
  for (const char* id : {"preset:default", "shape:gpt2", "shape:gpt2-xl", "shape:llama-7b",
                         "shape:llama-13b", "shape:llama-70b"})
    EXPECT_NE(findChoice(cs, id), nullptr) << id;
  // Published shapes: GPT-2 small 12 layers x 768, LLaMA-7B 32 x 4096, LLaMA-70B 80 x 8192.
  EXPECT_EQ(findChoice(cs, "shape:gpt2")->base.model.layers, 12);
  EXPECT_EQ(findChoice(cs, "shape:gpt2")->base.model.d_model, 768);
  EXPECT_EQ(findChoice(cs, "shape:llama-7b")->base.model.d_model, 4096);
  EXPECT_EQ(findChoice(cs, "shape:llama-70b")->base.model.layers, 80);
}

TEST(PlannerModel, TechniquesRoundTripThroughConfig) {
  PlannerTechniques t;
  t.precision = "fp16";
  t.checkpointing = "all";
  t.flash = true;
  t.zeroStage = 2;
  t.offloadOptimizer = "cpu";
  t.loraRank = 8;
  t.nf4Base = true;
  t.optimizer8bit = true;
  t.microBatch = 3;
  t.seqLen = 512;
  const auto c = applyTechniques(gpt2(), t, 4);
  EXPECT_EQ(c.parallel.ranks, 4);
  const auto back = techniquesOf(c);
  EXPECT_EQ(back.precision, "fp16");
  EXPECT_EQ(back.checkpointing, "all");
  EXPECT_TRUE(back.flash);
  EXPECT_EQ(back.zeroStage, 2);
  EXPECT_EQ(back.offloadOptimizer, "cpu");
  EXPECT_EQ(back.loraRank, 8);
  EXPECT_TRUE(back.nf4Base);
  EXPECT_TRUE(back.optimizer8bit);
  EXPECT_EQ(back.microBatch, 3);
  EXPECT_EQ(back.seqLen, 512);
  // NF4 without adapters would quantize weights that are being trained: dropped.
  t.loraRank = 0;
  EXPECT_EQ(applyTechniques(gpt2(), t, 1).finetune.base_quant, "none");
}

TEST(PlannerModel, ZeroThreeShardsModelStatesAcrossRanks) {
  // ZeRO paper §III.A: stage 3 divides parameters, gradients and optimizer state by N_d.
  PlannerTechniques t;
  t.zeroStage = 0;
  PlannerInput in;
  in.deviceMemory = 80 * GiB;
  in.ranks = 8;
  in.config = applyTechniques(gpt2(), t, 8);
  const auto s0 = evaluatePlanner(in);
  ASSERT_TRUE(s0.error.isEmpty()) << s0.error.toStdString();
  t.zeroStage = 3;
  in.config = applyTechniques(gpt2(), t, 8);
  const auto s3 = evaluatePlanner(in);
  ASSERT_TRUE(s3.error.isEmpty()) << s3.error.toStdString();
  const double ratio = double(modelStates(s0.estimate)) / double(modelStates(s3.estimate));
  EXPECT_NEAR(ratio, 8.0, 0.8);
}

TEST(PlannerModel, Llama70bInBf16DoesNotFitOneEightyGiBDevice) {
  // 70e9 parameters x 2 bytes (bf16 weights alone) = 140 GB > 80 GiB.
  const auto cs = plannerModelChoices(TRAINSCOPE_PRESET_DIR);
  PlannerTechniques t;
  PlannerInput in;
  in.deviceMemory = 80 * GiB;
  in.config = applyTechniques(findChoice(cs, "shape:llama-70b")->base, t, 1);
  in.maxPlans = 3;
  const auto out = evaluatePlanner(in);
  ASSERT_TRUE(out.error.isEmpty()) << out.error.toStdString();
  EXPECT_FALSE(out.estimate.fits);
  EXPECT_GT(double(out.estimate.peak_device), 140e9);
  // Whatever the planner suggests must fit the device.
  for (const auto& p : out.plans.plans) EXPECT_LE(p.estimate.peak_device, 80 * GiB);
}

TEST(PlannerModel, InvalidSetupIsReportedNotEstimated) {
  PlannerTechniques t;
  t.precision = "fp4";  // not a policy
  PlannerInput in;
  in.deviceMemory = 8 * GiB;
  in.config = applyTechniques(gpt2(), t, 1);
  const auto out = evaluatePlanner(in);
  EXPECT_FALSE(out.error.isEmpty());
  EXPECT_TRUE(out.error.contains("precision")) << out.error.toStdString();
  EXPECT_TRUE(out.plans.plans.empty());
}

TEST(PlannerModel, PlanTablePassesModelTesterAndEveryRowFits) {
  PlannerInput in;
  in.deviceMemory = 16 * GiB;
  in.config = applyTechniques(gpt2(), PlannerTechniques{}, 1);
  const auto out = evaluatePlanner(in);
  ASSERT_TRUE(out.error.isEmpty());
  ASSERT_FALSE(out.plans.plans.empty()) << out.plans.message;

  PlanTableModel model;
  QAbstractItemModelTester tester(&model, QAbstractItemModelTester::FailureReportingMode::Fatal);
  model.setPlans(out.plans.plans);
  ASSERT_EQ(model.rowCount(), static_cast<int>(out.plans.plans.size()));
  EXPECT_EQ(model.columnCount(), PlanTableModel::ColumnCount);
  for (int r = 0; r < model.rowCount(); ++r) {
    EXPECT_EQ(model.data(model.index(r, PlanTableModel::Rank)).toInt(), r + 1);
    const qlonglong peak =
        model.data(model.index(r, PlanTableModel::PeakDevice), Qt::UserRole).toLongLong();
    EXPECT_GT(peak, 0);
    EXPECT_LE(peak, 16 * GiB);
    // Micro x accum: the product is the sequences per rank per optimizer step.
    const auto& c = model.plan(r)->config;
    EXPECT_EQ(model.data(model.index(r, PlanTableModel::Batch), Qt::UserRole).toLongLong(),
              qlonglong(c.train.micro_batch) * c.train.grad_accum);
    EXPECT_FALSE(model.data(model.index(r, PlanTableModel::Techniques)).toString().isEmpty());
  }
  EXPECT_EQ(model.plan(model.rowCount()), nullptr);
  model.setPlans({});
  EXPECT_EQ(model.rowCount(), 0);
}

TEST(PlannerModel, ExportsCarryTheChosenTechniques) {
  PlannerTechniques t;
  t.precision = "bf16";
  t.zeroStage = 2;
  t.microBatch = 4;
  t.loraRank = 16;
  t.checkpointing = "all";
  auto c = applyTechniques(gpt2(), t, 8);
  c.train.grad_accum = 3;

  const auto ds = nlohmann::json::parse(exportPlannerConfig(c, PlannerExport::DeepSpeed));
  EXPECT_EQ(ds["zero_optimization"]["stage"], 2);
  EXPECT_EQ(ds["train_micro_batch_size_per_gpu"], 4);
  EXPECT_EQ(ds["gradient_accumulation_steps"], 3);
  EXPECT_EQ(ds["train_batch_size"], 4 * 3 * 8);
  EXPECT_EQ(ds["bf16"]["enabled"], true);

  const auto hf = nlohmann::json::parse(exportPlannerConfig(c, PlannerExport::HuggingFace));
  EXPECT_EQ(hf["training_args"]["per_device_train_batch_size"], 4);
  EXPECT_EQ(hf["training_args"]["gradient_accumulation_steps"], 3);
  EXPECT_EQ(hf["training_args"]["bf16"], true);
  EXPECT_EQ(hf["lora_config"]["r"], 16);

  // The run config parses back (as `trainscope-engine run` would) to the same techniques.
  const auto parsed = core::parseConfigText(exportPlannerConfig(c, PlannerExport::RunConfig));
  ASSERT_TRUE(parsed.ok()) << (parsed.issues.empty() ? "" : parsed.issues[0].toString());
  const auto back = techniquesOf(*parsed.config);
  EXPECT_EQ(back.zeroStage, 2);
  EXPECT_EQ(back.loraRank, 16);
  EXPECT_EQ(back.checkpointing, "all");
  EXPECT_EQ(parsed.config->parallel.ranks, 8);
  EXPECT_EQ(suggestedExportName(PlannerExport::DeepSpeed), "ds_config.json");
}

TEST(PlannerModel, ControllerCollapsesRequestsToTheLatest) {
  PlannerController ctl;
  QSignalSpy spy(&ctl, &PlannerController::finished);
  for (int ranks : {1, 2, 4}) {
    PlannerInput in;
    in.deviceMemory = 16 * GiB;
    in.ranks = ranks;
    in.maxPlans = 2;
    in.config = applyTechniques(gpt2(), PlannerTechniques{}, ranks);
    ctl.request(in);
  }
  EXPECT_TRUE(ctl.busy());
  ASSERT_TRUE(spy.wait(testutil::kWaitCapMs));
  QTest::qWait(50);
  ASSERT_FALSE(ctl.busy());
  // The first request was already running; the second was superseded by the third.
  ASSERT_EQ(spy.count(), 1);
  const auto in = spy.at(0).at(0).value<PlannerInput>();
  EXPECT_EQ(in.ranks, 4);
}

TEST(PlannerPageTest, SelectingASuggestionExportsIt) {
  PlannerPage page;
  QSignalSpy spy(&page, &PlannerPage::updated);
  page.selectModel("shape:gpt2");
  page.setDeviceMemoryGiB(16);
  page.setRanks(1);
  page.recompute();
  auto waitIdle = [&] {
    for (int i = 0; i < 600 && (page.computing() || spy.isEmpty()); ++i) QTest::qWait(50);
  };
  waitIdle();
  ASSERT_FALSE(spy.isEmpty());
  ASSERT_GT(page.planModel()->rowCount(), 0);
  // Nothing selected: the form's setup is exported.
  EXPECT_EQ(page.chosenConfig().model.d_model, 768);
  page.planView()->selectRow(0);
  const core::RunConfig chosen = page.planModel()->plan(0)->config;
  QTemporaryDir tmp;
  const QString path = tmp.filePath("ds.json");
  QString err;
  ASSERT_TRUE(page.exportTo(PlannerExport::DeepSpeed, path, &err)) << err.toStdString();
  QFile f(path);
  ASSERT_TRUE(f.open(QIODevice::ReadOnly));
  EXPECT_EQ(nlohmann::json::parse(f.readAll().toStdString()), core::toDeepSpeedConfig(chosen));
  EXPECT_FALSE(page.exportTo(PlannerExport::DeepSpeed, tmp.filePath("no/such/dir/x.json"), &err));
  EXPECT_TRUE(err.contains("no/such/dir")) << err.toStdString();
}

namespace {
// What this engine says of itself today (engine/src/train/Capabilities.cpp): LoRA, QLoRA, 8-bit
// state, ZeRO and offload not implemented; 16-bit and fp8 policies on the cpu backend only.
nlohmann::json engineLikeCaps(bool gpu) {
  auto no = [](const char* why) { return nlohmann::json{{"supported", false}, {"why", why}}; };
  nlohmann::json cpuOnly = {{"supported", true}, {"backends", {"cpu"}}, {"backends_why", "cpu"}};
  return {{"backends",
           {{{"name", "cpu"}, {"usable", true}},
            {{"name", "cuda"}, {"usable", gpu}, {"why", "no CUDA device"}}}},
          {"precisions",
           {{"fp32", {{"supported", true}}},
            {"bf16", cpuOnly},
            {"fp16", cpuOnly},
            {"fp8", cpuOnly},
            {"pure_bf16", cpuOnly}}},
          {"techniques",
           {{"zero", no("later")},
            {"offload", no("later")},
            {"lora", no("later")},
            {"qlora", no("later")},
            {"optimizer_8bit", no("later")},
            {"activation_compression", cpuOnly}}}};
}

void waitForPlanner(PlannerPage& page, QSignalSpy& spy) {
  const int before = spy.count();
  page.recompute();
  for (int i = 0; i < 600 && (page.computing() || spy.count() == before); ++i) QTest::qWait(50);
  ASSERT_GT(spy.count(), before);
}
}  // namespace

// Default preset on the planner: the configured setup is the 1.00x of the step-time column (it
// read 2480x for every row), with the basis in the tooltip.
TEST(PlannerPageTest, DefaultPresetStepTimeIsRelativeToTheSetup) {
  PlannerPage page;
  QSignalSpy spy(&page, &PlannerPage::updated);
  page.selectModel("preset:default");
  page.setCapabilities(engineLikeCaps(false));
  page.setRunnableOnly(false);
  ASSERT_NO_FATAL_FAILURE(waitForPlanner(page, spy));
  auto* m = page.planModel();
  ASSERT_GT(m->rowCount(), 0);
  // (Planner.StepTimeIsRelativeToTheConfiguredSetup checks the configured setup reads 1.00x.)
  for (int r = 0; r < m->rowCount(); ++r) {
    const double rel = m->data(m->index(r, PlanTableModel::StepTime), Qt::UserRole).toDouble();
    EXPECT_GT(rel, 0.2) << r;
    EXPECT_LT(rel, 5.0) << r;
    EXPECT_EQ(m->data(m->index(r, PlanTableModel::StepTime)).toString(),
              QStringLiteral("%1×").arg(rel, 0, 'f', 2));
  }
  const QString tip = m->data(m->index(0, PlanTableModel::StepTime), Qt::ToolTipRole).toString();
  EXPECT_TRUE(tip.contains("as configured")) << tip.toStdString();
  EXPECT_TRUE(tip.contains("fp32")) << tip.toStdString();
}

// Suggestions say whether this engine runs them on the chosen backend; the default filter is
// "fits and runs here", so nothing it refuses (LoRA, 8-bit state, ZeRO) is proposed.
TEST(PlannerPageTest, SuggestionsSayWhetherTheyRunHere) {
  PlannerPage page;
  QSignalSpy spy(&page, &PlannerPage::updated);
  page.selectModel("shape:gpt2");
  page.setDeviceMemoryGiB(24);
  page.setCapabilities(engineLikeCaps(false));  // no GPU: the backend defaults to cpu
  ASSERT_NO_FATAL_FAILURE(waitForPlanner(page, spy));
  auto* m = page.planModel();
  ASSERT_GT(m->rowCount(), 0) << "gpt2 small trains in fp32 or bf16 on 24 GiB";
  for (int r = 0; r < m->rowCount(); ++r) {
    const auto& c = m->plan(r)->config;
    SCOPED_TRACE(m->plan(r)->summary);
    EXPECT_TRUE(m->data(m->index(r, PlanTableModel::RunsHere), Qt::UserRole).toBool());
    EXPECT_EQ(m->data(m->index(r, PlanTableModel::RunsHere)).toString(), "yes");
    EXPECT_EQ(c.finetune.lora.r, 0);
    EXPECT_EQ(c.optimizer.state_bits, 32);
    EXPECT_EQ(c.parallel.zero_stage, 0);
    EXPECT_EQ(c.device.backend, "cpu");
  }
  // All that fit: the refused ones are there, each saying why.
  page.setRunnableOnly(false);
  ASSERT_NO_FATAL_FAILURE(waitForPlanner(page, spy));
  int refused = 0;
  for (int r = 0; r < m->rowCount(); ++r) {
    const QString text = m->data(m->index(r, PlanTableModel::RunsHere)).toString();
    if (text.startsWith("no: ")) {
      ++refused;
      EXPECT_TRUE(m->data(m->index(r, PlanTableModel::RunsHere), Qt::ToolTipRole)
                      .toString()
                      .contains("cannot run"));
    }
  }
  EXPECT_GT(refused, 0);
}

// The planner takes a Hugging Face config.json as its model: the estimate counts what
// transformers stored, the setup fine-tunes the folder; a config without weights beside it
// still plans (no base), and a broken one says why.
TEST(PlannerPageTest, HuggingFaceConfigIsTheModel) {
  PlannerPage page;
  QSignalSpy spy(&page, &PlannerPage::updated);
  page.setCapabilities(engineLikeCaps(false));
  const std::string dir = std::string(TRAINSCOPE_TEST_DATA) + "/hf_tiny/gpt2";
  EXPECT_EQ(page.addHfModel(QString::fromStdString(dir + "/config.json")), QString());
  ASSERT_NO_FATAL_FAILURE(waitForPlanner(page, spy));
  ASSERT_TRUE(page.lastOutput());
  const auto stored = core::readHfStoredWeights(dir);
  int64_t elements = 0;
  for (const auto& [dtype, n] : stored.elementsByDtype) elements += n;
  EXPECT_EQ(page.lastOutput()->estimate.params.total, elements);
  const auto cfg = page.chosenConfig();
  EXPECT_EQ(cfg.model.arch, "gpt2");
  EXPECT_EQ(cfg.model.layers, 2);
  EXPECT_EQ(cfg.model.d_model, 32);
  EXPECT_EQ(cfg.model.vocab, 384);
  EXPECT_EQ(cfg.finetune.base_checkpoint, dir);
  // The weights' headers are read off the GUI thread; the note follows.
  auto noteRead = [&] { return !page.modelNote().startsWith("Reading the weights"); };
  ASSERT_TRUE(testutil::waitFor(noteRead, testutil::kWaitCapMs));
  EXPECT_TRUE(page.modelNote().startsWith("GPT-2 (GPT2LMHeadModel)"))
      << page.modelNote().toStdString();

  QTemporaryDir tmp;
  const QString lone = tmp.filePath("llama-config.json");
  ASSERT_TRUE(QFile::copy(
      QString::fromStdString(std::string(TRAINSCOPE_TEST_DATA) + "/hf_tiny/llama/config.json"),
      lone));
  EXPECT_EQ(page.addHfModel(lone), QString());
  ASSERT_NO_FATAL_FAILURE(waitForPlanner(page, spy));
  EXPECT_EQ(page.chosenConfig().model.arch, "llama");
  EXPECT_EQ(page.chosenConfig().finetune.base_checkpoint, "");
  ASSERT_TRUE(testutil::waitFor(noteRead, testutil::kWaitCapMs));
  EXPECT_TRUE(page.modelNote().contains("no weights read")) << page.modelNote().toStdString();

  const QString broken = tmp.filePath("broken.json");
  QFile f(broken);
  ASSERT_TRUE(f.open(QIODevice::WriteOnly));
  f.write("{\"architectures\": [\"BertModel\"]}");
  f.close();
  const QString err = page.addHfModel(broken);
  EXPECT_TRUE(err.contains(broken + ": architecture 'BertModel' is not supported"))
      << err.toStdString();
  EXPECT_EQ(page.modelNote(), err);
  EXPECT_EQ(page.chosenConfig().model.arch, "llama");  // the last good model stays
}

namespace {
// The engine's capabilities on this kind of machine (2 cores, a CUDA build, no driver): every
// technique on every backend, the cuda backend unusable with the runtime's own words, and the
// GEMM rate the engine measured (engine/src/train/Capabilities.cpp, GemmCalibration.cpp).
nlohmann::json noGpuMachineCaps(double fp32Gflops) {
  nlohmann::json cal = {{"choice", "fp32"}, {"source", "measured"}};
  if (fp32Gflops > 0) {
    cal["fp32_gflops"] = fp32Gflops;
    cal["bf16_gflops"] = fp32Gflops * 0.6;
  }
  return {{"backends",
           {{{"name", "cpu"}, {"compiled", true}, {"usable", true}},
            {{"name", "cuda"},
             {"compiled", true},
             {"usable", false},
             {"why",
              "no usable CUDA device: cudaGetDeviceCount failed with "
              "cudaErrorInsufficientDriver (CUDA driver version is insufficient for CUDA "
              "runtime version)"}}}},
          {"cpu", {{"threads", 2}}},
          {"precisions",
           {{"fp32", {{"supported", true}}},
            {"bf16", {{"supported", true}, {"auto_gemm", "fp32"}, {"gemm_calibration", cal}}},
            {"fp16", {{"supported", true}}},
            {"pure_bf16", {{"supported", true}}}}},
          {"techniques",
           {{"zero", {{"supported", true}}},
            {"offload", {{"supported", true}}},
            {"lora", {{"supported", true}}},
            {"qlora", {{"supported", true}}},
            {"optimizer_8bit", {{"supported", true}}},
            {"activation_compression", {{"supported", true}}}}}};
}

int occurrences(const QString& text, const QString& what) {
  return text.count(what);
}
}  // namespace

// LLaMA-7B for a 24 GB GPU on a machine without one (issue 47): the suggestions are planned
// for such a device (the table is not empty with the default filter), every row says it does
// not run here, and why is said once, in plain words, not as the CUDA runtime's error twice.
TEST(PlannerPageTest, CudaWithoutAGpuStillPlansForTheDevice) {
  PlannerPage page;
  QSignalSpy spy(&page, &PlannerPage::updated);
  page.selectModel("shape:llama-7b");
  page.setDeviceMemoryGiB(24);
  page.setCapabilities(noGpuMachineCaps(40));
  page.setBackend("cuda");
  ASSERT_NO_FATAL_FAILURE(waitForPlanner(page, spy));
  auto* m = page.planModel();
  ASSERT_GT(m->rowCount(), 0) << page.planMessage().toStdString();
  for (int r = 0; r < m->rowCount(); ++r) {
    SCOPED_TRACE(m->plan(r)->summary);
    EXPECT_EQ(m->plan(r)->config.device.backend, "cuda");
    EXPECT_LE(m->plan(r)->estimate.peak_device, 24 * GiB);
    EXPECT_FALSE(m->data(m->index(r, PlanTableModel::RunsHere), Qt::UserRole).toBool());
    EXPECT_EQ(m->data(m->index(r, PlanTableModel::RunsHere)).toString(), "no: no CUDA device here");
    EXPECT_TRUE(m->data(m->index(r, PlanTableModel::RunsHere), Qt::ToolTipRole)
                    .toString()
                    .contains("no usable CUDA device on this machine"));
  }
  const QString shown = page.setupNote() + "\n" + page.planMessage();
  EXPECT_EQ(occurrences(shown, "no usable CUDA device on this machine"), 1) << shown.toStdString();
  EXPECT_TRUE(shown.contains("NVIDIA driver is missing or older than this engine needs"))
      << shown.toStdString();
  EXPECT_EQ(occurrences(shown, "cudaErrorInsufficientDriver"), 0) << shown.toStdString();
  EXPECT_EQ(occurrences(shown, "cudaGetDeviceCount"), 0) << shown.toStdString();
  // No measured rate for a GPU here: no time column rather than a guess.
  EXPECT_TRUE(page.planView()->isColumnHidden(PlanTableModel::TimeHere));
}

// The default view of LLaMA-7B on 24 GB: the best of each kind (LoRA, QLoRA, full fine-tune
// with offload, ...) before near-duplicates; it listed ten LoRA variants of 668 fits.
TEST(PlannerPageTest, DefaultViewShowsTheBestOfEachKindFirst) {
  PlannerPage page;
  QSignalSpy spy(&page, &PlannerPage::updated);
  page.selectModel("shape:llama-7b");
  page.setDeviceMemoryGiB(24);
  page.setCapabilities(noGpuMachineCaps(40));
  page.setBackend("cuda");
  ASSERT_NO_FATAL_FAILURE(waitForPlanner(page, spy));
  auto* m = page.planModel();
  ASSERT_GT(m->rowCount(), 5);
  QStringList kinds;
  for (int r = 0; r < m->rowCount(); ++r)
    kinds << m->data(m->index(r, PlanTableModel::Class)).toString();
  for (const char* k : {"LoRA", "QLoRA", "full + offload", "LoRA + offload", "QLoRA + offload"})
    EXPECT_TRUE(kinds.contains(k)) << k << " in " << kinds.join(" | ").toStdString();
  // Each kind's first row comes before any kind's second.
  QStringList seen;
  bool repeated = false;
  for (const auto& k : kinds) {
    if (seen.contains(k))
      repeated = true;
    else
      EXPECT_FALSE(repeated) << k.toStdString()
                             << " listed after a repeat: " << kinds.join(" | ").toStdString();
    seen << k;
  }
  // Each row is what its kind says: a QLoRA row has a 4-bit base, a full one no adapters.
  for (int r = 0; r < m->rowCount(); ++r) {
    const auto& c = m->plan(r)->config;
    if (kinds[r].startsWith("full")) EXPECT_EQ(c.finetune.lora.r, 0);
    if (kinds[r].startsWith("QLoRA")) EXPECT_EQ(c.finetune.base_quant, "nf4");
  }
  const auto& out = *page.lastOutput();
  EXPECT_GT(out.plans.fitting, m->rowCount());
  EXPECT_TRUE(page.planMessage().contains(
      QStringLiteral("of %1 setups that fit, the best of each kind first").arg(out.plans.fitting)))
      << page.planMessage().toStdString();
}

// With the cpu backend LLaMA-7B "runs here" on two cores: the page says how long a step takes
// at the GEMM rate the engine measured (else one assumed from the CPU, saying so), and that
// this is impractically slow.
TEST(PlannerPageTest, CpuSaysHowLongAStepTakesHere) {
  PlannerPage page;
  QSignalSpy spy(&page, &PlannerPage::updated);
  page.selectModel("shape:llama-7b");
  page.setDeviceMemoryGiB(24);
  page.setCapabilities(noGpuMachineCaps(40));  // 40 GFLOP/s measured
  page.setBackend("cpu");
  page.resize(1300, 860);
  page.show();
  ASSERT_NO_FATAL_FAILURE(waitForPlanner(page, spy));
  EXPECT_TRUE(page.grab().save(QDir(testutil::screenshotDir()).filePath("planner-cpu.png")));
  const auto& out = *page.lastOutput();
  ASSERT_TRUE(out.stepTime);
  // The floor: the step's FLOPs (6 x 6.7e9 parameters x 2048 tokens and more) at 40 GFLOP/s.
  EXPECT_DOUBLE_EQ(out.stepTime->seconds, out.estimate.flops_per_step / 40e9);
  EXPECT_GT(out.stepTime->seconds, 6 * 6.7e9 * 2048 / 40e9);
  EXPECT_TRUE(out.stepTime->impractical);
  EXPECT_TRUE(page.setupNote().contains("Time here: at least ")) << page.setupNote().toStdString();
  EXPECT_TRUE(page.setupNote().contains("impractically slow")) << page.setupNote().toStdString();
  EXPECT_TRUE(page.setupNote().contains("the 40 GFLOP/s the engine measured"))
      << page.setupNote().toStdString();
  auto* m = page.planModel();
  ASSERT_GT(m->rowCount(), 0);
  EXPECT_FALSE(page.planView()->isColumnHidden(PlanTableModel::TimeHere));
  for (int r = 0; r < m->rowCount(); ++r) {
    SCOPED_TRACE(m->plan(r)->summary);
    const double s = m->data(m->index(r, PlanTableModel::TimeHere), Qt::UserRole).toDouble();
    EXPECT_DOUBLE_EQ(s, m->plan(r)->estimate.flops_per_step / 40e9);
    EXPECT_TRUE(m->data(m->index(r, PlanTableModel::TimeHere)).toString().startsWith("≥ "));
    if (m->data(m->index(r, PlanTableModel::RunsHere), Qt::UserRole).toBool())
      EXPECT_EQ(m->data(m->index(r, PlanTableModel::RunsHere)).toString(),
                "yes, impractically slow");
  }
  // A small model at the same rate is slow but practical: a plain "yes".
  page.selectModel("preset:default");
  ASSERT_NO_FATAL_FAILURE(waitForPlanner(page, spy));
  ASSERT_TRUE(page.lastOutput()->stepTime);
  EXPECT_FALSE(page.lastOutput()->stepTime->impractical);
  EXPECT_FALSE(page.setupNote().contains("impractically")) << page.setupNote().toStdString();
  ASSERT_GT(m->rowCount(), 0);
  EXPECT_EQ(m->data(m->index(0, PlanTableModel::RunsHere)).toString(), "yes");
  // This machine's engine measures no GEMM rate (no native bf16 kernel, "no native kernel"):
  // a rate assumed from its threads and AVX2 FMA, and the page says it is assumed.
  auto caps = noGpuMachineCaps(0);
  caps["cpu"] = {{"threads", 2}, {"avx2", true}, {"fma", true}, {"avx512f", false}};
  page.selectModel("shape:llama-7b");
  page.setCapabilities(caps);
  ASSERT_NO_FATAL_FAILURE(waitForPlanner(page, spy));
  ASSERT_TRUE(page.lastOutput()->stepTime);
  EXPECT_FALSE(page.lastOutput()->gemm.measured);
  EXPECT_DOUBLE_EQ(page.lastOutput()->gemm.flopsPerS, 2 * 32 * 2.5e9 * 0.5);  // 80 GFLOP/s
  EXPECT_TRUE(page.lastOutput()->stepTime->impractical);
  EXPECT_TRUE(page.setupNote().contains("an assumed 80 GFLOP/s (2 threads"))
      << page.setupNote().toStdString();
  EXPECT_FALSE(page.planView()->isColumnHidden(PlanTableModel::TimeHere));
  // Nothing known of the CPU: no estimate (nothing made up), no column.
  caps.erase("cpu");
  page.setCapabilities(caps);
  ASSERT_NO_FATAL_FAILURE(waitForPlanner(page, spy));
  EXPECT_FALSE(page.lastOutput()->stepTime);
  EXPECT_FALSE(page.setupNote().contains("Time here")) << page.setupNote().toStdString();
  EXPECT_TRUE(page.planView()->isColumnHidden(PlanTableModel::TimeHere));
}

TEST(PlannerModel, DurationsReadAsAPersonWouldSayThem) {
  EXPECT_EQ(durationText(0.4), "0.40 s");
  EXPECT_EQ(durationText(12), "12 s");
  EXPECT_EQ(durationText(27 * 60), "27 min");
  EXPECT_EQ(durationText(5.2 * 3600), "5.2 h");
  EXPECT_EQ(durationText(3.1 * 86400), "3.1 days");
  EXPECT_EQ(durationText(90 * 86400), "3 months");
}

// The model names and the config.json button keep their text whole (they read "default (p"
// and "ɔnfig.json" in a 340 px column), on the page as the app's window shows it.
TEST(PlannerPageTest, ModelNamesAndConfigButtonFitTheirText) {
  QTemporaryDir tmp;
  MainWindow::Options o;
  o.dbPath = tmp.filePath("runs.db");
  o.enginePath = "/nonexistent/engine";  // never launches here
  o.reattach = false;
  o.askOnClose = false;
  MainWindow win(o);
  win.setShowDialogs(false);
  win.resize(1440, 900);
  win.show();
  ASSERT_TRUE(QTest::qWaitForWindowExposed(&win));
  win.showSection(MainWindow::Planner);
  PlannerPage& page = *win.planner();
  auto* combo = page.findChild<QComboBox*>("PlannerModel");
  auto* button = page.findChild<QPushButton*>("PlannerOpenHf");
  ASSERT_TRUE(combo && button);
  QTest::qWait(20);
  EXPECT_GE(button->width(), button->sizeHint().width()) << button->text().toStdString();
  EXPECT_GE(button->width(), button->fontMetrics().horizontalAdvance(button->text()));
  for (int i = 0; i < combo->count(); ++i) {
    combo->setCurrentIndex(i);
    QTest::qWait(10);
    QStyleOptionComboBox opt;
    opt.initFrom(combo);
    opt.currentText = combo->currentText();
    const QRect field = combo->style()->subControlRect(QStyle::CC_ComboBox, &opt,
                                                       QStyle::SC_ComboBoxEditField, combo);
    EXPECT_GE(field.width(), combo->fontMetrics().horizontalAdvance(combo->currentText()))
        << combo->currentText().toStdString() << " in " << combo->width() << " px";
  }
}
