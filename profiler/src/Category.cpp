#include <algorithm>
#include <array>
#include <cctype>
#include <string>

#include "trainscope/profiler/Tracer.h"

namespace ts::profiler {

namespace {
constexpr std::array<std::pair<SpanCategory, const char*>, 12> kNames{{
    {SpanCategory::Gemm, "gemm"},
    {SpanCategory::Attention, "attention"},
    {SpanCategory::Norm, "norm"},
    {SpanCategory::Elementwise, "elementwise"},
    {SpanCategory::Optimizer, "optimizer"},
    {SpanCategory::Communication, "communication"},
    {SpanCategory::Memcpy, "memcpy"},
    {SpanCategory::IO, "io"},
    {SpanCategory::Data, "data"},
    {SpanCategory::Block, "block"},
    {SpanCategory::Step, "step"},
    {SpanCategory::Other, "other"},
}};

bool contains(const std::string& hay, const char* needle) {
  return hay.find(needle) != std::string::npos;
}
}  // namespace

const char* toString(SpanCategory c) {
  for (const auto& [cat, name] : kNames)
    if (cat == c) return name;
  return "other";
}

SpanCategory categoryFromString(std::string_view s) {
  for (const auto& [cat, name] : kNames)
    if (s == name) return cat;
  return SpanCategory::Other;
}

SpanCategory categoryForName(std::string_view name, bool deviceKernel) {
  std::string n(name);
  std::transform(n.begin(), n.end(), n.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  // Order matters: "flash_attn_gemm" is attention, "layernorm" is not elementwise.
  if (contains(n, "nccl") || contains(n, "allreduce") || contains(n, "all_reduce") ||
      contains(n, "allgather") || contains(n, "all_gather") || contains(n, "reducescatter") ||
      contains(n, "reduce_scatter") || contains(n, "broadcast"))
    return SpanCategory::Communication;
  if (contains(n, "memcpy") || contains(n, "memset") || contains(n, "copy_kernel"))
    return SpanCategory::Memcpy;
  if (contains(n, "attn") || contains(n, "attention") || contains(n, "flash") ||
      contains(n, "softmax"))
    return SpanCategory::Attention;
  if (contains(n, "gemm") || contains(n, "matmul") || contains(n, "cublas") ||
      contains(n, "cutlass") || contains(n, "xmma") || contains(n, "linear"))
    return SpanCategory::Gemm;
  if (contains(n, "norm")) return SpanCategory::Norm;
  if (contains(n, "adam") || contains(n, "sgd") || contains(n, "optimizer") || contains(n, "lamb"))
    return SpanCategory::Optimizer;
  if (contains(n, "dataloader") || contains(n, "batch") || contains(n, "tokeniz"))
    return SpanCategory::Data;
  if (contains(n, "checkpoint") || contains(n, "save") || contains(n, "load") ||
      contains(n, "nvme") || contains(n, "write") || contains(n, "fread"))
    return SpanCategory::IO;
  if (contains(n, "gelu") || contains(n, "relu") || contains(n, "add") || contains(n, "mul") ||
      contains(n, "elementwise") || contains(n, "dropout") || contains(n, "scale") ||
      contains(n, "cast") || contains(n, "embedding"))
    return SpanCategory::Elementwise;
  return deviceKernel ? SpanCategory::Elementwise : SpanCategory::Other;
}

}  // namespace ts::profiler
