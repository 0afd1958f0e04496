#!/usr/bin/env bash
# One-call check on a lent GPU machine: build the headless engine with CUDA (sm_90 only, to keep
# the build short), run every gpu-labelled test (CUDA twins vs CPU ops, fp8/bf16/fp16 conversions
# bit for bit, CUPTI collector, the whole model on CUDA against the CPU per policy, checkpoints
# between the two), benchmark GPT-2 124M training in bf16 with flash attention on the GPU against
# PyTorch eager and torch.compile on the same model and batch (tools/gpt2_torch_bench.py; MFU
# against the bf16 matmul rate it measures), export one CUPTI timeline of a real engine step, run
# the engine's CPU benches (GEMM peak; precision policies) and print one table. A test binary
# whose every test skipped counts as a failure ("all skipped"), not ok.
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
TARGETS="kernels_gpu_tests precision_gpu_tests profiler_tests kernels_tests engine_tests trainscope-engine"
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
    local passed skipped
    passed=$(sed -n 's/.*\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$OUT/$name.log" | tail -1)
    skipped=$(sed -n 's/.*\[  SKIPPED \] \([0-9]*\) test.*/\1/p' "$OUT/$name.log" | tail -1)
    if [ "${RESULT[$name]}" = 0 ] && [ -n "$skipped" ] && [ "${passed:-0}" = 0 ]; then
      RESULT[$name]="all skipped"
    fi
  else
    RESULT[$name]="not built"
  fi
}
run_test kernels_gpu build/device/tests/kernels/kernels_gpu_tests
run_test precision_gpu build/device/tests/precision/precision_gpu_tests
run_test cupti build/device/tests/profiler/profiler_tests "CuptiGpu.*"
run_test kernels_cpu build/device/tests/kernels/kernels_tests
run_test engine_gpu build/device/tests/engine/engine_tests "CudaTrain*"
# GPT-2 124M, bf16 + flash, on the GPU: the engine's row, then PyTorch's on the same batch.
if [ -x $E ]; then
  python3 -c "
import array, random
random.seed(1)
array.array('H', (random.randrange(50304) for _ in range(1 << 21))).tofile(open('$OUT/tokens.u16', 'wb'))"
  timeout 240 $E run bench/gpu/gpt2-124m.json --db "$OUT/bench.db" --run-dir "$OUT/gpt2" \
    --set data.path="$OUT/tokens.u16" --set profile.enabled=true --set profile.wait=20 \
    --set profile.warmup=1 --set profile.active=1 >"$OUT/gpt2-events.ndjson" 2>"$OUT/gpt2.err"
  RESULT[gpt2_engine]=$?
  tail -3 "$OUT/gpt2.err"
  $E runs export gpt2-124m-bench --format chrome --output "$OUT/timeline.json" --db "$OUT/bench.db" \
    >/dev/null 2>&1
  RESULT[timeline]=$?
fi
timeout 300 python3 tools/gpt2_torch_bench.py --batch 8 --steps 20 >"$OUT/torch.json" 2>"$OUT/torch.err"
RESULT[gpt2_torch]=$?
tail -2 "$OUT/torch.err"
python3 - "$OUT" <<'PY'
import json, os, statistics, sys
out = sys.argv[1]
steps, mem = [], None
try:
    for line in open(os.path.join(out, "gpt2-events.ndjson")):
        e = json.loads(line)
        if e.get("type") == "step" and e.get("step", 0) > 5:
            steps.append(e["tokens_per_s"])
        if e.get("type") == "memory":
            mem = e
except OSError:
    pass
try:
    torch = json.load(open(os.path.join(out, "torch.json")))
except (OSError, ValueError):
    torch = {}
tflops, fpt = torch.get("bf16_matmul_tflops"), torch.get("flops_per_token")
print("\n| GPT-2 124M, batch 8 x 1024, bf16 | tokens/s | MFU | vs torch.compile |")
print("|---|---|---|---|")
eng = statistics.median(steps) if steps else None
ref = torch.get("compile", {}).get("tokens_per_s")
def row(name, tps):
    mfu = f"{tps * fpt / (tflops * 1e12):.1%}" if tps and tflops else "n/a"
    ratio = f"{tps / ref:.2f}x" if tps and ref else "n/a"
    print(f"| {name} | {tps:,.0f} | {mfu} | {ratio} |" if tps else f"| {name} | n/a | | |")
row("trainscope engine (cuda, flash)", eng)
row("PyTorch eager", torch.get("eager", {}).get("tokens_per_s"))
row("PyTorch torch.compile", ref)
print(f"\nbf16 matmul rate measured: {tflops:.0f} TFLOP/s" if tflops else "")
if mem:
    dev = mem["ranks"][0]["tiers"].get("device", {})
    print("engine peak device memory by category (MiB): " +
          ", ".join(f"{k} {v['peak'] / 2**20:.0f}" for k, v in dev.items()))
PY
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
for k in configure build kernels_gpu precision_gpu cupti kernels_cpu engine_gpu gpt2_engine \
  timeline gpt2_torch bench bench_precision; do
  echo "| $k | ${RESULT[$k]:-n/a} |"
done
echo "| build time | $((t1 - t0)) s |"
