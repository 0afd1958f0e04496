#pragma once
// What the engine can do (`trainscope-engine capabilities --json`), queried asynchronously.
#include <cstdint>
#include <vector>

#include <QObject>
#include <QProcess>
#include <QString>
#include <nlohmann/json.hpp>

#include "trainscope/core/config/Config.h"

namespace ts::gui {

struct CapabilitySummary {
  bool known = false;
  QString text;  // one line for the status bar ("CPU (AVX2, 2 threads) · no GPU")
  bool cudaAvailable = false;
  int64_t deviceMemory = 0;     // bytes of the first device (GPU memory, else host RAM)
  bool nativeBf16Gemm = false;  // precision.gemm "auto" runs bf16 GEMMs (AMX + oneDNN kernel)
  nlohmann::json raw;
};
// Tolerant reading of the capabilities document (missing fields are simply not shown).
CapabilitySummary summarizeCapabilities(const nlohmann::json& caps);
// What the config asks for that this engine says it cannot do yet (from the `precisions` and
// `techniques` of its capabilities), as issues with the config path and the engine's reason.
// Empty when the capabilities are unknown.
std::vector<core::ConfigIssue> engineLimitations(const nlohmann::json& caps,
                                                 const core::RunConfig& config);
// Why the chosen backend cannot run on this machine, in plain words ("no usable CUDA device on
// this machine (the NVIDIA driver is missing or older than this engine needs)"), from the
// engine's own reason (`backends[].why`, which names CUDA runtime errors).
std::string backendMissingText(const std::string& backend, const std::string& why);
// Host RAM in bytes (the CPU backend's "device").
int64_t hostMemoryBytes();

class CapabilityProbe : public QObject {
  Q_OBJECT
 public:
  explicit CapabilityProbe(QObject* parent = nullptr);
  // Stops a probe still running without reporting: whoever listened may be half destroyed
  // (a window closing while the engine answers).
  ~CapabilityProbe() override;
  void start(const QString& enginePath);
  const CapabilitySummary& summary() const { return summary_; }

 signals:
  void ready(const ts::gui::CapabilitySummary& summary);

 private:
  QProcess process_;
  CapabilitySummary summary_;
};

}  // namespace ts::gui
