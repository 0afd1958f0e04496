#pragma once
// `run --human`: readable progress lines (about 25 per run, each with the ETA) in place of the
// NDJSON events, for `scripts/trainscope run` headless.
#include <string>

#include <nlohmann/json.hpp>

#include "trainscope/core/protocol/Protocol.h"

namespace ts::app {

std::string fmtDuration(double seconds);
std::string fmtBytes(double bytes);

class HumanPrinter {
 public:
  explicit HumanPrinter(int fd) : fd_(fd) {}
  void onEvent(core::EventType t, const nlohmann::json& f);
  // Writes the whole string to the descriptor (a closed one ends it quietly).
  void put(const std::string& s);

 private:
  int fd_;
  double sumMs_ = 0;
  int64_t n_ = 0;
};

}  // namespace ts::app
