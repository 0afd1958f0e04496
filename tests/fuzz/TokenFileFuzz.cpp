// Pre-tokenized data (data.source tokens: little-endian uint16 ids, engine/Dataset.h): two flag
// bytes (seq_len, val_fraction, curriculum; seed), two bytes of model.vocab (1..65536), the
// rest the token file, read through makeDataset from <scratch>/tokens.bin and exercised
// (DatasetSupport.h). Documented error: DatasetError.
#include <cstdint>

#include "DatasetSupport.h"

using namespace ts;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > fuzz::kMaxInput) return 0;
  fuzz::Bytes in(data, size);
  core::RunConfig c;
  const uint8_t a = in.byte(), b = in.byte();
  fuzz::configFromFlags(c, a, b);
  const int lo = in.byte(), hi = in.byte();
  c.model.vocab = 1 + (lo | (hi << 8));
  c.data.source = "tokens";
  const auto path = fuzz::scratchDir("token_file") / "tokens.bin";
  fuzz::writeFile(path, in.rest());
  c.data.path = path.string();
  try {
    auto ds = engine::makeDataset(c);
    fuzz::exercise(*ds, c);
  } catch (const engine::DatasetError&) {
  }
  return 0;
}
