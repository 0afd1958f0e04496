#include "trainscope/engine/Safetensors.h"

#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>

#include <nlohmann/json.hpp>

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
  items_.push_back(
      {name, dtype, std::move(shape), std::string(static_cast<const char*>(data), bytes)});
}

std::string SafetensorsWriter::serialize() const {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata_.empty()) header["__metadata__"] = metadata_;
  size_t offset = 0;
  for (const auto& it : items_) {
    header[it.name] = {{"dtype", it.dtype},
                       {"shape", it.shape},
                       {"data_offsets", {offset, offset + it.bytes.size()}}};
    offset += it.bytes.size();
  }
  std::string h = header.dump();
  while (h.size() % 8 != 0) h.push_back(' ');  // align the data section
  std::string out;
  out.reserve(8 + h.size() + offset);
  uint64_t n = h.size();
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  out += h;
  for (const auto& it : items_) out += it.bytes;
  return out;
}

SafetensorsFile SafetensorsFile::parse(std::string bytes, const std::string& origin) {
  SafetensorsFile f;
  f.origin_ = origin;
  f.data_ = std::move(bytes);
  const std::string& d = f.data_;
  if (d.size() < 8) throw FormatError(origin + ": not a safetensors file (shorter than 8 bytes)");
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i)
    n |= static_cast<uint64_t>(static_cast<unsigned char>(d[i])) << (8 * i);
  if (n > d.size() - 8)
    throw FormatError(origin + ": truncated safetensors file (header length " + std::to_string(n) +
                      " exceeds the file)");
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(d.substr(8, n));
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
      e.shape = v.at("shape").get<std::vector<int64_t>>();
      auto off = v.at("data_offsets").get<std::vector<uint64_t>>();
      if (off.size() != 2 || off[0] > off[1] || off[1] > dataSize)
        throw FormatError("data_offsets outside the file (truncated?)");
      e.begin = off[0];
      e.end = off[1];
      const int eb = safetensorsDtypeBytes(e.dtype);
      if (eb == 0) throw FormatError("unknown dtype " + e.dtype);
      int64_t numel = 1;
      for (auto s : e.shape) {
        if (s < 0) throw FormatError("negative dimension");
        numel *= s;
      }
      if (static_cast<uint64_t>(numel) * eb != e.end - e.begin)
        throw FormatError("byte size does not match dtype and shape");
      f.entries_[it.key()] = e;
    } catch (const FormatError& e) {
      throw FormatError(origin + ": tensor '" + it.key() + "': " + e.what());
    } catch (const std::exception& e) {
      throw FormatError(origin + ": tensor '" + it.key() + "': malformed entry: " + e.what());
    }
  }
  return f;
}

SafetensorsFile SafetensorsFile::load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw FormatError(path + ": cannot open: " + std::strerror(errno));
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return parse(std::move(bytes), path);
}

const SafetensorsEntry& SafetensorsFile::entry(const std::string& name) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) throw FormatError(origin_ + ": no tensor named '" + name + "'");
  return it->second;
}

std::string_view SafetensorsFile::bytes(const std::string& name) const {
  const auto& e = entry(name);
  return std::string_view(data_).substr(dataStart_ + e.begin, e.end - e.begin);
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
  std::memcpy(dst, b.data(), b.size());
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
  std::memcpy(v.data(), b.data(), b.size());
  return v;
}

}  // namespace ts::engine
