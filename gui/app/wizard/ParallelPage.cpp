#include "wizard/ParallelPage.h"

#include <QFormLayout>
#include <QGroupBox>
#include <QLabel>
#include <QVBoxLayout>

#include "ConfigBinder.h"

namespace ts::gui {

ParallelPage::ParallelPage(ConfigBinder* binder)
    : WizardPage(binder, "Parallelism and offload",
                 "Data parallel ranks (one process each, started with mpirun). ZeRO shards "
                 "the model states over ranks; offload moves them to host RAM or NVMe.") {
  addRanksGroup();
  addOffloadGroup();
  addDeviceGroup();
  body()->addWidget(issueLabel({"parallel", "device"}));
  body()->addStretch(1);
}

void ParallelPage::addRanksGroup() {
  QFormLayout* f;
  auto* g = formGroup("Ranks and ZeRO", &f);
  f->addRow("Ranks",
            binder()->intSpin(
                "parallel.ranks", 1, 4096,
                "Processes (devices). More ranks: more throughput, communication every step."));
  f->addRow("ZeRO stage",
            binder()->intChoice(
                "parallel.zero_stage",
                {{"0: replicate everything", 0},
                 {"1: shard optimizer state", 1},
                 {"2: + shard gradients", 2},
                 {"3: + shard parameters", 3}},
                "Each stage divides one more model state by the rank count, at the price of more "
                "communication (stage 3 gathers parameters every forward and backward)."));
  f->addRow("Hostfile",
            binder()->text("parallel.hostfile", "empty: every rank on this machine",
                           "Optional: an mpirun hostfile (one machine per line, with its slots) "
                           "to spread the ranks over several machines. Leave it empty to run "
                           "every rank on this machine."));
  body()->addWidget(g);
}

void ParallelPage::addOffloadGroup() {
  QFormLayout* f;
  auto* o = formGroup("Offload", &f);
  f->addRow("Optimizer state",
            binder()->choice(
                "parallel.offload_optimizer",
                {{"On device", "none"}, {"Host RAM", "cpu"}, {"NVMe file", "nvme"}},
                "Moves optimizer state (the largest model state with Adam) off the device; the "
                "update then runs on the CPU and crosses the bus every step."));
  f->addRow("Parameters",
            binder()->choice(
                "parallel.offload_params",
                {{"On device", "none"}, {"Host RAM", "cpu"}, {"NVMe file", "nvme"}},
                "Parameters fetched per layer (ZeRO-3). Slowest, smallest device footprint."));
  f->addRow("NVMe path", binder()->text("parallel.nvme_path", "/mnt/nvme/trainscope",
                                        "Folder for NVMe offload files; use a fast local disk."));
  body()->addWidget(o);
}

void ParallelPage::addDeviceGroup() {
  QFormLayout* f;
  auto* d = formGroup("Device", &f);
  f->addRow("Backend",
            binder()->choice("device.backend",
                             {{"Automatic", "auto"}, {"CPU", "cpu"}, {"CUDA GPU", "cuda"}},
                             "Automatic picks a GPU when the engine finds one, else the CPU."));
  auto* threads = binder()->intSpin("device.threads", 0, 1024,
                                    "0 = all cores. Fewer leaves room for other work.");
  threads->setSpecialValueText("all cores");
  f->addRow("CPU threads", threads);
  body()->addWidget(d);
}

}  // namespace ts::gui
