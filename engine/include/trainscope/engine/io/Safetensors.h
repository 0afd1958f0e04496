#pragma once
// Minimal safetensors reader/writer (https://github.com/huggingface/safetensors): 8-byte
// little-endian header length, a JSON header {name: {dtype, shape, data_offsets}, __metadata__},
// then the raw little-endian tensor bytes. Readers validate every offset against the file (in
// bounds, sizes matching dtype and shape, no two tensors overlapping). A file is memory-mapped,
// not read into memory (a 7B model is 14 GB): tensors are read from the mapping on demand.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace ts::engine {

class FormatError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct SafetensorsEntry {
  std::string dtype;  // "F32", "I32", "BF16", ...
  std::vector<int64_t> shape;
  size_t begin = 0;  // offsets into the data section
  size_t end = 0;
};

class SafetensorsWriter {
 public:
  // Reads n bytes of a streamed tensor, from byte `offset` of it, into dst.
  using Reader = std::function<void(char* dst, size_t offset, size_t n)>;
  using Sink = std::function<void(const char* data, size_t n)>;

  // A tensor copied in now (small tensors, exports).
  void add(const std::string& name, const std::string& dtype, std::vector<int64_t> shape,
           const void* data, size_t bytes);
  // A tensor read only while writing, a chunk at a time: a checkpoint of a big model never
  // holds a second copy of its weights and optimizer state in host memory.
  void addStreamed(const std::string& name, const std::string& dtype, std::vector<int64_t> shape,
                   size_t bytes, Reader read);
  void setMetadata(const std::string& key, const std::string& value) { metadata_[key] = value; }
  // The whole file to `sink`: the header, then each tensor (streamed ones in pieces of at most
  // chunkBytes through one reused buffer). Returns the bytes written.
  size_t writeTo(const Sink& sink, size_t chunkBytes = size_t(4) << 20) const;
  std::string serialize() const;

 private:
  struct Item {
    std::string name, dtype;
    std::vector<int64_t> shape;
    size_t size = 0;
    std::string bytes;  // copied tensors
    Reader read;        // streamed tensors
  };
  std::vector<Item> items_;
  std::map<std::string, std::string> metadata_;
};

class SafetensorsFile {
 public:
  // Parses `bytes` (the whole file); throws FormatError naming `origin` on any inconsistency.
  static SafetensorsFile parse(std::string bytes, const std::string& origin);
  // Maps the file read-only (a copy of the bytes only where it cannot be mapped).
  static SafetensorsFile load(const std::string& path);
  const std::string& origin() const { return origin_; }

  bool has(const std::string& name) const { return entries_.count(name) != 0; }
  const SafetensorsEntry& entry(const std::string& name) const;
  const std::map<std::string, SafetensorsEntry>& entries() const { return entries_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // Raw bytes of a tensor.
  std::string_view bytes(const std::string& name) const;
  // Copies an F32 tensor into dst after checking its element count; throws FormatError.
  void readF32(const std::string& name, float* dst, int64_t numel) const;
  // Copies an F32, BF16 or F16 tensor into dst converted to fp32 (a Hugging Face model's
  // weights in any of its dtypes); throws FormatError for other dtypes or a wrong count.
  void readAsF32(const std::string& name, float* dst, int64_t numel) const;
  std::vector<float> f32(const std::string& name) const;
  std::vector<int32_t> i32(const std::string& name) const;

 private:
  struct Bytes;  // the file's bytes: a read-only mapping, or an owned string
  static SafetensorsFile parseBytes(std::shared_ptr<const Bytes> bytes, const std::string& origin);
  std::string_view data() const;
  std::string origin_;
  std::shared_ptr<const Bytes> bytes_;
  size_t dataStart_ = 0;
  std::map<std::string, SafetensorsEntry> entries_;
  std::map<std::string, std::string> metadata_;
};

// Bytes per element of a safetensors dtype name (0 when unknown).
int safetensorsDtypeBytes(const std::string& dtype);

// FNV-1a 64-bit hash (checkpoint checksums).
uint64_t fnv1a64(std::string_view bytes, uint64_t seed = 0xcbf29ce484222325ull);
std::string hex64(uint64_t v);

}  // namespace ts::engine
