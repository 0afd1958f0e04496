#pragma once
// Helpers shared by the libFuzzer targets of tests/fuzz (docs/testing.md, "Fuzzing"): a
// per-process scratch directory for readers that take a path, a byte reader for the flag bytes
// some targets take from the front of the input, and a check that aborts (an assert that
// NDEBUG does not remove: the fuzzer must see every broken invariant).
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

namespace ts::fuzz {

// Inputs above this are skipped: every target stays fast.
inline constexpr size_t kMaxInput = 64 * 1024;

[[noreturn]] inline void fail(const char* file, int line, const char* what, const std::string& msg) {
  std::fprintf(stderr, "%s:%d: fuzz check failed: %s %s\n", file, line, what, msg.c_str());
  std::abort();
}
#define TS_FUZZ_CHECK(cond, msg)                                 \
  do {                                                           \
    if (!(cond)) ::ts::fuzz::fail(__FILE__, __LINE__, #cond, (msg)); \
  } while (0)

// <tmp>/trainscope-fuzz-<name>-<pid>, created on first use, removed at exit (kept when
// TRAINSCOPE_FUZZ_KEEP is set, to look at the files a target builds). One per process
// (libFuzzer's -jobs/-fork run several), reused by every input.
inline const std::filesystem::path& scratchDir(const char* name) {
  static const std::filesystem::path dir = [name] {
    char pid[16];
    std::snprintf(pid, sizeof pid, "%08d", static_cast<int>(::getpid()));
    std::filesystem::path d = std::filesystem::temp_directory_path() /
                              (std::string("trainscope-fuzz-") + name + "-" + pid);
    std::filesystem::remove_all(d);
    std::filesystem::create_directories(d);
    static const std::filesystem::path keep = d;
    if (!std::getenv("TRAINSCOPE_FUZZ_KEEP")) std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(keep, ec);
    });
    return d;
  }();
  return dir;
}

inline void writeFile(const std::filesystem::path& p, std::string_view bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) fail(__FILE__, __LINE__, "write", p.string());
}

// Takes bytes from the front of the input (0 when it is used up); rest() is what is left.
class Bytes {
 public:
  Bytes(const uint8_t* data, size_t size) : p_(reinterpret_cast<const char*>(data)), n_(size) {}
  uint8_t byte() {
    if (n_ == 0) return 0;
    --n_;
    return static_cast<uint8_t>(*p_++);
  }
  std::string_view rest() const { return {p_, n_}; }

 private:
  const char* p_;
  size_t n_;
};

}  // namespace ts::fuzz
