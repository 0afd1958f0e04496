#!/usr/bin/env python3
"""Golden data for the engine's GPT: a tiny GPT-2 in PyTorch, its logits, loss and gradients.

Writes to tests/data/golden/ (committed; CI never runs this script):
  tiny_gpt.safetensors           fp32 weights, names and (out, in) layout of nn.Linear
  tiny_gpt.json                  the shape and conventions (keys as in the run config's "model")
  tiny_gpt_expected.safetensors  inputs I32 [B,T], targets I32 [B,T] (-1 = ignored),
                                 logits F32 [B,T,V], loss F32 [1] (mean CE over non-ignored
                                 targets), grad.<name> F32 for every parameter

The model: token + learned position embedding, pre-LN blocks
  x = x + c_proj(attn(ln_1(x)));  x = x + mlp.c_proj(gelu_tanh(mlp.c_fc(ln_2(x))))
final ln_f, LM head tied to wte (logits = ln_f(x) @ wte^T). c_attn's 3C outputs are [q | k | v],
heads contiguous within each (head h uses columns h*hd .. (h+1)*hd). Causal softmax(QK^T/sqrt(hd))V.
LayerNorm eps 1e-5, GELU with the tanh approximation (GPT-2's).

The reference is computed in float64 from the stored fp32 weights (so the only error in the
files is the final rounding to fp32), and cross-checked three ways:
  1. an fp32 forward/backward of the same code agrees to ~1e-6 relative;
  2. central differences in float64 on random elements of every parameter tensor agree;
  3. when `transformers` is installed, Hugging Face's GPT2LMHeadModel (its Conv1D stores
     weights (in, out), so they are transposed in) gives the same logits, loss and gradients.

Usage: python tools/make_golden.py [--out tests/data/golden] [--seed 1234]
Needs: pip install torch safetensors numpy  (optional: transformers)
"""
import argparse
import json
import math
import os
import sys

import torch
import torch.nn.functional as F
from safetensors.torch import save_file

CFG = dict(layers=2, heads=4, d_model=32, seq_len=16, vocab=64, batch=3)
LN_EPS = 1e-5


def param_names(layers):
    names = ["wte", "wpe"]
    for i in range(layers):
        p = f"h.{i}."
        names += [p + "ln_1.weight", p + "ln_1.bias", p + "attn.c_attn.weight", p + "attn.c_attn.bias",
                  p + "attn.c_proj.weight", p + "attn.c_proj.bias", p + "ln_2.weight", p + "ln_2.bias",
                  p + "mlp.c_fc.weight", p + "mlp.c_fc.bias", p + "mlp.c_proj.weight", p + "mlp.c_proj.bias"]
    return names + ["ln_f.weight", "ln_f.bias"]


def make_weights(seed):
    L, C, T, V = CFG["layers"], CFG["d_model"], CFG["seq_len"], CFG["vocab"]
    g = torch.Generator().manual_seed(seed)

    def rnd(*shape, std=0.1, mean=0.0):
        return (torch.randn(*shape, generator=g, dtype=torch.float64) * std + mean).float()

    w = {"wte": rnd(V, C, std=0.2), "wpe": rnd(T, C, std=0.1)}
    for i in range(L):
        p = f"h.{i}."
        w[p + "ln_1.weight"] = rnd(C, mean=1.0)
        w[p + "ln_1.bias"] = rnd(C)
        w[p + "attn.c_attn.weight"] = rnd(3 * C, C, std=0.2)  # larger: non-uniform attention
        w[p + "attn.c_attn.bias"] = rnd(3 * C)
        w[p + "attn.c_proj.weight"] = rnd(C, C)
        w[p + "attn.c_proj.bias"] = rnd(C)
        w[p + "ln_2.weight"] = rnd(C, mean=1.0)
        w[p + "ln_2.bias"] = rnd(C)
        w[p + "mlp.c_fc.weight"] = rnd(4 * C, C)
        w[p + "mlp.c_fc.bias"] = rnd(4 * C)
        w[p + "mlp.c_proj.weight"] = rnd(C, 4 * C)
        w[p + "mlp.c_proj.bias"] = rnd(C)
    w["ln_f.weight"] = rnd(C, mean=1.0)
    w["ln_f.bias"] = rnd(C)
    assert list(w) == param_names(L)
    return w


def make_batch(seed):
    B, T, V = CFG["batch"], CFG["seq_len"], CFG["vocab"]
    g = torch.Generator().manual_seed(seed + 1)
    inputs = torch.randint(0, V, (B, T), generator=g, dtype=torch.int64)
    targets = torch.randint(0, V, (B, T), generator=g, dtype=torch.int64)
    # A few ignored positions (-1), as the engine's data sources produce them.
    targets[0, 0] = -1
    targets[1, 5] = -1
    targets[1, 6] = -1
    targets[2, T - 1] = -1
    return inputs, targets


def forward(w, inputs, targets, heads, layers):
    """Plain-ops GPT-2 forward; returns (logits, loss)."""
    B, T = inputs.shape
    C = w["wte"].shape[1]
    hd = C // heads
    x = w["wte"][inputs] + w["wpe"][:T].unsqueeze(0)
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    for i in range(layers):
        p = f"h.{i}."
        h = F.layer_norm(x, (C,), w[p + "ln_1.weight"], w[p + "ln_1.bias"], LN_EPS)
        qkv = h @ w[p + "attn.c_attn.weight"].T + w[p + "attn.c_attn.bias"]
        q, k, v = qkv.split(C, dim=-1)
        q = q.view(B, T, heads, hd).transpose(1, 2)
        k = k.view(B, T, heads, hd).transpose(1, 2)
        v = v.view(B, T, heads, hd).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hd)
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + y @ w[p + "attn.c_proj.weight"].T + w[p + "attn.c_proj.bias"]
        h = F.layer_norm(x, (C,), w[p + "ln_2.weight"], w[p + "ln_2.bias"], LN_EPS)
        h = F.gelu(h @ w[p + "mlp.c_fc.weight"].T + w[p + "mlp.c_fc.bias"], approximate="tanh")
        x = x + h @ w[p + "mlp.c_proj.weight"].T + w[p + "mlp.c_proj.bias"]
    x = F.layer_norm(x, (C,), w["ln_f.weight"], w["ln_f.bias"], LN_EPS)
    logits = x @ w["wte"].T
    loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), ignore_index=-1)
    return logits, loss


def run(w32, inputs, targets, dtype):
    w = {k: v.to(dtype).clone().requires_grad_(True) for k, v in w32.items()}
    logits, loss = forward(w, inputs, targets, CFG["heads"], CFG["layers"])
    loss.backward()
    return logits.detach(), loss.detach(), {k: v.grad.detach() for k, v in w.items()}


def max_rel(a, b):
    return ((a.double() - b.double()).abs().max() / b.double().abs().max().clamp_min(1e-30)).item()


def check_finite_differences(w32, inputs, targets, ref_grads, per_tensor=4, eps=1e-6):
    """Central differences in float64 on a few random elements of every parameter tensor."""
    w = {k: v.double().clone() for k, v in w32.items()}
    g = torch.Generator().manual_seed(99)
    worst = 0.0
    for k, v in w.items():
        flat = v.view(-1)
        for idx in torch.randint(0, flat.numel(), (per_tensor,), generator=g).tolist():
            old = flat[idx].item()
            flat[idx] = old + eps
            lp = forward(w, inputs, targets, CFG["heads"], CFG["layers"])[1].item()
            flat[idx] = old - eps
            lm = forward(w, inputs, targets, CFG["heads"], CFG["layers"])[1].item()
            flat[idx] = old
            fd = (lp - lm) / (2 * eps)
            an = ref_grads[k].view(-1)[idx].item()
            err = abs(fd - an) / max(abs(an), 1e-4)
            worst = max(worst, err)
    return worst


def check_hf(w32, inputs, targets, ref_logits, ref_loss, ref_grads):
    try:
        from transformers import GPT2Config, GPT2LMHeadModel
    except ImportError:
        print("transformers not installed: skipping the Hugging Face cross-check")
        return None
    C, L = CFG["d_model"], CFG["layers"]
    cfg = GPT2Config(vocab_size=CFG["vocab"], n_positions=CFG["seq_len"], n_embd=C, n_layer=L,
                     n_head=CFG["heads"], bos_token_id=0, eos_token_id=0, activation_function="gelu_new", layer_norm_epsilon=LN_EPS,
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, tie_word_embeddings=True)
    model = GPT2LMHeadModel(cfg).double().eval()
    sd = {}
    for k, v in w32.items():
        t = v.double()
        if k.endswith(".weight") and any(s in k for s in ("c_attn", "c_proj", "c_fc")):
            t = t.T.contiguous()  # HF Conv1D keeps (in, out)
        sd["transformer." + k + (".weight" if k in ("wte", "wpe") else "")] = t
    missing, unexpected = model.load_state_dict(sd, strict=False)
    missing = [m for m in missing if not m.endswith("attn.bias") and m != "lm_head.weight"]
    assert not missing and not unexpected, (missing, unexpected)
    # HF's labels are shifted inside the model; pass our already-shifted targets ourselves.
    out = model(input_ids=inputs)
    loss = F.cross_entropy(out.logits.reshape(-1, CFG["vocab"]), targets.reshape(-1), ignore_index=-1)
    loss.backward()
    errs = {"logits": max_rel(out.logits.detach(), ref_logits), "loss": max_rel(loss.detach(), ref_loss)}
    params = dict(model.named_parameters())
    for k, g in ref_grads.items():
        hk = "transformer." + k + (".weight" if k in ("wte", "wpe") else "")
        hg = params[hk].grad
        if hg.dim() == 2 and k != "wte" and k != "wpe":
            hg = hg.T
        errs["grad." + k] = max_rel(hg, g)
    return errs


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--out", default=os.path.join(here, "..", "tests", "data", "golden"))
    ap.add_argument("--seed", type=int, default=1234)
    args = ap.parse_args()
    torch.manual_seed(args.seed)
    torch.use_deterministic_algorithms(True)

    w32 = make_weights(args.seed)
    inputs, targets = make_batch(args.seed)
    logits, loss, grads = run(w32, inputs, targets, torch.float64)

    # Cross-checks (fail loudly rather than write wrong golden data).
    l32, loss32, g32 = run(w32, inputs, targets, torch.float32)
    worst = max([max_rel(l32, logits), max_rel(loss32, loss)] + [max_rel(g32[k], grads[k]) for k in grads])
    print(f"fp32 vs fp64 reference: max relative error {worst:.2e}")
    assert worst < 1e-4, worst
    fd = check_finite_differences(w32, inputs, targets, grads)
    print(f"central differences (float64, 4 elements per tensor): max relative error {fd:.2e}")
    assert fd < 1e-5, fd
    hf = check_hf(w32, inputs, targets, logits, loss, grads)
    if hf is not None:
        worst_hf = max(hf.values())
        print(f"Hugging Face GPT2LMHeadModel vs reference: max relative error {worst_hf:.2e}")
        assert worst_hf < 1e-10, hf

    # Sanity: the batch is not trivial (non-uniform predictions, real gradients everywhere).
    assert abs(loss.item() - math.log(CFG["vocab"])) > 0.05, loss.item()
    for k, g in grads.items():
        assert g.abs().max().item() > 1e-6, k

    os.makedirs(args.out, exist_ok=True)
    meta = {"format": "trainscope-golden-v1", "generator": "tools/make_golden.py", "seed": str(args.seed),
            "torch": torch.__version__}
    save_file({k: v.contiguous() for k, v in w32.items()}, os.path.join(args.out, "tiny_gpt.safetensors"), meta)
    expected = {"inputs": inputs.to(torch.int32), "targets": targets.to(torch.int32),
                "logits": logits.float().contiguous(), "loss": loss.float().reshape(1)}
    for k, g in grads.items():
        expected["grad." + k] = g.float().contiguous()
    save_file(expected, os.path.join(args.out, "tiny_gpt_expected.safetensors"), meta)
    shape = {
        "model": {"arch": "gpt2", "layers": CFG["layers"], "heads": CFG["heads"], "d_model": CFG["d_model"],
                  "seq_len": CFG["seq_len"], "vocab": CFG["vocab"], "activation": "gelu", "dropout": 0.0},
        "batch": CFG["batch"],
        "gelu": "tanh", "layernorm_eps": LN_EPS, "tied_lm_head": True,
        "weight_layout": "(out, in) as nn.Linear: y = x W^T + b",
        "qkv_layout": "c_attn output = [q | k | v], each C wide, heads contiguous (head h: h*hd..(h+1)*hd)",
        "loss": "mean cross-entropy over targets != -1",
        "reference": "float64 from the fp32 weights, stored as fp32",
        "parameters": {k: list(v.shape) for k, v in w32.items()},
        "loss_value": loss.item(),
        "seed": args.seed,
    }
    with open(os.path.join(args.out, "tiny_gpt.json"), "w") as f:
        json.dump(shape, f, indent=1)
        f.write("\n")
    for name in ("tiny_gpt.safetensors", "tiny_gpt_expected.safetensors", "tiny_gpt.json"):
        os.chmod(os.path.join(args.out, name), 0o644)  # safetensors writes 0600
    print(f"loss {loss.item():.6f} (ln V = {math.log(CFG['vocab']):.6f}); wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
