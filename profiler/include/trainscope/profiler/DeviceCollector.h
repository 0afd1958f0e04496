#pragma once
// A source of device activity (GPU kernels, copies) feeding the same Span model as the host
// tracer. The CUPTI implementation is compiled only with CUDA; the factory exists everywhere.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "trainscope/profiler/Tracer.h"

namespace ts::profiler {

class DeviceCollector {
 public:
  virtual ~DeviceCollector() = default;
  virtual std::string name() const = 0;  // "cupti"
  // Starts collecting. Returns false with the reason (no GPU, another CUPTI subscriber, missing
  // privileges, ...) when collection is impossible; the run then continues with host ranges.
  virtual bool start(std::string* why) = 0;
  // Stops collecting; records not flushed yet are kept for the next flush().
  virtual void stop() = 0;
  virtual bool active() const = 0;
  // Waits for the device, flushes the activity buffers and returns the completed records as
  // spans on the tracer's clock (start_ns relative to Tracer::instance()'s epoch).
  virtual std::vector<Span> flush() = 0;
  // Records lost since construction (activity buffers full or not provided).
  virtual int64_t droppedRecords() const = 0;
};

// The CUPTI collector, or nullptr with *why = "built without CUDA" (or why it can't be made).
std::unique_ptr<DeviceCollector> makeCuptiCollector(std::string* why);

}  // namespace ts::profiler
