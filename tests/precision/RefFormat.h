#pragma once
// Independent reference codecs for the tests: values from the format definitions via ldexp,
// rounding by exact comparison with the midpoints of a sorted value table (doubles hold every
// fp32 value and every midpoint of these <= 11-bit-significand formats exactly). Nothing here
// calls the code under test.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

namespace ts::test {

struct RefFormat {
  const char* name;
  int E;  // exponent bits
  int M;  // mantissa bits
  int bias;
  bool fn;  // "finite": no inf, the only NaN is S.11..1.11..1 (E4M3fn)
};
inline constexpr RefFormat kBf16{"bf16", 8, 7, 127, false};
inline constexpr RefFormat kFp16{"fp16", 5, 10, 15, false};
inline constexpr RefFormat kE4M3{"e4m3", 4, 3, 7, true};
inline constexpr RefFormat kE5M2{"e5m2", 5, 2, 15, false};

inline uint32_t bitsOf(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}
inline float floatOf(uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

// Value of `code` as defined by the format (NaN for NaN codes, +-inf for IEEE inf).
inline double refDecode(const RefFormat& f, uint32_t code) {
  const bool neg = (code >> (f.E + f.M)) & 1u;
  const uint32_t e = (code >> f.M) & ((1u << f.E) - 1u);
  const uint32_t m = code & ((1u << f.M) - 1u);
  const uint32_t eAll = (1u << f.E) - 1u;
  const double nan = std::copysign(std::numeric_limits<double>::quiet_NaN(), neg ? -1.0 : 1.0);
  double v;
  if (f.fn && e == eAll && m == (1u << f.M) - 1u) return nan;
  if (!f.fn && e == eAll) {
    if (m != 0) return nan;
    v = std::numeric_limits<double>::infinity();
  } else if (e == 0) {
    v = std::ldexp(double(m), 1 - f.bias - f.M);  // subnormal: 0.m * 2^(1-bias)
  } else {
    v = std::ldexp(double(m + (1u << f.M)), int(e) - f.bias - f.M);  // 1.m * 2^(e-bias)
  }
  return neg ? -v : v;
}

class RefEncoder {
 public:
  explicit RefEncoder(const RefFormat& f) : f_(f) {
    for (uint32_t c = 0;; ++c) {  // positive codes ascend in value until inf/NaN
      const double v = refDecode(f, c);
      if (!std::isfinite(v)) break;
      vals_.push_back(v);
    }
    maxCode_ = uint32_t(vals_.size() - 1);
    // The value one ulp past max (where the exponent range would continue): overflow target.
    virt_ = vals_[maxCode_] + (vals_[maxCode_] - vals_[maxCode_ - 1]);
  }
  uint32_t maxCode() const { return maxCode_; }
  uint32_t signBit() const { return 1u << (f_.E + f_.M); }
  const std::vector<double>& values() const { return vals_; }
  double upperNeighbour(uint32_t c) const { return c == maxCode_ ? virt_ : vals_[c + 1]; }

  // RNE encode of a non-NaN x. Overflow: saturate -> max, else inf (IEEE) or NaN (fn).
  uint32_t encode(float x, bool saturate) const {
    const double ax = std::fabs(double(x));
    uint32_t c;
    if (ax >= virt_) {
      c = maxCode_ + 1;
    } else {
      const auto it = std::upper_bound(vals_.begin(), vals_.end(), ax);
      const uint32_t lo = uint32_t(it - vals_.begin()) - 1u;
      const double mid = (vals_[lo] + upperNeighbour(lo)) / 2;  // exact
      c = ax < mid ? lo : (ax > mid ? lo + 1 : (lo % 2 == 0 ? lo : lo + 1));
    }
    if (c > maxCode_) c = saturate ? maxCode_ : (f_.fn ? (signBit() - 1u) : maxCode_ + 1);
    return (std::signbit(x) ? signBit() : 0u) | c;
  }

 private:
  RefFormat f_;
  std::vector<double> vals_;
  uint32_t maxCode_ = 0;
  double virt_ = 0;
};

}  // namespace ts::test
