#!/usr/bin/env python3
"""Golden data for a Llama-architecture model: a tiny random Hugging Face LlamaForCausalLM,
its logits, loss, every parameter gradient and layer-0 intermediates.

Writes to tests/data/llama_tiny/ (committed; CI never runs this script):
  config.json                 the Hugging Face config (save_pretrained)
  model.safetensors           fp32 weights, Hugging Face names, nn.Linear (out, in) layout
                              (save_pretrained; from_pretrained loads it back)
  expected.safetensors        same conventions as tests/data/golden/tiny_gpt_expected.safetensors:
                              inputs I32 [B,T], targets I32 [B,T] (-1 = ignored, already aligned:
                              logits[b,t] is scored against targets[b,t]), logits F32 [B,T,V],
                              loss F32 [1] (mean CE over non-ignored targets), loss_f64 F64 [1],
                              grad.<HF name> F32 for every parameter
  intermediates.safetensors   layer-0 (and a few other) activations of the float64 reference, F32
  README.md                   how it was made, versions, layouts, conventions, observed tolerances

The reference is the Hugging Face model itself (attn_implementation="eager") run in float64 from
the stored fp32 weights. Stock transformers upcasts to float32 in three places even in a float64
model (RMSNorm's variance, the eager softmax, and the RoPE cos/sin tables); for the reference those
three are patched to stay in float64, so the only error in the files is the final rounding to fp32.
It is cross-checked four ways (the script fails rather than write data that disagrees):
  1. an independent plain-ops float64 implementation in this file (same logits/loss/grads);
  2. central differences in float64 on random elements of every parameter tensor;
  3. stock (unpatched) transformers in float64 agrees to ~fp32 rounding;
  4. stock transformers in float32 (what the observed fp32-vs-fp64 tolerance in README.md is).

Usage: python3 tools/make_llama_golden.py [--out tests/data/llama_tiny] [--seed 1234]
Needs: pip install -r tools/requirements-golden.txt   (torch, transformers, safetensors, numpy)
"""
import argparse
import json
import math
import os
import shutil
import struct
import sys
import tempfile

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save

CFG = dict(hidden=64, layers=2, heads=4, kv_heads=2, intermediate=88, vocab=200, max_pos=64,
           rope_theta=10000.0, eps=1e-5, batch=2, seq_len=16)
FILES = ("config.json", "model.safetensors", "expected.safetensors", "intermediates.safetensors",
         "README.md")


# --------------------------------------------------------------------------- model and data

def hf_config(c):
    from transformers import LlamaConfig
    return LlamaConfig(
        vocab_size=c["vocab"], hidden_size=c["hidden"], intermediate_size=c["intermediate"],
        num_hidden_layers=c["layers"], num_attention_heads=c["heads"],
        num_key_value_heads=c["kv_heads"], hidden_act="silu",
        max_position_embeddings=c["max_pos"], rms_norm_eps=c["eps"],
        rope_parameters={"rope_type": "default", "rope_theta": c["rope_theta"]},
        tie_word_embeddings=False, attention_bias=False, mlp_bias=False, attention_dropout=0.0,
        bos_token_id=1, eos_token_id=2, pad_token_id=None, use_cache=False,
        architectures=["LlamaForCausalLM"])


def make_model(c, dtype):
    from transformers import LlamaForCausalLM
    torch.manual_seed(0)  # HF's own init is overwritten below; this only makes it quiet/deterministic
    model = LlamaForCausalLM._from_config(hf_config(c), attn_implementation="eager",
                                          dtype=torch.float32)
    return model.to(dtype).eval()


def make_weights(model, seed):
    """fp32 weights in the model's parameter order: N(0, 0.1) for every matrix (q/k: 0.2, so the
    attention pattern is far from uniform and RoPE matters), RMSNorm weights 1 + 0.1 N(0, 1)."""
    g = torch.Generator().manual_seed(seed)
    w = {}
    for name, p in model.named_parameters():
        if name.endswith("norm.weight"):
            t = 1.0 + 0.1 * torch.randn(p.shape, generator=g, dtype=torch.float64)
        else:
            std = 0.2 if (".q_proj." in name or ".k_proj." in name) else 0.1
            t = std * torch.randn(p.shape, generator=g, dtype=torch.float64)
        w[name] = t.float().contiguous()
    return w


def make_batch(c, seed):
    """Next-token batch: a random sequence of T+1 tokens per row; inputs = seq[:, :T],
    targets = seq[:, 1:] (already shifted, aligned with logits), a few positions ignored (-1)."""
    B, T, V = c["batch"], c["seq_len"], c["vocab"]
    g = torch.Generator().manual_seed(seed + 1)
    seq = torch.randint(0, V, (B, T + 1), generator=g, dtype=torch.int64)
    inputs, targets = seq[:, :T].clone(), seq[:, 1:].clone()
    targets[0, 0] = -1
    targets[1, 7] = -1
    targets[1, T - 1] = -1
    return inputs, targets


# --------------------------------------------------------------------------- float64 patches

class Float64Patches:
    """Keep stock transformers' Llama in the model's dtype where it upcasts to float32."""

    def __init__(self, capture=None):
        self.capture = capture  # dict: filled with layer-0 q/k (post-RoPE), v, probs, cos, sin

    def __enter__(self):
        from transformers.models.llama import modeling_llama as m
        self.m = m
        self.saved = (m.LlamaRMSNorm.forward, m.eager_attention_forward,
                      m.LlamaRotaryEmbedding.forward)
        cap = self.capture

        def rms_forward(self_, x):
            var = x.pow(2).mean(-1, keepdim=True)
            return self_.weight * (x * torch.rsqrt(var + self_.variance_epsilon))

        def rope_forward(self_, x, position_ids):
            dim = self_.inv_freq.numel() * 2
            theta = self_.config.rope_parameters["rope_theta"]
            inv = 1.0 / (theta ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
            freqs = position_ids[..., None].to(torch.float64) * inv
            emb = torch.cat((freqs, freqs), dim=-1)
            cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
            if cap is not None and "cos" not in cap:
                cap["cos"], cap["sin"] = cos[0], sin[0]
            return cos, sin

        def eager(module, query, key, value, attention_mask, scaling, dropout=0.0, **kw):
            k = m.repeat_kv(key, module.num_key_value_groups)
            v = m.repeat_kv(value, module.num_key_value_groups)
            s = torch.matmul(query, k.transpose(2, 3)) * scaling
            if attention_mask is not None:
                s = s + attention_mask
            else:  # transformers may hand eager no mask and rely on is_causal; do it ourselves
                T = query.shape[-2]
                s = s.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf"))
            probs = F.softmax(s, dim=-1)
            out = torch.matmul(probs, v)
            if cap is not None and module.layer_idx == 0:
                cap["q"], cap["k"], cap["v"], cap["probs"] = query, key, value, probs
            return out.transpose(1, 2).contiguous(), probs

        m.LlamaRMSNorm.forward = rms_forward
        m.LlamaRotaryEmbedding.forward = rope_forward
        m.eager_attention_forward = eager
        return self

    def __exit__(self, *exc):
        m = self.m
        m.LlamaRMSNorm.forward, m.eager_attention_forward, m.LlamaRotaryEmbedding.forward = self.saved
        return False


# --------------------------------------------------------------------------- runs

def ce_loss(logits, targets):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1),
                           ignore_index=-1)


def run_hf(c, w32, inputs, targets, dtype, patched, capture=None):
    """Forward + backward of the HF model; returns logits, loss, grads (and fills capture)."""
    model = make_model(c, dtype)
    with torch.no_grad():
        params = dict(model.named_parameters())
        for k, v in w32.items():
            params[k].copy_(v.to(dtype))
    hooks = []
    if capture is not None:
        layer0 = model.model.layers[0]

        def keep(name):
            def hook(mod, args, out):
                t = out[0] if isinstance(out, tuple) else out
                if name == "layer0.output":
                    t.retain_grad()
                capture[name] = t
            return hook

        def keep_input(name):
            def hook(mod, args):
                capture[name] = args[0]
            return hook

        hooks += [model.model.embed_tokens.register_forward_hook(keep("embed_tokens")),
                  layer0.input_layernorm.register_forward_hook(keep("layer0.input_layernorm")),
                  layer0.self_attn.o_proj.register_forward_pre_hook(keep_input("layer0.attn_out")),
                  layer0.register_forward_hook(keep("layer0.output"))]
    ctx = Float64Patches(capture) if patched else None
    if ctx:
        ctx.__enter__()
    try:
        pos = torch.arange(inputs.shape[1]).unsqueeze(0).expand_as(inputs)
        out = model(input_ids=inputs, position_ids=pos, use_cache=False)
        loss = ce_loss(out.logits, targets)
        loss.backward()
    finally:
        if ctx:
            ctx.__exit__(None, None, None)
        for h in hooks:
            h.remove()
    grads = {k: p.grad.detach().clone() for k, p in model.named_parameters()}
    return out.logits.detach(), loss.detach(), grads


def plain_forward(c, w, inputs, targets):
    """Independent plain-ops Llama (no transformers), in the dtype of w."""
    B, T = inputs.shape
    H, KV = c["heads"], c["kv_heads"]
    hd = c["hidden"] // H
    dt = w["lm_head.weight"].dtype

    def rms(x, g):
        return g * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + c["eps"]))

    def rot(x):
        return torch.cat((-x[..., hd // 2:], x[..., :hd // 2]), dim=-1)

    inv = 1.0 / (c["rope_theta"] ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
    ang = torch.arange(T, dtype=torch.float64)[:, None] * inv[None, :]
    cos = torch.cat((ang, ang), -1).cos().to(dt)
    sin = torch.cat((ang, ang), -1).sin().to(dt)
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    x = w["model.embed_tokens.weight"][inputs]
    for i in range(c["layers"]):
        p = f"model.layers.{i}."
        h = rms(x, w[p + "input_layernorm.weight"])
        q = (h @ w[p + "self_attn.q_proj.weight"].T).view(B, T, H, hd).transpose(1, 2)
        k = (h @ w[p + "self_attn.k_proj.weight"].T).view(B, T, KV, hd).transpose(1, 2)
        v = (h @ w[p + "self_attn.v_proj.weight"].T).view(B, T, KV, hd).transpose(1, 2)
        q, k = q * cos + rot(q) * sin, k * cos + rot(k) * sin
        k = k.repeat_interleave(H // KV, dim=1)  # query head j uses kv head j // (H/KV)
        v = v.repeat_interleave(H // KV, dim=1)
        s = (q @ k.transpose(-2, -1)) / math.sqrt(hd)
        y = s.masked_fill(~mask, float("-inf")).softmax(-1) @ v
        x = x + y.transpose(1, 2).reshape(B, T, H * hd) @ w[p + "self_attn.o_proj.weight"].T
        h = rms(x, w[p + "post_attention_layernorm.weight"])
        a = F.silu(h @ w[p + "mlp.gate_proj.weight"].T) * (h @ w[p + "mlp.up_proj.weight"].T)
        x = x + a @ w[p + "mlp.down_proj.weight"].T
    logits = rms(x, w["model.norm.weight"]) @ w["lm_head.weight"].T
    return logits, ce_loss(logits, targets)


def run_plain(c, w32, inputs, targets):
    w = {k: v.double().clone().requires_grad_(True) for k, v in w32.items()}
    logits, loss = plain_forward(c, w, inputs, targets)
    loss.backward()
    return logits.detach(), loss.detach(), {k: v.grad for k, v in w.items()}


def finite_differences(c, w32, inputs, targets, ref_grads, per_tensor=3, eps=1e-6):
    w = {k: v.double().clone() for k, v in w32.items()}
    g = torch.Generator().manual_seed(99)
    worst = 0.0
    for k, v in w.items():
        flat = v.view(-1)
        for idx in torch.randint(0, flat.numel(), (per_tensor,), generator=g).tolist():
            old = flat[idx].item()
            flat[idx] = old + eps
            lp = plain_forward(c, w, inputs, targets)[1].item()
            flat[idx] = old - eps
            lm = plain_forward(c, w, inputs, targets)[1].item()
            flat[idx] = old
            an = ref_grads[k].view(-1)[idx].item()
            worst = max(worst, abs((lp - lm) / (2 * eps) - an) / max(abs(an), 1e-4))
    return worst


# --------------------------------------------------------------------------- comparisons

def save_safetensors(tensors, path, meta):
    """safetensors.torch.save_file, but with the metadata keys in sorted order: the Rust writer
    emits them in hash order, which differs run to run and would make reruns not byte-identical."""
    raw = save(tensors, meta)
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    header["__metadata__"] = dict(sorted(header["__metadata__"].items()))
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + raw[8 + n:])


def max_abs(a, b):
    return (a.double() - b.double()).abs().max().item()


def max_rel(a, b):  # max |a-b| over max |b| (per tensor), as the C++ golden tests use
    return max_abs(a, b) / max(b.double().abs().max().item(), 1e-30)


def compare(name, logits, loss, grads, ref):
    rl, rloss, rg = ref
    r = {"logits_max_abs": max_abs(logits, rl), "logits_max_rel": max_rel(logits, rl),
         "logits_tol_use": ((logits.double() - rl).abs() / (1e-5 + 1e-4 * rl.abs())).max().item(),
         "loss_abs": max_abs(loss, rloss),
         "grad_max_abs": max(max_abs(grads[k], rg[k]) for k in rg),
         "grad_max_rel": max(max_rel(grads[k], rg[k]) for k in rg),
         "grad_worst_tensor": max(rg, key=lambda k: max_rel(grads[k], rg[k]))}
    print(f"{name}: logits max abs {r['logits_max_abs']:.2e} (rel {r['logits_max_rel']:.2e}), "
          f"loss abs {r['loss_abs']:.2e}, grads max abs {r['grad_max_abs']:.2e} "
          f"(max rel-to-tensor-max {r['grad_max_rel']:.2e}, in {r['grad_worst_tensor']})")
    return r


# --------------------------------------------------------------------------- README

def readme(c, args, ref_loss, shapes_w, shapes_e, shapes_i, chk, sizes):
    import safetensors
    import transformers
    B, T, V = c["batch"], c["seq_len"], c["vocab"]
    H, KV, C = c["heads"], c["kv_heads"], c["hidden"]
    hd = C // H
    f32, hfr = chk["fp32"], chk["stock64"]

    def table(shapes):
        return "\n".join(f"| `{k}` | {dt} | {list(s)} |" for k, (dt, s) in shapes.items())

    return f"""# llama_tiny: golden data for the Llama architecture

A tiny random Hugging Face `LlamaForCausalLM` (GQA, RoPE, RMSNorm, SwiGLU, untied LM head), one
fixed batch, and its logits, loss, every parameter gradient and layer-0 intermediates.

Made by (deterministic: with the same versions a rerun writes byte-identical files; it takes
about 10 s on one core):

    pip install -r tools/requirements-golden.txt
    python3 tools/make_llama_golden.py --out tests/data/llama_tiny --seed {args.seed}

Versions used: torch {torch.__version__}, transformers {transformers.__version__},
safetensors {safetensors.__version__}, Python {sys.version.split()[0]}.

## Model (`config.json`, the Hugging Face config written by `save_pretrained`)

hidden_size {C}, num_hidden_layers {c['layers']}, num_attention_heads {H}, num_key_value_heads {KV}
(GQA, {H // KV} query heads per kv head), head_dim {hd}, intermediate_size {c['intermediate']},
vocab_size {V}, max_position_embeddings {c['max_pos']}, rope_theta {c['rope_theta']:g} (transformers 5
writes it as `rope_parameters.rope_theta`, with `rope_type: "default"`; older configs have a
top-level `rope_theta`: read both), rms_norm_eps {c['eps']:g}, hidden_act silu,
tie_word_embeddings false, attention_bias false, mlp_bias false, no dropout;
attn_implementation "eager" (a runtime choice, not stored in config.json).

intermediate_size {c['intermediate']} and vocab_size {V} are deliberately not multiples of 64 (nor 16)
to catch kernel tail bugs, and small so that the folder stays well under 1 MB
(`--intermediate-size 176 --vocab-size 300` regenerates a larger variant, about 1.2 MB).

Weights (`model.safetensors`, fp32, {sizes['params']} parameters): every matrix N(0, 0.1) except
q_proj/k_proj N(0, 0.2) (so attention is far from uniform and RoPE matters); every RMSNorm weight
1 + 0.1 N(0, 1) (so the norm weight matters). One torch.Generator seeded with --seed, in
`named_parameters()` order. Loss of the batch {ref_loss:.6f} vs ln V = {math.log(V):.6f}.

The forward, as transformers computes it:

    x = embed_tokens[inputs]                                   # [B,T,C]
    per layer: h = input_layernorm(x)
               q = h @ q_proj^T -> [B,T,{H},{hd}] -> [B,{H},T,{hd}];  k, v = h @ k_proj^T, h @ v_proj^T -> [B,{KV},T,{hd}]
               q, k = q*cos + rotate_half(q)*sin, k*cos + rotate_half(k)*sin
               query head j attends with kv head j // {H // KV}  (repeat_kv = repeat_interleave on the head axis)
               a = softmax(q k^T / sqrt({hd}) + causal mask) v -> [B,T,{H}*{hd}] (head j = columns j*{hd}..(j+1)*{hd})
               x = x + a @ o_proj^T
               h = post_attention_layernorm(x)
               x = x + (silu(h @ gate_proj^T) * (h @ up_proj^T)) @ down_proj^T
    logits = norm(x) @ lm_head^T                               # [B,T,V]
    RMSNorm(x) = weight * x / sqrt(mean(x^2 over C) + eps)     # no bias, no mean subtraction

Layouts: every weight is an nn.Linear weight, **[out, in]** (y = x W^T), row-major:
q_proj [{H * hd}, {C}] = [heads*head_dim, hidden], k_proj and v_proj [{KV * hd}, {C}] = [kv_heads*head_dim, hidden],
o_proj [{C}, {H * hd}], gate_proj and up_proj [{c['intermediate']}, {C}], down_proj [{C}, {c['intermediate']}],
embed_tokens and lm_head [{V}, {C}]. Within q_proj's output, head j is rows j*{hd}..(j+1)*{hd} (same for k/v with kv heads).

RoPE convention: Hugging Face / GPT-NeoX **rotate_half** (not the interleaved-pairs form of the
original Meta checkpoint): for position p and i in 0..{hd // 2 - 1}, angle = p * theta^(-2i/{hd});
cos/sin tables are [T, {hd}] = cat(angle, angle); rotate_half(x) = cat(-x[{hd // 2}:], x[:{hd // 2}]),
so dims i and i+{hd // 2} form a rotation pair. Positions are 0..T-1 for every row (no padding, no mask
other than causal). Attention scale 1/sqrt(head_dim).

## Batch, loss, gradients (`expected.safetensors`; same keys and conventions as tests/data/golden)

B={B}, T={T}. Each row is a random sequence s of T+1 tokens: `inputs = s[:, :T]`,
`targets = s[:, 1:]`, i.e. already shifted: `logits[b,t]` is scored against `targets[b,t]`
(the HF `labels=` shift is *not* applied again). Positions with target -1 are ignored:
(0,0), (1,7), (1,{T - 1}). `loss` = mean cross-entropy over the non-ignored targets ({B * T - 3} of them).
`grad.<name>` is d loss / d parameter for every parameter, Hugging Face names.

Precision: the reference is the HF model in **float64** from the stored fp32 weights, with
transformers' three float32 upcasts (RMSNorm variance, eager softmax, RoPE cos/sin) patched to stay
in float64. logits, loss and all grads are stored **fp32** (rounded from float64), `loss_f64`
in fp64. The same applies to `intermediates.safetensors` (fp32 from the float64 run).

Cross-checks the script runs before writing:
- an independent plain-ops float64 Llama in the script (no transformers; same op order, so 0
  means bit-identical): logits max abs {chk['plain']['logits_max_abs']:.1e}, grads max abs {chk['plain']['grad_max_abs']:.1e};
- central differences (float64, 3 elements of every tensor): max relative error {chk['fd']:.1e};
- stock transformers in float64 (its float32 upcasts left in): logits max abs {hfr['logits_max_abs']:.1e},
  grads max abs {hfr['grad_max_abs']:.1e}.

## Observed fp32 vs fp64 (for the C++ test's tolerance)

Stock transformers in float32 (same weights, same batch) against the float64 reference:

| quantity | max abs diff | max abs diff / max abs of the tensor |
| --- | --- | --- |
| logits | {f32['logits_max_abs']:.2e} | {f32['logits_max_rel']:.2e} |
| loss | {f32['loss_abs']:.2e} | {f32['loss_abs'] / ref_loss:.2e} |
| grads (worst tensor) | {f32['grad_max_abs']:.2e} | {f32['grad_max_rel']:.2e} (`{f32['grad_worst_tensor']}`) |

A float32 engine should meet the same tolerances as the GPT-2 golden test
(tests/engine/GoldenTest.cpp): per element, logits and loss within 1e-5 + 1e-4 |expected|,
gradients within 1e-3 of the tensor's max |g|. PyTorch's own fp32 run uses at most
{100 * f32['logits_tol_use']:.1f}% of that logit tolerance and {100 * f32['grad_max_rel'] / 1e-3:.1f}% of that gradient tolerance.

## Tensors

`model.safetensors` (F32; HF metadata `format: pt`):

| name | dtype | shape |
| --- | --- | --- |
{table(shapes_w)}

`expected.safetensors`:

| name | dtype | shape |
| --- | --- | --- |
{table(shapes_e)}

`intermediates.safetensors` (F32, float64 run, batch as above; `layer0.*` = first decoder layer):

| name | dtype | shape | what |
| --- | --- | --- | --- |
{chr(10).join(f"| `{k}` | {dt} | {list(s)} | {INTERMEDIATE_DOC[k]} |" for k, (dt, s) in shapes_i.items())}
"""


INTERMEDIATE_DOC = {
    "embed_tokens": "input embeddings, embed_tokens[inputs]",
    "rope.cos": "RoPE cos table for positions 0..T-1, cat(angle, angle)",
    "rope.sin": "RoPE sin table",
    "layer0.input_layernorm": "output of layer 0's input RMSNorm (weight applied)",
    "layer0.q_rope": "queries after RoPE, [B, heads, T, head_dim]",
    "layer0.k_rope": "keys after RoPE, [B, kv_heads, T, head_dim] (before repeat_kv)",
    "layer0.v": "values, [B, kv_heads, T, head_dim] (before repeat_kv)",
    "layer0.attn_probs": "softmax(q k^T / sqrt(head_dim) + causal mask), [B, heads, T, T]",
    "layer0.attn_out": "attention output before o_proj, [B, T, heads*head_dim]",
    "layer0.output": "layer 0's output hidden state (input of layer 1)",
    "grad.layer0.output": "d loss / d (layer 0's output hidden state)",
}


# --------------------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--out", default=os.path.join(here, "..", "tests", "data", "llama_tiny"))
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--intermediate-size", type=int, default=CFG["intermediate"])
    ap.add_argument("--vocab-size", type=int, default=CFG["vocab"])
    args = ap.parse_args()
    c = dict(CFG, intermediate=args.intermediate_size, vocab=args.vocab_size)
    torch.set_num_threads(1)  # modest CPU use, and one summation order run to run
    torch.manual_seed(args.seed)
    torch.use_deterministic_algorithms(True)
    from transformers.utils import logging as hf_logging
    hf_logging.set_verbosity_error()

    model32 = make_model(c, torch.float32)
    w32 = make_weights(model32, args.seed)
    inputs, targets = make_batch(c, args.seed)

    cap = {}
    ref = run_hf(c, w32, inputs, targets, torch.float64, patched=True, capture=cap)
    logits, loss, grads = ref

    # Cross-checks: fail loudly rather than write wrong golden data.
    chk = {"plain": compare("plain-ops float64 vs reference", *run_plain(c, w32, inputs, targets), ref)}
    assert chk["plain"]["logits_max_abs"] < 1e-12 and chk["plain"]["grad_max_rel"] < 1e-11, chk["plain"]
    chk["fd"] = finite_differences(c, w32, inputs, targets, grads)
    print(f"central differences (float64, 3 elements per tensor): max relative error {chk['fd']:.2e}")
    assert chk["fd"] < 1e-5, chk["fd"]
    chk["stock64"] = compare("stock transformers float64 vs reference",
                             *run_hf(c, w32, inputs, targets, torch.float64, patched=False), ref)
    assert chk["stock64"]["logits_max_rel"] < 1e-5 and chk["stock64"]["grad_max_rel"] < 1e-4
    chk["fp32"] = compare("stock transformers float32 vs reference",
                          *run_hf(c, w32, inputs, targets, torch.float32, patched=False), ref)
    assert chk["fp32"]["logits_max_rel"] < 1e-4 and chk["fp32"]["grad_max_rel"] < 1e-3, chk["fp32"]

    # Sanity: the batch is not trivial.
    assert abs(loss.item() - math.log(c["vocab"])) > 0.05, loss.item()
    for k, g in grads.items():
        assert g.abs().max().item() > 1e-6, k
    probs = cap["probs"]
    assert probs[..., 4:, :].max().item() > 0.5, "attention is close to uniform"

    os.makedirs(args.out, exist_ok=True)
    for name in os.listdir(args.out):  # only what this script writes lives here
        if name not in FILES:
            raise SystemExit(f"{args.out} holds {name}, which this script does not write")

    # config.json + model.safetensors via save_pretrained, written to a temp dir then moved.
    with torch.no_grad():
        for k, p in model32.named_parameters():
            p.copy_(w32[k])
    with tempfile.TemporaryDirectory() as tmp:
        model32.save_pretrained(tmp)
        for name in ("config.json", "model.safetensors"):
            shutil.copyfile(os.path.join(tmp, name), os.path.join(args.out, name))
    back = load_file(os.path.join(args.out, "model.safetensors"))
    assert set(back) == set(w32), set(back) ^ set(w32)
    assert all(torch.equal(back[k], w32[k]) and back[k].dtype == torch.float32 for k in w32)

    meta = {"format": "trainscope-golden-v1", "generator": "tools/make_llama_golden.py",
            "seed": str(args.seed), "torch": torch.__version__, "reference": "float64, stored fp32"}
    expected = {"inputs": inputs.to(torch.int32), "targets": targets.to(torch.int32),
                "logits": logits.float().contiguous(), "loss": loss.float().reshape(1),
                "loss_f64": loss.double().reshape(1)}
    for k, g in grads.items():
        expected["grad." + k] = g.float().contiguous()
    save_safetensors(expected, os.path.join(args.out, "expected.safetensors"), meta)

    inter = {"embed_tokens": cap["embed_tokens"], "rope.cos": cap["cos"], "rope.sin": cap["sin"],
             "layer0.input_layernorm": cap["layer0.input_layernorm"],
             "layer0.q_rope": cap["q"], "layer0.k_rope": cap["k"], "layer0.v": cap["v"],
             "layer0.attn_probs": cap["probs"], "layer0.attn_out": cap["layer0.attn_out"],
             "layer0.output": cap["layer0.output"],
             "grad.layer0.output": cap["layer0.output"].grad}
    assert list(inter) == list(INTERMEDIATE_DOC)
    inter = {k: v.detach().float().contiguous() for k, v in inter.items()}
    save_safetensors(inter, os.path.join(args.out, "intermediates.safetensors"), meta)

    def shapes(path):
        from safetensors import safe_open
        with safe_open(path, "pt") as f:
            return {k: (str(f.get_slice(k).get_dtype()), f.get_slice(k).get_shape()) for k in f.keys()}

    sw = shapes(os.path.join(args.out, "model.safetensors"))
    sw = {k: sw[k] for k in w32}  # parameter order
    se = shapes(os.path.join(args.out, "expected.safetensors"))
    se = {k: se[k] for k in expected}
    si = shapes(os.path.join(args.out, "intermediates.safetensors"))
    si = {k: si[k] for k in INTERMEDIATE_DOC}
    sizes = {"params": sum(v.numel() for v in w32.values())}
    with open(os.path.join(args.out, "README.md"), "w") as f:
        f.write(readme(c, args, loss.item(), sw, se, si, chk, sizes))
    for name in FILES:
        os.chmod(os.path.join(args.out, name), 0o644)  # safetensors writes 0600
    total = sum(os.path.getsize(os.path.join(args.out, n)) for n in FILES)
    print(f"loss {loss.item():.6f} (ln V = {math.log(c['vocab']):.6f}); wrote {args.out} "
          f"({total / 1024:.0f} KiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
