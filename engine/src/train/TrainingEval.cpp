// A run's evaluation (validation loss; exact match by greedy decoding where the data has
// answers) and the events every rank takes part in: memory (rank 0 gathers the others' tables)
// and profiled windows (rank 0 gathers their timelines).
#include <algorithm>
#include <cmath>

#include "TrainingSession.h"
#include "trainscope/profiler/Aggregation.h"
#include "trainscope/profiler/Tracer.h"

namespace ts::engine {
namespace {

nlohmann::json memoryFields(kernels::Backend* backend, const MemoryTracker& tracker,
                            const core::RunConfig& config, const CompressionStats& st,
                            const MemoryTracker* teacher, const nlohmann::json& params) {
  nlohmann::json j = core::toJson(tracker.report());
  if (!params.is_null()) j["params"] = params;
  // The distillation teacher's share (already counted in the categories above).
  if (teacher) j["teacher"] = core::toJson(teacher->report());
  // Compression of the last forward: ratio = fp32 bytes / stored bytes of the compressed
  // tensors; sparsity = fraction of ReLU outputs that were zero (sparse only).
  const std::string& mode = config.memory.activation_compression;
  if (mode != "none") {
    nlohmann::json c = {{"mode", mode},
                        {"raw_bytes", st.rawBytes},
                        {"stored_bytes", st.storedBytes},
                        {"ratio", st.storedBytes > 0 ? double(st.rawBytes) / st.storedBytes : 1.0}};
    if (st.reluValues > 0) c["sparsity"] = double(st.reluZeros) / double(st.reluValues);
    j["activation_compression"] = std::move(c);
  }
  j["process"] = {{"rss", processRssBytes()},
                  {"peak_rss", processPeakRssBytes()},
                  {"tracked", tracker.totalCurrent()},
                  {"tracked_peak", tracker.totalPeak()}};
  // The device's own count (CUDA: cudaMemGetInfo) beside the tracker's device tier: what the
  // tracker misses (the context, the library workspaces, untracked buffers) is the difference.
  int64_t used = 0, total = 0;
  if (backend->deviceMemory(&used, &total)) {
    int64_t tracked = 0;
    for (int c = 0; c < core::kMemoryCategoryCount; ++c)
      tracked += tracker.current(core::MemoryTier::Device, static_cast<core::MemoryCategory>(c));
    j["device_memory"] = {
        {"used", used}, {"total", total}, {"tracked", tracked}, {"untracked", used - tracked}};
  }
  return j;
}

// Greedy decoding of the data's exact-match samples, batched over samples with equal prompt
// length: the number answered exactly.
using Samples = std::vector<std::pair<std::vector<int32_t>, std::vector<int32_t>>>;

int64_t countExactAnswers(Gpt& model, const Samples& samples, int batch, int T, int vocab,
                          int dataVocab) {
  int64_t correct = 0;
  std::vector<size_t> order(samples.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return samples[a].first.size() < samples[b].first.size();
  });
  std::vector<float> row(static_cast<size_t>(vocab));
  size_t pos = 0;
  while (pos < order.size()) {
    size_t end = pos;
    const size_t plen = samples[order[pos]].first.size();
    while (end < order.size() && end - pos < static_cast<size_t>(batch) &&
           samples[order[end]].first.size() == plen)
      ++end;
    const int nb2 = static_cast<int>(end - pos);
    size_t maxAns = 0;
    for (size_t k = pos; k < end; ++k) maxAns = std::max(maxAns, samples[order[k]].second.size());
    std::vector<std::vector<int32_t>> seqs, gen(nb2);
    for (size_t k = pos; k < end; ++k) seqs.push_back(samples[order[k]].first);
    for (size_t g = 0; g < maxAns; ++g) {
      const int len = static_cast<int>(std::min<size_t>(seqs[0].size(), T));
      std::vector<int32_t> tokens(static_cast<size_t>(nb2) * len);
      for (int b = 0; b < nb2; ++b)
        std::copy(seqs[b].end() - len, seqs[b].end(), tokens.begin() + int64_t(b) * len);
      model.forward(tokens.data(), nullptr, nb2, len, 0.f);
      for (int b = 0; b < nb2; ++b) {
        model.logitsRow(b, len - 1, row.data());
        const int32_t next = static_cast<int32_t>(
            std::max_element(row.begin(), row.begin() + dataVocab) - row.begin());
        seqs[b].push_back(next);
        gen[b].push_back(next);
      }
    }
    for (int b = 0; b < nb2; ++b) {
      const auto& want = samples[order[pos + b]].second;
      if (std::equal(want.begin(), want.end(), gen[b].begin())) ++correct;
    }
    pos = end;
  }
  return correct;
}

}  // namespace

void TrainingSession::evaluate() {
  profiler::ScopedRange r("eval", profiler::SpanCategory::Other);
  // ZeRO-3: the embeddings and head gathered for the evaluation's forwards.
  struct Resident {
    DataParallel* dp;
    explicit Resident(DataParallel* d) : dp(d) {
      if (dp) dp->gatherResident();
    }
    ~Resident() {
      if (dp) dp->releaseResident();
    }
  } resident(dp_.get());
  model_->setTraining(false);  // no dropout while evaluating
  struct Training {
    Gpt* m;
    ~Training() { m->setTraining(true); }
  } training{model_.get()};
  nlohmann::json ev = {{"step", step_}};
  validationLoss(ev);
  if (data_->hasExactMatch()) exactMatch(ev);
  if (std::isfinite(bestVal_)) ev["best_val_loss"] = bestVal_;
  emit(core::EventType::Eval, ev);
  memoryEvent();
}

// Several ranks: each evaluates its rows of the global validation batch (ranks * B rows, as one
// rank with that micro-batch would), the sums are added up.
void TrainingSession::validationLoss(nlohmann::json& ev) {
  const int evalB = B_;
  const int64_t nb =
      std::min<int64_t>(data_->valBatchCount(evalB * ranks_, T_), options_.evalBatches);
  std::vector<int32_t> in(static_cast<size_t>(evalB) * T_ * ranks_), tg(in.size());
  const int64_t mine = int64_t(rank_) * evalB * T_;
  double sum = 0;
  int64_t count = 0;
  for (int64_t i = 0; i < nb; ++i) {
    data_->valBatch(i, in.data(), tg.data(), evalB * ranks_, T_);
    int64_t c = 0;
    sum += model_->forward(in.data() + mine, tg.data() + mine, evalB, T_, 0.f, &c);
    count += c;
  }
  if (ranks_ > 1) {
    sum = comm_->allReduceSum(sum);
    count = static_cast<int64_t>(comm_->allReduceSum(static_cast<double>(count)));
  }
  if (count > 0) {
    const double vl = sum / static_cast<double>(count);
    ev["val_loss"] = vl;
    ev["val_tokens"] = count;
    result_.finalValLoss = vl;
    if (!std::isfinite(bestVal_) || vl < bestVal_) bestVal_ = vl;
  }
}

void TrainingSession::exactMatch(nlohmann::json& ev) {
  auto samples = data_->exactMatchSamples(options_.exactMatchSamples);
  const int64_t correct = countExactAnswers(*model_, samples, B_, T_, vocab_, dataVocab_);
  if (!samples.empty()) {
    result_.accuracy = static_cast<double>(correct) / static_cast<double>(samples.size());
    ev["accuracy"] = result_.accuracy;
    ev["exact_match_samples"] = samples.size();
  }
}

// Every rank's memory in one event: rank 0 gathers the others' tables (all ranks call this).
void TrainingSession::memoryEvent() {
  nlohmann::json f = memoryFields(backend_, tracker_, config_, compStats_,
                                  teacher_ ? &teacherTracker_ : nullptr, paramCounts_);
  if (setupPeak_ >= 0) f["process"]["setup_peak"] = setupPeak_;
  if (ranks_ > 1) {
    nlohmann::json mine = {{"ranks", f["ranks"]}, {"process", f["process"]}};
    const auto all = comm_->gatherStrings(mine.dump(), 0);
    if (rank_ != 0) return;
    nlohmann::json rs = nlohmann::json::array(), procs = nlohmann::json::array();
    for (size_t i = 0; i < all.size(); ++i) {
      const auto j = nlohmann::json::parse(all[i]);
      for (auto rr : j.at("ranks")) {
        rr["rank"] = static_cast<int>(i);
        rs.push_back(std::move(rr));
      }
      procs.push_back(j.at("process"));
    }
    f["ranks"] = std::move(rs);
    f["rank_process"] = std::move(procs);
  }
  // The step it was sampled at (the steps done so far), so a follower of the database can place
  // the sample on the memory-over-time chart.
  f["step"] = step_;
  emit(core::EventType::Memory, std::move(f));
}

// Several ranks: every rank profiles the same steps; rank 0 gathers their timelines and emits
// each rank's batches (the timeline's lane groups), its own summary first.
void TrainingSession::emitWindow(const profiler::ProfileWindow& w) {
  using core::EventType;
  auto mine = profiler::kernelsBatches(w, rank_, profiler::Tracer::instance().epochUnixNs());
  if (ranks_ > 1) {
    const auto all = comm_->gatherStrings(nlohmann::json(mine).dump(), 0);
    if (rank_ != 0) return;
    emit(EventType::KernelSummary, profiler::toJson(profiler::summarize(w, 0)));
    for (const auto& text : all)
      for (auto& batch : nlohmann::json::parse(text))
        emit(EventType::Kernels, std::move(batch), true);
    return;
  }
  emit(EventType::KernelSummary, profiler::toJson(profiler::summarize(w, 0)));
  for (auto& batch : mine) emit(EventType::Kernels, std::move(batch), true);
}

}  // namespace ts::engine
