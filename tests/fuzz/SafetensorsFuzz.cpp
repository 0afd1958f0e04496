// safetensors (engine/Safetensors.h): the input as a whole file, parsed from memory
// (SafetensorsFile::parse) and mapped from a file (load), every tensor then read the ways the
// engine reads them (raw bytes, f32, i32, readAsF32); the same file as a Hugging Face folder's
// model.safetensors through the planner's header-only reader (core::readHfStoredWeights).
// Documented errors: FormatError (engine), HfConfigError (core).
#include <cstdint>
#include <string>
#include <vector>

#include "FuzzSupport.h"
#include "trainscope/core/model/HfConfig.h"
#include "trainscope/engine/io/Safetensors.h"

using namespace ts::engine;

namespace {
void readAll(const SafetensorsFile& f) {
  for (const auto& [name, e] : f.entries()) {
    TS_FUZZ_CHECK(e.begin <= e.end, "offsets in order");
    const std::string_view b = f.bytes(name);
    TS_FUZZ_CHECK(b.size() == e.end - e.begin, "bytes() is the tensor's extent");
    const int eb = safetensorsDtypeBytes(e.dtype);
    TS_FUZZ_CHECK(eb > 0 && b.size() % size_t(eb) == 0, "size is a whole number of elements");
    const int64_t numel = static_cast<int64_t>(b.size() / size_t(eb));
    try {
      if (e.dtype == "F32") TS_FUZZ_CHECK(f.f32(name).size() == size_t(numel), "f32 count");
      if (e.dtype == "I32") TS_FUZZ_CHECK(f.i32(name).size() == size_t(numel), "i32 count");
      if (e.dtype == "F32" || e.dtype == "BF16" || e.dtype == "F16") {
        std::vector<float> v(static_cast<size_t>(numel));
        f.readAsF32(name, v.data(), numel);
      }
    } catch (const FormatError&) {
      ts::fuzz::fail(__FILE__, __LINE__, "read of a validated tensor threw", name);
    }
    try {  // the wrong count is an error, not a read past the tensor
      std::vector<float> v(static_cast<size_t>(numel) + 1);
      f.readAsF32(name, v.data(), numel + 1);
      ts::fuzz::fail(__FILE__, __LINE__, "readAsF32 accepted a wrong count", name);
    } catch (const FormatError&) {
    }
  }
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > ts::fuzz::kMaxInput) return 0;
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  try {
    readAll(SafetensorsFile::parse(bytes, "fuzz"));
  } catch (const FormatError&) {
  }
  const auto& dir = ts::fuzz::scratchDir("safetensors");
  const auto path = dir / "model.safetensors";
  ts::fuzz::writeFile(path, bytes);
  try {
    readAll(SafetensorsFile::load(path.string()));
  } catch (const FormatError&) {
  }
  try {
    const auto w = ts::core::readHfStoredWeights(dir.string());
    TS_FUZZ_CHECK(w.files == 1 && w.fileBytes == int64_t(size), "one file, its size");
    for (const auto& [dtype, n] : w.elementsByDtype) TS_FUZZ_CHECK(n >= 0, "element counts");
    (void)w.summary();
  } catch (const ts::core::HfConfigError&) {
  }
  return 0;
}
