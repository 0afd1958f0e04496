#include "trainscope/gui/Capabilities.h"

#include <unistd.h>

#include <QStringList>
#include <QTimer>

namespace ts::gui {

std::vector<core::ConfigIssue> engineLimitations(const nlohmann::json& caps,
                                                 const core::RunConfig& c) {
  std::vector<core::ConfigIssue> out;
  if (!caps.is_object()) return out;
  // The backend the run will get: "auto" is CUDA where the engine found a usable GPU.
  auto backendUsable = [&](const std::string& name, std::string* why) {
    if (!caps.contains("backends") || !caps["backends"].is_array()) return true;  // unknown
    for (const auto& b : caps["backends"])
      if (b.is_object() && b.value("name", std::string()) == name) {
        if (why) *why = b.value("why", std::string("not usable"));
        return b.value("usable", true);
      }
    if (why) *why = "this engine has no " + name + " backend";
    return false;
  };
  std::string backend = c.device.backend;
  if (backend == "auto") backend = backendUsable("cuda", nullptr) ? "cuda" : "cpu";
  auto check = [&](const char* group, const std::string& key, bool used, const char* path,
                   const std::string& value, const std::string& what) {
    if (!used || !caps.contains(group) || !caps[group].is_object() || !caps[group].contains(key))
      return;
    const auto& e = caps[group][key];
    if (!e.is_object()) return;
    if (!e.value("supported", true)) {
      out.push_back({path, value,
                     "this engine cannot run " + what + " yet (" +
                         e.value("why", std::string("not supported")) + ")"});
      return;
    }
    if (e.contains("backends") && e["backends"].is_array()) {
      bool here = false;
      for (const auto& b : e["backends"]) here = here || (b.is_string() && b == backend);
      if (!here)
        out.push_back({path, value,
                       "this engine cannot run " + what + " on the " + backend + " backend (" +
                           e.value("backends_why", std::string("not on this backend")) + ")"});
    }
  };
  check("precisions", c.precision.policy, true, "precision.policy", c.precision.policy,
        c.precision.policy);
  check("techniques", "activation_checkpointing", c.memory.checkpointing != "none",
        "memory.checkpointing", c.memory.checkpointing, "activation checkpointing");
  check("techniques", "activation_compression", c.memory.activation_compression != "none",
        "memory.activation_compression", c.memory.activation_compression, "activation compression");
  check("techniques", "activation_compression_sparse", c.memory.activation_compression == "sparse",
        "memory.activation_compression", "sparse", "sparse activation compression");
  check("techniques", "zero", c.parallel.zero_stage > 0, "parallel.zero_stage",
        std::to_string(c.parallel.zero_stage), "ZeRO");
  check("techniques", "offload",
        c.parallel.offload_optimizer != "none" || c.parallel.offload_params != "none",
        "parallel.offload_optimizer", c.parallel.offload_optimizer, "offload");
  check("techniques", "lora", c.finetune.lora.r > 0, "finetune.lora.r",
        std::to_string(c.finetune.lora.r), "LoRA");
  check("techniques", "qlora", c.finetune.base_quant == "nf4", "finetune.base_quant",
        c.finetune.base_quant, "a 4-bit NF4 base");
  check("techniques", "optimizer_8bit", c.optimizer.state_bits == 8, "optimizer.state_bits", "8",
        "an 8-bit optimizer");
  check("techniques", "distillation", !c.distill.teacher_checkpoint.empty(),
        "distill.teacher_checkpoint", c.distill.teacher_checkpoint, "distillation");
  check("techniques", "curriculum", c.curriculum.type != "none", "curriculum.type",
        c.curriculum.type, "a curriculum");
  check("techniques", "profiling", c.profile.enabled, "profile.enabled", "true", "profiling");
  // Last: what the engine cannot do comes first, then what this machine lacks.
  if (std::string why; !backendUsable(backend, &why))
    out.push_back({"device.backend", c.device.backend, backendMissingText(backend, why)});
  return out;
}

std::string backendMissingText(const std::string& backend, const std::string& why) {
  if (backend != "cuda") return "the " + backend + " backend cannot run here (" + why + ")";
  // The CUDA runtime's error names mean nothing to most users: say what is missing.
  std::string plain;
  if (why.find("cudaErrorInsufficientDriver") != std::string::npos)
    plain = "the NVIDIA driver is missing or older than this engine needs";
  else if (why.find("cudaErrorNoDevice") != std::string::npos ||
           why.find("0 devices") != std::string::npos)
    plain = "no NVIDIA GPU found";
  else {
    plain = why;
    const std::string prefix = "no usable CUDA device: ";
    if (plain.rfind(prefix, 0) == 0) plain = plain.substr(prefix.size());
  }
  return "no usable CUDA device on this machine (" + plain + ")";
}

int64_t hostMemoryBytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), size = ::sysconf(_SC_PAGE_SIZE);
  return pages > 0 && size > 0 ? static_cast<int64_t>(pages) * size : 0;
}

static QString gib(int64_t b) {
  return QString::number(b / double(int64_t{1} << 30), 'f', 1) + " GiB";
}

CapabilitySummary summarizeCapabilities(const nlohmann::json& caps) {
  CapabilitySummary s;
  s.raw = caps;
  if (!caps.is_object()) return s;
  s.known = true;
  QStringList parts;
  // CPU: features and threads, wherever the engine puts them.
  const nlohmann::json cpu =
      caps.contains("cpu") && caps["cpu"].is_object() ? caps["cpu"] : nlohmann::json::object();
  QStringList feats;
  auto addFeatures = [&](const nlohmann::json& f) {
    if (f.is_array()) {
      for (const auto& x : f)
        if (x.is_string()) feats << QString::fromStdString(x.get<std::string>()).toUpper();
    } else if (f.is_object()) {
      for (auto it = f.begin(); it != f.end(); ++it)
        if (it.value().is_boolean() && it.value().get<bool>())
          feats << QString::fromStdString(it.key()).toUpper();
    }
  };
  if (cpu.contains("features"))
    addFeatures(cpu["features"]);
  else if (caps.contains("cpu_features"))
    addFeatures(caps["cpu_features"]);
  QString cpuText = "CPU";
  if (!feats.isEmpty()) cpuText += " (" + feats.join(", ") + ")";
  int threads = cpu.value("threads", cpu.value("cores", 0));
  if (threads > 0) cpuText += QStringLiteral(", %1 threads").arg(threads);
  parts << cpuText;
  // GPUs: "devices" array with backend/name/memory, or a "cuda" object.
  int gpus = 0;
  if (caps.contains("devices") && caps["devices"].is_array()) {
    for (const auto& d : caps["devices"]) {
      if (!d.is_object()) continue;
      const std::string kind = d.value("kind", d.value("backend", d.value("type", std::string())));
      if (kind == "cpu") {
        const int64_t mem = d.value("memory_bytes", int64_t{0});
        if (mem > 0 && s.deviceMemory == 0 && gpus == 0) s.deviceMemory = mem;
        continue;
      }
      ++gpus;
      const int64_t mem = d.value("memory", d.value("memory_bytes", int64_t{0}));
      if (s.deviceMemory == 0) s.deviceMemory = mem;
      parts << QString::fromStdString(d.value("name", std::string("GPU"))) +
                   (mem > 0 ? " " + gib(mem) : QString());
    }
  }
  if (gpus > 0) {
    s.cudaAvailable = true;
    // The first GPU's memory is the device capacity (a CPU entry may have filled it first).
    for (const auto& d : caps["devices"])
      if (d.is_object() && d.value("kind", std::string()) == "cuda") {
        s.deviceMemory = d.value("memory_bytes", s.deviceMemory);
        break;
      }
  }
  if (caps.contains("cuda") && caps["cuda"].is_object() && caps["cuda"].value("available", false))
    s.cudaAvailable = true;
  if (gpus == 0) parts << (s.cudaAvailable ? "CUDA" : "no GPU");
  if (s.deviceMemory == 0) s.deviceMemory = hostMemoryBytes();
  if (caps.contains("precisions") && caps["precisions"].is_object()) {
    const auto& p = caps["precisions"];
    if (p.contains("bf16") && p["bf16"].is_object())
      s.nativeBf16Gemm = p["bf16"].value("auto_gemm", std::string()) == "bf16";
  }
  s.text = parts.join(QStringLiteral(" · "));
  return s;
}

CapabilityProbe::CapabilityProbe(QObject* parent) : QObject(parent) {
  connect(&process_, &QProcess::finished, this, [this](int code, QProcess::ExitStatus) {
    const QByteArray out = process_.readAllStandardOutput();
    try {
      summary_ = summarizeCapabilities(nlohmann::json::parse(out.toStdString()));
    } catch (const std::exception&) {
      summary_ = {};
      summary_.text = code == 0
                          ? "engine capabilities unreadable"
                          : QStringLiteral("engine capabilities unavailable (exit %1)").arg(code);
      summary_.deviceMemory = hostMemoryBytes();
    }
    emit ready(summary_);
  });
  connect(&process_, &QProcess::errorOccurred, this, [this](QProcess::ProcessError e) {
    if (e != QProcess::FailedToStart) return;
    summary_ = {};
    summary_.text = "engine not found";
    summary_.deviceMemory = hostMemoryBytes();
    emit ready(summary_);
  });
}

CapabilityProbe::~CapabilityProbe() {
  process_.disconnect(this);
  if (process_.state() != QProcess::NotRunning) {
    process_.kill();
    process_.waitForFinished(5000);
  }
}

void CapabilityProbe::start(const QString& enginePath) {
  if (enginePath.isEmpty()) {
    summary_ = {};
    summary_.text = "engine not found";
    summary_.deviceMemory = hostMemoryBytes();
    QTimer::singleShot(0, this, [this] { emit ready(summary_); });
    return;
  }
  process_.start(enginePath, {"capabilities", "--json"});
  // Never wait forever on a wedged engine.
  QTimer::singleShot(10000, this, [this] {
    if (process_.state() != QProcess::NotRunning) process_.kill();
  });
}

}  // namespace ts::gui
