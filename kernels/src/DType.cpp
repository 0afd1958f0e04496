#include "trainscope/kernels/Backend.h"

namespace ts::kernels {

const char* dtypeName(DType d) {
  switch (d) {
    case DType::F32:
      return "f32";
    case DType::BF16:
      return "bf16";
    case DType::F16:
      return "f16";
    case DType::F8E4M3:
      return "f8e4m3";
    case DType::F8E5M2:
      return "f8e5m2";
    case DType::I8:
      return "i8";
    case DType::NF4:
      return "nf4";
    case DType::I32:
      return "i32";
    case DType::U16:
      return "u16";
  }
  return "unknown";
}

int dtypeBits(DType d) {
  switch (d) {
    case DType::F32:
    case DType::I32:
      return 32;
    case DType::BF16:
    case DType::F16:
    case DType::U16:
      return 16;
    case DType::F8E4M3:
    case DType::F8E5M2:
    case DType::I8:
      return 8;
    case DType::NF4:
      return 4;
  }
  return 0;
}

}  // namespace ts::kernels
