#!/usr/bin/env python3
"""Golden data for `trainscope-engine evaluate`: transformers' mean cross-entropy over the same
consecutive windows the engine scores (window i = tokens[i*N : i*N + N + 1]: the first N read,
each next token scored; a trailing partial window left out), for the committed tiny Hugging
Face folders tests/data/llama_tiny and tests/data/lora_tiny/gpt2_base, in float64.

Writes tests/data/eval/: tokens_llama.bin, tokens_gpt2.bin (little-endian ids, seeded: uint16
for a vocabulary of up to 65,536 ids, uint32 above, as the engine reads them),
expected.json ({case: {folder, tokens_file, seq, loss, tokens, perplexity}}).

Usage: python3 tools/make_eval_golden.py [--out tests/data/eval]
Needs: pip install -r tools/requirements-golden.txt
"""
import argparse
import json
import math
import os

import numpy as np
import torch
import torch.nn.functional as F
from transformers import AutoModelForCausalLM

CASES = {
    "llama": ("tests/data/llama_tiny", 16, 301),
    "gpt2": ("tests/data/lora_tiny/gpt2_base", 16, 250),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="tests/data/eval")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    rng = np.random.default_rng(1234)
    expected = {}
    for name, (folder, seq, n) in CASES.items():
        model = AutoModelForCausalLM.from_pretrained(folder, torch_dtype=torch.float64).eval()
        vocab = model.config.vocab_size
        ids = rng.integers(0, vocab, size=n).astype("<u2" if vocab <= 65536 else "<u4")
        path = os.path.join(args.out, f"tokens_{name}.bin")
        ids.tofile(path)
        t = torch.tensor(ids.astype(np.int64))
        windows = (n - 1) // seq
        total, count = 0.0, 0
        with torch.no_grad():
            for w in range(windows):
                chunk = t[w * seq: w * seq + seq + 1]
                logits = model(chunk[:-1].unsqueeze(0)).logits[0]
                total += F.cross_entropy(logits, chunk[1:], reduction="sum").item()
                count += seq
        loss = total / count
        expected[name] = {"folder": folder, "tokens_file": f"tokens_{name}.bin", "seq": seq,
                          "loss": loss, "tokens": count, "perplexity": math.exp(loss),
                          "windows": windows}
        print(name, expected[name])
    with open(os.path.join(args.out, "expected.json"), "w") as f:
        json.dump(expected, f, indent=2)
        f.write("\n")


if __name__ == "__main__":
    main()
