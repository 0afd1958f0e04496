#!/usr/bin/env bash
# libFuzzer targets of tests/fuzz (docs/testing.md, "Fuzzing"): builds the fuzz preset (clang,
# ASan + UBSan + libFuzzer; only the fuzz targets), then runs each target on a temporary copy
# of its seed corpus (tests/fuzz/corpus/<target>; new inputs go to the copy, the repository's
# corpus is never changed) plus its saved regressions (tests/fuzz/regressions/<target>).
#
#   scripts/fuzz.sh [--runs N] [--seconds N] [target...]
#
# Default (CI): deterministic, `-seed=1 -runs=<N>` per target, so a run that passes here passes
# in CI; a generous -max_total_time is only a cap (a capped target is reported). `--runs N` sets
# N for every target (default: each target's count in RUNS below, all 12 in about 2 minutes on
# 2 cores with FUZZ_JOBS=2). `--seconds N` alone is a random exploration for manual use: no fixed
# count, a time-derived seed, N seconds per target. Leak detection is on; -rss_limit_mb=2048;
# one input running over 30 s is a hang.
#
# Environment: FUZZ_JOBS targets at a time (default 1), FUZZ_BUILD_JOBS build parallelism
# (default nproc), FUZZ_BUILD_DIR an existing build configured with TRAINSCOPE_FUZZ=ON to use
# instead of the fuzz preset's build/fuzz (CI passes build/asan, which holds the unit tests and
# the fuzz targets). Exits non-zero when any target crashed, leaked, hung or hit a sanitizer
# report, naming the target, its log and the input that did it (under <build>/fuzz-artifacts/).
# Targets: config config_override protocol safetensors checkpoint hf_config hf_index token_file
# text_dataset jsonl_dataset tokenizer deepspeed_import chat_template.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
start=$(date +%s)

# Executions per target in the deterministic run (fast targets get more; each about 5-15 s
# here). --runs overrides them all.
declare -A RUNS=(
  [config]=20000 [config_override]=12000 [protocol]=15000 [safetensors]=20000
  [checkpoint]=8000 [hf_config]=20000 [hf_index]=10000 [token_file]=20000
  [text_dataset]=4000 [jsonl_dataset]=5000 [tokenizer]=12000 [deepspeed_import]=60000
  [chat_template]=20000
)
ALL=(config config_override protocol safetensors checkpoint hf_config hf_index token_file
     text_dataset jsonl_dataset tokenizer deepspeed_import chat_template)
CAP_S=600  # -max_total_time of the deterministic run: a cap, never reached on a sane machine

runs="" seconds="" targets=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --runs) runs="$2"; shift 2 ;;
    --seconds) seconds="$2"; shift 2 ;;
    -h|--help) sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "fuzz.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
[[ ${#targets[@]} -gt 0 ]] || targets=("${ALL[@]}")
for t in "${targets[@]}"; do
  [[ -n "${RUNS[$t]:-}" ]] || { echo "fuzz.sh: unknown target '$t' (allowed: ${ALL[*]})" >&2; exit 2; }
done
jobs=${FUZZ_JOBS:-1}

build=${FUZZ_BUILD_DIR:-build/fuzz}
build_start=$(date +%s)
if [[ -z ${FUZZ_BUILD_DIR:-} ]]; then
  echo "== building the fuzz preset (${#targets[@]} targets) =="
  cmake --preset fuzz >/dev/null
else
  grep -q '^TRAINSCOPE_FUZZ:BOOL=ON' "$build/CMakeCache.txt" 2>/dev/null || {
    echo "fuzz.sh: FUZZ_BUILD_DIR=$build is not a build configured with TRAINSCOPE_FUZZ=ON" >&2
    exit 2
  }
  echo "== building ${#targets[@]} fuzz targets in $build =="
fi
cmake --build "$build" -j "${FUZZ_BUILD_JOBS:-$(nproc)}" \
  $(for t in "${targets[@]}"; do printf -- '--target fuzz_%s ' "$t"; done)
echo "build took $(( $(date +%s) - build_start )) s"

work=$(mktemp -d "${TMPDIR:-/tmp}/trainscope-fuzz.XXXXXX")
trap 'rm -rf "$work"' EXIT
artifacts=$root/$build/fuzz-artifacts
mkdir -p "$artifacts"

# One target: its verdict line in $work/<target>.result, its log in $artifacts/<target>.log.
fuzz_one() {
  local t=$1 log=$artifacts/$t.log art=$artifacts/$t/
  rm -rf "$art" && mkdir -p "$art" "$work/$t"
  cp -r "$root/tests/fuzz/corpus/$t/." "$work/$t/"
  local inputs=("$work/$t")
  [[ -d $root/tests/fuzz/regressions/$t ]] && inputs+=("$root/tests/fuzz/regressions/$t")
  local mode=()
  if [[ -n $seconds && -z $runs ]]; then
    mode=(-max_total_time="$seconds")  # exploration: libFuzzer picks a seed from the clock
  else
    mode=(-seed=1 -runs="${runs:-${RUNS[$t]}}" -max_total_time="${seconds:-$CAP_S}")
  fi
  local t0 rc=0
  t0=$(date +%s)
  ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=0 \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 OMP_NUM_THREADS=1 \
    "$root/$build/tests/fuzz/fuzz_$t" "${mode[@]}" -rss_limit_mb=2048 -timeout=30 \
      -detect_leaks=1 -print_final_stats=1 -artifact_prefix="$art" "${inputs[@]}" \
      >"$log" 2>&1 || rc=$?
  local dt=$(( $(date +%s) - t0 ))
  local done_line cov
  done_line=$(grep -o 'Done [0-9]* runs in [0-9]* second' "$log" | tail -1 || true)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 || true)
  local crash
  crash=$(grep -o 'Test unit written to .*' "$log" | head -1 | sed 's/Test unit written to //' || true)
  if [[ $rc -ne 0 || -n $crash ]] ||
     grep -qE '^==[0-9]+==ERROR|runtime error:|ERROR: libFuzzer|ERROR: LeakSanitizer' "$log"; then
    local what
    what=$(grep -m1 -oE 'ERROR: [A-Za-z]+: [^ ]+( [^ ]+)?|runtime error: .{0,100}|fuzz check failed: .{0,100}' "$log" || true)
    echo "FAIL $t (exit $rc, ${dt} s): ${what:-see the log}; input: ${crash:-none written}; log: $log" >"$work/$t.result"
  else
    local capped=""
    if [[ -z $seconds && -n $done_line ]]; then
      local n=${done_line#Done }; n=${n%% *}
      [[ $n -lt ${runs:-${RUNS[$t]}} ]] && capped=" (CAPPED at ${CAP_S} s: not the full run)"
    fi
    echo "ok   $t (${dt} s): ${done_line:-no summary}, $cov, corpus $(ls "$work/$t" | wc -l) inputs$capped" >"$work/$t.result"
  fi
}

echo "== fuzzing: ${targets[*]} (FUZZ_JOBS=$jobs; $( [[ -n $seconds && -z $runs ]] && echo "exploration, ${seconds} s each" || echo "-seed=1, fixed runs" )) =="
fuzz_start=$(date +%s)
running=0
for t in "${targets[@]}"; do
  if [[ $jobs -le 1 ]]; then
    fuzz_one "$t"; cat "$work/$t.result"
  else
    fuzz_one "$t" &
    running=$((running + 1))
    if [[ $running -ge $jobs ]]; then wait -n || true; running=$((running - 1)); fi
  fi
done
wait
failed=0
[[ $jobs -le 1 ]] || for t in "${targets[@]}"; do cat "$work/$t.result"; done
for t in "${targets[@]}"; do grep -q '^FAIL' "$work/$t.result" && failed=$((failed + 1)); done
end=$(date +%s)
echo "fuzzing took $(( end - fuzz_start )) s; total $(( end - start )) s (build included)"
if [[ $failed -gt 0 ]]; then
  echo "fuzz.sh: $failed target(s) failed; reproduce: $build/tests/fuzz/fuzz_<target> <input>" >&2
  echo "  (fix the bug, then save the input as tests/fuzz/regressions/<target>/<bug-name>)" >&2
  exit 1
fi
