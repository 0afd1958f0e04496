#!/usr/bin/env python3
"""Checks that what `trainscope-engine export-hf` writes loads in transformers and PEFT.

For a LoRA run exported twice (the PEFT adapter folder, and `--merge`):
  1. transformers loads the merged folder (AutoModelForCausalLM.from_pretrained);
  2. PEFT applies the adapter folder to the original base (PeftModel.from_pretrained);
  3. both give the same logits on a fixed batch (float32), and those differ from the base's.
The engine's own tests show the merged export equals the engine's adapter model; this closes the
loop to the reference libraries. Prints one line per check and exits 1 on a failure.

Usage: python3 tools/check_hf_export.py BASE_DIR ADAPTER_DIR MERGED_DIR [--vocab N] [--seq T]
Needs: pip install -r tools/requirements-golden.txt
"""
import argparse
import sys

import torch
from peft import PeftModel
from transformers import AutoModelForCausalLM


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("base")
    ap.add_argument("adapter")
    ap.add_argument("merged")
    ap.add_argument("--seq", type=int, default=16)
    args = ap.parse_args()
    torch.manual_seed(0)
    base = AutoModelForCausalLM.from_pretrained(args.base, torch_dtype=torch.float32).eval()
    vocab = base.config.vocab_size
    ids = torch.randint(0, vocab, (2, args.seq))
    with torch.no_grad():
        base_logits = base(ids).logits
        merged = AutoModelForCausalLM.from_pretrained(args.merged, torch_dtype=torch.float32).eval()
        merged_logits = merged(ids).logits
        peft = PeftModel.from_pretrained(base, args.adapter).eval()
        peft_logits = peft(ids).logits
    d_pm = (peft_logits - merged_logits).abs().max().item()
    d_base = (peft_logits - base_logits).abs().max().item()
    ok = d_pm < 1e-4 and d_base > 1e-3
    print(f"transformers loads {args.merged}: {type(merged).__name__}")
    print(f"PEFT loads {args.adapter} on {args.base}: {type(peft).__name__}")
    print(f"max |PEFT(adapter) - merged| = {d_pm:.3e} (< 1e-4), "
          f"max |PEFT(adapter) - base| = {d_base:.3e} (> 1e-3): {'OK' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
