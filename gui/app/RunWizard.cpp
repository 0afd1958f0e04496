#include "RunWizard.h"

#include <algorithm>
#include <random>

#include <QCheckBox>
#include <QComboBox>
#include <QDir>
#include <QFile>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QListWidget>
#include <QMessageBox>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QScrollArea>
#include <QStackedWidget>
#include <QVBoxLayout>

#include "ChartView.h"
#include "ConfigBinder.h"
#include "MemoryBars.h"
#include "trainscope/core/model/HfConfig.h"
#include "trainscope/core/model/ModelFamily.h"
#include "trainscope/core/model/ModelSpec.h"
#include "trainscope/core/config/Schedule.h"
#include "trainscope/gui/RunRepository.h"

namespace ts::gui {
namespace {

// model.arch's choices and tooltip, one per model family.
QList<QPair<QString, QString>> familyChoices() {
  QList<QPair<QString, QString>> out;
  for (const auto* f : ts::core::modelFamilies())
    out.append({QString::fromStdString(f->displayName()), QString::fromStdString(f->name())});
  return out;
}

QString familyTip() {
  QStringList parts;
  for (const auto* f : ts::core::modelFamilies())
    parts << QString::fromStdString(f->displayName() + ": " + f->description());
  return parts.join(' ');
}

QString issuePath(const core::ConfigIssue& i) {
  QString p = QString::fromStdString(i.path);
  if (p.startsWith('/')) p = p.mid(1);
  p.replace('/', '.');
  return p;
}

// What a model path holds, from its file names: a Hugging Face folder, a trainscope
// checkpoint, or nothing usable (said before launch rather than by the engine).
QString describeModelPath(const std::string& path, const QString& empty) {
  if (path.empty()) return empty;
  QFileInfo fi(QString::fromStdString(path));
  QDir dir(fi.isDir() ? fi.absoluteFilePath() : fi.absolutePath());
  if (dir.exists("config.json") && !dir.exists("state.json"))
    return "Hugging Face model folder: " + dir.absolutePath() +
           (dir.exists("model.safetensors") || dir.exists("model.safetensors.index.json")
                ? QString()
                : QStringLiteral(" — no model.safetensors in it"));
  if (dir.exists("state.json")) return "trainscope checkpoint: " + dir.absolutePath();
  return "Not found or not a model: " + QString::fromStdString(path) +
         " (expected a checkpoint directory or a folder with config.json)";
}

QGroupBox* group(const QString& title, QFormLayout** form) {
  auto* g = new QGroupBox(title);
  *form = new QFormLayout(g);
  (*form)->setLabelAlignment(Qt::AlignRight | Qt::AlignVCenter);
  (*form)->setFieldGrowthPolicy(QFormLayout::ExpandingFieldsGrow);
  (*form)->setHorizontalSpacing(14);
  (*form)->setVerticalSpacing(8);
  return g;
}

QLabel* hintLabel(const QString& text) {
  auto* l = new QLabel(text);
  l->setObjectName("Muted");
  l->setWordWrap(true);
  return l;
}

}  // namespace

RunWizard::RunWizard(ConfigDocument* doc, const RunRepository* repo, QWidget* parent)
    : QWidget(parent), doc_(doc), repo_(repo), binder_(new ConfigBinder(doc, this)) {
  caps_.deviceMemory = hostMemoryBytes();
  caps_.text = "CPU";
  nav_ = new QListWidget;
  nav_->setObjectName("WizardSteps");
  nav_->setFixedWidth(200);
  nav_->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  stack_ = new QStackedWidget;

  addPage("Start", buildStartPage(), {"name"});
  addPage("Model & data", buildModelPage(), {"model", "data"});
  addPage("Precision", buildPrecisionPage(), {"precision"});
  addPage("Memory", buildMemoryPage(),
          {"memory", "attention", "train.micro_batch", "train.grad_accum"});
  addPage("Parallelism", buildParallelPage(), {"parallel", "device"});
  addPage("Optimizer & schedule", buildOptimizerPage(),
          {"optimizer", "schedule", "curriculum", "train.steps", "train.grad_clip"});
  addPage("Fine-tuning", buildFinetunePage(), {"finetune", "distill"});
  addPage("Profiling", buildProfilingPage(),
          {"profile", "train.eval_every", "train.checkpoint_every", "train.seed"});
  addPage("Review", buildReviewPage(), {});
  for (int i = 0; i < stack_->count(); ++i) {
    nav_->item(i)->setText(QStringLiteral("%1.  %2").arg(i + 1).arg(nav_->item(i)->text()));
  }

  back_ = new QPushButton("Back");
  next_ = new QPushButton("Next");
  next_->setObjectName("Primary");
  launch_ = new QPushButton("Launch run");
  launch_->setObjectName("Primary");
  launch_->setToolTip("Start trainscope-engine with this configuration");
  blockers_ = new QLabel;
  blockers_->setObjectName("Issue");
  blockers_->setWordWrap(true);

  auto* buttons = new QHBoxLayout;
  buttons->addWidget(blockers_, 1);
  buttons->addWidget(back_);
  buttons->addWidget(next_);
  buttons->addWidget(launch_);

  auto* center = new QVBoxLayout;
  center->addWidget(stack_, 1);
  center->addLayout(buttons);

  auto* lay = new QHBoxLayout(this);
  lay->setContentsMargins(12, 12, 12, 12);
  lay->setSpacing(14);
  lay->addWidget(nav_);
  lay->addLayout(center, 1);
  lay->addWidget(buildSidePanel());

  connect(nav_, &QListWidget::currentRowChanged, this, &RunWizard::goToPage);
  connect(back_, &QPushButton::clicked, this, [this] { goToPage(currentPage() - 1); });
  connect(next_, &QPushButton::clicked, this, [this] { goToPage(currentPage() + 1); });
  connect(launch_, &QPushButton::clicked, this, [this] {
    if (launchBlockers().isEmpty()) emit launchRequested();
  });
  connect(doc_, &ConfigDocument::changed, this, &RunWizard::onDocumentChanged);
  goToPage(0);
  onDocumentChanged();
}

void RunWizard::addPage(const QString& nav, QWidget* w, QStringList sections) {
  auto* scroll = new QScrollArea;
  scroll->setWidget(w);
  scroll->setWidgetResizable(true);
  scroll->setFrameShape(QFrame::NoFrame);
  stack_->addWidget(scroll);
  nav_->addItem(nav);
  (void)sections;
}

QWidget* RunWizard::page(const QString& title, const QString& hint, QVBoxLayout** body) {
  auto* w = new QWidget;
  auto* v = new QVBoxLayout(w);
  v->setContentsMargins(4, 0, 8, 0);
  v->setSpacing(10);
  auto* t = new QLabel(title);
  t->setObjectName("PageTitle");
  v->addWidget(t);
  if (!hint.isEmpty()) {
    auto* h = new QLabel(hint);
    h->setObjectName("PageHint");
    h->setWordWrap(true);
    v->addWidget(h);
  }
  *body = v;
  return w;
}

QLabel* RunWizard::issueLabel(QStringList sections) {
  auto* l = new QLabel;
  l->setObjectName("Issue");
  l->setWordWrap(true);
  l->setVisible(false);
  l->setTextFormat(Qt::RichText);
  issueLabels_.push_back({l, sections});
  return l;
}

int RunWizard::pageCount() const {
  return stack_->count();
}
int RunWizard::currentPage() const {
  return stack_->currentIndex();
}
QString RunWizard::pageTitle(int i) const {
  return i >= 0 && i < nav_->count() ? nav_->item(i)->text() : QString();
}

void RunWizard::goToPage(int i) {
  i = std::clamp(i, 0, stack_->count() - 1);
  stack_->setCurrentIndex(i);
  {
    QSignalBlocker b(nav_);
    nav_->setCurrentRow(i);
  }
  back_->setEnabled(i > 0);
  next_->setVisible(i < stack_->count() - 1);
  if (i == stack_->count() - 1) onDocumentChanged();  // review shows the latest document
}

int64_t RunWizard::capacity() const {
  if (!capacityPick_) return caps_.deviceMemory;
  const qlonglong v = capacityPick_->currentData().toLongLong();
  return v > 0 ? v : caps_.deviceMemory;
}

void RunWizard::setCapabilities(const CapabilitySummary& caps) {
  caps_ = caps;
  doc_->setNativeBf16Gemm(caps.nativeBf16Gemm);
  if (capacityPick_) {
    capacityPick_->setItemText(0, QStringLiteral("This machine (%1)")
                                      .arg(formatBytes(static_cast<double>(caps_.deviceMemory))));
    capacityPick_->setItemData(0, QVariant::fromValue<qlonglong>(caps_.deviceMemory));
  }
  onDocumentChanged();
}

// ---- Start -------------------------------------------------------------------------------
QWidget* RunWizard::buildStartPage() {
  QVBoxLayout* v;
  QWidget* w = page("Start a run",
                    "Begin from a built-in preset, clone a run from the database, or import a "
                    "config file. Every later page edits the same configuration.",
                    &v);
  QFormLayout* f;
  auto* nameBox = group("Run", &f);
  f->addRow("Name",
            binder_->text("name", "run name", "Shown in the run list and the dashboard tab"));
  v->addWidget(nameBox);

  auto* pg = new QGroupBox("Built-in presets");
  auto* pl = new QVBoxLayout(pg);
  presets_ = new QListWidget;
  presets_->setObjectName("Presets");
  presets_->setWordWrap(true);
  presetData_ = PresetLibrary::builtIn();
  for (const auto& p : presetData_) {
    // Plain text first line = the title (tests and accessibility read it); shown as rich text.
    auto* item = new QListWidgetItem(QStringLiteral("%1\n%2").arg(p.title, p.summary));
    item->setToolTip(p.summary);
    item->setForeground(Qt::transparent);
    presets_->addItem(item);
    auto* label = new QLabel(QStringLiteral("<b>%1</b><br><span style='color:#52606d'>%2</span>")
                                 .arg(p.title.toHtmlEscaped(), p.summary.toHtmlEscaped()));
    label->setWordWrap(true);
    label->setContentsMargins(6, 5, 6, 5);
    label->setAttribute(Qt::WA_TransparentForMouseEvents);
    item->setSizeHint(QSize(10, label->heightForWidth(560) + 12));
    presets_->setItemWidget(item, label);
  }
  if (presetData_.empty()) presets_->addItem("(no presets were built into this binary)");
  presets_->setMinimumHeight(220);
  presets_->setSpacing(2);
  pl->addWidget(presets_);
  v->addWidget(pg);
  connect(presets_, &QListWidget::currentRowChanged, this, &RunWizard::applyPreset);

  auto* rg = new QGroupBox("Clone a past run");
  auto* rl = new QVBoxLayout(rg);
  pastRuns_ = new QListWidget;
  pastRuns_->setMinimumHeight(90);
  pastRuns_->setMaximumHeight(150);
  rl->addWidget(pastRuns_);
  auto* refresh = new QPushButton("Refresh");
  auto* rh = new QHBoxLayout;
  rh->addWidget(hintLabel("Takes the resolved config of the selected run."), 1);
  rh->addWidget(refresh);
  rl->addLayout(rh);
  v->addWidget(rg);
  connect(refresh, &QPushButton::clicked, this, &RunWizard::refreshPastRuns);
  connect(pastRuns_, &QListWidget::itemActivated, this, [this](QListWidgetItem* it) {
    if (!repo_) return;
    QString err;
    auto run = repo_->getRun(it->data(Qt::UserRole).toLongLong(), &err);
    if (!run || run->config.is_null()) {
      startStatus_->setText(err.isEmpty() ? "That run has no recorded config." : err);
      return;
    }
    auto cfg = run->config;
    cfg["name"] = run->name + "-clone";
    doc_->reset(cfg);
    startStatus_->setText(
        QStringLiteral("Cloned run #%1 (%2).").arg(run->id).arg(QString::fromStdString(run->name)));
  });

  auto* ig = new QGroupBox("Import a config file");
  auto* il = new QHBoxLayout(ig);
  il->addWidget(hintLabel("A Trainscope run config (JSON), or a DeepSpeed JSON: batch sizes, "
                          "precision, ZeRO stage, offload, optimizer and scheduler are mapped."),
                1);
  auto* imp = new QPushButton("Import…");
  il->addWidget(imp);
  v->addWidget(ig);
  connect(imp, &QPushButton::clicked, this, [this] {
    const QString f = QFileDialog::getOpenFileName(this, "Import a run config", QString(),
                                                   "JSON files (*.json);;All files (*)");
    if (f.isEmpty()) return;
    const QString err = importFile(f);
    if (!err.isEmpty()) QMessageBox::warning(this, "Import failed", err);
  });
  startStatus_ = new QLabel;
  startStatus_->setObjectName("Muted");
  v->addWidget(startStatus_);
  v->addWidget(issueLabel({"name", "tags", "notes"}));
  v->addStretch(1);
  refreshPastRuns();
  return w;
}

void RunWizard::applyPreset(int index) {
  if (index < 0 || index >= static_cast<int>(presetData_.size())) return;
  doc_->reset(presetData_[index].doc);
  if (startStatus_)
    startStatus_->setText(QStringLiteral("Preset “%1” loaded.").arg(presetData_[index].title));
}

QString RunWizard::importFile(const QString& path) {
  QFile f(path);
  if (!f.open(QIODevice::ReadOnly))
    return QStringLiteral("Cannot open %1: %2").arg(path, f.errorString());
  const std::string err = doc_->importText(f.readAll().toStdString());
  if (!err.empty()) return QStringLiteral("%1: %2").arg(path, QString::fromStdString(err));
  if (startStatus_) startStatus_->setText("Imported " + QFileInfo(path).fileName() + ".");
  return {};
}

void RunWizard::refreshPastRuns() {
  if (!pastRuns_) return;
  pastRuns_->clear();
  QString err;
  auto runs = repo_ ? repo_->listRuns(&err) : std::vector<core::RunSummary>{};
  for (const auto& r : runs) {
    auto* it = new QListWidgetItem(
        QStringLiteral("#%1  %2  ·  %3  ·  %4 steps")
            .arg(r.id)
            .arg(QString::fromStdString(r.name), QString::fromStdString(r.status))
            .arg(r.steps));
    it->setData(Qt::UserRole, QVariant::fromValue<qlonglong>(r.id));
    pastRuns_->addItem(it);
  }
  if (runs.empty())
    pastRuns_->addItem(err.isEmpty() ? "No runs in the database yet." : "Database: " + err);
  if (teacherPick_) {
    const QString current = teacherPick_->currentData().toString();
    teacherPick_->clear();
    teacherPick_->addItem("No teacher (distillation off)", QString());
    if (repo_)
      for (const auto& c : repo_->checkpoints())
        teacherPick_->addItem(QStringLiteral("#%1 %2 · step %3")
                                  .arg(c.runId)
                                  .arg(QString::fromStdString(c.runName))
                                  .arg(c.step),
                              QString::fromStdString(c.path));
  }
}

// ---- Model & data ------------------------------------------------------------------------
QString RunWizard::openHfFolder(const QString& path) {
  const HfFolderInfo hf = inspectHfFolder(path.toStdString());
  if (!hf.ok()) {
    hfInfo_->setText(hf.error);
    return hf.error;
  }
  doc_->reset(applyHfFolder(doc_->document(), hf));
  return {};
}

QWidget* RunWizard::buildModelPage() {
  QVBoxLayout* v;
  QWidget* w = page(
      "Model and data",
      "A decoder (GPT-2 or LLaMA). Bigger models learn more and need more memory and time.", &v);
  QFormLayout* f;
  auto* mg = group("Model", &f);
  // A downloaded model: its config.json fills the shape below (so the estimate is the model's)
  // and the run fine-tunes its weights.
  auto* hfRow = new QHBoxLayout;
  auto* openHf = new QPushButton("Hugging Face folder…");
  openHf->setObjectName("OpenHfFolder");
  openHf->setToolTip(
      "A folder with config.json and model.safetensors (GPT2LMHeadModel, LlamaForCausalLM, "
      "MistralForCausalLM): its shape fills the fields below and the run starts from its "
      "weights (finetune.base_checkpoint).");
  hfRow->addWidget(openHf);
  auto* applyHf = new QPushButton("Use its shape");
  applyHf->setObjectName("ApplyHfShape");
  applyHf->setToolTip("Set the fields below to the base folder's config.json");
  hfRow->addWidget(applyHf);
  hfRow->addStretch(1);
  f->addRow("Start from", hfRow);
  hfInfo_ = new QLabel;
  hfInfo_->setObjectName("HfFolderInfo");
  hfInfo_->setWordWrap(true);
  hfInfo_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  f->addRow("", hfInfo_);
  connect(openHf, &QPushButton::clicked, this, [this] {
    const QString dir = QFileDialog::getExistingDirectory(this, "Hugging Face model folder");
    if (!dir.isEmpty()) openHfFolder(dir);
  });
  connect(applyHf, &QPushButton::clicked, this, [this] {
    const auto v = doc_->value("finetune.base_checkpoint");
    if (v.is_string()) openHfFolder(QString::fromStdString(v.get<std::string>()));
  });
  onChange_.push_back([this, applyHf] {
    const auto v = doc_->value("finetune.base_checkpoint");
    const std::string base = v.is_string() ? v.get<std::string>() : std::string();
    applyHf->setVisible(false);
    if (base.empty() || !core::isHfModelFolder(base)) {
      hfInfo_->setText(base.empty() ? "Random initialization, or open a Hugging Face model "
                                      "folder to fine-tune it."
                                    : describeModelPath(base, QString()));
      return;
    }
    const HfFolderInfo& hf = hfFolders_.get(base);
    QString t = hf.summary();
    if (hf.ok() && doc_->config() && doc_->estimate()) {
      const auto diffs =
          core::hfShapeMismatches(hf.info, doc_->config()->model, doc_->estimate()->vocab);
      if (!diffs.empty()) {
        t += "\nThe run does not describe this model:";
        for (const auto& d : diffs) t += "\n  " + QString::fromStdString(d);
        applyHf->setVisible(true);
      }
    }
    hfInfo_->setText(t);
  });
  f->addRow("Architecture",
            binder_->choice("model.arch", familyChoices(), familyTip()));
  f->addRow("Layers",
            binder_->intSpin(
                "model.layers", 1, 256,
                "Transformer blocks. Each adds parameters, activations and compute linearly."));
  f->addRow(
      "Attention heads",
      binder_->intSpin("model.heads", 1, 256,
                       "Heads per block; d_model must divide evenly. More heads: finer attention, "
                       "smaller per-head width."));
  auto* kv = binder_->intSpin("model.kv_heads", 0, 256,
                              "LLaMA: key/value heads shared by the query heads (grouped-query "
                              "attention: a smaller KV cache and fewer K/V weights). Must divide "
                              "the heads; 0 = as many as heads.");
  kv->setSpecialValueText("= heads");
  f->addRow("KV heads", kv);
  f->addRow(
      "Width (d_model)",
      binder_->intSpin("model.d_model", 8, 16384,
                       "Hidden size. Parameters grow with its square; activations linearly.", 8));
  f->addRow(
      "Sequence length",
      binder_->intSpin(
          "model.seq_len", 4, 131072,
          "Tokens per sample. Activations grow linearly (quadratically with naive attention).", 8));
  auto* dff =
      binder_->intSpin("model.d_ff", 0, 1 << 20,
                       "LLaMA: the SwiGLU MLP's width (11008 for LLaMA-7B). 0 = 4 × d_model.", 8);
  dff->setSpecialValueText("4 × d_model");
  f->addRow("MLP width (d_ff)", dff);
  auto* vocab = binder_->intSpin(
      "model.vocab", 0, 1000000,
      "0 = taken from the data's tokenizer. Embedding and output layer grow with it.");
  vocab->setSpecialValueText("from the data");
  f->addRow("Vocabulary", vocab);
  f->addRow(
      "Activation",
      binder_->choice("model.activation", {{"GELU", "gelu"}, {"ReLU", "relu"}},
                      "GELU is the GPT-2 default; ReLU makes activations sparse (enables sparse "
                      "activation compression)."));
  f->addRow("Dropout",
            binder_->doubleSpin(
                "model.dropout", 0.0, 0.9, 2,
                "Regularization; costs a mask per activation and slows convergence on small data.",
                0.05));
  paramCount_ = new QLabel;
  paramCount_->setObjectName("BigNumber");
  paramCount_->setToolTip("Counted by the engine's estimator from the shape above");
  f->addRow("Parameters", paramCount_);
  v->addWidget(mg);

  auto* dg = group("Data", &f);
  f->addRow("Source",
            binder_->choice(
                "data.source",
                {{"Synthetic (generated, no files)", "synthetic"},
                 {"Text file (the model's tokenizer, else bytes)", "text"},
                 {"Token file (uint16)", "tokens"},
                 {"Instruction data (jsonl: prompt/completion or text)", "jsonl"}},
                "Synthetic tasks need no download and show learning within minutes; files train on "
                "your own corpus."));
  f->addRow("Synthetic task",
            binder_->choice(
                "data.task",
                {{"Addition (a+b=reversed sum)", "addition"}, {"Grammar (agreement)", "grammar"}},
                "Addition learns fast and its accuracy is unambiguous; grammar tests longer-range "
                "agreement."));
  f->addRow("Digits", binder_->intSpin(
                          "data.digits", 1, 18,
                          "Addition difficulty: operand length. Longer needs longer sequences."));
  auto* pathRow = new QHBoxLayout;
  auto* pathEdit =
      binder_->text("data.path", "path to a text, token or jsonl file",
                    "Text: UTF-8 through the tokenizer below. Tokens: little-endian uint16 ids. "
                    "jsonl: one {\"prompt\", \"completion\"} (loss on the completion) or "
                    "{\"text\"} object per line, one padded sample per row.");
  auto* browse = new QPushButton("Browse…");
  pathRow->addWidget(pathEdit, 1);
  pathRow->addWidget(browse);
  f->addRow("File", pathRow);
  connect(browse, &QPushButton::clicked, this, [this] {
    const QString fn = QFileDialog::getOpenFileName(this, "Training data");
    if (!fn.isEmpty()) doc_->setValue("data.path", fn.toStdString());
  });
  f->addRow("Tokenizer",
            binder_->text("data.tokenizer", "empty = the base model's tokenizer.json, else bytes",
                          "Text and jsonl: \"bytes\", or a tokenizer.json (or a Hugging Face "
                          "folder holding one). Empty takes the fine-tuning base's own."));
  f->addRow("Validation share",
            binder_->doubleSpin(
                "data.val_fraction", 0.0, 0.5, 2,
                "Held out for eval loss; more gives a steadier eval curve and less training data.",
                0.05));
  v->addWidget(dg);
  auto* pv = new QGroupBox("Preview: first samples");
  auto* pvl = new QVBoxLayout(pv);
  dataPreview_ = new QPlainTextEdit;
  dataPreview_->setObjectName("Json");
  dataPreview_->setReadOnly(true);
  dataPreview_->setFixedHeight(120);
  pvl->addWidget(dataPreview_);
  v->addWidget(pv);
  v->addWidget(issueLabel({"model", "data"}));
  v->addStretch(1);
  onChange_.push_back([this] {
    if (const auto& e = doc_->estimate()) {
      QString t = humanCount(static_cast<double>(e->params.total));
      if (e->params.frozen > 0)
        t += QStringLiteral("  (trainable %1)")
                 .arg(humanCount(static_cast<double>(e->params.trainable)));
      paramCount_->setText(t);
    } else {
      paramCount_->setText("— (fix the problems below)");
    }
    updateDataPreview();
  });
  return w;
}

void RunWizard::updateDataPreview() {
  if (!dataPreview_) return;
  const std::string source = doc_->value("data.source").get<std::string>();
  QString text;
  if (source == "synthetic") {
    const std::string task = doc_->value("data.task").is_string()
                                 ? doc_->value("data.task").get<std::string>()
                                 : "addition";
    if (task == "addition") {
      const int d = std::clamp(
          doc_->value("data.digits").is_number() ? doc_->value("data.digits").get<int>() : 3, 1, 9);
      std::mt19937_64 rng(
          doc_->value("train.seed").is_number() ? doc_->value("train.seed").get<uint64_t>() : 1);
      int64_t lim = 1;
      for (int i = 0; i < d; ++i) lim *= 10;
      std::uniform_int_distribution<int64_t> U(0, lim - 1);
      text =
          "Generated by the engine: operands zero-padded, the sum written reversed "
          "(least significant digit first). Examples of the format:\n";
      for (int i = 0; i < 4; ++i) {
        const int64_t a = U(rng), b = U(rng);
        QString s = QString::number(a + b).rightJustified(d + 1, '0');
        std::reverse(s.begin(), s.end());
        text +=
            QStringLiteral("%1+%2=%3\n").arg(a, d, 10, QChar('0')).arg(b, d, 10, QChar('0')).arg(s);
      }
    } else {
      text =
          "Generated by the engine: sentences from a small grammar with subject-verb "
          "agreement, e.g.\nthe cats near a red fox chase every dog .";
    }
  } else {
    const QString path = QString::fromStdString(
        doc_->value("data.path").is_string() ? doc_->value("data.path").get<std::string>() : "");
    QFile f(path);
    if (path.isEmpty()) {
      text = "Pick a file to see its first samples.";
    } else if (!f.open(QIODevice::ReadOnly)) {
      text = QStringLiteral("Cannot open %1: %2").arg(path, f.errorString());
    } else if (source == "text" || source == "jsonl") {
      const QByteArray head = f.read(600);
      text = QStringLiteral("%1 · %2\n")
                 .arg(QFileInfo(path).fileName(), formatBytes(static_cast<double>(f.size()))) +
             QString::fromUtf8(head);
    } else {
      const QByteArray head = f.read(64);
      QStringList ids;
      for (int i = 0; i + 1 < head.size(); i += 2)
        ids << QString::number(static_cast<uint8_t>(head[i]) |
                               (static_cast<uint8_t>(head[i + 1]) << 8));
      text = QStringLiteral("%1 · %2 tokens\nfirst ids: %3")
                 .arg(QFileInfo(path).fileName())
                 .arg(f.size() / 2)
                 .arg(ids.join(' '));
    }
  }
  if (dataPreview_->toPlainText() != text) dataPreview_->setPlainText(text);
}

// ---- Precision ---------------------------------------------------------------------------
QWidget* RunWizard::buildPrecisionPage() {
  QVBoxLayout* v;
  QWidget* w = page("Precision",
                    "Lower precision halves (or quarters) the bytes per value and speeds up "
                    "math on hardware that has it; fp16 needs loss scaling to keep small "
                    "gradients from underflowing.",
                    &v);
  QFormLayout* f;
  auto* g = group("Number format", &f);
  f->addRow("Policy",
            binder_->choice(
                "precision.policy",
                {{"fp32 (reference)", "fp32"},
                 {"bf16 mixed (fp32 master weights)", "bf16"},
                 {"fp16 mixed + loss scaling", "fp16"},
                 {"fp8 (E4M3/E5M2, scaled)", "fp8"},
                 {"pure bf16 (no fp32 master)", "pure_bf16"}},
                "fp32: 4 bytes, exact reference. bf16: 2-byte activations, fp32 master copy. fp16: "
                "more mantissa, less range, needs loss scaling. fp8: 1 byte, scaled per tensor. "
                "pure bf16: smallest, may stall on tiny updates."));
  v->addWidget(g);
  auto* gm = group("GEMMs (bf16, pure bf16)", &f);
  f->addRow("Matrix multiplies",
            binder_->choice(
                "precision.gemm",
                {{"Automatic (bf16 where the CPU has AMX)", "auto"},
                 {"fp32 on upcast copies", "fp32"},
                 {"bf16 operands, fp32 accumulation", "bf16"}},
                "bf16 GEMMs multiply the bf16 weights with bf16-rounded inputs: 3-7x faster on "
                "AMX, emulated (slower) on CPUs without bf16 instructions."));
  v->addWidget(gm);
  auto* ls = group("Loss scaling (fp16)", &f);
  f->addRow("Mode",
            binder_->choice(
                "precision.loss_scale.mode",
                {{"Dynamic (grow / back off)", "dynamic"}, {"Static", "static"}},
                "Dynamic raises the scale until an overflow, then halves it and skips that step."));
  f->addRow("Initial scale",
            binder_->doubleSpin("precision.loss_scale.init", 1, 16777216, 0,
                                "Start high: the first overflows back it off quickly.", 1024));
  f->addRow(
      "Growth interval",
      binder_->intSpin(
          "precision.loss_scale.growth_interval", 1, 1000000,
          "Steps without overflow before the scale doubles. Short: more skipped steps.", 100));
  f->addRow("Static scale", binder_->doubleSpin("precision.loss_scale.static_scale", 1, 16777216, 0,
                                                "Used only in static mode.", 128));
  v->addWidget(ls);
  auto* f8 = group("fp8", &f);
  f->addRow("Scaling recipe",
            binder_->choice(
                "precision.fp8.recipe",
                {{"Delayed (amax history)", "delayed"}, {"Blockwise", "blockwise"}},
                "Delayed uses past maxima (cheap, one step stale); blockwise scales each block "
                "(more accurate, more scale storage)."));
  f->addRow("Format",
            binder_->choice(
                "precision.fp8.format",
                {{"Hybrid: E4M3 forward, E5M2 gradients", "hybrid"}, {"E4M3 everywhere", "e4m3"}},
                "E5M2 has the range gradients need; E4M3 the precision activations need."));
  f->addRow("amax history",
            binder_->intSpin("precision.fp8.amax_history", 1, 100000,
                             "Steps of maxima the delayed recipe looks back over."));
  v->addWidget(f8);
  v->addWidget(issueLabel({"precision"}));
  v->addStretch(1);
  onChange_.push_back([this, gm, ls, f8] {
    const auto pol = doc_->value("precision.policy");
    gm->setEnabled(pol == "bf16" || pol == "pure_bf16");
    ls->setEnabled(pol == "fp16");
    f8->setEnabled(pol == "fp8");
  });
  return w;
}

// ---- Memory ------------------------------------------------------------------------------
QWidget* RunWizard::buildMemoryPage() {
  QVBoxLayout* v;
  QWidget* w = page("Memory",
                    "Activations usually dominate: recompute them, store them compressed, or "
                    "use smaller micro-batches with accumulation. Watch the side panel.",
                    &v);
  QFormLayout* f;
  auto* g = group("Activations", &f);
  f->addRow("Checkpointing",
            binder_->choice(
                "memory.checkpointing",
                {{"None", "none"}, {"Every block", "all"}, {"Every k-th block", "every_k"}},
                "Keeps only block inputs and recomputes the rest in backward: far less activation "
                "memory for about one extra forward pass."));
  auto* k = binder_->intSpin(
      "memory.checkpoint_every", 0, 1024,
      "Checkpoint one block in k; 0 = sqrt(layers). Larger k: less recompute, more memory.");
  k->setSpecialValueText("√layers");
  f->addRow("k (every_k)", k);
  f->addRow(
      "Compression",
      binder_->choice(
          "memory.activation_compression",
          {{"None", "none"}, {"int8 (scaled)", "int8"}, {"Sparse (after ReLU)", "sparse"}},
          "Saved activations stored as int8 (4x smaller than fp32, small rounding error) or as "
          "bitmap + nonzeros (needs ReLU). Costs a (de)compression pass."));
  f->addRow(
      "Attention",
      binder_->choice("attention.impl",
                      {{"Naive (T×T scores)", "naive"}, {"Flash (tiled, O(T) memory)", "flash"}},
                      "Flash never stores the T×T score matrix: memory linear in sequence length, "
                      "recomputes scores in backward."));
  v->addWidget(g);
  auto* b = group("Batch", &f);
  f->addRow("Micro-batch",
            binder_->intSpin("train.micro_batch", 1, 65536,
                             "Sequences per forward/backward. Activation memory grows with it."));
  f->addRow("Accumulation steps",
            binder_->intSpin(
                "train.grad_accum", 1, 65536,
                "Micro-batches summed before each optimizer step: a bigger effective batch at the "
                "memory of one micro-batch, more time per step."));
  effBatch_ = new QLabel;
  effBatch_->setObjectName("BigNumber");
  effBatch_->setToolTip("micro-batch × accumulation steps × ranks");
  f->addRow("Effective batch", effBatch_);
  v->addWidget(b);
  v->addWidget(issueLabel({"memory", "attention", "train.micro_batch", "train.grad_accum"}));
  v->addStretch(1);
  onChange_.push_back([this] {
    const int64_t eb = doc_->effectiveBatch();
    const auto seq = doc_->value("model.seq_len");
    effBatch_->setText(QStringLiteral("%1 sequences · %2 tokens per step")
                           .arg(eb)
                           .arg(QLocale().toString(static_cast<qlonglong>(
                               eb * (seq.is_number() ? seq.get<int64_t>() : 0)))));
  });
  return w;
}

// ---- Parallelism -------------------------------------------------------------------------
QWidget* RunWizard::buildParallelPage() {
  QVBoxLayout* v;
  QWidget* w = page("Parallelism and offload",
                    "Data parallel ranks (one process each, started with mpirun). ZeRO shards "
                    "the model states over ranks; offload moves them to host RAM or NVMe.",
                    &v);
  QFormLayout* f;
  auto* g = group("Ranks and ZeRO", &f);
  f->addRow("Ranks",
            binder_->intSpin(
                "parallel.ranks", 1, 4096,
                "Processes (devices). More ranks: more throughput, communication every step."));
  f->addRow("ZeRO stage",
            binder_->intChoice(
                "parallel.zero_stage",
                {{"0: replicate everything", 0},
                 {"1: shard optimizer state", 1},
                 {"2: + shard gradients", 2},
                 {"3: + shard parameters", 3}},
                "Each stage divides one more model state by the rank count, at the price of more "
                "communication (stage 3 gathers parameters every forward and backward)."));
  f->addRow("Hostfile",
            binder_->text("parallel.hostfile", "empty: every rank on this machine",
                          "Optional: an mpirun hostfile (one machine per line, with its slots) "
                          "to spread the ranks over several machines. Leave it empty to run "
                          "every rank on this machine."));
  v->addWidget(g);
  auto* o = group("Offload", &f);
  f->addRow("Optimizer state",
            binder_->choice(
                "parallel.offload_optimizer",
                {{"On device", "none"}, {"Host RAM", "cpu"}, {"NVMe file", "nvme"}},
                "Moves optimizer state (the largest model state with Adam) off the device; the "
                "update then runs on the CPU and crosses the bus every step."));
  f->addRow("Parameters",
            binder_->choice(
                "parallel.offload_params",
                {{"On device", "none"}, {"Host RAM", "cpu"}, {"NVMe file", "nvme"}},
                "Parameters fetched per layer (ZeRO-3). Slowest, smallest device footprint."));
  f->addRow("NVMe path", binder_->text("parallel.nvme_path", "/mnt/nvme/trainscope",
                                       "Folder for NVMe offload files; use a fast local disk."));
  v->addWidget(o);
  auto* d = group("Device", &f);
  f->addRow("Backend",
            binder_->choice("device.backend",
                            {{"Automatic", "auto"}, {"CPU", "cpu"}, {"CUDA GPU", "cuda"}},
                            "Automatic picks a GPU when the engine finds one, else the CPU."));
  auto* threads = binder_->intSpin("device.threads", 0, 1024,
                                   "0 = all cores. Fewer leaves room for other work.");
  threads->setSpecialValueText("all cores");
  f->addRow("CPU threads", threads);
  v->addWidget(d);
  v->addWidget(issueLabel({"parallel", "device"}));
  v->addStretch(1);
  return w;
}

// ---- Optimizer & schedule ----------------------------------------------------------------
QWidget* RunWizard::buildOptimizerPage() {
  QVBoxLayout* v;
  QWidget* w = page("Optimizer and schedule", "", &v);
  QFormLayout* f;
  auto* g = group("Optimizer", &f);
  f->addRow("Type",
            binder_->choice("optimizer.type", {{"AdamW", "adamw"}, {"SGD + momentum", "sgd"}},
                            "AdamW: two state values per parameter, robust. SGD: one (momentum), "
                            "needs more tuning."));
  f->addRow(
      "Peak learning rate",
      binder_->doubleSpin("optimizer.lr", 0.0, 10.0, 6,
                          "Too high diverges, too low crawls. Reached after warmup.", 0.0001));
  f->addRow("Weight decay",
            binder_->doubleSpin("optimizer.weight_decay", 0.0, 1.0, 3,
                                "Decoupled L2 pull towards zero; regularizes.", 0.01));
  f->addRow("Adam β1", binder_->doubleSpin("optimizer.betas.0", 0.0, 0.9999, 4,
                                           "Momentum of the gradient average.", 0.01));
  f->addRow("Adam β2",
            binder_->doubleSpin(
                "optimizer.betas.1", 0.0, 0.99999, 5,
                "Memory of the squared-gradient average; lower reacts faster to spikes.", 0.001));
  f->addRow(
      "State precision",
      binder_->intChoice(
          "optimizer.state_bits", {{"32-bit", 32}, {"8-bit blockwise", 8}},
          "8-bit Adam state: 4x smaller optimizer state, quantization noise in the moments."));
  f->addRow("Gradient clipping",
            binder_->doubleSpin(
                "train.grad_clip", 0.0, 1000.0, 2,
                "Caps the global gradient norm (0 = off); guards against loss spikes.", 0.1));
  v->addWidget(g);
  auto* s = group("Schedule", &f);
  f->addRow("Steps",
            binder_->intSpin("train.steps", 1, 100000000, "Optimizer steps in the run.", 100));
  f->addRow("Shape",
            binder_->choice(
                "schedule.type",
                {{"Cosine decay", "cosine"}, {"Linear decay", "linear"}, {"Constant", "constant"}},
                "Decay lets the model settle at the end; constant is simplest for short tests."));
  f->addRow("Warmup steps",
            binder_->intSpin("schedule.warmup_steps", 0, 100000000,
                             "Linear ramp from 0: avoids early instability, delays learning.", 10));
  f->addRow("Final learning rate",
            binder_->doubleSpin("schedule.min_lr", 0.0, 10.0, 6, "Floor of the decay.", 0.00001));
  v->addWidget(s);
  lrChart_ = new ChartView("Learning rate over the run");
  lrChart_->setAxisTitles("step", "learning rate");
  lrChart_->setYLabelFormat("%.1e");
  lrChart_->setLegendVisible(false);
  lrChart_->setMinimumHeight(200);
  lrSeries_ = lrChart_->addSeries("learning rate", QColor("#2563eb"));
  lrChart_->setYFloor(0);
  v->addWidget(lrChart_);
  auto* c = group("Curriculum", &f);
  f->addRow("Ordering",
            binder_->choice(
                "curriculum.type",
                {{"None (shuffled)", "none"},
                 {"Short to long", "length"},
                 {"Easy to hard", "difficulty"}},
                "Starts on easier samples; can speed up early learning, may bias the start."));
  f->addRow("Pacing", binder_->choice(
                          "curriculum.pacing",
                          {{"Linear", "linear"}, {"Square root", "root"}, {"Four stages", "step"}},
                          "How fast the difficulty grows to the full data."));
  f->addRow("Full data at",
            binder_->doubleSpin("curriculum.full_at", 0.0, 1.0, 2,
                                "Fraction of the run after which all data is in use.", 0.05));
  v->addWidget(c);
  curriculumChart_ = new ChartView("Curriculum: share of full difficulty");
  curriculumChart_->setAxisTitles("step", "fraction");
  curriculumChart_->setYLabelFormat("%.1f");
  curriculumChart_->setLegendVisible(false);
  curriculumChart_->setMinimumHeight(170);
  curriculumSeries_ = curriculumChart_->addSeries("difficulty", QColor("#10b981"));
  curriculumChart_->setYFloor(0);
  v->addWidget(curriculumChart_);
  v->addWidget(
      issueLabel({"optimizer", "schedule", "curriculum", "train.steps", "train.grad_clip"}));
  v->addStretch(1);
  onChange_.push_back([this] { updateSchedulePreview(); });
  return w;
}

void RunWizard::updateSchedulePreview() {
  if (!lrChart_) return;
  const auto& cfg = doc_->config();
  if (!cfg) return;  // keep the last valid preview while the document has problems
  const int n = 400;
  const auto lr = core::scheduleCurve(*cfg, n);
  const auto steps = core::scheduleCurveSteps(*cfg, n);
  QVector<QPointF> pts, cur;
  for (size_t i = 0; i < lr.size() && i < steps.size(); ++i) {
    pts.append(QPointF(static_cast<double>(steps[i]), lr[i]));
    cur.append(QPointF(static_cast<double>(steps[i]), core::curriculumFraction(*cfg, steps[i])));
  }
  const double last = std::max<double>(1, static_cast<double>(cfg->train.steps - 1));
  lrChart_->setXRange(0, last);
  lrChart_->setPoints(lrSeries_, pts);
  curriculumChart_->setXRange(0, last);
  curriculumChart_->setPoints(curriculumSeries_, cur);
  curriculumChart_->setVisible(cfg->curriculum.type != "none");
}

// ---- Fine-tuning -------------------------------------------------------------------------
QWidget* RunWizard::buildFinetunePage() {
  QVBoxLayout* v;
  QWidget* w = page("Fine-tuning and distillation",
                    "Start from a checkpoint and train small adapters instead of every weight, "
                    "or learn from a teacher's softened predictions.",
                    &v);
  QFormLayout* f;
  auto* g = group("Base model", &f);
  auto* baseRow = new QHBoxLayout;
  baseRow->addWidget(
      binder_->text("finetune.base_checkpoint", "empty = train from scratch",
                    "A trainscope checkpoint or a Hugging Face model folder (config.json + "
                    "model.safetensors) whose weights the run starts from."),
      1);
  auto* browse = new QPushButton("Checkpoint…");
  browse->setToolTip("A checkpoint's state.json");
  baseRow->addWidget(browse);
  connect(browse, &QPushButton::clicked, this, [this] {
    const QString fn =
        QFileDialog::getOpenFileName(this, "Base checkpoint", {}, "Checkpoints (state.json)");
    if (!fn.isEmpty()) doc_->setValue("finetune.base_checkpoint", fn.toStdString());
  });
  auto* folder = new QPushButton("Folder…");
  folder->setObjectName("BaseFolder");
  folder->setToolTip("A Hugging Face model folder or a checkpoint directory");
  baseRow->addWidget(folder);
  connect(folder, &QPushButton::clicked, this, [this] {
    const QString dir = QFileDialog::getExistingDirectory(this, "Base model folder");
    if (!dir.isEmpty()) doc_->setValue("finetune.base_checkpoint", dir.toStdString());
  });
  f->addRow("Base", baseRow);
  // What the chosen path is (a cheap look at two file names, no weights read).
  auto* baseKind = new QLabel;
  baseKind->setObjectName("BaseKind");
  baseKind->setWordWrap(true);
  f->addRow("", baseKind);
  onChange_.push_back([this, baseKind] {
    const auto v = doc_->value("finetune.base_checkpoint");
    baseKind->setText(describeModelPath(v.is_string() ? v.get<std::string>() : std::string(),
                                        "Training from scratch (random init)."));
  });
  f->addRow(
      "Base weights",
      binder_->choice(
          "finetune.base_quant", {{"Full precision", "none"}, {"NF4 4-bit (QLoRA)", "nf4"}},
          "NF4 stores the frozen base in half a byte per weight (needs LoRA): 8x smaller than "
          "fp32, small quantization error."));
  v->addWidget(g);
  auto* l = group("LoRA adapters", &f);
  f->addRow("Rank r",
            binder_->intSpin(
                "finetune.lora.r", 0, 1024,
                "0 = off. Adapter size grows with r; the base stays frozen (no gradients, no "
                "optimizer state)."));
  f->addRow("Alpha", binder_->doubleSpin("finetune.lora.alpha", 0.0, 1024.0, 1,
                                         "Scale of the adapter update (alpha / r).", 1));
  f->addRow("Dropout", binder_->doubleSpin("finetune.lora.dropout", 0.0, 0.9, 2,
                                           "Dropout on the adapter input.", 0.05));
  f->addRow("Scaling", binder_->check("finetune.lora.use_rslora", "rsLoRA: alpha / sqrt(r)",
                                      "Rank-stabilized scaling: alpha / sqrt(r) instead of "
                                      "alpha / r (keeps the update's size as r grows)."));
  // The targets are the model's own modules (PEFT's target names), rebuilt when the
  // architecture changes; a short name in the config (q, v, ...) checks the modules it selects.
  auto* targets = new QWidget;
  targets->setObjectName("LoraTargets");
  auto* th = new QHBoxLayout(targets);
  th->setContentsMargins(0, 0, 0, 0);
  f->addRow("Targets", targets);
  auto writeTargets = [this, targets] {
    nlohmann::json arr = nlohmann::json::array();
    for (auto* c : targets->findChildren<QCheckBox*>())
      if (c->isChecked()) arr.push_back(c->property("loraTarget").toString().toStdString());
    doc_->setValue("finetune.lora.targets", arr);
  };
  onChange_.push_back([this, targets, th, writeTargets] {
    ts::core::ModelConfig model;
    const auto archValue = doc_->value("model.arch");
    if (archValue.is_string()) model.arch = archValue.get<std::string>();
    std::vector<std::string> chosen;
    const auto tv = doc_->value("finetune.lora.targets");
    if (tv.is_array())
      for (const auto& x : tv)
        if (x.is_string()) chosen.push_back(x.get<std::string>());
    const auto arch = ts::core::archSpecOf(model, 2);
    const auto modules = ts::core::loraModules(arch);
    auto boxes = targets->findChildren<QCheckBox*>();
    bool same = int(boxes.size()) == int(modules.size());
    for (size_t i = 0; same && i < modules.size(); ++i)
      same = boxes[int(i)]->property("loraTarget").toString().toStdString() == modules[i];
    if (!same) {
      for (auto* c : boxes) delete c;
      while (th->count() > 0) delete th->takeAt(0);
      for (const auto& m : modules) {
        auto* cb = new QCheckBox(QString::fromStdString(m));
        cb->setToolTip(
            "Adapt this module. More targets: more adapter parameters, usually better "
            "quality.");
        cb->setProperty("loraTarget", QString::fromStdString(m));
        th->addWidget(cb);
        connect(cb, &QCheckBox::toggled, this, writeTargets);
      }
      th->addStretch(1);
      boxes = targets->findChildren<QCheckBox*>();
    }
    for (auto* c : boxes) {
      QSignalBlocker b(c);
      c->setChecked(
          ts::core::loraTargets(chosen, arch, c->property("loraTarget").toString().toStdString()));
    }
  });
  v->addWidget(l);
  auto* d = group("Distillation", &f);
  teacherPick_ = new QComboBox;
  teacherPick_->setToolTip(
      "A checkpoint from a past run. The teacher runs forward only: its "
      "weights cost memory, no gradients.");
  auto* teacherRow = new QHBoxLayout;
  teacherRow->addWidget(teacherPick_, 1);
  auto* tb = new QPushButton("Browse…");
  teacherRow->addWidget(tb);
  f->addRow("Teacher", teacherRow);
  connect(teacherPick_, &QComboBox::activated, this, [this](int) {
    doc_->setValue("distill.teacher_checkpoint",
                   teacherPick_->currentData().toString().toStdString());
  });
  connect(tb, &QPushButton::clicked, this, [this] {
    const QString dir =
        QFileDialog::getExistingDirectory(this, "Teacher: checkpoint or model folder");
    if (!dir.isEmpty()) doc_->setValue("distill.teacher_checkpoint", dir.toStdString());
  });
  f->addRow("Teacher storage",
            binder_->choice("distill.teacher_dtype",
                            {{"Like the run (auto)", "auto"},
                             {"fp32", "fp32"},
                             {"bf16", "bf16"},
                             {"NF4 4-bit", "nf4"}},
                            "How the frozen teacher is kept: NF4 stores its linear layers in "
                            "about half a byte per weight."));
  f->addRow("Temperature",
            binder_->doubleSpin(
                "distill.temperature", 0.1, 100.0, 2,
                "Softens both distributions; higher passes more of the teacher's ranking.", 0.5));
  f->addRow(
      "KL weight α",
      binder_->doubleSpin("distill.alpha", 0.0, 1.0, 2,
                          "Mix of teacher KL (α) and hard-label cross-entropy (1 − α).", 0.05));
  auto* teacherNow = new QLabel;
  teacherNow->setObjectName("Muted");
  teacherNow->setWordWrap(true);
  f->addRow("", teacherNow);
  onChange_.push_back([this, teacherNow] {
    const auto t = doc_->value("distill.teacher_checkpoint");
    const QString s = t.is_string() ? QString::fromStdString(t.get<std::string>()) : QString();
    teacherNow->setText(s.isEmpty() ? "Distillation is off."
                                    : describeModelPath(s.toStdString(), QString()));
  });
  v->addWidget(d);
  v->addWidget(issueLabel({"finetune", "distill"}));
  v->addStretch(1);
  return w;
}

// ---- Profiling ---------------------------------------------------------------------------
QWidget* RunWizard::buildProfilingPage() {
  QVBoxLayout* v;
  QWidget* w = page("Profiling, evaluation and checkpoints", "", &v);
  QFormLayout* f;
  auto* g = group("Profiler", &f);
  f->addRow("",
            binder_->check(
                "profile.enabled", "Record a kernel timeline",
                "Host ranges on CPU, CUPTI kernels on GPU. Adds a little overhead in the profiled "
                "steps only."));
  f->addRow("Wait steps",
            binder_->intSpin("profile.wait", 0, 1000000, "Steps skipped before profiling."));
  f->addRow("Warmup steps",
            binder_->intSpin(
                "profile.warmup", 0, 1000000,
                "Traced but discarded: first-iteration effects (allocations, caches) stay out."));
  f->addRow("Active steps",
            binder_->intSpin("profile.active", 1, 1000000,
                             "Steps recorded per window. More: a richer timeline, larger traces."));
  auto* repeat = binder_->intSpin("profile.repeat", 0, 1000000, "Windows (0 = until the end).");
  repeat->setSpecialValueText("until the end");
  f->addRow("Repeat", repeat);
  v->addWidget(g);
  auto* e = group("Evaluation and checkpoints", &f);
  f->addRow(
      "Eval every",
      binder_->intSpin("train.eval_every", 0, 100000000,
                       "Steps between validation passes (0 = off). Frequent evals cost time.", 10));
  f->addRow(
      "Checkpoint every",
      binder_->intSpin(
          "train.checkpoint_every", 0, 100000000,
          "Steps between checkpoints (0 = only at the end). Disk space and a pause per save.", 10));
  f->addRow("Seed", binder_->intSpin("train.seed", 0, 2147483647, "Same seed, same run."));
  v->addWidget(e);
  v->addWidget(issueLabel({"profile", "train.eval_every", "train.checkpoint_every", "train.seed"}));
  v->addStretch(1);
  return w;
}

// ---- Review ------------------------------------------------------------------------------
QWidget* RunWizard::buildReviewPage() {
  QVBoxLayout* v;
  QWidget* w = page("Review", "The resolved configuration the engine will receive.", &v);
  reviewEstimate_ = new QLabel;
  reviewEstimate_->setWordWrap(true);
  reviewEstimate_->setTextFormat(Qt::RichText);
  v->addWidget(reviewEstimate_);
  reviewIssues_ = new QLabel;
  reviewIssues_->setObjectName("Issue");
  reviewIssues_->setWordWrap(true);
  reviewIssues_->setTextFormat(Qt::RichText);
  v->addWidget(reviewIssues_);
  reviewWarnings_ = new QLabel;
  reviewWarnings_->setObjectName("Warning");
  reviewWarnings_->setWordWrap(true);
  reviewWarnings_->setTextFormat(Qt::RichText);
  v->addWidget(reviewWarnings_);
  reviewJson_ = new QPlainTextEdit;
  reviewJson_->setObjectName("Json");
  reviewJson_->setReadOnly(true);
  reviewJson_->setMinimumHeight(300);
  v->addWidget(reviewJson_, 1);
  return w;
}

// ---- Side panel --------------------------------------------------------------------------
QWidget* RunWizard::buildSidePanel() {
  auto* panel = new QFrame;
  panel->setObjectName("Card");
  panel->setFixedWidth(340);
  auto* v = new QVBoxLayout(panel);
  auto* t = new QLabel("Estimated memory per rank");
  t->setObjectName("SectionTitle");
  v->addWidget(t);
  auto* row = new QHBoxLayout;
  row->addWidget(new QLabel("Device"));
  capacityPick_ = new QComboBox;
  capacityPick_->setToolTip("The device capacity the bars are compared with");
  capacityPick_->addItem(
      QStringLiteral("This machine (%1)").arg(formatBytes(static_cast<double>(caps_.deviceMemory))),
      QVariant::fromValue<qlonglong>(caps_.deviceMemory));
  for (int g : {8, 16, 24, 40, 80, 141})
    capacityPick_->addItem(QStringLiteral("%1 GiB GPU").arg(g),
                           QVariant::fromValue<qlonglong>(static_cast<qlonglong>(g) << 30));
  row->addWidget(capacityPick_, 1);
  v->addLayout(row);
  connect(capacityPick_, &QComboBox::currentIndexChanged, this, [this] { onDocumentChanged(); });
  bars_ = new MemoryBars;
  v->addWidget(bars_);
  memSummary_ = new QLabel;
  memSummary_->setWordWrap(true);
  memSummary_->setTextFormat(Qt::RichText);
  v->addWidget(memSummary_);
  v->addStretch(1);
  return panel;
}

std::vector<core::ConfigIssue> RunWizard::allIssues() const {
  std::vector<core::ConfigIssue> all = doc_->issues();
  if (doc_->config() && caps_.known)
    for (auto& i : engineLimitations(caps_.raw, *doc_->config())) all.push_back(std::move(i));
  return all;
}

QStringList RunWizard::launchBlockers() const {
  QStringList out;
  for (const auto& i : allIssues())
    out << QStringLiteral("%1: %2").arg(issuePath(i), QString::fromStdString(i.message));
  return out;
}

void RunWizard::onDocumentChanged() {
  for (auto& f : onChange_) f();
  const auto issues = allIssues();
  // Inline issues on the page that owns the key.
  for (auto& [label, sections] : issueLabels_) {
    QStringList lines;
    for (const auto& i : issues) {
      const QString p = issuePath(i);
      for (const QString& s : sections)
        if (p == s || p.startsWith(s + '.') || p.startsWith(s + '[')) {
          lines << QStringLiteral("<b>%1</b>: %2")
                       .arg(p.toHtmlEscaped(), QString::fromStdString(i.message).toHtmlEscaped());
          break;
        }
    }
    label->setText(lines.join("<br>"));
    label->setVisible(!lines.isEmpty());
  }
  const QStringList blockers = launchBlockers();
  launch_->setEnabled(blockers.isEmpty());
  launch_->setToolTip(blockers.isEmpty() ? "Start trainscope-engine with this configuration"
                                         : "Fix first:\n" + blockers.join('\n'));
  blockers_->setText(blockers.isEmpty() ? QString()
                                        : QStringLiteral("Launch is disabled: %1 problem%2 — %3")
                                              .arg(blockers.size())
                                              .arg(blockers.size() == 1 ? "" : "s")
                                              .arg(blockers.first()));
  // Memory panel.
  const auto& est = doc_->estimate();
  const int64_t cap = capacity();
  if (bars_)
    bars_->setReports(est ? std::optional(est->report) : std::nullopt, std::nullopt, cap, true);
  if (memSummary_) {
    if (est) {
      const bool fits = cap <= 0 || est->peak_device <= cap;
      QString s = QStringLiteral("<b style='color:%1'>%2</b> — peak %3 on rank 0")
                      .arg(fits ? "#0f7b3f" : "#b42318", fits ? "Fits" : "Does not fit",
                           formatBytes(static_cast<double>(est->peak_device)));
      if (est->peak_host > 0)
        s += QStringLiteral(", host %1").arg(formatBytes(static_cast<double>(est->peak_host)));
      if (est->peak_nvme > 0)
        s += QStringLiteral(", NVMe %1").arg(formatBytes(static_cast<double>(est->peak_nvme)));
      s += QStringLiteral(
               "<br><span style='color:#52606d'>%1 parameters (%2 trainable) · %3 bytes/param for "
               "model states · effective batch %4</span>")
               .arg(humanCount(static_cast<double>(est->params.total)),
                    humanCount(static_cast<double>(est->params.trainable)))
               .arg(est->bytes_per_param, 0, 'f', 1)
               .arg(est->effective_batch);
      memSummary_->setText(s);
    } else {
      memSummary_->setText(
          "<span style='color:#b42318'>No estimate while the configuration has problems.</span>");
    }
  }
  // Review page.
  if (reviewJson_ && stack_->currentIndex() == stack_->count() - 1) {
    const std::string text = doc_->resolved().dump(2);
    reviewJson_->setPlainText(QString::fromStdString(text));
  }
  if (reviewIssues_) {
    QStringList l;
    for (const auto& b : blockers) l << b.toHtmlEscaped();
    reviewIssues_->setText(
        l.isEmpty() ? QString() : "<b>Problems (Launch is disabled):</b><br>" + l.join("<br>"));
    reviewIssues_->setVisible(!l.isEmpty());
    QStringList wl;
    for (const auto& wmsg : doc_->warnings(cap)) wl << QString::fromStdString(wmsg).toHtmlEscaped();
    reviewWarnings_->setText(wl.isEmpty() ? QString() : "<b>Warnings:</b><br>" + wl.join("<br>"));
    reviewWarnings_->setVisible(!wl.isEmpty());
    if (est) {
      reviewEstimate_->setText(
          QStringLiteral("<b>%1</b> parameters · effective batch <b>%2</b> (%3 tokens/step) · "
                         "<b>%4 GFLOP</b> per step · peak device memory <b>%5</b> per rank. "
                         "Time per step is measured in the first steps and shown on the dashboard.")
              .arg(humanCount(static_cast<double>(est->params.total)))
              .arg(est->effective_batch)
              .arg(QLocale().toString(static_cast<qlonglong>(est->tokens_per_step)))
              .arg(est->flops_per_step / 1e9, 0, 'f', 2)
              .arg(formatBytes(static_cast<double>(est->peak_device))));
    } else {
      reviewEstimate_->clear();
    }
  }
}

}  // namespace ts::gui
