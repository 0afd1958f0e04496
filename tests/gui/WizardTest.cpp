// Drives the wizard like a user: pick a preset on the start page, click Next through every
// page, change options through the widgets, and check the document Launch would send.
#include <fstream>

#include <gtest/gtest.h>
#include <QCheckBox>
#include <QComboBox>
#include <QGroupBox>
#include <QLabel>
#include <QListWidget>
#include <QPainter>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QSignalSpy>
#include <QSpinBox>
#include <QTemporaryDir>
#include <QTest>

#include "GuiTestUtil.h"
#include "MainWindow.h"
#include "RunWizard.h"
#include "trainscope/core/config/Config.h"
#include "trainscope/core/model/HfConfig.h"
#include "trainscope/core/plan/Estimator.h"
#include "trainscope/core/store/RunRecorder.h"

using namespace ts::gui;

namespace {

nlohmann::json presetFile(const std::string& name) {
  std::ifstream f(std::string(TRAINSCOPE_PRESET_DIR) + "/" + name + ".json");
  return nlohmann::json::parse(f);
}

nlohmann::json resolvedReference(const nlohmann::json& doc) {
  auto r = ts::core::parseConfigJson(doc);
  EXPECT_TRUE(r.ok());
  return r.ok() ? ts::core::toJson(*r.config) : nlohmann::json();
}

template <class W>
W* byPath(QWidget* root, const char* path) {
  for (W* w : root->findChildren<W*>())
    if (w->property("configPath").toString() == path) return w;
  return nullptr;
}

int presetRow(RunWizard* wiz, const QString& title) {
  for (int i = 0; i < wiz->presetList()->count(); ++i)
    if (wiz->presetList()->item(i)->text().startsWith(title)) return i;
  return -1;
}

struct WizardTest : ::testing::Test {
  QTemporaryDir tmp;
  std::unique_ptr<MainWindow> win;
  void SetUp() override {
    MainWindow::Options o;
    o.dbPath = tmp.filePath("runs.db");
    o.enginePath = "/nonexistent/engine";  // never launches here
    o.reattach = false;
    o.askOnClose = false;
    win = std::make_unique<MainWindow>(o);
    win->setShowDialogs(false);
    win->resize(1400, 900);
    win->show();
    ASSERT_TRUE(QTest::qWaitForWindowExposed(win.get()));
  }
  void clickThrough(RunWizard* wiz) {
    ASSERT_EQ(wiz->currentPage(), 0);
    for (int i = 1; i < wiz->pageCount(); ++i) {
      QTest::mouseClick(wiz->nextButton(), Qt::LeftButton);
      ASSERT_EQ(wiz->currentPage(), i) << wiz->pageTitle(i).toStdString();
    }
    EXPECT_FALSE(wiz->nextButton()->isVisible());
  }
};

}  // namespace

TEST_F(WizardTest, WindowIsTitledTrainscope) {
  EXPECT_EQ(win->windowTitle(), "Trainscope");
}

TEST_F(WizardTest, DefaultPresetToLaunch) {
  RunWizard* wiz = win->wizard();
  const int row = presetRow(wiz, "default");
  ASSERT_GE(row, 0);
  wiz->presetList()->setCurrentRow(row);
  QSignalSpy launch(wiz, &RunWizard::launchRequested);
  clickThrough(wiz);
  ASSERT_TRUE(wiz->launchButton()->isEnabled()) << wiz->launchBlockers().join("; ").toStdString();
  QTest::mouseClick(wiz->launchButton(), Qt::LeftButton);
  EXPECT_EQ(launch.count(), 1);
  // What Launch sends is exactly the preset as the engine's validator resolves it.
  EXPECT_EQ(wiz->document()->resolved(), resolvedReference(presetFile("default")));
}

TEST_F(WizardTest, ConsumerGpuScenarioEditedThroughWidgets) {
  RunWizard* wiz = win->wizard();
  const int row = presetRow(wiz, "consumer-gpu");
  ASSERT_GE(row, 0);
  wiz->presetList()->setCurrentRow(row);
  auto expected = presetFile("consumer-gpu");

  // Memory page: double the micro-batch, halve accumulation (same effective batch).
  wiz->goToPage(3);
  auto* mb = byPath<QSpinBox>(wiz, "train.micro_batch");
  auto* ga = byPath<QSpinBox>(wiz, "train.grad_accum");
  ASSERT_TRUE(mb && ga);
  const int mb0 = mb->value(), ga0 = std::max(1, ga->value());
  const int64_t eff0 = wiz->document()->effectiveBatch();
  mb->setValue(mb0 * 2);
  if (ga0 % 2 == 0) ga->setValue(ga0 / 2);
  expected["train"]["micro_batch"] = mb0 * 2;
  if (ga0 % 2 == 0) {
    expected["train"]["grad_accum"] = ga0 / 2;
    EXPECT_EQ(wiz->document()->effectiveBatch(), eff0);
  }
  // Attention: switch with the combo box, as a user would.
  auto* attn = byPath<QComboBox>(wiz, "attention.impl");
  ASSERT_TRUE(attn);
  attn->setCurrentIndex(attn->findData("flash"));
  expected["attention"]["impl"] = "flash";

  // An invalid combination disables Launch and says why, inline.
  wiz->goToPage(4);
  auto* zero = byPath<QComboBox>(wiz, "parallel.zero_stage");
  auto* ranks = byPath<QSpinBox>(wiz, "parallel.ranks");
  ASSERT_TRUE(zero && ranks);
  ranks->setValue(1);
  zero->setCurrentIndex(zero->findData(3));
  EXPECT_FALSE(wiz->launchButton()->isEnabled());
  EXPECT_FALSE(wiz->launchBlockers().isEmpty());
  zero->setCurrentIndex(zero->findData(0));
  expected["parallel"]["ranks"] = 1;
  expected["parallel"]["zero_stage"] = 0;

  wiz->goToPage(0);
  clickThrough(wiz);
  ASSERT_TRUE(wiz->launchButton()->isEnabled()) << wiz->launchBlockers().join("; ").toStdString();
  const auto got = wiz->document()->resolved();
  EXPECT_EQ(got, resolvedReference(expected));
  // The scenario's techniques survived the edits.
  EXPECT_EQ(got["finetune"]["base_quant"], "nf4");
  EXPECT_GT(got["finetune"]["lora"]["r"].get<int>(), 0);
  EXPECT_EQ(got["optimizer"]["state_bits"], 8);
}

TEST_F(WizardTest, LaunchWithMissingEngineShowsErrorNotHang) {
  auto* d = win->launch();
  EXPECT_EQ(d, nullptr);
  EXPECT_TRUE(win->lastError().contains("not found")) << win->lastError().toStdString();
}

// The precision page enables only the groups the chosen policy uses; choosing the GEMM mode
// through its combo writes precision.gemm.
TEST_F(WizardTest, PrecisionGroupsFollowThePolicy) {
  RunWizard* wiz = win->wizard();
  auto groupNamed = [&](const QString& title) -> QGroupBox* {
    for (QGroupBox* g : wiz->findChildren<QGroupBox*>())
      if (g->title() == title) return g;
    return nullptr;
  };
  QGroupBox* gemm = groupNamed("GEMMs (bf16, pure bf16)");
  QGroupBox* scaling = groupNamed("Loss scaling (fp16)");
  QGroupBox* fp8 = groupNamed("fp8");
  ASSERT_TRUE(gemm && scaling && fp8);
  auto* policy = byPath<QComboBox>(wiz, "precision.policy");
  ASSERT_NE(policy, nullptr);
  const struct {
    const char* policy;
    bool gemm, scaling, fp8;
  } cases[] = {{"fp32", false, false, false},
               {"bf16", true, false, false},
               {"fp16", false, true, false},
               {"fp8", false, false, true},
               {"pure_bf16", true, false, false}};
  for (const auto& c : cases) {
    policy->setCurrentIndex(policy->findData(QString(c.policy)));
    QCoreApplication::processEvents();
    ASSERT_EQ(win->wizard()->document()->value("precision.policy"), c.policy);
    EXPECT_EQ(gemm->isEnabled(), c.gemm) << c.policy;
    EXPECT_EQ(scaling->isEnabled(), c.scaling) << c.policy;
    EXPECT_EQ(fp8->isEnabled(), c.fp8) << c.policy;
  }
  auto* gemmMode = byPath<QComboBox>(wiz, "precision.gemm");
  ASSERT_NE(gemmMode, nullptr);
  gemmMode->setCurrentIndex(gemmMode->findData(QString("bf16")));
  EXPECT_EQ(win->wizard()->document()->value("precision.gemm"), "bf16");
}

// The model page offers LLaMA: picking it (and grouped-query attention) through the widgets
// changes the document and the parameter count follows the estimator's description.
TEST_F(WizardTest, LlamaThroughTheModelPage) {
  RunWizard* wiz = win->wizard();
  wiz->goToPage(1);
  auto* arch = byPath<QComboBox>(wiz, "model.arch");
  auto* kv = byPath<QSpinBox>(wiz, "model.kv_heads");
  auto* heads = byPath<QSpinBox>(wiz, "model.heads");
  ASSERT_TRUE(arch && kv && heads);
  ASSERT_GE(arch->findData("llama"), 0);
  const int64_t gpt2 = ts::core::estimateMemory(*wiz->document()->config()).params.total;
  arch->setCurrentIndex(arch->findData("llama"));
  heads->setValue(4);
  kv->setValue(2);
  ASSERT_TRUE(wiz->document()->config());
  const auto& c = *wiz->document()->config();
  EXPECT_EQ(c.model.arch, "llama");
  EXPECT_EQ(c.model.kv_heads, 2);
  // Same width and depth: LLaMA has no biases and no position table but an untied head and
  // SwiGLU's third matrix, so the count moves.
  EXPECT_NE(ts::core::estimateMemory(c).params.total, gpt2);
}

// The fine-tuning page lists LoRA targets by the model's own module names (PEFT's target names),
// follows the architecture, reads short names in the config as the modules they select, and
// writes module names back.
// Shows the wizard page whose title contains `title`; false when there is none.
static bool goToPageTitled(RunWizard* wiz, const QString& title) {
  for (int i = 0; i < wiz->pageCount(); ++i)
    if (wiz->pageTitle(i).contains(title)) {
      wiz->goToPage(i);
      return true;
    }
  return false;
}

TEST_F(WizardTest, LoraTargetsAreTheModelsModules) {
  RunWizard* wiz = win->wizard();
  ASSERT_TRUE(goToPageTitled(wiz, "Fine-tuning"));
  auto* box = wiz->findChild<QWidget*>("LoraTargets");
  ASSERT_TRUE(box);
  auto labels = [&] {
    QStringList l;
    for (auto* c : box->findChildren<QCheckBox*>()) l << c->text();
    return l;
  };
  auto checked = [&] {
    QStringList l;
    for (auto* c : box->findChildren<QCheckBox*>())
      if (c->isChecked()) l << c->text();
    return l;
  };
  auto boxFor = [&](const QString& t) -> QCheckBox* {
    for (auto* c : box->findChildren<QCheckBox*>())
      if (c->text() == t) return c;
    return nullptr;
  };
  wiz->document()->setValue("finetune.lora.targets", nlohmann::json({"q", "v"}));
  EXPECT_EQ(labels(), (QStringList{"c_attn", "attn.c_proj", "c_fc", "mlp.c_proj"}));
  EXPECT_EQ(checked(), QStringList{"c_attn"}) << "gpt2's q and v live in c_attn";
  boxFor("c_fc")->click();
  EXPECT_EQ(wiz->document()->value("finetune.lora.targets"), nlohmann::json({"c_attn", "c_fc"}));
  wiz->document()->setValue("model.arch", "llama");
  EXPECT_EQ(labels(), (QStringList{"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                   "down_proj"}));
  EXPECT_TRUE(checked().isEmpty());
  wiz->document()->setValue("finetune.lora.r", 8);
  EXPECT_FALSE(wiz->document()->isValid()) << "c_attn is not a llama module";
  boxFor("q_proj")->click();
  boxFor("v_proj")->click();
  EXPECT_EQ(wiz->document()->value("finetune.lora.targets"), nlohmann::json({"q_proj", "v_proj"}));
  EXPECT_TRUE(wiz->document()->isValid());
}

// The fine-tuning page takes a Hugging Face folder or a checkpoint as the base and says which it
// is (or that the path holds no model) before launch; the teacher's storage is a choice.
TEST_F(WizardTest, BaseIsAFolderOrACheckpointAndTheWizardSaysWhich) {
  RunWizard* wiz = win->wizard();
  ASSERT_TRUE(goToPageTitled(wiz, "Fine-tuning"));
  auto* kind = wiz->findChild<QLabel*>("BaseKind");
  ASSERT_TRUE(kind);
  ASSERT_TRUE(wiz->findChild<QPushButton*>("BaseFolder"));
  const std::string hf = std::string(TRAINSCOPE_TEST_DATA) + "/lora_tiny/gpt2_base";
  wiz->document()->setValue("finetune.base_checkpoint", hf);
  EXPECT_TRUE(kind->text().startsWith("Hugging Face model folder")) << kind->text().toStdString();
  wiz->document()->setValue("finetune.base_checkpoint", std::string("/nonexistent/base"));
  EXPECT_TRUE(kind->text().startsWith("Not found")) << kind->text().toStdString();
  wiz->document()->setValue("finetune.base_checkpoint", std::string());
  EXPECT_TRUE(kind->text().contains("scratch"));
  wiz->document()->setValue("distill.teacher_dtype", std::string("nf4"));
  EXPECT_EQ(wiz->document()->value("distill.teacher_dtype"), "nf4");
}

// A downloaded model on the model page: its config.json fills model.*, the run fine-tunes it,
// the page says what the folder holds, and the estimate counts exactly the parameters
// transformers stored.
TEST_F(WizardTest, HuggingFaceFolderOnTheModelPage) {
  RunWizard* wiz = win->wizard();
  ASSERT_TRUE(goToPageTitled(wiz, "Model"));
  auto* info = wiz->findChild<QLabel*>("HfFolderInfo");
  auto* apply = wiz->findChild<QPushButton*>("ApplyHfShape");
  ASSERT_TRUE(info && apply && wiz->findChild<QPushButton*>("OpenHfFolder"));
  ConfigDocument* doc = wiz->document();
  ASSERT_TRUE(doc->estimate());
  const int64_t before = doc->estimate()->params.total;
  const std::string dir = std::string(TRAINSCOPE_TEST_DATA) + "/hf_tiny/llama";
  std::ifstream cf(dir + "/config.json");
  const auto c = nlohmann::json::parse(cf);

  EXPECT_EQ(wiz->openHfFolder(QString::fromStdString(dir)), QString());
  EXPECT_EQ(doc->value("model.arch"), "llama");
  EXPECT_EQ(doc->value("model.layers"), c["num_hidden_layers"]);
  EXPECT_EQ(doc->value("model.heads"), c["num_attention_heads"]);
  EXPECT_EQ(doc->value("model.kv_heads"), c["num_key_value_heads"]);
  EXPECT_EQ(doc->value("model.d_model"), c["hidden_size"]);
  EXPECT_EQ(doc->value("model.d_ff"), c["intermediate_size"]);
  EXPECT_EQ(doc->value("model.vocab"), c["vocab_size"]);
  EXPECT_EQ(doc->value("finetune.base_checkpoint"), dir);
  EXPECT_EQ(byPath<QSpinBox>(wiz, "model.d_model")->value(), c["hidden_size"].get<int>());
  ASSERT_TRUE(doc->isValid());
  const auto stored = ts::core::readHfStoredWeights(dir);
  int64_t elements = 0;
  for (const auto& [dtype, n] : stored.elementsByDtype) elements += n;
  ASSERT_TRUE(doc->estimate());
  EXPECT_EQ(doc->estimate()->params.total, elements);
  EXPECT_NE(doc->estimate()->params.total, before);
  EXPECT_TRUE(info->text().startsWith("LLaMA (LlamaForCausalLM)")) << info->text().toStdString();
  EXPECT_TRUE(info->text().contains("stored F32")) << info->text().toStdString();
  EXPECT_TRUE(apply->isHidden());

  // Edited away from the folder: the page says how, and puts the folder's shape back.
  byPath<QSpinBox>(wiz, "model.layers")->setValue(3);
  EXPECT_TRUE(info->text().contains("model.layers: the run has 3")) << info->text().toStdString();
  EXPECT_FALSE(apply->isHidden());
  QTest::mouseClick(apply, Qt::LeftButton);
  // The folder is read off the GUI thread; its shape lands when the read does.
  EXPECT_TRUE(testutil::waitFor(
      [&] { return doc->value("model.layers") == c["num_hidden_layers"]; }, testutil::kWaitCapMs));
  EXPECT_TRUE(apply->isHidden());

  // A folder the engine cannot load: the error names file and field, the document stays.
  QTemporaryDir bad;
  auto q = c;
  q["architectures"] = {"MixtralForCausalLM"};
  std::ofstream(bad.filePath("config.json").toStdString()) << q.dump();
  const QString err = wiz->openHfFolder(bad.path());
  EXPECT_TRUE(err.contains(bad.filePath("config.json") + ": architecture 'MixtralForCausalLM'"))
      << err.toStdString();
  EXPECT_EQ(info->text(), err);
  EXPECT_EQ(doc->value("finetune.base_checkpoint"), dir);
}

// A Hugging Face base replaces the preset's leftovers: the run is named and described after
// the folder, the activation row says what the family uses (LLaMA: SiLU in its SwiGLU MLP)
// instead of a GELU it does not read, Review's JSON leaves that key out, and the data page
// says the data is still the synthetic task.
TEST_F(WizardTest, HuggingFaceBaseReplacesThePresetsLeftovers) {
  RunWizard* wiz = win->wizard();
  wiz->presetList()->setCurrentRow(presetRow(wiz, "default"));
  ConfigDocument* doc = wiz->document();
  ASSERT_EQ(doc->value("name"), "default");
  ASSERT_TRUE(goToPageTitled(wiz, "Model"));
  auto* activation = byPath<QComboBox>(wiz, "model.activation");
  auto* fixed = wiz->findChild<QLabel*>("ActivationFixed");
  auto* dataNote = wiz->findChild<QLabel*>("DataNote");
  ASSERT_TRUE(activation && fixed && dataNote);
  EXPECT_TRUE(activation->isVisibleTo(wiz));
  EXPECT_FALSE(fixed->isVisibleTo(wiz));
  EXPECT_FALSE(dataNote->isVisibleTo(wiz));

  const std::string dir = std::string(TRAINSCOPE_TEST_DATA) + "/hf_tiny/llama";
  ASSERT_EQ(wiz->openHfFolder(QString::fromStdString(dir)), QString());
  EXPECT_EQ(doc->value("name"), "llama-finetune");
  EXPECT_EQ(doc->value("tags"), nlohmann::json({"finetune", "hf", "llama"}));
  EXPECT_EQ(doc->value("notes").get<std::string>().find("Built-in default"), std::string::npos);
  EXPECT_FALSE(activation->isVisibleTo(wiz)) << "LLaMA does not read model.activation";
  EXPECT_TRUE(fixed->isVisibleTo(wiz));
  EXPECT_TRUE(fixed->text().startsWith("SiLU")) << fixed->text().toStdString();
  EXPECT_TRUE(fixed->text().contains("LLaMA")) << fixed->text().toStdString();
  EXPECT_TRUE(dataNote->isVisibleTo(wiz));
  EXPECT_TRUE(dataNote->text().contains("synthetic")) << dataNote->text().toStdString();
  ASSERT_TRUE(doc->isValid());
  const auto shown = doc->resolvedForFamily();
  EXPECT_FALSE(shown["model"].contains("activation")) << shown["model"].dump();
  EXPECT_EQ(shown["model"]["mlp"], "swiglu");
  // The review page shows that JSON.
  wiz->goToPage(wiz->pageCount() - 1);
  bool reviewed = false;
  for (auto* e : wiz->findChildren<QPlainTextEdit*>("Json"))
    if (e->isVisibleTo(wiz) && e->toPlainText().contains("\"swiglu\"")) {
      reviewed = true;
      EXPECT_FALSE(e->toPlainText().contains("\"activation\"")) << "review shows an unread key";
    }
  EXPECT_TRUE(reviewed);
  // Data from a file: no note.
  doc->setValue("data.source", "text");
  EXPECT_FALSE(dataNote->isVisibleTo(wiz));
}

// LoRA on "training from scratch" trains adapters on a frozen random base: the fine-tuning
// page and Review say so in plain words; the targets row says what the config gets (gpt2's
// default ["q", "v"] selects its fused c_attn).
TEST_F(WizardTest, LoraWithoutABaseIsFlaggedAndTargetsSayWhatTheConfigGets) {
  RunWizard* wiz = win->wizard();
  wiz->presetList()->setCurrentRow(presetRow(wiz, "default"));
  ConfigDocument* doc = wiz->document();
  ASSERT_TRUE(goToPageTitled(wiz, "Fine-tuning"));
  auto* noBase = wiz->findChild<QLabel*>("LoraNoBase");
  auto* written = wiz->findChild<QLabel*>("LoraTargetsWritten");
  ASSERT_TRUE(noBase && written);
  EXPECT_FALSE(noBase->isVisibleTo(wiz)) << "LoRA is off";
  doc->setValue("finetune.lora.r", 8);
  ASSERT_TRUE(doc->isValid());
  EXPECT_TRUE(noBase->isVisibleTo(wiz));
  EXPECT_TRUE(noBase->text().contains("random")) << noBase->text().toStdString();
  auto loraWarning = [&] {
    for (const auto& w : doc->warnings(0))
      if (w.find("LoRA without a base") != std::string::npos) return true;
    return false;
  };
  EXPECT_TRUE(loraWarning());
  EXPECT_EQ(doc->value("finetune.lora.targets"), nlohmann::json({"q", "v"}));
  EXPECT_EQ(written->text(), "The config gets targets: [q, v], which select c_attn");
  doc->setValue("finetune.base_checkpoint",
                std::string(TRAINSCOPE_TEST_DATA) + "/lora_tiny/gpt2_base");
  EXPECT_FALSE(noBase->isVisibleTo(wiz));
  EXPECT_FALSE(loraWarning());
}

// The estimator's notes are not warnings, and are said in a user's terms: Review shows them
// under "About the estimate" without "fp32 compute copies of a block's weights".
TEST_F(WizardTest, ReviewSaysTheEstimateNotesInPlainWords) {
  RunWizard* wiz = win->wizard();
  wiz->presetList()->setCurrentRow(presetRow(wiz, "default"));
  ConfigDocument* doc = wiz->document();
  doc->setValue("precision.policy", "bf16");
  ASSERT_TRUE(doc->estimate());
  bool jargon = false;
  for (const auto& n : doc->estimate()->notes) jargon |= n.find("compute copies") != n.npos;
  ASSERT_TRUE(jargon) << "the estimator's own note is the case this test is about";
  for (const auto& w : doc->warnings(0)) EXPECT_EQ(w.find("compute copies"), w.npos) << w;
  wiz->goToPage(wiz->pageCount() - 1);
  auto* notes = wiz->findChild<QLabel*>("EstimateNotes");
  ASSERT_TRUE(notes);
  EXPECT_TRUE(notes->isVisibleTo(wiz));
  EXPECT_TRUE(notes->text().contains("working copies")) << notes->text().toStdString();
  EXPECT_FALSE(notes->text().contains("compute copies")) << notes->text().toStdString();
  auto* warnings = wiz->findChild<QLabel*>("Warning");
  if (warnings) EXPECT_FALSE(warnings->text().contains("compute copies"));
}

// The selected preset is drawn once: by its label. The list item keeps its text (tests and
// accessibility read it) but the delegate paints none, selected or not.
TEST_F(WizardTest, SelectedPresetDrawsItsDescriptionOnce) {
  RunWizard* wiz = win->wizard();
  QListWidget* list = wiz->presetList();
  const int row = presetRow(wiz, "default");
  ASSERT_GE(row, 0);
  list->setCurrentRow(row);
  QListWidgetItem* item = list->item(row);
  ASSERT_TRUE(item->isSelected());
  ASSERT_FALSE(item->text().isEmpty());
  const QModelIndex index = list->model()->index(row, 0);
  auto paint = [&] {
    QImage img(list->visualItemRect(item).size(), QImage::Format_ARGB32);
    img.fill(Qt::white);
    QPainter p(&img);
    QStyleOptionViewItem o;
    o.initFrom(list->viewport());
    o.rect = img.rect();
    o.state |= QStyle::State_Selected | QStyle::State_Enabled | QStyle::State_Active;
    o.widget = list;
    o.features |= QStyleOptionViewItem::WrapText;
    list->itemDelegate()->paint(&p, o, index);
    return img;
  };
  const QImage withText = paint();
  const QString text = item->text();
  item->setText(QString());
  const QImage withoutText = paint();
  item->setText(text);
  EXPECT_TRUE(withText == withoutText) << "the item's own text is painted under its label";
}

// A run recorded after the wizard opened (a resumed run, say) is in the clone list when the
// start page is shown again.
TEST_F(WizardTest, CloneListFollowsTheDatabaseWhenShown) {
  RunWizard* wiz = win->wizard();
  wiz->goToPage(0);
  auto listed = [&] {
    for (int i = 0; i < wiz->pastRunList()->count(); ++i)
      if (wiz->pastRunList()->item(i)->text().contains("resumed-later")) return true;
    return false;
  };
  EXPECT_FALSE(listed());
  {
    ts::core::RunRecorder::Options o;
    o.dbPath = tmp.filePath("runs.db").toStdString();
    o.runDir = tmp.filePath("resumed").toStdString();
    o.name = "resumed-later";
    ts::core::RunRecorder rec(o);
    rec.record({{"type", "hello"}, {"seq", 0}, {"time", 1.7e9}});
    rec.record({{"type", "finished"}, {"seq", 1}, {"time", 1.7e9 + 1}, {"status", "completed"}});
    rec.close();
  }
  wiz->goToPage(1);
  wiz->goToPage(0);
  // Read off the GUI thread: the list fills when the read lands.
  EXPECT_TRUE(testutil::waitFor(listed, testutil::kWaitCapMs));
}
