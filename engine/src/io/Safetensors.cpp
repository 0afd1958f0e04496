#include "trainscope/engine/io/Safetensors.h"
#include "trainscope/core/protocol/BoundedJson.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>

#include <nlohmann/json.hpp>

#include "trainscope/kernels/Numeric.h"

namespace ts::engine {

int safetensorsDtypeBytes(const std::string& d) {
  if (d == "F64" || d == "I64" || d == "U64") return 8;
  if (d == "F32" || d == "I32" || d == "U32") return 4;
  if (d == "F16" || d == "BF16" || d == "I16" || d == "U16") return 2;
  if (d == "I8" || d == "U8" || d == "BOOL" || d == "F8_E4M3" || d == "F8_E5M2") return 1;
  return 0;
}

uint64_t fnv1a64(std::string_view bytes, uint64_t h) {
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

std::string hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

void SafetensorsWriter::add(const std::string& name, const std::string& dtype,
                            std::vector<int64_t> shape, const void* data, size_t bytes) {
  Item it{name, dtype, std::move(shape), bytes, {}, {}};
  if (bytes > 0) it.bytes.assign(static_cast<const char*>(data), bytes);
  items_.push_back(std::move(it));
}

void SafetensorsWriter::addStreamed(const std::string& name, const std::string& dtype,
                                    std::vector<int64_t> shape, size_t bytes, Reader read) {
  items_.push_back({name, dtype, std::move(shape), bytes, {}, std::move(read)});
}

size_t SafetensorsWriter::writeTo(const Sink& sink, size_t chunkBytes) const {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata_.empty()) header["__metadata__"] = metadata_;
  size_t offset = 0;
  for (const auto& it : items_) {
    header[it.name] = {
        {"dtype", it.dtype}, {"shape", it.shape}, {"data_offsets", {offset, offset + it.size}}};
    offset += it.size;
  }
  std::string h = header.dump();
  while (h.size() % 8 != 0) h.push_back(' ');  // align the data section
  char len[8];
  const uint64_t n = h.size();
  for (int i = 0; i < 8; ++i) len[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  sink(len, 8);
  sink(h.data(), h.size());
  size_t largest = 0;
  for (const auto& it : items_)
    if (it.read) largest = std::max(largest, it.size);
  std::vector<char> chunk(std::min(std::max<size_t>(chunkBytes, 1), largest));
  for (const auto& it : items_) {
    if (!it.read) {
      if (it.size > 0) sink(it.bytes.data(), it.size);
      continue;
    }
    for (size_t done = 0; done < it.size;) {
      const size_t k = std::min(chunk.size(), it.size - done);
      it.read(chunk.data(), done, k);
      sink(chunk.data(), k);
      done += k;
    }
  }
  return 8 + h.size() + offset;
}

std::string SafetensorsWriter::serialize() const {
  std::string out;
  writeTo([&](const char* d, size_t k) { out.append(d, k); });
  return out;
}

struct SafetensorsFile::Bytes {
  std::string owned;
  const char* map = nullptr;
  size_t mapSize = 0;
  Bytes() = default;
  Bytes(const Bytes&) = delete;
  Bytes& operator=(const Bytes&) = delete;
  ~Bytes() {
    if (map) ::munmap(const_cast<char*>(map), mapSize);
  }
  std::string_view view() const {
    return map ? std::string_view(map, mapSize) : std::string_view(owned);
  }
};

std::string_view SafetensorsFile::data() const {
  return bytes_ ? bytes_->view() : std::string_view();
}

SafetensorsFile SafetensorsFile::parse(std::string bytes, const std::string& origin) {
  auto b = std::make_shared<Bytes>();
  b->owned = std::move(bytes);
  return parseBytes(std::move(b), origin);
}

SafetensorsFile SafetensorsFile::parseBytes(std::shared_ptr<const Bytes> bytes,
                                            const std::string& origin) {
  SafetensorsFile f;
  f.origin_ = origin;
  f.bytes_ = std::move(bytes);
  const std::string_view d = f.data();
  if (d.size() < 8) throw FormatError(origin + ": not a safetensors file (shorter than 8 bytes)");
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i)
    n |= static_cast<uint64_t>(static_cast<unsigned char>(d[i])) << (8 * i);
  if (n > d.size() - 8)
    throw FormatError(origin + ": truncated safetensors file (header length " + std::to_string(n) +
                      " exceeds the file)");
  nlohmann::json header;
  try {
    header = core::parseBoundedJson(d.substr(8, static_cast<size_t>(n)));
  } catch (const std::exception& e) {
    throw FormatError(origin + ": corrupt safetensors header: " + e.what());
  }
  if (!header.is_object()) throw FormatError(origin + ": safetensors header is not an object");
  f.dataStart_ = 8 + n;
  const size_t dataSize = d.size() - f.dataStart_;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (it->is_object())
        for (auto m = it->begin(); m != it->end(); ++m)
          if (m->is_string()) f.metadata_[m.key()] = m->get<std::string>();
      continue;
    }
    const auto& v = *it;
    try {
      SafetensorsEntry e;
      e.dtype = v.at("dtype").get<std::string>();
      // Integers only: nlohmann would silently truncate 2.5 to 2 (and wrap -1 as an offset).
      const auto& shape = v.at("shape");
      if (!shape.is_array()) throw FormatError("shape must be an array of integers");
      for (const auto& s : shape) {
        if (!s.is_number_integer()) throw FormatError("shape " + s.dump() + " is not an integer");
        if (s.is_number_unsigned() ? s.get<uint64_t>() > uint64_t(INT64_MAX) : s.get<int64_t>() < 0)
          throw FormatError("shape has a negative or too large dimension " + s.dump());
        e.shape.push_back(s.get<int64_t>());
      }
      const auto& off = v.at("data_offsets");
      if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() ||
          !off[1].is_number_unsigned())
        throw FormatError("data_offsets must be two non-negative integers, got " + off.dump());
      const uint64_t b = off[0].get<uint64_t>(), end = off[1].get<uint64_t>();
      if (b > end || end > dataSize)
        throw FormatError("data_offsets outside the file (truncated?)");
      e.begin = static_cast<size_t>(b);
      e.end = static_cast<size_t>(end);
      const int eb = safetensorsDtypeBytes(e.dtype);
      if (eb == 0) throw FormatError("unknown dtype " + e.dtype);
      // The byte size, without overflow: no tensor is larger than its data section.
      uint64_t size = static_cast<uint64_t>(eb);
      bool tooBig = false;
      for (auto s : e.shape) {
        if (s == 0) {
          size = 0;
          tooBig = false;
          break;
        }
        if (tooBig || __builtin_mul_overflow(size, static_cast<uint64_t>(s), &size)) tooBig = true;
      }
      if (tooBig || size != e.end - e.begin)
        throw FormatError("byte size does not match dtype and shape");
      f.entries_[it.key()] = e;
    } catch (const FormatError& e) {
      throw FormatError(origin + ": tensor '" + it.key() + "': " + e.what());
    } catch (const std::exception& e) {
      throw FormatError(origin + ": tensor '" + it.key() + "': malformed entry: " + e.what());
    }
  }
  // A header that lies about offsets: no two tensors may share bytes.
  std::vector<std::pair<size_t, std::string>> order;
  for (const auto& [name, e] : f.entries_)
    if (e.end > e.begin) order.push_back({e.begin, name});
  std::sort(order.begin(), order.end());
  for (size_t i = 1; i < order.size(); ++i) {
    const auto& prev = f.entries_.at(order[i - 1].second);
    if (order[i].first < prev.end)
      throw FormatError(origin + ": tensors '" + order[i - 1].second + "' and '" + order[i].second +
                        "' overlap (data_offsets lie)");
  }
  return f;
}

SafetensorsFile SafetensorsFile::load(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw FormatError(path + ": cannot open: " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    throw FormatError(path + ": cannot stat: " + std::strerror(err));
  }
  if (S_ISDIR(st.st_mode)) {  // opens fine, then every read fails (EISDIR)
    ::close(fd);
    throw FormatError(path + ": is a directory, not a safetensors file");
  }
  auto b = std::make_shared<Bytes>();
  if (st.st_size > 0) {
    void* m = ::mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
    if (m != MAP_FAILED) {
      b->map = static_cast<const char*>(m);
      b->mapSize = static_cast<size_t>(st.st_size);
    }
  }
  if (!b->map && st.st_size > 0) {  // not mappable (a pipe, some file systems): read it
    try {
      std::ifstream in(path, std::ios::binary);
      b->owned.assign((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    } catch (const std::exception& e) {  // libstdc++'s filebuf throws on a read error
      ::close(fd);
      throw FormatError(path + ": cannot read: " + e.what());
    }
  }
  ::close(fd);
  return parseBytes(std::move(b), path);
}

const SafetensorsEntry& SafetensorsFile::entry(const std::string& name) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) throw FormatError(origin_ + ": no tensor named '" + name + "'");
  return it->second;
}

std::string_view SafetensorsFile::bytes(const std::string& name) const {
  const auto& e = entry(name);
  return data().substr(dataStart_ + e.begin, e.end - e.begin);
}

void SafetensorsFile::readF32(const std::string& name, float* dst, int64_t numel) const {
  const auto& e = entry(name);
  if (e.dtype != "F32")
    throw FormatError(origin_ + ": tensor '" + name + "' has dtype " + e.dtype + ", expected F32");
  if (static_cast<int64_t>((e.end - e.begin) / 4) != numel)
    throw FormatError(origin_ + ": tensor '" + name + "' has " +
                      std::to_string((e.end - e.begin) / 4) + " elements, expected " +
                      std::to_string(numel));
  auto b = bytes(name);
  if (!b.empty()) std::memcpy(dst, b.data(), b.size());  // an empty tensor: dst may be null
}

void SafetensorsFile::readAsF32(const std::string& name, float* dst, int64_t numel) const {
  const auto& e = entry(name);
  if (e.dtype == "F32") return readF32(name, dst, numel);
  if (e.dtype != "BF16" && e.dtype != "F16")
    throw FormatError(origin_ + ": tensor '" + name + "' has dtype " + e.dtype +
                      " (F32, BF16 or F16 expected)");
  if (static_cast<int64_t>((e.end - e.begin) / 2) != numel)
    throw FormatError(origin_ + ": tensor '" + name + "' has " +
                      std::to_string((e.end - e.begin) / 2) + " elements, expected " +
                      std::to_string(numel));
  const auto b = bytes(name);
  const bool bf16 = e.dtype == "BF16";
  for (int64_t i = 0; i < numel; ++i) {
    uint16_t h;
    std::memcpy(&h, b.data() + 2 * i, 2);
    dst[i] = bf16 ? kernels::bf16ToFloat(h) : kernels::fp16ToFloat(h);
  }
}

std::vector<float> SafetensorsFile::f32(const std::string& name) const {
  const auto& e = entry(name);
  std::vector<float> v((e.end - e.begin) / 4);
  readF32(name, v.data(), static_cast<int64_t>(v.size()));
  return v;
}

std::vector<int32_t> SafetensorsFile::i32(const std::string& name) const {
  const auto& e = entry(name);
  if (e.dtype != "I32")
    throw FormatError(origin_ + ": tensor '" + name + "' has dtype " + e.dtype + ", expected I32");
  std::vector<int32_t> v((e.end - e.begin) / 4);
  auto b = bytes(name);
  if (!b.empty()) std::memcpy(v.data(), b.data(), b.size());
  return v;
}

}  // namespace ts::engine
