#pragma once
// The guarded CPU backend, for tests: the CPU backend's kernels on memory the host cannot touch
// outside backend calls, so a test run on it proves that engine code reaches tensor memory only
// through the backend, as it must for CUDA, without a GPU.
//
// Every allocation is its own mapping, PROT_NONE except while a backend call that was handed a
// pointer into it runs (each op's pointer arguments, the device side of copyToDevice/copyToHost);
// a guard page follows it, its data ends against that page, and it starts out as 0xFF bytes (NaN)
// rather than zero. So a host read or write of tensor memory outside a backend call segfaults,
// as it would fault on a GPU; an op handed a pointer outside this backend's memory (host memory,
// which a GPU kernel could not read) or a copy whose host side lies in it throws
// std::logic_error naming the call. Results are the CPU backend's bit for bit (same kernels, same
// threads). name() "cpu-guarded", kind() Cpu (the CPU's capabilities), hostAccessible() false.
// Calls are serialised by one lock. Not one of makeBackend()'s names: it is a test device.
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "trainscope/kernels/Backend.h"

namespace ts::kernels {

std::unique_ptr<Backend> makeGuardedCpuBackend();
// How often each backend call (an op's name, "copyToHost", "copyToDevice", ...) ran on a
// backend from makeGuardedCpuBackend (std::logic_error for any other): e.g. how many host reads
// a training step makes, each a synchronization on a GPU.
std::map<std::string, int64_t> guardedCallCounts(Backend& b);

}  // namespace ts::kernels
