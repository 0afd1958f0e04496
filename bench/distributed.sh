#!/usr/bin/env bash
# Distributed benchmark: data parallel and ZeRO-1/2/3 on 2 and 4 ranks (fp32 policy, MPI on one
# machine), a small GPT (the default preset at 4 layers, d_model 128, seq_len 64, micro-batch 8
# per rank, 1 thread per rank). For each run: mean step ms and tokens/s over the steps after the
# warm-up, rank 0's measured collective bytes per step (the step event's comm_bytes, counted as a
# ring sends them: all-reduce 2(N-1)/N of the buffer, reduce-scatter and all-gather (N-1)/N each),
# and the ZeRO paper's volume for comparison (/work/shared/reference.md, "ZeRO in DeepSpeed"):
#   formula bytes/step = k·Ψ·(N-1)/N·4,  k = 2 for stages 0-2 (data parallel all-reduce;
#   ZeRO-1/2 reduce-scatter + all-gather), k = 3 for stage 3 (all-gather in forward, again in
#   backward, reduce-scatter of the gradients).
# Ψ (elements communicated) is taken from the run itself: rank 0's optimizer_state current bytes in
# the last memory event / 8 (fp32 AdamW keeps m and v, 8 bytes per element), times N for stages
# >= 1, whose optimizer state is sharded. The ZeRO layout pads every shard (page-aligned), so for
# stages >= 1 this Ψ is slightly larger than the model's parameter count (the "model: P
# parameters" log line, printed above the table); the collectives move the padded groups too.
# What this engine sends: stage 0 all-reduces the gradients; stages 1 and 2 all-gather the updated
# weights after the optimizer step (stage 1 after an all-reduce of the gradients, stage 2 after a
# reduce-scatter); stage 3 all-gathers each block's weights in forward and again in backward,
# then reduce-scatters the gradients, while the groups outside the blocks (embeddings, final
# norm) are gathered once per step and kept, so stage 3 lands a little under 3Ψ. The ratio
# column shows how far each stage is from the formula; the formula is not adjusted to fit.
# A second table gives the single-rank baseline at the same global batch (micro-batch 8·N) for
# scale. On a 2-core machine the 4-rank runs are oversubscribed, so their step times are not a
# scaling result.
# A third table: NVMe offload of the optimizer (2 ranks, ZeRO-2, parallel.offload_optimizer nvme
# in --nvme DIR), and of the optimizer and the parameters under ZeRO-3: bytes read and written
# per step, time in I/O calls (summed over the store's I/O
# threads), time the step waited for them, and the I/O threads' rate next to the directory's raw
# sequential write/read rate measured in the same run (`trainscope-engine bench --disk`).
# Usage: bench/distributed.sh [--steps N] [--warmup K] [--engine PATH] [--out FILE] [--nvme DIR]
#   --steps N      training steps per run (default 30)
#   --warmup K     leading steps left out of the means (default 5)
#   --engine PATH  trainscope-engine binary (default build/default/engine/trainscope-engine)
#   --out FILE     also write the tables as markdown to FILE
#   --nvme DIR     directory for the NVMe offload run (default: a temporary one)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ENGINE="$ROOT/build/default/engine/trainscope-engine"
STEPS=30
WARMUP=5
OUT_FILE=""
NVME_DIR=""
RANKS="2 4"
STAGES="0 1 2 3"
MICRO=8

usage() { sed -n '/^# Usage:/,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//' >&2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) STEPS="${2:?--steps needs a value}"; shift 2 ;;
    --warmup) WARMUP="${2:?--warmup needs a value}"; shift 2 ;;
    --engine) ENGINE="${2:?--engine needs a value}"; shift 2 ;;
    --out) OUT_FILE="${2:?--out needs a value}"; shift 2 ;;
    --nvme) NVME_DIR="${2:?--nvme needs a value}"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "distributed.sh: unknown option $1" >&2; usage; exit 2 ;;
  esac
done
case "$STEPS$WARMUP" in
  *[!0-9]*) echo "distributed.sh: --steps/--warmup take integers" >&2; exit 2 ;;
esac
if [ "$STEPS" -le "$WARMUP" ]; then
  echo "distributed.sh: --steps ($STEPS) must exceed --warmup ($WARMUP)" >&2
  exit 2
fi
if [ ! -x "$ENGINE" ]; then
  echo "distributed.sh: no engine at $ENGINE (build it, or pass --engine)" >&2
  exit 2
fi
command -v mpirun >/dev/null || { echo "distributed.sh: needs mpirun (OpenMPI)" >&2; exit 2; }
if [ -n "$OUT_FILE" ]; then
  mkdir -p "$(dirname "$OUT_FILE")"
  OUT_FILE="$(cd "$(dirname "$OUT_FILE")" && pwd)/$(basename "$OUT_FILE")"
fi

WORK="$(mktemp -d "${TMPDIR:-/tmp}/trainscope-distributed.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
export OMP_WAIT_POLICY=passive  # ranks share the cores; spinning OpenMP threads would collapse them

PRESET="$ROOT/resources/presets/default.json"
COMMON=(--set model.layers=4 --set model.d_model=128 --set model.heads=4 --set model.seq_len=64
  --set device.threads=1 --set train.eval_every=0 --set train.checkpoint_every=0
  --set train.steps="$STEPS" --set precision.policy=fp32 --set optimizer.type=adamw
  --set optimizer.state_bits=32)

run_engine() {  # name ranks stage micro_batch
  local name=$1 ranks=$2 stage=$3 micro=$4 t0 t1
  t0=$(date +%s%N)
  if ! "$ENGINE" run "$PRESET" --db "$WORK/$name.sqlite" --run-dir "$WORK/$name" "${COMMON[@]}" \
      --set train.micro_batch="$micro" --set parallel.ranks="$ranks" \
      --set parallel.zero_stage="$stage" >"$WORK/$name.ndjson" 2>"$WORK/$name.err"; then
    echo "distributed.sh: $name (ranks $ranks, stage $stage) failed:" >&2
    tail -20 "$WORK/$name.err" >&2
    grep -h '"type":"finished"' "$WORK/$name.ndjson" >&2 || true
    exit 1
  fi
  t1=$(date +%s%N)
  printf '  %-7s ranks %d stage %d micro-batch %-3d %6d ms\n' "$name" "$ranks" "$stage" "$micro" \
    $(((t1 - t0) / 1000000)) >&2
}

echo "distributed.sh: $STEPS steps per run (first $WARMUP left out), engine $ENGINE" >&2
for n in $RANKS; do
  for s in $STAGES; do run_engine "r${n}s${s}" "$n" "$s" "$MICRO"; done
done
for n in $RANKS; do run_engine "base$n" 1 0 $((MICRO * n)); done
echo >&2

python3 "$ROOT/bench/distributed_report.py" "$WORK" --warmup "$WARMUP" --ranks "$RANKS" \
  --stages "$STAGES" --micro-batch "$MICRO" ${OUT_FILE:+--out "$OUT_FILE"} \
  --title "ZeRO communication per step (trainscope-engine, fp32, $(nproc) cores, $STEPS steps)"

# ---- NVMe offload against the raw disk --------------------------------------------------------
NVME="${NVME_DIR:-$WORK/nvme}"
mkdir -p "$NVME"
"$ENGINE" run "$PRESET" --db "$WORK/nvme.sqlite" --run-dir "$WORK/nvme-run" "${COMMON[@]}" \
  --set train.micro_batch="$MICRO" --set parallel.ranks=2 --set parallel.zero_stage=2 \
  --set parallel.offload_optimizer=nvme --set parallel.nvme_path="$NVME" \
  >"$WORK/nvme.ndjson" 2>"$WORK/nvme.err" || { tail -20 "$WORK/nvme.err" >&2; exit 1; }
# ZeRO-3 with the parameters offloaded too (read ahead per block, written behind).
"$ENGINE" run "$PRESET" --db "$WORK/nvme.sqlite" --run-dir "$WORK/nvme-run3" "${COMMON[@]}" \
  --set train.micro_batch="$MICRO" --set parallel.ranks=2 --set parallel.zero_stage=3 \
  --set parallel.offload_optimizer=nvme --set parallel.offload_params=nvme \
  --set parallel.nvme_path="$NVME" \
  >"$WORK/nvme3.ndjson" 2>"$WORK/nvme3.err" || { tail -20 "$WORK/nvme3.err" >&2; exit 1; }
"$ENGINE" bench --disk "$NVME" --disk-mib 256 --json | tail -1 >"$WORK/disk.json"
python3 - "$WORK/nvme.ndjson" "$WORK/nvme3.ndjson" "$WORK/disk.json" "$WARMUP" "$NVME" <<'PY' | tee -a "${OUT_FILE:-/dev/null}"
import json, sys
disk = json.load(open(sys.argv[3]))
warm = int(sys.argv[4])
def steps(path):
    events = [json.loads(l) for l in open(path) if l.startswith("{")]
    return [e for e in events if e.get("type") == "step"][warm:]
def row(what, ss, prefix):
    mean = lambda k: sum(e.get(k, 0) for e in ss) / max(1, len(ss))
    rd, wr, io, wait = (mean(prefix + k) for k in ("read_bytes", "write_bytes", "io_ms",
                                                   "wait_ms"))
    rate = (rd + wr) / (io / 1000) if io > 0 else float("nan")
    print(f"| {what} | {rd:.0f} | {wr:.0f} | {io:.2f} | {wait:.2f} | {rate / 1e6:.0f} | "
          f"{disk['write_bytes_per_s'] / 1e6:.0f} | {disk['read_bytes_per_s'] / 1e6:.0f} |")
s2, s3 = steps(sys.argv[1]), steps(sys.argv[2])
print(f"\nNVMe offload (rank 0, 2 ranks, {sys.argv[5]}), mean over {len(s2)} steps\n")
print("| files | read B/step | written B/step | I/O ms (threads) | waited ms | I/O-thread MB/s | raw write MB/s | raw read MB/s |")
print("|---|---|---|---|---|---|---|---|")
row("optimizer state, ZeRO-2", s2, "offload_")
row("optimizer state, ZeRO-3", s3, "offload_")
row("parameters, ZeRO-3", s3, "offload_param_")
PY
