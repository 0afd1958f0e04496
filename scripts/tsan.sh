#!/usr/bin/env bash
# ThreadSanitizer on the threaded parts (docs/testing.md, "ThreadSanitizer"): builds the tsan
# preset's tests/tsan targets only (the event writer, offload store and run recorder sources
# with their tests, the GUI engine client with QtCore; not the engine, kernels or oneDNN), then
# runs them (ctest label tsan) with halt_on_error=1 and tests/tsan/suppressions.txt. Reports of
# every process, the recorder's child processes included, go to build/tsan/tsan-reports/ and are
# printed here. Exits non-zero on any failed test or any report.
#
#   scripts/tsan.sh
#
# Environment: TSAN_BUILD_JOBS build parallelism, TSAN_TEST_JOBS tests at a time (both default
# nproc); TSAN_OPTIONS is appended to the options above.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
start=$(date +%s)
build=build/tsan

echo "== building the tsan preset (tests/tsan) =="
cmake --preset tsan >/dev/null
cmake --build "$build" -j "${TSAN_BUILD_JOBS:-$(nproc)}" --target tsan_all
echo "build took $(( $(date +%s) - start )) s"

reports=$root/$build/tsan-reports
rm -rf "$reports"
mkdir -p "$reports"
export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 \
suppressions=$root/tests/tsan/suppressions.txt log_path=$reports/report ${TSAN_OPTIONS:-}"
export OMP_NUM_THREADS=1  # libgomp is not instrumented; nothing here should use it anyway

status=0
echo "== tests (ThreadSanitizer) =="
ctest --test-dir "$build" -L tsan --output-on-failure -j "${TSAN_TEST_JOBS:-$(nproc)}" || status=1
if compgen -G "$reports/report.*" >/dev/null; then
  echo "== ThreadSanitizer reports =="
  for f in "$reports"/report.*; do
    echo "--- $f"
    cat "$f"
  done
  status=1
fi
echo "tsan took $(( $(date +%s) - start )) s"
exit "$status"
