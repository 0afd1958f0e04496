#!/usr/bin/env python3
"""Tables for bench/distributed.sh from the NDJSON event files it wrote (standard library only).

Usage: distributed_report.py DIR --warmup K [--out FILE]
DIR holds r<N>s<stage>.ndjson (N ranks, ZeRO stage) and base<N>.ndjson (1 rank, micro-batch x N).
See bench/distributed.sh for what is measured and the formula it is compared with.
"""
import argparse
import json
import os
import re
import sys


def events(path):
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line.startswith("{"):
                continue  # anything mpirun itself printed
            try:
                yield json.loads(line)
            except json.JSONDecodeError:
                continue


def mean(xs):
    return sum(xs) / len(xs) if xs else float("nan")


def load(path, warmup):
    steps, memory, params = [], None, None
    for e in events(path):
        t = e.get("type")
        if t == "step":
            steps.append(e)
        elif t == "memory":
            memory = e  # the last one: optimizer state after the run's steps
        elif t == "log":
            m = re.match(r"model: (\d+) parameters", e.get("message", ""))
            if m:
                params = int(m.group(1))
    kept = [s for s in steps if s["step"] > warmup]
    if not kept:
        sys.exit(f"{path}: no step events after the {warmup} warm-up steps ({len(steps)} in all)")
    return {
        "steps": kept,
        "step_ms": mean([s["step_ms"] for s in kept]),
        "tokens_per_s": mean([s["tokens_per_s"] for s in kept]),
        "comm": [s.get("comm_bytes", 0) for s in kept],
        "memory": memory,
        "params": params,
    }


def optimizer_bytes_rank0(memory):
    rank0 = next(r for r in memory["ranks"] if r["rank"] == 0)
    return sum(tier["optimizer_state"]["current"] for tier in rank0["tiers"].values())


def markdown(header, rows):
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--out", default="")
    ap.add_argument("--ranks", default="2 4")
    ap.add_argument("--stages", default="0 1 2 3")
    ap.add_argument("--micro-batch", type=int, default=8)
    ap.add_argument("--title", default="")
    a = ap.parse_args()

    rows, notes, params = [], [], None
    for n in map(int, a.ranks.split()):
        for stage in map(int, a.stages.split()):
            r = load(os.path.join(a.dir, f"r{n}s{stage}.ndjson"), a.warmup)
            params = params or r["params"]
            if r["memory"] is None:
                sys.exit(f"r{n}s{stage}: no memory event")
            psi = optimizer_bytes_rank0(r["memory"]) / 8 * (n if stage >= 1 else 1)
            formula = (3 if stage == 3 else 2) * psi * (n - 1) / n * 4
            measured = mean(r["comm"])
            if min(r["comm"]) != max(r["comm"]):
                notes.append(f"ranks {n} stage {stage}: comm bytes vary from step to step "
                             f"({min(r['comm'])}..{max(r['comm'])}); the mean is shown")
            rows.append([str(n), str(stage), f"{r['step_ms']:.1f}", f"{r['tokens_per_s']:.0f}",
                         f"{psi:.0f}", f"{measured:.0f}", f"{formula:.0f}",
                         f"{measured / formula:.3f}"])
    main_table = markdown(["ranks", "stage", "step ms", "tokens/s", "Ψ (elements)",
                           "comm bytes/step (rank 0)", "formula bytes/step",
                           "measured/formula"], rows)

    base_rows = []
    for n in map(int, a.ranks.split()):
        r = load(os.path.join(a.dir, f"base{n}.ndjson"), a.warmup)
        base_rows.append(["1", str(a.micro_batch * n), f"{r['step_ms']:.1f}",
                          f"{r['tokens_per_s']:.0f}"])
    base_table = markdown(["ranks", "micro-batch (= global batch of N ranks)", "step ms",
                           "tokens/s"], base_rows)

    text = []
    if a.title:
        text += [a.title, ""]
    text += [f"Model: {params} parameters. Means over the steps after the first {a.warmup}. "
             "Formula: (2Ψ for stages 0-2, 3Ψ for stage 3) x (N-1)/N x 4 bytes, Ψ = rank 0's "
             "optimizer state / 8 (x N for stages >= 1).", "", main_table, "",
             "Single-rank baseline, same global batch:", "", base_table]
    if notes:
        text += [""] + [f"- {x}" for x in notes]
    text = "\n".join(text) + "\n"
    sys.stdout.write(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
