#!/usr/bin/env bash
# Real screenshots of the real app driving the real engine, under Xvfb: the live dashboard
# mid-run, the runs browser, the compare page with two runs, the timeline of a profiled run and
# the planner with LLaMA-7B on a 24 GB GPU (all that fit; and planner-cuda, as the default
# filter leaves it: planned for the GPU even where this machine has none), and reopened-run: a
# run kept training while the app closed, re-attached by a second window with its history and
# working controls (through the engine's control socket). Each shot is checked
# (widgets visible and not blank, plotted points inside their charts, expected text on screen);
# a failed check fails the script. The README shows docs/screenshots/*.png.
#   scripts/screenshots.sh [OUT_DIR] [STEPS]     (default docs/screenshots, 600 steps per run)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${1:-$ROOT/docs/screenshots}"
STEPS="${2:-600}"
"$ROOT/scripts/trainscope" build
BUILD="$ROOT/build/default"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$OUT"
export OMP_WAIT_POLICY=passive
# A fresh database, so the shots show these runs only; a light theme-independent screen.
xvfb-run -a -s "-screen 0 1600x1000x24" \
  "$BUILD/gui/trainscope" --db "$tmp/runs.db" --engine "$BUILD/engine/trainscope-engine" \
  --preset "$ROOT/resources/presets/default.json" --screenshots "$OUT" --tour-steps "$STEPS"
ls -1 "$OUT"/*.png
