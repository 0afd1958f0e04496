#!/usr/bin/env bash
# One-call check on a lent GPU machine (see DEVELOPERS guide): build the headless engine with
# CUDA (sm_90 only, to keep the build short), run the gpu-labelled tests (CUDA twins vs CPU,
# CUPTI), then the unit tests, and print a summary table. The machine has no package registry,
# so Debian packages the build needs travel as .deb files in .devdeps/ (made by
# `scripts/device-check.sh --fetch` here) and are unpacked into / there.
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
cmake --build build/device -j "$(nproc)" >"$OUT/build.log" 2>&1
RESULT[build]=$?
tail -30 "$OUT/build.log"
t1=$(date +%s)
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
build/device/engine/trainscope-engine capabilities --json | tee "$OUT/capabilities.json"
(cd build/device && ctest -L gpu --output-on-failure -j4 2>&1 | tee "$OUT/gpu-tests.log")
RESULT[gpu_tests]=${PIPESTATUS[0]}
(cd build/device && ctest -L unit -j8 2>&1 | tail -15 | tee "$OUT/unit-tests.log")
RESULT[unit_tests]=${PIPESTATUS[0]}
for b in build/device/tests/kernels/kernels_gpu_bench; do
  [ -x "$b" ] && "$b" | tee "$OUT/gpu-bench.log"
done
echo
echo "| step | result |"
echo "|---|---|"
for k in configure build gpu_tests unit_tests; do echo "| $k | ${RESULT[$k]:-n/a} |"; done
echo "| build time | $((t1 - t0)) s |"
grep -E "^\[  (PASSED|SKIPPED|FAILED) " "$OUT/gpu-tests.log" | head -20
