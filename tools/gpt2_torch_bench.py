#!/usr/bin/env python3
"""GPT-2 124M training throughput in PyTorch, the reference row of scripts/device-check.sh.

The same model and batch as bench/gpu/gpt2-124m.json: 12 layers, 768 wide, 12 heads, seq 1024,
vocab 50304 (tied embeddings), AdamW, bf16 autocast with fp32 master weights, causal
scaled_dot_product_attention (flash on the GPU). Measures the bf16 matmul rate of this GPU first
(the MFU denominator for both rows), then tokens/s eager and with torch.compile. Prints one JSON
object. A tools/ script: PyTorch is used here only, never by the product or its tests.

  python3 tools/gpt2_torch_bench.py [--batch 8] [--steps 20] [--device cuda] [--no-compile]
"""
import argparse
import json
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, C, NH):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.c_attn, self.c_proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.c_fc, self.mlp_proj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)
        self.NH = NH

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.NH, C // self.NH).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class Gpt2(nn.Module):
    def __init__(self, L=12, C=768, NH=12, T=1024, V=50304):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(T, C)
        self.h = nn.ModuleList(Block(C, NH) for _ in range(L))
        self.ln_f = nn.LayerNorm(C)

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for b in self.h:
            x = b(x)
        logits = F.linear(self.ln_f(x), self.wte.weight)  # tied head
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.view(-1))


def matmul_tflops(device, n=8192, reps=20):
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    sync(device)
    t0 = time.perf_counter()
    for _ in range(reps):
        a @ b
    sync(device)
    return 2 * n**3 * reps / (time.perf_counter() - t0) / 1e12


def sync(device):
    if device == "cuda":
        torch.cuda.synchronize()


def train_rate(model, device, batch, T, V, steps, warmup=5):
    opt = torch.optim.AdamW(model.parameters(), lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1,
                            fused=device == "cuda")
    g = torch.Generator(device="cpu").manual_seed(1)
    x = torch.randint(0, V, (batch, T), generator=g).to(device)
    y = torch.randint(0, V, (batch, T), generator=g).to(device)
    losses = []
    for i in range(warmup + steps):
        if i == warmup:
            sync(device)
            t0 = time.perf_counter()
        with torch.autocast(device_type=device, dtype=torch.bfloat16):
            loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss)
    sync(device)
    dt = time.perf_counter() - t0
    return batch * T * steps / dt, float(losses[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--width", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--vocab", type=int, default=50304)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--no-compile", action="store_true")
    a = ap.parse_args()
    torch.manual_seed(1337)
    if a.device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
    L, C, T, V = a.layers, a.width, a.seq, a.vocab
    out = {"device": torch.cuda.get_device_name() if a.device == "cuda" else "cpu",
           "torch": torch.__version__, "batch": a.batch, "seq": T}
    out["bf16_matmul_tflops"] = matmul_tflops(a.device, n=8192 if a.device == "cuda" else 512)
    # Training FLOPs per token: 6 per weight of the matmuls (embeddings' lookups excluded, the tied
    # head counted) plus attention's 12 * L * T * C (QK^T and PV, forward and backward).
    n_matmul = L * 12 * C * C + V * C
    out["flops_per_token"] = 6 * n_matmul + 12 * L * T * C
    rows = [("eager", False)] + ([] if a.no_compile else [("compile", True)])
    for name, comp in rows:
        model = Gpt2(L, C, a.heads, T, V).to(a.device)
        run = torch.compile(model) if comp else model
        tps, loss = train_rate(run, a.device, a.batch, T, V, a.steps)
        out[name] = {"tokens_per_s": tps, "final_loss": loss,
                     "mfu": tps * out["flops_per_token"] / (out["bf16_matmul_tflops"] * 1e12)}
        if a.device == "cuda":
            out[name]["peak_bytes"] = torch.cuda.max_memory_allocated()
            torch.cuda.reset_peak_memory_stats()
        del model, run
    print(json.dumps(out))
    assert math.isfinite(out["eager"]["final_loss"])


if __name__ == "__main__":
    main()
