// Op names, from the same list as the enum (OpList.h).
#include "trainscope/kernels/Backend.h"

namespace ts::kernels {

const char* opName(Op op) {
  switch (op) {
#define TS_OP_KIND(kind) \
  case Op::kind:         \
    return #kind;
#include "trainscope/kernels/OpList.h"
  }
  return "unknown";
}

}  // namespace ts::kernels
