#include "HumanPrinter.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace ts::app {

std::string fmtDuration(double s) {
  char buf[32];
  if (s < 0 || !std::isfinite(s)) return "?";
  const long t = static_cast<long>(s + 0.5);
  if (t >= 3600)
    std::snprintf(buf, sizeof buf, "%ldh%02ldm", t / 3600, (t / 60) % 60);
  else if (t >= 60)
    std::snprintf(buf, sizeof buf, "%ldm%02lds", t / 60, t % 60);
  else
    std::snprintf(buf, sizeof buf, "%lds", t);
  return buf;
}

std::string fmtBytes(double b) {
  const char* u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int i = 0;
  while (b >= 1024 && i < 4) b /= 1024, ++i;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f %s", b, u[i]);
  return buf;
}

// Readable progress for `scripts/trainscope run` headless.
void HumanPrinter::onEvent(core::EventType t, const nlohmann::json& f) {
  char buf[512];
  switch (t) {
    case core::EventType::Step: {
      const int64_t step = f.value("step", int64_t(0)), total = f.value("total_steps", int64_t(0));
      const double tps = f.value("tokens_per_s", 0.0);
      sumMs_ += f.value("step_ms", 0.0);
      ++n_;
      const int64_t every = std::max<int64_t>(1, total / 25);
      if (step % every != 0 && step != total && step != 1) return;
      const double eta = n_ > 0 ? (total - step) * (sumMs_ / n_) / 1000.0 : 0;
      std::snprintf(buf, sizeof buf,
                    "step %6lld/%lld  loss %.4f  lr %.2e  grad_norm %.3f  %.0f tok/s  ETA %s\n",
                    (long long)step, (long long)total, f.value("loss", 0.0), f.value("lr", 0.0),
                    f.value("grad_norm", 0.0), tps, fmtDuration(eta).c_str());
      put(buf);
      break;
    }
    case core::EventType::Eval: {
      std::string line = "eval  step " + std::to_string(f.value("step", int64_t(0)));
      if (f.contains("val_loss")) {
        std::snprintf(buf, sizeof buf, "  val_loss %.4f", f["val_loss"].get<double>());
        line += buf;
      }
      if (f.contains("accuracy")) {
        std::snprintf(buf, sizeof buf, "  exact-match %.1f%%", 100 * f["accuracy"].get<double>());
        line += buf;
      }
      put(line + "\n");
      break;
    }
    case core::EventType::Checkpoint:
      put("checkpoint  " + f.value("path", std::string()) + "\n");
      break;
    case core::EventType::Warning:
      put("warning: " + f.value("message", std::string()) + "\n");
      break;
    case core::EventType::Error:
      put("error: " + f.value("message", std::string()) + "\n");
      break;
    case core::EventType::Log:
      put(f.value("message", std::string()) + "\n");
      break;
    default:
      break;
  }
}

void HumanPrinter::put(const std::string& s) {
  size_t done = 0;
  while (done < s.size()) {
    ssize_t n = ::write(fd_, s.data() + done, s.size() - done);
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

}  // namespace ts::app
