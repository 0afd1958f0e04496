#include "trainscope/profiler/DeviceCollector.h"

namespace ts::profiler {

#ifndef TRAINSCOPE_WITH_CUPTI
// Without CUDA/CUPTI there is no device collector; profiling uses host ranges only.
std::unique_ptr<DeviceCollector> makeCuptiCollector(std::string* why) {
  if (why) *why = "built without CUDA";
  return nullptr;
}
#endif

}  // namespace ts::profiler
