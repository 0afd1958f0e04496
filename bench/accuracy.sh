#!/usr/bin/env bash
# Accuracy of the precision policies and int8 activation compression, measured (issue: "mixed
# precision ... accuracy, measured not assumed"). Not a test: a report, from the real engine.
#   A. The default preset as shipped (4000 steps, 3-digit addition), seeds 1337, 1 and 2:
#      held-out exact match and final held-out loss for fp32, bf16 and bf16 with bf16 GEMMs.
#   B. 300 steps of the synthetic grammar task (held-out sentences), seeds 1337, 1 and 2: final
#      held-out loss of every policy and of fp32 with int8 compression, against fp32's, as
#      mean and spread (min..max) over the seeds.
#
#   bench/accuracy.sh [ENGINE]      (default: build/default/engine/trainscope-engine)
#
# Takes about 6 minutes on 2 cores. Prints two tables.
set -euo pipefail
cd "$(dirname "$0")/.."
engine=${1:-build/default/engine/trainscope-engine}
preset=resources/presets/default.json
[[ -x $engine ]] || { echo "accuracy.sh: no engine at $engine (build it first)" >&2; exit 2; }
work=$(mktemp -d "${TMPDIR:-/tmp}/trainscope-accuracy.XXXXXX")
trap 'rm -rf "$work"' EXIT
export OMP_WAIT_POLICY=passive
seeds=(1337 1 2)

# run NAME SEED ARGS...: one headless run; its summary lines go to $work/NAME-SEED.txt.
run() {
  local name=$1 seed=$2
  shift 2
  "$engine" run "$preset" --human --db "$work/runs.db" --run-dir "$work/$name-$seed" \
    --set train.seed="$seed" "$@" >"$work/$name-$seed.txt" 2>&1 ||
    { echo "accuracy.sh: $name seed $seed failed:" >&2; tail -5 "$work/$name-$seed.txt" >&2; exit 1; }
}

echo "== A: default preset, 4000 steps, seeds ${seeds[*]} =="
for s in "${seeds[@]}"; do
  run A-fp32 "$s" --set precision.policy=fp32
  run A-bf16 "$s" --set precision.policy=bf16
  run A-bf16gemm "$s" --set precision.policy=bf16 --set precision.gemm=bf16
done

echo "== B: grammar task, 300 steps, seeds ${seeds[*]} =="
grammar=(--set data.task=grammar --set train.steps=300 --set train.eval_every=100)
for s in "${seeds[@]}"; do
  for p in fp32 bf16 fp16 fp8 pure_bf16; do run "B-$p" "$s" "${grammar[@]}" --set precision.policy=$p; done
  run B-int8 "$s" "${grammar[@]}" --set memory.activation_compression=int8
done

python3 - "$work" "${seeds[@]}" <<'EOF'
import re, statistics, sys
work, seeds = sys.argv[1], sys.argv[2:]
def summary(name, seed):
    t = open(f"{work}/{name}-{seed}.txt").read()
    acc = re.search(r"exact-match accuracy ([0-9.]+)%", t)
    val = re.search(r"final val loss ([0-9.]+)", t)
    return (float(acc.group(1)) if acc else float("nan")), float(val.group(1))
def spread(xs):
    return f"{statistics.mean(xs):.4f} ({min(xs):.4f}..{max(xs):.4f})"
print("\nA. default preset (3-digit addition), 4000 steps; exact match on held-out sums")
print(f"{'policy':<12}" + "".join(f"{'seed ' + s:>16}" for s in seeds) + f"{'mean exact':>12}")
for name, label in [("A-fp32", "fp32"), ("A-bf16", "bf16"), ("A-bf16gemm", "bf16 GEMMs")]:
    r = [summary(name, s) for s in seeds]
    cells = "".join(f"{a:>8.1f}% {v:>6.4f}" for a, v in r)
    print(f"{label:<12}{cells}{statistics.mean(a for a, _ in r):>11.1f}%")
print("  (each cell: exact match, final held-out loss)")
print("\nB. grammar task, 300 steps; final held-out loss, mean (min..max) over the seeds")
base = [summary("B-fp32", s)[1] for s in seeds]
print(f"{'config':<12}{'held-out loss':>28}{'vs fp32, per seed':>34}")
for name in ["fp32", "bf16", "fp16", "fp8", "pure_bf16", "int8"]:
    v = [summary("B-" + name, s)[1] for s in seeds]
    rel = [100 * (x - b) / b for x, b in zip(v, base)]
    label = "fp32+int8" if name == "int8" else name
    print(f"{label:<12}{spread(v):>28}   " + " ".join(f"{r:+7.2f}%" for r in rel))
EOF
