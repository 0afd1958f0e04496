#!/usr/bin/env bash
# One-call check on a lent GPU machine: build the headless engine with CUDA (sm_90 only, to keep
# the build short), run every gpu-labelled test (CUDA twins vs CPU ops, fp8/bf16/fp16 conversions
# bit for bit, CUPTI collector), the engine's CPU benches (GEMM peak; precision policies with
# oneDNN's bf16 GEMM where the host has AMX) on a quiet machine, and print a table.
# The machine has no package registry, so the Debian packages the build needs travel as .deb
# files in .devdeps/ (fetch them here with `scripts/device-check.sh --fetch`; pass
# carry=[".devdeps"]) and are unpacked into / there.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
if [ "${1:-}" = "--fetch" ]; then
  mkdir -p .devdeps && cd .devdeps
  apt-get download nlohmann-json3-dev libcli11-dev libsqlite3-dev libsqlite3-0 libdnnl-dev \
    libdnnl2 ocl-icd-opencl-dev ocl-icd-libopencl1 opencl-c-headers opencl-clhpp-headers \
    libgtest-dev libgmock-dev googletest
  exit 0
fi
OUT="${OUT:-/tmp/device-out}"
mkdir -p "$OUT"
for f in .devdeps/*.deb; do dpkg -x "$f" /; done
ldconfig
declare -A RESULT
t0=$(date +%s)
cmake -S . -B build/device -G Ninja -DCMAKE_BUILD_TYPE=Release -DTRAINSCOPE_GUI=OFF \
  -DTRAINSCOPE_BENCH=OFF -DTRAINSCOPE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 >"$OUT/configure.log" 2>&1
RESULT[configure]=$?
tail -5 "$OUT/configure.log"
TARGETS="kernels_gpu_tests precision_gpu_tests profiler_tests kernels_tests trainscope-engine"
cmake --build build/device -j "$(nproc)" --target $TARGETS -- -k 0 >"$OUT/build.log" 2>&1
RESULT[build]=$?
grep -E "error|FAILED" "$OUT/build.log" | head -20
t1=$(date +%s)
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
E=build/device/engine/trainscope-engine
[ -x $E ] && $E capabilities --json >"$OUT/capabilities.json" && head -c 1500 "$OUT/capabilities.json" && echo
run_test() {  # name binary [filter]
  local name=$1 bin=$2 filter=${3:-*}
  if [ -x "$bin" ]; then
    "$bin" --gtest_filter="$filter" --gtest_brief=1 >"$OUT/$name.log" 2>&1
    RESULT[$name]=$?
    grep -E "PASSED|FAILED|SKIPPED" "$OUT/$name.log" | tail -4
  else
    RESULT[$name]="not built"
  fi
}
run_test kernels_gpu build/device/tests/kernels/kernels_gpu_tests
run_test precision_gpu build/device/tests/precision/precision_gpu_tests
run_test cupti build/device/tests/profiler/profiler_tests "CuptiGpu.*"
run_test kernels_cpu build/device/tests/kernels/kernels_tests
if [ -x $E ]; then
  OMP_WAIT_POLICY=passive timeout 240 $E bench --threads 1 --threads 2 2>&1 | tee "$OUT/bench.log" | tail -40
  RESULT[bench]=${PIPESTATUS[0]}
  # The host CPU may have AMX: precision policies with the bf16 GEMM row (native vs emulated)
  # and the kernels_cpu run above compared oneDNN's bf16 kernel with the emulation.
  OMP_WAIT_POLICY=passive timeout 240 $E bench --precision --quick --threads 1 2>&1 |
    tee "$OUT/bench-precision.log" | tail -16
  RESULT[bench_precision]=${PIPESTATUS[0]}
fi
echo
echo "| step | result (0 = ok) |"
echo "|---|---|"
for k in configure build kernels_gpu precision_gpu cupti kernels_cpu bench bench_precision; do
  echo "| $k | ${RESULT[$k]:-n/a} |"
done
echo "| build time | $((t1 - t0)) s |"
