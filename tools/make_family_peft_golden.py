#!/usr/bin/env python3
"""PEFT's side of every llama-like family's LoRA: an adapter on the family's own module names,
applied by PEFT to the family's golden folder (tests/data/families/<family>, from
make_family_golden.py), and the logits PEFT computes with it.

Writes tests/data/families/<family>/peft/ (committed; CI never runs this script):
  adapter_config.json, adapter_model.safetensors   PEFT's own files (save_pretrained)
  expected.safetensors                             logits F32 [B,T,V] of the adapted model on
                                                   the golden inputs (float64, stored as fp32)

The adapter's A and B are random (PEFT initialises B to zero, which would hide every mistake in
the B side), r 4, lora_alpha 8, targets: the family's attention q and v and the MLP's up
projections under the names PEFT uses for that architecture. The engine's test
(FamilyPeft in tests/engine/model/FamilyGoldenTest.cpp) reads these files through the same
names its export writes and must reproduce the logits: the adapter the engine exports is the
one PEFT applies.

Usage: python3 tools/make_family_peft_golden.py [--data tests/data/families]
Needs: pip install -r tools/requirements-golden.txt   (torch, transformers, peft, safetensors)
"""
import argparse
import json
import os

import torch
from safetensors.torch import load_file, save_file

TARGETS = {
    "phi3": ["qkv_proj", "gate_up_proj"],
}
DEFAULT_TARGETS = ["q_proj", "v_proj", "gate_proj", "up_proj"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="tests/data/families")
    ap.add_argument("--seed", type=int, default=99)
    a = ap.parse_args()
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM
    for fam in sorted(os.listdir(a.data)):
        d = os.path.join(a.data, fam)
        if not os.path.isfile(os.path.join(d, "config.json")):
            continue
        model = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float64,
                                                     attn_implementation="eager").eval()
        cfg = LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, bias="none",
                         target_modules=TARGETS.get(fam, DEFAULT_TARGETS), task_type="CAUSAL_LM")
        peft = get_peft_model(model, cfg)
        g = torch.Generator().manual_seed(a.seed)
        with torch.no_grad():
            for name, p in peft.named_parameters():
                if "lora_A" in name or "lora_B" in name:
                    p.copy_(0.2 * torch.randn(p.shape, generator=g, dtype=torch.float64))
        out = os.path.join(d, "peft")
        os.makedirs(out, exist_ok=True)
        # fp32 files, as the engine stores and exports adapters.
        peft.to(torch.float32).save_pretrained(out, safe_serialization=True)
        peft.to(torch.float64)
        cfgj = json.load(open(os.path.join(out, "adapter_config.json")))
        cfgj["base_model_name_or_path"] = f"tests/data/families/{fam}"
        json.dump(cfgj, open(os.path.join(out, "adapter_config.json"), "w"), indent=2,
                  sort_keys=True)
        readme = os.path.join(out, "README.md")
        if os.path.exists(readme):
            os.remove(readme)
        # The stored fp32 adapter is what the engine reads: PEFT's logits from the same values.
        stored = load_file(os.path.join(out, "adapter_model.safetensors"))
        with torch.no_grad():
            for name, p in peft.named_parameters():
                key = name.replace(".default", "")
                if key in stored:
                    p.copy_(stored[key].to(torch.float64))
        exp = load_file(os.path.join(d, "expected.safetensors"))
        with torch.no_grad():
            logits = peft(input_ids=exp["inputs"].long()).logits
        save_file({"logits": logits.to(torch.float32).contiguous()},
                  os.path.join(out, "expected.safetensors"))
        print(fam, cfgj["target_modules"], len(stored), "tensors")


if __name__ == "__main__":
    main()
