#!/usr/bin/env python3
"""import-hf -> train 2 steps -> export-hf, checked against transformers.

For each committed tiny folder (tests/data/hf_tiny/gpt2, tests/data/hf_tiny/llama), with the real
`trainscope-engine`:
  1. import-hf the folder; run 2 steps of full fine-tuning on tests/data/hf_tiny/eval.txt, the
     text tokenized by the folder's own tokenizer (data.source text, the imported checkpoint as
     finetune.base_checkpoint);
  2. export-hf the last checkpoint (fp32, and --dtype bf16);
  3. transformers loads each exported folder (AutoModelForCausalLM, AutoTokenizer): the
     tokenizer's ids for eval.txt equal the golden ids (tests/data/hf_tiny/expected.json), and
     its mean cross-entropy over windows of 16 equals the engine's `evaluate --json` of the
     checkpoint (fp32: 1e-5 relative; bf16: 1e-2 relative, the rounding of the weights), and
     differs from the untrained folder's (the 2 steps changed the weights).
Prints one line per check and exits 1 on a failure.

Usage: python3 tools/check_hf_roundtrip.py [--engine build/default/engine/trainscope-engine]
Needs: pip install -r tools/requirements-golden.txt
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import torch
import torch.nn.functional as F
from transformers import AutoModelForCausalLM, AutoTokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = os.path.join(ROOT, "tests", "data", "hf_tiny")
SEQ = 16


def windows_loss(model, ids):
    t = torch.tensor(ids)
    total, count = 0.0, 0
    with torch.no_grad():
        for w in range((len(ids) - 1) // SEQ):
            chunk = t[w * SEQ: w * SEQ + SEQ + 1]
            logits = model(chunk[:-1].unsqueeze(0)).logits[0].double()
            total += F.cross_entropy(logits, chunk[1:], reduction="sum").item()
            count += SEQ
    return total / count


def engine(args, *cmd):
    r = subprocess.run([args.engine, *cmd], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"trainscope-engine {' '.join(cmd)} failed:\n{r.stderr}")
    return r.stdout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--engine", default=os.path.join(ROOT, "build/default/engine/trainscope-engine"))
    args = ap.parse_args()
    expected = json.load(open(os.path.join(TINY, "expected.json")))
    text = open(os.path.join(TINY, "eval.txt"), encoding="utf-8").read()
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        for name in ("gpt2", "llama"):
            folder = os.path.join(TINY, name)
            imported = os.path.join(tmp, name + "_imported")
            engine(args, "import-hf", folder, "--out", imported)
            cfg = json.load(open(os.path.join(folder, "config.json")))
            seq = cfg.get("n_positions", 64) if name == "gpt2" else 64
            run_dir = os.path.join(tmp, name + "_run")
            engine(args, "run", os.path.join(ROOT, "resources/presets/default.json"),
                   "--db", os.path.join(tmp, "runs.db"), "--run-dir", run_dir,
                   "--set", f"finetune.base_checkpoint={imported}",
                   "--set", "data.source=text", "--set",
                   f"data.path={os.path.join(TINY, 'eval.txt')}",
                   "--set", "data.val_fraction=0", "--set", "train.eval_every=0",
                   "--set", "train.steps=2", "--set", "train.micro_batch=4",
                   "--set", "train.grad_accum=1", "--set", "optimizer.lr=0.01",
                   "--set", f"model.seq_len={seq}", "--set", "curriculum.type=none",
                   *sum([["--set", kv] for kv in model_sets(cfg, name)], []))
            ckpts = sorted(d for d in os.listdir(os.path.join(run_dir, "checkpoints"))
                           if d.startswith("step_"))
            ckpt = os.path.join(run_dir, "checkpoints", ckpts[-1])
            engine_loss = json.loads(engine(args, "evaluate", ckpt, "--text",
                                            os.path.join(TINY, "eval.txt"), "--seq", str(SEQ),
                                            "--json"))["loss"]
            base = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float64).eval()
            ids = expected[name]["ids"]
            base_loss = windows_loss(base, ids)
            for dtype, tol in (("fp32", 1e-5), ("bf16", 1e-2)):
                out = os.path.join(tmp, f"{name}_{dtype}")
                engine(args, "export-hf", ckpt, "--out", out, "--dtype", dtype)
                tok = AutoTokenizer.from_pretrained(out)
                tok_ids = tok(text, add_special_tokens=False)["input_ids"]
                model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float64).eval()
                hf_loss = windows_loss(model, tok_ids)
                same_ids = tok_ids == ids
                close = abs(hf_loss - engine_loss) <= tol * engine_loss
                moved = abs(hf_loss - base_loss) > 1e-4
                good = same_ids and close and moved
                ok &= good
                print(f"{name} {dtype}: transformers loads {type(model).__name__} + "
                      f"{type(tok).__name__}; ids equal golden: {same_ids}; loss transformers "
                      f"{hf_loss:.6f} vs engine {engine_loss:.6f} (|d| {abs(hf_loss - engine_loss):.2e},"
                      f" tol {tol:g} rel); untrained {base_loss:.6f}: {'OK' if good else 'FAIL'}")
    sys.exit(0 if ok else 1)


def model_sets(cfg, name):
    """The run's model.* for the folder (the engine checks they describe it)."""
    if name == "gpt2":
        return [f"model.arch=gpt2", f"model.layers={cfg['n_layer']}", f"model.heads={cfg['n_head']}",
                f"model.d_model={cfg['n_embd']}", f"model.vocab={cfg['vocab_size']}"]
    return ["model.arch=llama", f"model.layers={cfg['num_hidden_layers']}",
            f"model.heads={cfg['num_attention_heads']}", f"model.d_model={cfg['hidden_size']}",
            f"model.kv_heads={cfg['num_key_value_heads']}", f"model.d_ff={cfg['intermediate_size']}",
            f"model.vocab={cfg['vocab_size']}", "model.mlp=swiglu", "model.norm=rmsnorm",
            f"model.rope_theta={cfg.get('rope_theta', cfg.get('rope_parameters', {}).get('rope_theta', 10000.0))}"]


if __name__ == "__main__":
    main()
