// RunStore: opening the file (retried while SQLite answers "busy") and the metric column names.
#include "trainscope/core/store/RunStore.h"

#include <chrono>
#include <random>
#include <thread>

#include "RunStoreImpl.h"

namespace ts::core {

std::string_view toString(MetricColumn c) {
  return store::metricSqlColumn(c);
}

std::optional<MetricColumn> metricColumnFromString(std::string_view s) {
  for (auto c : allMetricColumns())
    if (s == store::metricSqlColumn(c)) return c;
  return std::nullopt;
}

std::vector<MetricColumn> allMetricColumns() {
  return {MetricColumn::Loss,      MetricColumn::Lr,     MetricColumn::GradNorm,
          MetricColumn::LossScale, MetricColumn::Tokens, MetricColumn::TokensPerS,
          MetricColumn::StepMs,    MetricColumn::Skipped};
}

RunStore::RunStore(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RunStore::RunStore(RunStore&&) noexcept = default;
RunStore& RunStore::operator=(RunStore&&) noexcept = default;
RunStore::~RunStore() = default;

RunStore RunStore::open(const std::string& path, Mode mode, Options options) {
  // Where waiting could deadlock, SQLite answers "busy" at once instead of calling its busy
  // handler: switching a new file to WAL, or reading it while another process does. Engines
  // started together hit exactly that, so opening is retried (jittered) up to the busy timeout.
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(options.busyTimeoutMs);
  std::minstd_rand jitter(std::random_device{}());
  for (;;) {
    try {
      auto impl = std::make_unique<Impl>(path, mode == Mode::ReadOnly, options);
      impl->db.migrate();
      RunStore s(std::move(impl));
      if (mode == Mode::ReadWrite) s.markCrashedRuns();
      return s;
    } catch (const StoreError& e) {
      if (e.kind() != StoreError::Kind::Locked || std::chrono::steady_clock::now() >= deadline)
        throw;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2 + jitter() % 20));
  }
}

const std::string& RunStore::path() const {
  return impl_->db.path();
}
bool RunStore::readOnly() const {
  return impl_->db.readOnly();
}
int RunStore::schemaVersion() const {
  return impl_->db.userVersion();
}

}  // namespace ts::core
