// Stand-in for NcclCommunicator.cpp in builds without NCCL (CUDA off, or the toolkit has no
// libnccl / nccl.h): the engine links the same either way and a GPU run asking for NCCL gets a
// clear CommError instead of a link error. engine/CMakeLists.txt picks one of the two files.
#include <string>

#include "trainscope/engine/parallel/Communicator.h"

#ifndef TRAINSCOPE_NCCL_MISSING
#define TRAINSCOPE_NCCL_MISSING "NCCL not found at configure time"
#endif

namespace ts::engine {

bool ncclCompiled() {
  return false;
}

std::unique_ptr<Communicator> makeNcclCommunicator(Communicator*, int device) {
  throw CommError("this build has no NCCL (" TRAINSCOPE_NCCL_MISSING
                  "): no NCCL communicator for CUDA device " +
                  std::to_string(device) + "; reconfigure with the CUDA toolkit's NCCL");
}

}  // namespace ts::engine
