// Waiting in tests: on the event itself, never on a guess of how long it takes. The cap only
// ends a test that is already broken; a loaded CI machine is slow, not broken.
#pragma once

#include <chrono>
#include <functional>
#include <thread>

namespace testsupport {

inline constexpr int kWaitCapMs = 600000;  // 10 min: far beyond any healthy wait

// Polls cond() until it holds (true) or the cap passes (false).
inline bool waitUntil(const std::function<bool()>& cond, int capMs = kWaitCapMs, int pollMs = 20) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(capMs);
  while (!cond()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(pollMs));
  }
  return true;
}

}  // namespace testsupport
