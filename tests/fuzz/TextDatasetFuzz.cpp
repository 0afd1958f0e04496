// UTF-8 text data (data.source text, engine/Dataset.h): two flag bytes (seq_len, val_fraction,
// curriculum; seed; bit 7 of the first: the tiny GPT-2 tokenizer.json of tests/data instead of
// bytes), the rest the text file, read through makeDataset from <scratch>/corpus.txt and
// exercised (DatasetSupport.h). Documented error: DatasetError.
#include <cstdint>

#include "DatasetSupport.h"

using namespace ts;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 16 * 1024) return 0;
  fuzz::Bytes in(data, size);
  core::RunConfig c;
  const uint8_t a = in.byte(), b = in.byte();
  fuzz::configFromFlags(c, a, b);
  c.data.source = "text";
  c.data.tokenizer = (a & 0x80) ? TRAINSCOPE_TEST_DATA "/tokenizers/gpt2/tokenizer.json" : "bytes";
  const auto path = fuzz::scratchDir("text_dataset") / "corpus.txt";
  fuzz::writeFile(path, in.rest());
  c.data.path = path.string();
  try {
    auto ds = engine::makeDataset(c);
    fuzz::exercise(*ds, c);
  } catch (const engine::DatasetError&) {
  }
  return 0;
}
