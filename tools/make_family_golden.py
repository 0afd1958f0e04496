#!/usr/bin/env python3
"""Golden data for every llama-like model family the engine trains: a tiny random Hugging Face
model of each, saved by transformers, with its logits, loss and every parameter gradient.

Writes tests/data/families/<family>/ (committed; CI never runs this script):
  config.json           the Hugging Face config (save_pretrained), the family's own keys
  model.safetensors     fp32 weights, Hugging Face names (save_pretrained)
  expected.safetensors  inputs I32 [B,T], targets I32 [B,T] (-1 = ignored; aligned: logits[b,t]
                        is scored against targets[b,t]), logits F32 [B,T,V], loss F32 [1] (mean
                        CE over the scored targets), grad.<HF name> F32 for every parameter
  README.md             versions, the shape, what each family's config exercises

The reference is transformers' own model (attn_implementation="eager") run in float64 from the
stored fp32 weights, so the files carry transformers' computation rounded once to fp32 (stock
transformers keeps a few float32 casts inside a float64 model: the RoPE tables and some norms;
their effect is ~1e-7 relative, far below the tests' tolerances). Each tiny config turns on what
the family adds to the llama block, at shapes where it matters (sliding windows shorter than the
sequence, head_dim unequal to hidden/heads, rope scaling whose frequency bands all occur,
longrope past its original length, soft-caps that bite).

Usage: python3 tools/make_family_golden.py [--out tests/data/families] [--only qwen3,...]
Needs: pip install -r tools/requirements-golden.txt   (torch, transformers, safetensors, numpy)
"""
import argparse
import json
import os
import sys

import torch
import torch.nn.functional as F
from safetensors.torch import save_file

B, T = 2, 16
BASE = dict(vocab_size=200, hidden_size=64, intermediate_size=88, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
            rms_norm_eps=1e-6, attention_dropout=0.0, use_cache=False, bos_token_id=1,
            eos_token_id=2, pad_token_id=None)


def families():
    import transformers as tr
    return {
        # Llama 3.1+: llama3 rope scaling (its three bands all occur at head dim 16 with
        # original_max_position_embeddings 16), tied head (3.2 1B/3B), eps 1e-6.
        "llama": (tr.LlamaConfig, tr.LlamaForCausalLM, dict(
            tie_word_embeddings=True, attention_bias=False, mlp_bias=False, hidden_act="silu",
            rope_parameters=dict(rope_type="llama3", rope_theta=500000.0, factor=8.0,
                                 low_freq_factor=1.0, high_freq_factor=4.0,
                                 original_max_position_embeddings=16))),
        # Mistral v0.1: a sliding window (5) shorter than the sequence (16).
        "mistral": (tr.MistralConfig, tr.MistralForCausalLM, dict(
            sliding_window=5, head_dim=16, tie_word_embeddings=False,
            rope_parameters=dict(rope_type="default", rope_theta=10000.0))),
        # Qwen2.5: q/k/v biases, theta 1e6, untied (7B+).
        "qwen2": (tr.Qwen2Config, tr.Qwen2ForCausalLM, dict(
            tie_word_embeddings=False, use_sliding_window=False,
            rope_parameters=dict(rope_type="default", rope_theta=1000000.0))),
        # Qwen3: per-head q/k norms, head_dim 24 with hidden 64 and 4 heads (q 96 wide), tied.
        "qwen3": (tr.Qwen3Config, tr.Qwen3ForCausalLM, dict(
            head_dim=24, tie_word_embeddings=True, attention_bias=False, use_sliding_window=False,
            rope_parameters=dict(rope_type="default", rope_theta=1000000.0))),
        # Gemma 2: (1 + w) norms, four per block, GeGLU, sqrt(hidden) embeddings, head_dim 24,
        # query_pre_attn_scalar 20, soft-caps that bite (scores 3, logits 2), windows of 6 on
        # every other layer of 3.
        "gemma2": (tr.Gemma2Config, tr.Gemma2ForCausalLM, dict(
            num_hidden_layers=3, head_dim=24, query_pre_attn_scalar=20, sliding_window=6,
            attn_logit_softcapping=3.0, final_logit_softcapping=2.0, tie_word_embeddings=True,
            hidden_activation="gelu_pytorch_tanh",
            rope_parameters=dict(rope_type="default", rope_theta=10000.0))),
        # Gemma 3: Gemma 2's block plus per-head q/k norms, no soft-caps, sliding layers (window
        # 6) with their own base 1e4, the global one 1e6 with linear scaling 2.
        "gemma3": (tr.Gemma3TextConfig, tr.Gemma3ForCausalLM, dict(
            num_hidden_layers=3, head_dim=24, query_pre_attn_scalar=20, sliding_window=6,
            layer_types=["sliding_attention", "full_attention", "sliding_attention"],
            tie_word_embeddings=True, hidden_activation="gelu_pytorch_tanh",
            rope_parameters={"full_attention": dict(rope_type="linear", factor=2.0,
                                                    rope_theta=1000000.0),
                             "sliding_attention": dict(rope_type="default",
                                                       rope_theta=10000.0)})),
        # Phi-3.5/4: fused qkv_proj and gate_up_proj, half the head rotated, longrope past its
        # original length (8 < 16: the long factors, attention factor sqrt(1 + ln 8 / ln 8)),
        # a window of 7.
        "phi3": (tr.Phi3Config, tr.Phi3ForCausalLM, dict(
            tie_word_embeddings=False, sliding_window=7, original_max_position_embeddings=8,
            rope_parameters=dict(rope_type="longrope", rope_theta=10000.0,
                                 partial_rotary_factor=0.5,
                                 short_factor=[1.0, 1.1, 1.3, 1.7],
                                 long_factor=[1.0, 2.0, 4.5, 9.0],
                                 original_max_position_embeddings=8))),
        # OLMo 2: norms after the branches only, whole-projection q/k norms.
        "olmo2": (tr.Olmo2Config, tr.Olmo2ForCausalLM, dict(
            tie_word_embeddings=False,
            rope_parameters=dict(rope_type="default", rope_theta=500000.0))),
    }


def build(name, spec):
    Config, Model, extra = spec
    kw = dict(BASE)
    kw.update(extra)
    cfg = Config(**kw)
    cfg.architectures = [Model.__name__]
    torch.manual_seed(0)
    model = Model._from_config(cfg, attn_implementation="eager", dtype=torch.float32)
    return model.eval()


def init_weights(model, name, seed):
    """N(0, 0.1) matrices (q/k 0.2: attention far from uniform), biases N(0, 0.1); norm weights
    1 + 0.1 N(0, 1), Gemma's (stored as w of 1 + w) 0.1 N(0, 1)."""
    g = torch.Generator().manual_seed(seed)
    gemma = name.startswith("gemma")
    with torch.no_grad():
        for pname, p in model.named_parameters():
            n = torch.randn(p.shape, generator=g, dtype=torch.float64)
            if "norm" in pname:
                v = 0.1 * n if gemma else 1.0 + 0.1 * n
            elif pname.endswith("bias"):
                v = 0.1 * n
            elif "q_proj" in pname or "k_proj" in pname or "qkv_proj" in pname:
                v = 0.2 * n
            else:
                v = 0.1 * n
            p.copy_(v.to(torch.float32))


def make(name, spec, out, seed):
    model = build(name, spec)
    init_weights(model, name, seed)
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    model.save_pretrained(d, safe_serialization=True)
    for extra in ("generation_config.json",):
        if os.path.exists(os.path.join(d, extra)):
            os.remove(os.path.join(d, extra))
    g = torch.Generator().manual_seed(seed + 1)
    V = model.config.vocab_size
    inputs = torch.randint(0, V, (B, T), generator=g)
    targets = torch.randint(0, V, (B, T), generator=g)
    targets[0, :3] = -1  # a prompt the loss ignores
    targets[1, 7] = -1
    m64 = model.to(torch.float64)
    m64.zero_grad()
    logits = m64(input_ids=inputs).logits
    loss = F.cross_entropy(logits.reshape(-1, V), targets.reshape(-1), ignore_index=-1)
    loss.backward()
    tensors = {"inputs": inputs.to(torch.int32), "targets": targets.to(torch.int32),
               "logits": logits.detach().to(torch.float32).contiguous(),
               "loss": loss.detach().reshape(1).to(torch.float32)}
    seen = set()
    for pname, p in m64.named_parameters():
        if p.grad is None or id(p) in seen:
            continue
        seen.add(id(p))
        tensors["grad." + pname] = p.grad.to(torch.float32).contiguous()
    save_file(tensors, os.path.join(d, "expected.safetensors"))
    return float(loss), sum(p.numel() for p in model.parameters())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="tests/data/families")
    ap.add_argument("--only", default="")
    ap.add_argument("--seed", type=int, default=4321)
    a = ap.parse_args()
    import transformers
    fams = families()
    only = [x for x in a.only.split(",") if x]
    rows = []
    for name, spec in fams.items():
        if only and name not in only:
            continue
        loss, n = make(name, spec, a.out, a.seed)
        rows.append((name, spec[1].__name__, n, loss))
        print(f"{name}: {spec[1].__name__}, {n} parameters, loss {loss:.6f}", file=sys.stderr)
    with open(os.path.join(a.out, "README.md"), "w") as f:
        f.write("# families: golden data for every llama-like family\n\n")
        f.write("Made by `python3 tools/make_family_golden.py --out tests/data/families` "
                f"(torch {torch.__version__}, transformers {transformers.__version__}); what "
                "each config exercises is in the script. B = 2, T = 16; the reference is "
                "transformers in float64 (eager attention), stored as fp32.\n\n")
        f.write("| family | class | parameters | loss |\n|---|---|---|---|\n")
        for r in rows:
            f.write(f"| {r[0]} | {r[1]} | {r[2]} | {r[3]:.6f} |\n")


if __name__ == "__main__":
    main()
