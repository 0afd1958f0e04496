#!/usr/bin/env python3
"""Golden data for NF4 (QLoRA) 4-bit quantization, 8-bit blockwise dynamic quantization and 8-bit
Adam, made with the real bitsandbytes library on CPU.

Writes to tests/data/nf4/ (committed; CI never runs this script):
  nf4.safetensors         bitsandbytes.functional.quantize_4bit(x, blocksize=64, quant_type="nf4")
                          of four fixed fp32 inputs, with compress_statistics=False and =True
                          (double quantization): inputs, packed bytes, absmax, the double-quantized
                          state, dequantize_4bit outputs, the 16 NF4 code values
  blockwise8.safetensors  create_dynamic_map(signed=True / False) and quantize_blockwise /
                          dequantize_blockwise (blocksize 256) of a signed and a non-negative input
  adam8bit.safetensors    bitsandbytes.optim.AdamW8bit on CPU: 5 steps on one parameter tensor with
                          fixed gradients: parameters after every step, final 8-bit states
  README.md               how it was made, versions, every tensor, the rounding rules found
Every file is bitsandbytes' own output; the script fails rather than write data that disagrees with
its cross-checks, all against independent numpy code in this file:
  1. NF4: nearest code (ties to the lower index) of x * (1/absmax) (x / absmax in a short last
     block), packing, double quantization and dequantization reproduce bitsandbytes' bytes and fp32
     values bit for bit; the code values equal the list in /work/shared/reference.md;
  2. 8-bit: the rule bitsandbytes' CPU kernel implements (a 65536-entry lookup table, see README.md)
     reproduces its codes bit for bit; the exact nearest-entry rule is computed too and every place
     where the two differ is counted (and stored, codes_nearest); the dynamic maps agree with an
     fp64 evaluation of their formula;
  3. 8-bit Adam: an fp32 numpy emulation of the CPU update (torch's op order) reproduces the
     parameters and states (bit for bit when torch's own sqrt is used; IEEE sqrt: a few 1-ulp
     differences, recorded), Adam8bit == AdamW8bit, and an fp64 unquantized AdamW stays close.

Usage: python3 tools/make_nf4_golden.py [--out tests/data/nf4] [--seed 1234] [--adam-numel 4160]
Needs: pip install -r tools/requirements-golden.txt   (torch, bitsandbytes, safetensors, numpy)
Runs on CPU only, one thread (OMP_NUM_THREADS=1), with torch.compile disabled
(TORCHDYNAMO_DISABLE=1: bitsandbytes wraps two torch fallbacks in torch.compile, which would start
an Inductor C++ build; eager runs the same fp32 operations).
"""
import os
import sys

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")  # CPU kernels, even where a GPU exists

import argparse  # noqa: E402
import logging  # noqa: E402
import math  # noqa: E402
import platform  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_llama_golden import save_safetensors  # noqa: E402

F32 = np.float32
F64 = np.float64
BS4 = 64      # NF4 block size (bitsandbytes' default)
BS8 = 256     # 8-bit blockwise block size (8-bit optimizers; second level of double quantization)
LUT = 65536   # bitsandbytes' CPU 8-bit quantizer: entries of its lookup table
FILES = ("nf4.safetensors", "blockwise8.safetensors", "adam8bit.safetensors", "README.md")
# /work/shared/reference.md, "8-bit optimizer, QLoRA, LoRA": bitsandbytes functional.get_4bit_type
NF4_REFERENCE = [-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453,
                 -0.28444138169288635, -0.18477343022823334, -0.09105003625154495, 0.0,
                 0.07958029955625534, 0.16093020141124725, 0.24611230194568634, 0.33791524171829224,
                 0.44070982933044434, 0.5626170039176941, 0.7229568362236023, 1.0]
CASES = {  # NF4 inputs: name -> shape, what it is
    "a": ((96, 64), "normal(0, 0.02)"),
    "b": ((37, 50), "normal(0, 0.02); 1850 elements = 28 blocks of 64 + a last block of 58"),
    "c": ((23, 24), "special values, 552 elements = 8 blocks + a last block of 40 (see README)"),
    "d": ((5, 13), "normal(0, 0.02); 65 elements (odd) = 1 block + a last block of 1"),
}
ADAM = dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01, steps=5)
GRAD_SHIFT = 12  # gradients are int8 * 2^-12 (exact in fp32, stored as int8)


def bnb_modules():
    logging.getLogger("bitsandbytes").setLevel(logging.ERROR)  # "kernels" package not installed
    import bitsandbytes
    import bitsandbytes.functional as bf
    return bitsandbytes, bf


def t2n(t):
    return t.detach().cpu().numpy().copy()


def bits_equal(a, b):
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype.kind == "f":
        return np.array_equal(a.view(np.uint32 if a.itemsize == 4 else np.uint64),
                              b.view(np.uint32 if b.itemsize == 4 else np.uint64))
    return np.array_equal(a, b)


def check(cond, what):
    if not cond:
        raise SystemExit(f"cross-check failed: {what}")


def rel_err(a, b):
    a, b = np.asarray(a, F64), np.asarray(b, F64)
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30))


def blocks_of(n, bs):
    return [(s, min(s + bs, n)) for s in range(0, n, bs)]


# --------------------------------------------------------------------------- numpy NF4

def nf4_bounds(code):
    """fp32 midpoints between neighbouring codes, as bitsandbytes computes them: (c[i]+c[i+1])/2."""
    return ((code[:-1] + code[1:]) / F32(2)).astype(F32)


def np_scaled_4bit(flat, bs, absmax_rule="bnb"):
    """x / absmax per block as bitsandbytes' CPU quantize_4bit computes it: full blocks multiply by
    the fp32 reciprocal of max(absmax, fp32(1e-38)); the last partial block divides by it. Clamped."""
    n = flat.size
    absmax = np.empty(-(-n // bs), F32)
    scaled = np.empty(n, F32)
    tiny = F32(1e-38)
    for b, (s, e) in enumerate(blocks_of(n, bs)):
        blk = flat[s:e]
        am = np.abs(blk).max()
        absmax[b] = am
        den = max(am, tiny)
        if (e - s == bs or absmax_rule == "reciprocal") and absmax_rule != "division":
            v = blk * (F32(1) / den)
        else:
            v = blk / den
        scaled[s:e] = np.clip(v, F32(-1), F32(1))
    return scaled, absmax


def np_quantize_nf4(x, code, bs=BS4, absmax_rule="bnb"):
    """-> packed uint8 [ceil(n/2), 1] (first element in the high nibble), absmax fp32, indices."""
    flat = x.reshape(-1).astype(F32)
    scaled, absmax = np_scaled_4bit(flat, bs, absmax_rule)
    bounds = nf4_bounds(code)
    q = np.searchsorted(bounds, scaled, side="left").astype(np.uint8)  # ties -> lower index
    if q.size % 2:
        q = np.append(q, np.searchsorted(bounds, F32(0), side="left").astype(np.uint8))
    packed = ((q[0::2] << 4) | q[1::2]).astype(np.uint8).reshape(-1, 1)
    return packed, absmax, q[:flat.size]


def np_unpack_nf4(packed, n):
    p = packed.reshape(-1)
    q = np.empty(p.size * 2, np.uint8)
    q[0::2], q[1::2] = p >> 4, p & 0x0F
    return q[:n]


def np_dequant_nf4(packed, absmax, code, shape, bs=BS4):
    n = int(np.prod(shape))
    q = np_unpack_nf4(packed, n)
    scale = np.repeat(absmax.astype(F32), bs)[:n]
    return (code[q] * scale).astype(F32).reshape(shape)


# --------------------------------------------------------------------------- numpy 8-bit blockwise

def np_dynamic_map_fp64(signed, max_exponent_bits=7, total_bits=8):
    """create_dynamic_map's formula evaluated in float64 (for comparison; bitsandbytes builds the map
    with float32 torch.linspace, the stored map is bitsandbytes' own)."""
    data = []
    non_sign_bits = total_bits - 1
    assert 2 ** (non_sign_bits - max_exponent_bits) - 1 == 0  # no "additional items" for 8 bits
    for i in range(max_exponent_bits):
        k = 2 ** (i + non_sign_bits - max_exponent_bits + (0 if signed else 1)) + 1
        bnd = np.linspace(0.1, 1.0, k)
        means = (bnd[:-1] + bnd[1:]) / 2.0
        scale = 10.0 ** (-(max_exponent_bits - 1) + i)
        data += list(scale * means)
        if signed:
            data += list(-scale * means)
    data += [0.0, 1.0]
    assert len(data) == 2 ** total_bits
    return np.sort(np.array(data, F64))


def lut_table(code):
    """bitsandbytes' CPU quantize_blockwise lookup table (csrc/cpu_ops.cpp build_quantize_lut, and the
    shipped x86-64 binary): midpoints m[i] = 0.5f*(c[i]+c[i+1]); grid g[j] = (2f*j)/65535f - 1f;
    lut[j] = number of midpoints < g[j]."""
    mids = ((code[:-1] + code[1:]) * F32(0.5)).astype(F32)
    grid = ((F32(2) * np.arange(LUT, dtype=F32)) / F32(LUT - 1) - F32(1)).astype(F32)
    return np.searchsorted(mids, grid, side="left").astype(np.uint8)


def lut_index(v):
    """uint16 index of a normalised value v (fp32, already clamped to [-1, 1]):
    trunc(fma((v + 1f) * 0.5f, 65535f, 0.5f)), one rounding for the fused multiply-add (the shipped
    binary uses vfmadd213ss). Computed exactly in float64, then rounded once to fp32."""
    t = ((v.astype(F32) + F32(1)) * F32(0.5)).astype(F32)
    r = (t.astype(F64) * float(LUT - 1) + 0.5).astype(F32)  # exact in f64, one rounding to f32
    return np.trunc(r).astype(np.int64)


def lut_index_unfused(v):
    t = ((v.astype(F32) + F32(1)) * F32(0.5)).astype(F32)
    r = ((t * F32(LUT - 1)).astype(F32) + F32(0.5)).astype(F32)
    return np.trunc(r).astype(np.int64)


def np_normalise_8bit(flat, bs):
    """-> per-element v = clamp(x * (1f/absmax), -1, 1) (0 where the block's absmax is 0), absmax."""
    n = flat.size
    absmax = np.empty(-(-n // bs), F32)
    v = np.zeros(n, F32)
    zero = np.zeros(n, bool)
    for b, (s, e) in enumerate(blocks_of(n, bs)):
        am = np.abs(flat[s:e]).max()
        absmax[b] = am
        if am == 0:
            zero[s:e] = True
            continue
        v[s:e] = np.clip(flat[s:e] * (F32(1) / am), F32(-1), F32(1))
    return v, absmax, zero


def np_quantize_8bit_bnb_cpu(x, code, bs=BS8, index=lut_index):
    """bitsandbytes' CPU rule: codes = lut[index(v)]; a block whose absmax is 0 gets code 0."""
    flat = x.reshape(-1).astype(F32)
    v, absmax, zero = np_normalise_8bit(flat, bs)
    codes = lut_table(code)[index(v)]
    codes[zero] = 0
    return codes.reshape(x.shape), absmax


def np_quantize_8bit_nearest(x, code, bs=BS8):
    """Exact rule: the map entry nearest to v = x * (1f/absmax) (fp32 midpoints, a value exactly on a
    midpoint goes to the lower index); a block whose absmax is 0 gets the index of 0.0."""
    flat = x.reshape(-1).astype(F32)
    v, absmax, zero = np_normalise_8bit(flat, bs)
    mids = ((code[:-1] + code[1:]) * F32(0.5)).astype(F32)
    codes = np.searchsorted(mids, v, side="left").astype(np.uint8)
    codes[zero] = int(np.nonzero(code == 0)[0][0])
    return codes.reshape(x.shape), absmax


def np_dequant_8bit(codes, absmax, code, bs=BS8):
    flat = codes.reshape(-1)
    return (code[flat] * np.repeat(absmax.astype(F32), bs)[:flat.size]).astype(F32).reshape(codes.shape)


# --------------------------------------------------------------------------- inputs

def randn(gen, n, std, dtype=torch.float64):
    return (std * torch.randn(n, generator=gen, dtype=dtype)).numpy()


def as_f32_bits(x):
    return np.asarray(x, F32).reshape(-1).view(np.int32)


def from_bits(i):
    return np.asarray(i, np.int32).view(F32)


def rule_splitters(a, bounds):
    """fp32 values x near a * bounds[i] for which x * (1f/a) and x / a fall on different sides of a
    midpoint (or one of them exactly on it): they tell the two normalisations apart."""
    a = F32(a)
    inv = F32(1) / a
    out = []
    for m in bounds:
        base = as_f32_bits(F32(m) * a)[0]
        for k in range(-64, 65):
            x = from_bits(base + k)
            smul = np.clip(x * inv, F32(-1), F32(1))
            sdiv = np.clip(x / a, F32(-1), F32(1))
            if np.searchsorted(bounds, smul, "left") != np.searchsorted(bounds, sdiv, "left"):
                out.append(x)
    return np.array(out, F32)


def make_nf4_inputs(seed, code):
    bounds = nf4_bounds(code)
    g = torch.Generator().manual_seed(seed)
    x = {}
    for name in ("a", "b", "d"):
        shape = CASES[name][0]
        x[name] = randn(g, int(np.prod(shape)), 0.02).astype(F32).reshape(shape)
    # (c): 8 full blocks + a last block of 40; see README.md for the layout
    blocks = []
    blocks.append(np.zeros(BS4, F32))                                            # 0: all zero
    blocks.append((np.tile(code, 4) * F32(0.0375)).astype(F32))                  # 1: codes * 0.0375
    blocks.append((np.tile(code[::-1], 4) * F32(1.7)).astype(F32))               # 2: codes * 1.7
    up = np.nextafter(bounds, F32(np.inf)).astype(F32)
    dn = np.nextafter(bounds, F32(-np.inf)).astype(F32)
    fill = np.clip(randn(g, 17, 0.4), -0.99, 0.99).astype(F32)
    blocks.append(np.concatenate([[F32(1.0)], bounds, up, dn, [F32(-1.0)], fill]).astype(F32))  # 3
    rec = rule_splitters(0.03, bounds)                                     # 4: absmax 0.03
    n_rec = min(rec.size, BS4 - 2)
    fill = np.clip(randn(g, BS4 - 2 - n_rec, 0.01), -0.029, 0.029).astype(F32)
    blocks.append(np.concatenate([[F32(0.03)], rec[:n_rec], [F32(-0.01)], fill]).astype(F32))
    for k, outl in ((5, {5: 8.0}), (6, {40: -50.0}), (7, {3: 1.5, 17: -1.2, 60: 0.9})):
        blk = randn(g, BS4, 0.02).astype(F32)                                    # 5-7: outliers
        for i, val in outl.items():
            blk[i] = val
        blocks.append(blk)
    div = rule_splitters(0.06, bounds)                                    # tail: absmax 0.06
    n_div = min(div.size, 40 - 1)
    fill = np.clip(randn(g, 40 - 1 - n_div, 0.02), -0.059, 0.059).astype(F32)
    blocks.append(np.concatenate([[F32(-0.06)], div[:n_div], fill]).astype(F32))
    c = np.concatenate(blocks).astype(F32)
    assert c.size == 552, c.size
    x["c"] = c.reshape(CASES["c"][0])
    layout = {"rec_splitters": int(n_rec), "rec_found": int(rec.size),
              "div_splitters": int(n_div), "div_found": int(div.size)}
    return {k: x[k] for k in CASES}, layout


def make_8bit_inputs(seed, maps):
    """Two 1000-element fp32 tensors (3 blocks of 256 + 232): random, with special values in block 1
    (elements 256..511), whose absmax is exactly 4 (so x * (1/4) is exact)."""
    g = torch.Generator().manual_seed(seed + 1)
    out, layout = {}, {}
    for kind, code in (("signed", maps["signed"]), ("unsigned", maps["unsigned"])):
        x = randn(g, 1000, 1.0)
        if kind == "unsigned":
            x = np.abs(x)
        x = x.astype(F32)
        blk = np.clip(x[256:512], -3.9, 3.9).astype(F32)
        mids = ((code[:-1] + code[1:]) * F32(0.5)).astype(F32)
        idx_code = np.arange(0, 256, 8)
        idx_mid = np.arange(3, 255, 8)
        tiny = [4e-7, 4e-6, 4e-5] if kind == "unsigned" else [4e-7, -4e-7, 4e-6, -4e-6, 4e-5, -4e-5]
        special = np.concatenate([
            [4.0], [0.0] * 4, tiny,
            F32(4) * code[idx_code],                                   # exact map entries * absmax
            F32(4) * mids[idx_mid],                                    # exactly on midpoints
            F32(4) * np.nextafter(mids[idx_mid], F32(np.inf)),         # one ulp above them
        ]).astype(F32)
        blk[:special.size] = special
        x[256:512] = blk
        out[kind] = x
        layout[kind] = dict(n_special=int(special.size), n_tiny=len(tiny), idx_code=idx_code,
                            idx_mid=idx_mid, start_code=256 + 5 + len(tiny),
                            start_mid=256 + 5 + len(tiny) + idx_code.size,
                            start_up=256 + 5 + len(tiny) + idx_code.size + idx_mid.size)
    return out, layout


# --------------------------------------------------------------------------- NF4 with bitsandbytes

def run_nf4(bf, inputs, code):
    """quantize_4bit / dequantize_4bit for every case, both compress_statistics settings, and the
    independent numpy reproduction (asserted bitwise)."""
    dyn = t2n(bf.create_dynamic_map(signed=True))
    tensors, facts = {}, {}
    for name, x in inputs.items():
        xt = torch.from_numpy(x.copy())
        f = {}
        q0, s0 = bf.quantize_4bit(xt, blocksize=BS4, quant_type="nf4", compress_statistics=False)
        q1, s1 = bf.quantize_4bit(xt, blocksize=BS4, quant_type="nf4", compress_statistics=True)
        d0, d1 = t2n(bf.dequantize_4bit(q0, s0)), t2n(bf.dequantize_4bit(q1, s1))
        check(torch.equal(xt, torch.from_numpy(x)), f"{name}: input modified")
        packed, absmax = t2n(q0), t2n(s0.absmax)
        check(q0.dtype == torch.uint8 and s0.absmax.dtype == torch.float32, f"{name}: dtypes")
        check(bits_equal(packed, t2n(q1)), f"{name}: packed bytes differ with compress_statistics")
        check(bits_equal(t2n(s0.code), code) and bits_equal(t2n(s1.code), code), f"{name}: code")
        check(not s0.nested and s1.nested and s0.blocksize == s1.blocksize == BS4
              and s0.quant_type == "nf4" and s0.dtype == torch.float32
              and tuple(s0.shape) == x.shape, f"{name}: QuantState fields")
        # double-quantized state
        st2 = s1.state2
        offset = t2n(s1.offset).reshape(1)
        dq_codes, dq_absmax2, dq_code = t2n(s1.absmax), t2n(st2.absmax), t2n(st2.code)
        check(s1.absmax.dtype == torch.uint8 and st2.blocksize == BS8 and not st2.nested,
              f"{name}: state2 fields")
        check(bits_equal(dq_code, dyn), f"{name}: state2.code is not create_dynamic_map(signed=True)")
        absmax_dq = t2n(bf.dequantize_blockwise(s1.absmax, st2)) + offset[0]  # what dequantize_4bit does
        # numpy: the 4-bit part
        np_packed, np_absmax, idx = np_quantize_nf4(x, code)
        check(bits_equal(np_packed, packed), f"{name}: packed bytes (numpy vs bitsandbytes)")
        check(bits_equal(np_absmax, absmax), f"{name}: absmax")
        np_d0 = np_dequant_nf4(np_packed, np_absmax, code, x.shape)
        check(bits_equal(np_d0, d0), f"{name}: dequantize_4bit (compress_statistics=False)")
        f["dequant_rel_err_false"] = rel_err(np_d0, d0)
        # numpy: double quantization. The offset is torch's fp32 mean; compare with an fp64 mean.
        off64 = F32(np.mean(np_absmax.astype(F64)))
        f["offset_ulp"] = int(abs(int(as_f32_bits(off64)[0]) - int(as_f32_bits(offset)[0])))
        np_codes, np_absmax2 = np_quantize_8bit_bnb_cpu((np_absmax - offset[0]).astype(F32), dyn)
        check(bits_equal(np_codes, dq_codes), f"{name}: double-quantized absmax codes")
        check(bits_equal(np_absmax2, dq_absmax2), f"{name}: second-level absmax")
        np_codes_own, _ = np_quantize_8bit_bnb_cpu((np_absmax - off64).astype(F32), dyn)
        f["dq_codes_with_fp64_offset_mismatches"] = int(np.count_nonzero(np_codes_own != dq_codes))
        near, _ = np_quantize_8bit_nearest((np_absmax - offset[0]).astype(F32), dyn)
        f["dq_codes_nearest_mismatches"] = int(np.count_nonzero(near != dq_codes))
        np_absmax_dq = (np_dequant_8bit(np_codes, np_absmax2, dyn) + offset[0]).astype(F32)
        check(bits_equal(np_absmax_dq, absmax_dq.astype(F32)), f"{name}: dequantized absmax")
        np_d1 = np_dequant_nf4(np_packed, np_absmax_dq, code, x.shape)
        check(bits_equal(np_d1, d1), f"{name}: dequantize_4bit (compress_statistics=True)")
        f["dequant_rel_err_true"] = rel_err(np_d1, d1)
        nz = np_absmax > 0  # (c) has an all-zero block
        f["absmax_dq_max_rel_err"] = float(np.max(np.abs(np_absmax_dq[nz].astype(F64) - np_absmax[nz])
                                                  / np_absmax[nz]))
        f["absmax_dq_negative"] = int(np.count_nonzero(np_absmax_dq < 0))
        # what the normalisation rule pins: the other rule's bytes
        alt, _, _ = np_quantize_nf4(x, code, absmax_rule="reciprocal")
        f["last_block_division_matters"] = int(np.count_nonzero(np_unpack_nf4(alt, x.size)
                                                                != np_unpack_nf4(packed, x.size)))
        alt, _, _ = np_quantize_nf4(x, code, absmax_rule="division")
        f["full_block_reciprocal_matters"] = int(np.count_nonzero(np_unpack_nf4(alt, x.size)
                                                                  != np_unpack_nf4(packed, x.size)))
        n = x.size
        f.update(numel=n, blocks=int(absmax.size), last_block=n - (absmax.size - 1) * BS4,
                 packed_bytes=int(packed.size), packed_shape=list(packed.shape),
                 pad_nibble=int(packed.reshape(-1)[-1] & 0x0F) if n % 2 else None,
                 state2_blocks=int(dq_absmax2.size), offset=float(offset[0]),
                 dequant_max_abs_err_vs_input_false=float(np.abs(d0.astype(F64) - x).max()),
                 dequant_max_abs_err_vs_input_true=float(np.abs(d1.astype(F64) - x).max()))
        facts[name] = f
        tensors.update({
            f"{name}.input": x, f"{name}.packed": packed, f"{name}.absmax": absmax,
            f"{name}.dequant": d0, f"{name}.dq.absmax_codes": dq_codes, f"{name}.dq.offset": offset,
            f"{name}.dq.state2_absmax": dq_absmax2, f"{name}.dq.absmax_dequant": absmax_dq.astype(F32),
            f"{name}.dq.dequant": d1})
        if name == "a":
            facts["quant_state_a"] = {
                False: {k: describe(getattr(s0, k)) for k in s0.__dict__},
                True: {k: describe(getattr(s1, k)) for k in s1.__dict__},
                "state2": {k: describe(getattr(st2, k)) for k in st2.__dict__}}
    tensors["nf4.code"] = code
    tensors["dq.code"] = dyn
    return tensors, facts


def describe(v):
    if isinstance(v, torch.Tensor):
        return f"tensor {str(v.dtype).replace('torch.', '')} {list(v.shape)}"
    if v is None:
        return "None"
    if type(v).__name__ == "QuantState":
        return "QuantState"
    return repr(v).replace("torch.", "")


def tie_facts(inputs, code, packed):
    """What happened to the exact ties in case (c) block 3 (absmax 1.0, element k = midpoint k)."""
    q = np_unpack_nf4(packed, inputs.size)
    b3 = q[3 * BS4: 4 * BS4]
    lower = all(int(b3[1 + i]) == i for i in range(15))          # exactly on midpoint i -> code i
    above = all(int(b3[16 + i]) == i + 1 for i in range(15))     # one ulp above -> code i+1
    below = all(int(b3[31 + i]) == i for i in range(15))         # one ulp below -> code i
    return dict(tie_lower=lower, above_upper=above, below_lower=below,
                block0=[int(v) for v in set(q[:BS4].tolist())])


def probe_nf4_edges(bf, code, seed):
    """Shapes not stored: where bitsandbytes' CPU dequantize_4bit disagrees with code[q] * absmax."""
    g = torch.Generator().manual_seed(seed + 7)
    out = {}
    for shape in ((4, 96), (4, 32), (3, 64), (6, 50), (1, 640)):
        x = randn(g, int(np.prod(shape)), 1.0).astype(F32).reshape(shape)
        q, s = bf.quantize_4bit(torch.from_numpy(x), blocksize=BS4, quant_type="nf4")
        d = t2n(bf.dequantize_4bit(q, s))
        ref = np_dequant_nf4(t2n(q), t2n(s.absmax), code, shape)
        np_packed, _, _ = np_quantize_nf4(x, code)
        check(bits_equal(np_packed, t2n(q)), f"probe {shape}: packed bytes")
        out[shape] = dict(wrong=int(np.count_nonzero(d != ref)), n=int(x.size),
                          max_abs=float(np.abs(d.astype(F64) - ref).max()))
    return out


# --------------------------------------------------------------------------- 8-bit with bitsandbytes

def run_8bit(bf, inputs, maps, layout):
    tensors, facts = {"map.signed": maps["signed"], "map.unsigned": maps["unsigned"]}, {}
    for kind, x in inputs.items():
        code = maps[kind]
        code_t = torch.from_numpy(code.copy())
        q, s = bf.quantize_blockwise(torch.from_numpy(x.copy()), code=code_t, blocksize=BS8)
        check(bits_equal(t2n(code_t), code), f"{kind}: the map was modified by quantize_blockwise")
        d = t2n(bf.dequantize_blockwise(q, s))
        codes, absmax = t2n(q), t2n(s.absmax)
        check(q.dtype == torch.uint8 and s.blocksize == BS8 and bits_equal(t2n(s.code), code),
              f"{kind}: QuantState")
        np_codes, np_absmax = np_quantize_8bit_bnb_cpu(x, code)
        check(bits_equal(np_absmax, absmax), f"{kind}: absmax")
        check(bits_equal(np_codes, codes), f"{kind}: codes (numpy LUT rule vs bitsandbytes)")
        np_d = np_dequant_8bit(codes, absmax, code)
        check(bits_equal(np_d, d), f"{kind}: dequantize_blockwise")
        unf, _ = np_quantize_8bit_bnb_cpu(x, code, index=lut_index_unfused)
        near, _ = np_quantize_8bit_nearest(x, code)
        diff = np.nonzero(near != codes)[0]
        lay = layout[kind]
        zero_pos = np.arange(257, 261)
        mid_pos = lay["start_mid"] + np.arange(lay["idx_mid"].size)
        code_pos = lay["start_code"] + np.arange(lay["idx_code"].size)
        up_pos = lay["start_up"] + np.arange(lay["idx_mid"].size)
        random_pos = np.setdiff1d(np.arange(x.size), np.arange(256, 256 + lay["n_special"]))
        facts[kind] = dict(
            unfused_mismatches=int(np.count_nonzero(unf != codes)),
            nearest_mismatches=int(diff.size),
            nearest_mismatch_random=int(np.intersect1d(diff, random_pos).size),
            nearest_mismatch_special=int(np.setdiff1d(diff, random_pos).size),
            zero_code=int(codes[257]), zero_value=float(code[codes[257]]),
            zero_all_same=bool(np.all(codes[zero_pos] == codes[257])),
            code_entries_exact=int(np.count_nonzero(codes[code_pos] == lay["idx_code"])),
            n_code_entries=int(code_pos.size),
            mid_lower=int(np.count_nonzero(codes[mid_pos] == lay["idx_mid"])),
            mid_upper=int(np.count_nonzero(codes[mid_pos] == lay["idx_mid"] + 1)),
            mid_other=int(np.count_nonzero((codes[mid_pos] != lay["idx_mid"])
                                           & (codes[mid_pos] != lay["idx_mid"] + 1))),
            up_upper=int(np.count_nonzero(codes[up_pos] == lay["idx_mid"] + 1)),
            n_mid=int(mid_pos.size), absmax=[float(a) for a in absmax],
            dequant_max_rel_err=float(np.abs(d.astype(F64) - x).max() / np.abs(x).max()))
        tensors.update({f"{kind}.input": x, f"{kind}.codes": codes, f"{kind}.absmax": absmax,
                        f"{kind}.dequant": d, f"{kind}.codes_nearest": near.astype(np.uint8)})
    return tensors, facts


def check_maps(bf):
    maps = {"signed": t2n(bf.create_dynamic_map(signed=True)),
            "unsigned": t2n(bf.create_dynamic_map(signed=False))}
    facts = {}
    for kind, m in maps.items():
        ref = np_dynamic_map_fp64(kind == "signed")
        check(m.dtype == F32 and m.shape == (256,) and np.all(np.diff(m) > 0), f"map {kind}: sorted")
        err = np.abs(m.astype(F64) - ref)
        ulp = np.abs(m.astype(F64) - ref.astype(F32).astype(F64)) / np.spacing(np.abs(m)).astype(F64)
        check(err.max() < 1e-6 and ulp.max() <= 4, f"map {kind}: fp64 formula ({err.max()})")
        facts[kind] = dict(min=float(m[0]), max=float(m[-1]), zero_index=int(np.nonzero(m == 0)[0][0]),
                           smallest_positive=float(m[m > 0].min()), max_abs_vs_fp64=float(err.max()),
                           max_ulp_vs_fp64=float(ulp.max()), n_neg=int(np.count_nonzero(m < 0)),
                           n_pos=int(np.count_nonzero(m > 0)))
    return maps, facts


# --------------------------------------------------------------------------- 8-bit Adam

def make_adam_inputs(seed, n):
    g = torch.Generator().manual_seed(seed + 2)
    p0 = randn(g, n, 0.1).astype(F32)
    gq = np.clip(np.round(randn(g, ADAM["steps"] * n, 24.0)), -127, 127).astype(np.int8)
    return p0, gq.reshape(ADAM["steps"], n)


def grads_of(gq):
    return (gq.astype(F32) * F32(2.0 ** -GRAD_SHIFT)).astype(F32)


def run_bnb_adam(bnb, p0, grads, cls_name):
    cls = getattr(bnb.optim, cls_name)
    p = torch.nn.Parameter(torch.from_numpy(p0.copy()))
    opt = cls([p], lr=ADAM["lr"], betas=ADAM["betas"], eps=ADAM["eps"],
              weight_decay=ADAM["weight_decay"])
    params, am1, am2 = [], [], []
    for t in range(ADAM["steps"]):
        p.grad = torch.from_numpy(grads[t].copy())
        opt.step()
        st = opt.state[p]
        params.append(t2n(p))
        am1.append(t2n(st["absmax1"]))
        am2.append(t2n(st["absmax2"]))
    st = opt.state[p]
    check(st["state1"].dtype == torch.uint8 and st["state2"].dtype == torch.uint8,
          f"{cls_name}: 8-bit states (numel {p0.size} >= min_8bit_size)")
    return dict(params=np.stack(params), absmax1=np.stack(am1), absmax2=np.stack(am2),
                state1=t2n(st["state1"]), state2=t2n(st["state2"]), qmap1=t2n(st["qmap1"]),
                qmap2=t2n(st["qmap2"]), step=int(st["step"]))


def fma32(a, b, c):
    """fp32 fused multiply-add a*b + c with one rounding (a, b, c fp32; the f64 product is exact)."""
    return (np.asarray(a, F32).astype(F64) * np.asarray(b, F32).astype(F64)
            + np.asarray(c, F32).astype(F64)).astype(F32)


def np_adam8bit_cpu(p0, grads, maps, sqrt):
    """bitsandbytes' CPU optimizer_update_8bit_blockwise("adam") in fp32, in torch's op order:
    m = fma(g, 1-b1, m*b1) [add_ with alpha: vectorised fmadd]; v = fma((1-b2)*g, g, v*b2) [addcmul];
    denom = sqrt(v)/c2 + eps; p = p*(1-lr*wd); p = p + ((-lr/c1)*m)/denom [addcdiv]; requantize."""
    lr, (b1, b2), eps, wd = ADAM["lr"], ADAM["betas"], ADAM["eps"], ADAM["weight_decay"]
    n = p0.size
    nb = -(-n // BS8)
    p = p0.copy()
    c1, c2 = np.zeros(n, np.uint8), np.zeros(n, np.uint8)
    a1, a2 = np.zeros(nb, F32), np.zeros(nb, F32)
    params = []
    for t in range(1, ADAM["steps"] + 1):
        g = grads[t - 1]
        m = np_dequant_8bit(c1, a1, maps["signed"])
        v = np_dequant_8bit(c2, a2, maps["unsigned"])
        m = fma32(g, F32(1.0 - b1), (m * F32(b1)).astype(F32))
        v = fma32((F32(1.0 - b2) * g).astype(F32), g, (v * F32(b2)).astype(F32))
        corr1 = 1.0 - b1 ** t
        corr2 = math.sqrt(1.0 - b2 ** t)
        denom = ((sqrt(v) / F32(corr2)).astype(F32) + F32(eps)).astype(F32)
        p = (p * F32(1.0 - lr * wd)).astype(F32)
        p = (p + ((F32(-lr / corr1) * m).astype(F32) / denom).astype(F32)).astype(F32)
        c1, a1 = np_quantize_8bit_bnb_cpu(m, maps["signed"])
        c2, a2 = np_quantize_8bit_bnb_cpu(v, maps["unsigned"])
        params.append(p.copy())
    return dict(params=np.stack(params), state1=c1, state2=c2, absmax1=a1, absmax2=a2)


def np_adamw_fp64(p0, grads):
    """The published update in float64 without quantization (bitsandbytes' CUDA order: Adam step,
    then decoupled decay p *= 1 - lr*wd): p -= lr*sqrt(1-b2^t)/(1-b1^t) * m/(sqrt(v) + sqrt(1-b2^t)*eps)."""
    lr, (b1, b2), eps, wd = ADAM["lr"], ADAM["betas"], ADAM["eps"], ADAM["weight_decay"]
    p = p0.astype(F64)
    m = np.zeros_like(p)
    v = np.zeros_like(p)
    out = []
    for t in range(1, ADAM["steps"] + 1):
        g = grads[t - 1].astype(F64)
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        c2 = math.sqrt(1 - b2 ** t)
        p = p - lr * c2 / (1 - b1 ** t) * m / (np.sqrt(v) + c2 * eps)
        p = p * (1 - lr * wd)
        out.append(p.copy())
    return np.stack(out)


def ulps(a, b):
    ia, ib = as_f32_bits(a).astype(np.int64), as_f32_bits(b).astype(np.int64)
    return int(np.abs(ia - ib).max())


def run_adam(bnb, maps, seed, n, b8_zero):
    p0, gq = make_adam_inputs(seed, n)
    grads = grads_of(gq)
    res = run_bnb_adam(bnb, p0, grads, "AdamW8bit")
    other = run_bnb_adam(bnb, p0, grads, "Adam8bit")
    check(all(bits_equal(res[k], other[k]) for k in ("params", "state1", "state2", "absmax1", "absmax2")),
          "Adam8bit and AdamW8bit differ")
    check(bits_equal(res["qmap1"], maps["signed"]) and bits_equal(res["qmap2"], maps["unsigned"]),
          "optimizer maps are not create_dynamic_map(signed=True / False)")
    check(res["step"] == ADAM["steps"], "step count")
    facts = {}
    torch_sqrt = lambda v: t2n(torch.sqrt(torch.from_numpy(np.ascontiguousarray(v))))  # noqa: E731
    emu_t = np_adam8bit_cpu(p0, grads, maps, torch_sqrt)
    for k in ("params", "state1", "state2", "absmax1", "absmax2"):
        ref = res[k] if k in ("params", "state1", "state2") else res[k][-1]
        check(bits_equal(emu_t[k], ref), f"adam: numpy emulation with torch.sqrt: {k}")
    emu = np_adam8bit_cpu(p0, grads, maps, np.sqrt)  # IEEE sqrt: independent of torch
    facts["ieee_param_mismatch_per_step"] = [int(np.count_nonzero(as_f32_bits(emu["params"][t])
                                                                 != as_f32_bits(res["params"][t])))
                                             for t in range(ADAM["steps"])]
    facts["ieee_param_max_ulp"] = ulps(emu["params"], res["params"])
    facts["ieee_state_mismatch"] = {k: int(np.count_nonzero(emu[k] != (res[k] if k.startswith("state")
                                                                       else res[k][-1])))
                                    for k in ("state1", "state2", "absmax1", "absmax2")}
    check(facts["ieee_param_max_ulp"] <= 4, f"adam: IEEE-sqrt emulation {facts['ieee_param_max_ulp']} ulp")
    check(sum(facts["ieee_state_mismatch"].values()) <= 8, f"adam: states {facts['ieee_state_mismatch']}")
    ref64 = np_adamw_fp64(p0, grads)
    step = np.abs(ref64[-1] - p0.astype(F64))
    dev = np.abs(res["params"][-1].astype(F64) - ref64[-1])
    facts["fp64_max_abs_dev"] = float(dev.max())
    facts["fp64_total_change_max"] = float(step.max())
    facts["fp64_total_change_median"] = float(np.median(step))
    facts["fp64_dev_over_change_median"] = float(np.median(dev / np.maximum(step, 1e-12)))
    check(dev.max() < 0.25 * step.max(), "adam: far from the fp64 unquantized AdamW")
    # torch's sqrt against correctly rounded (how often the 1-ulp difference happens)
    g = torch.Generator().manual_seed(seed + 3)
    s = torch.rand(100000, generator=g) + 0.1
    exact = np.sqrt(t2n(s).astype(F64)).astype(F32)
    facts["torch_sqrt_not_ieee"] = int(np.count_nonzero(t2n(torch.sqrt(s)) != exact))
    facts["numpy_sqrt_not_ieee"] = int(np.count_nonzero(np.sqrt(t2n(s)) != exact))
    # non-finite gradients (not stored): what the CPU path does with one NaN / inf at element 10
    for name, val in (("nan", np.nan), ("inf", np.inf)):
        p = torch.nn.Parameter(torch.from_numpy(p0.copy()))
        opt = bnb.optim.AdamW8bit([p], lr=ADAM["lr"], betas=ADAM["betas"], eps=ADAM["eps"],
                                  weight_decay=ADAM["weight_decay"])
        gbad = grads[0].copy()
        gbad[10] = val
        p.grad = torch.from_numpy(gbad)
        opt.step()
        st = opt.state[p]
        c1, c2 = t2n(st["state1"]), t2n(st["state2"])
        others = np.setdiff1d(np.arange(BS8), [10])
        facts[name + "_grad"] = dict(
            nan_params=int(torch.isnan(p).sum()), absmax1=float(st["absmax1"][0]),
            absmax2=float(st["absmax2"][0]), code1=int(c1[10]), code2=int(c2[10]),
            block_zero_codes=bool(np.all(c1[others] == b8_zero["signed"])
                                  and np.all(c2[others] == b8_zero["unsigned"])),
            other_blocks_finite=bool(np.isfinite(t2n(st["absmax1"])[1:]).all()
                                     and np.isfinite(t2n(st["absmax2"])[1:]).all()))
    tensors = {"param0": p0, "grad_q": gq, "params": res["params"],
               "state1.codes": res["state1"], "state1.absmax": res["absmax1"][-1],
               "state2.codes": res["state2"], "state2.absmax": res["absmax2"][-1],
               "state1.absmax_steps": res["absmax1"], "state2.absmax_steps": res["absmax2"]}
    return tensors, facts


# --------------------------------------------------------------------------- README

NF4_DOC = {
    "nf4.code": "the 16 NF4 code values bitsandbytes uses (QuantState.code; index = 4-bit code)",
    "dq.code": "QuantState.state2.code: the signed 8-bit dynamic map (create_dynamic_map(signed=True))"
               " of the second level; the same for every case",
    "{n}.input": "the fp32 input",
    "{n}.packed": "quantize_4bit's packed output, exactly as returned: uint8 [ceil(numel/2), 1]; "
                  "byte k holds flat elements 2k (HIGH nibble) and 2k+1 (low nibble); "
                  "identical for compress_statistics False and True",
    "{n}.absmax": "compress_statistics=False: QuantState.absmax, fp32 max abs(x) of each block of 64 "
                  "(flat order; the last block may be short)",
    "{n}.dequant": "dequantize_4bit(packed, state) with compress_statistics=False: "
                   "code[q] * absmax[block]",
    "{n}.dq.absmax_codes": "compress_statistics=True: QuantState.absmax, uint8 codes of "
                           "(absmax - offset) in the signed dynamic map, blocks of 256",
    "{n}.dq.offset": "compress_statistics=True: QuantState.offset (a 0-dim tensor, stored as [1]): "
                     "fp32 mean of the block absmaxes",
    "{n}.dq.state2_absmax": "compress_statistics=True: QuantState.state2.absmax, fp32 max "
                            "abs(absmax - offset) per block of 256 absmaxes",
    "{n}.dq.absmax_dequant": "derived, what dequantize_4bit uses: dequantize_blockwise(absmax_codes,"
                             " state2) + offset = dq.code[absmax_codes] * state2_absmax + offset (fp32)",
    "{n}.dq.dequant": "dequantize_4bit(packed, state) with compress_statistics=True: "
                      "code[q] * absmax_dequant[block]",
}
B8_DOC = {
    "map.signed": "create_dynamic_map(signed=True): 256 sorted fp32 entries (m of 8-bit Adam; second"
                  " level of NF4 double quantization)",
    "map.unsigned": "create_dynamic_map(signed=False): 256 sorted fp32 entries (v of 8-bit Adam)",
    "{n}.input": "the fp32 input (1000 elements: blocks of 256, 256, 256, 232)",
    "{n}.codes": "quantize_blockwise(input, code=map.{n}, blocksize=256): uint8 codes, as returned",
    "{n}.absmax": "its QuantState.absmax: fp32 max abs(x) per block",
    "{n}.dequant": "dequantize_blockwise(codes, state): map[codes] * absmax[block]",
    "{n}.codes_nearest": "NOT bitsandbytes output: the exact nearest-entry codes (numpy, see the "
                         "rule below) for comparison with {n}.codes",
}
ADAM_DOC = {
    "param0": "the initial fp32 parameter tensor, normal(0, 0.1) (generator seeded with --seed + 2)",
    "grad_q": f"the gradients, int8 [steps, N]: gradient of step t = grad_q[t-1] * 2^-{GRAD_SHIFT} "
              "(exact in fp32; round(normal(0, 24)) clipped to +-127)",
    "params": "the fp32 parameters after step 1..5 (row t-1 = after step t)",
    "state1.codes": "final (after step 5) uint8 codes of m (state1), signed map",
    "state1.absmax": "final fp32 absmax per block of 256 of m (absmax1)",
    "state2.codes": "final uint8 codes of v (state2), unsigned map",
    "state2.absmax": "final fp32 absmax per block of 256 of v (absmax2)",
    "state1.absmax_steps": "absmax1 after every step [steps, blocks]",
    "state2.absmax_steps": "absmax2 after every step [steps, blocks]",
}


def table(tensors, doc):
    rows = []
    for k, v in tensors.items():
        head, _, rest = k.partition(".")
        text = doc.get(k) or doc.get("{n}." + rest, "")
        dt = {"float32": "F32", "uint8": "U8", "int8": "I8"}[str(v.dtype)]
        rows.append(f"| `{k}` | {dt} | {list(v.shape)} | {text.replace('{n}', head)} |")
    return "| name | dtype | shape | meaning |\n| --- | --- | --- | --- |\n" + "\n".join(rows)


def pattern_table(tensors, doc, cases):
    """One row per tensor kind ({n} = each case), then the shapes per case."""
    rows, kinds = [], []
    for k, v in tensors.items():
        head, _, rest = k.partition(".")
        if head in cases:
            if rest in kinds:
                continue
            kinds.append(rest)
            name, text = "X." + rest, doc["{n}." + rest].replace("{n}", "X")
        else:
            name, text = k, doc[k]
        dt = {"float32": "F32", "uint8": "U8", "int8": "I8"}[str(v.dtype)]
        rows.append(f"| `{name}` | {dt} | {list(v.shape) if head not in cases else 'below'} | {text} |")
    out = ("| name (X = " + ", ".join(cases) + ") | dtype | shape | meaning |\n| --- | --- | --- | --- |\n"
           + "\n".join(rows) + "\n\nShapes:\n\n| case | " + " | ".join(f"`X.{r}`" for r in kinds)
           + " |\n| --- |" + " --- |" * len(kinds) + "\n")
    for c in cases:
        out += f"| {c} | " + " | ".join(str(list(tensors[f"{c}.{r}"].shape)) for r in kinds) + " |\n"
    return out


def yes(flag):
    return "yes" if flag else "NO"


def fmt_map(m):
    return ", ".join(f"{float(v):.9g}" for v in m)


def readme(args, versions, nf4_t, nf4_f, layout, ties, edges, b8_t, b8_f, map_f, adam_t, adam_f,
           bits, sizes):
    a, b, c, d = (nf4_f[k] for k in "abcd")
    qs = nf4_f["quant_state_a"]
    s, u = b8_f["signed"], b8_f["unsigned"]
    ms, mu = map_f["signed"], map_f["unsigned"]
    n_adam = adam_t["param0"].size
    nb_adam = adam_t["state1.absmax"].size
    edge_lines = "\n".join(
        f"  - shape {list(k)} ({v['n']} elements): {v['wrong']} of {v['n']} values wrong"
        + (f" (max abs error {v['max_abs']:.3g})" if v["wrong"] else "") for k, v in edges.items())
    buggy = [k for k, v in edges.items() if v["wrong"]]
    qs_lines = "\n".join(
        f"| `{k}` | {qs[False].get(k, '-')} | {qs[True].get(k, '-')} | {QS_MEANING.get(k, '')} |"
        for k in qs[True])
    st2_lines = ", ".join(f"`{k}` = {v}" for k, v in qs["state2"].items())
    return f"""# nf4: golden data for NF4 (QLoRA), 8-bit blockwise quantization and 8-bit Adam

Everything here is the output of the real bitsandbytes library **on CPU** (its native
`libbitsandbytes_cpu.so` and its torch fallbacks), cross-checked bit for bit against independent
numpy code in the generator. Made by (deterministic: with the same versions and CPU a rerun writes
byte-identical files; it takes a few seconds on one core):

    pip install -r tools/requirements-golden.txt
    python3 tools/make_nf4_golden.py --out tests/data/nf4 --seed {args.seed} --adam-numel {args.adam_numel}

Versions used: bitsandbytes {versions['bitsandbytes']}, torch {versions['torch']}, numpy {versions['numpy']},
safetensors {versions['safetensors']}, Python {versions['python']}; {versions['machine']},
torch CPU capability {versions['cpu_capability']}. The script sets OMP_NUM_THREADS=1,
CUDA_VISIBLE_DEVICES="" and TORCHDYNAMO_DISABLE=1 (bitsandbytes wraps two torch fallbacks,
`_dequantize_4bit_compute` and `_dequantize_blockwise_compute`, in `torch.compile`; disabled, they
run eagerly: the same fp32 gather and multiply). The rules below were read from bitsandbytes'
Python sources (the files used are identical to the GitHub snapshot of
bitsandbytes-foundation/bitsandbytes at 95f9af30, version string 0.50.2.dev0) and
`csrc/cpu_ops.cpp` there, confirmed on the disassembly of the shipped x86-64
`libbitsandbytes_cpu.so`, and, above all, by reproducing every byte in numpy. The 8-bit lookup-table
quantizer and the CPU optimizer kernels are new in bitsandbytes 0.50.0 (earlier CPU builds searched
the map, and had no CPU 8-bit optimizer): regenerate with >= 0.50.

Which bitsandbytes functions run on CPU in {versions['bitsandbytes']} (all used here):
`quantize_4bit` (torch fallback: `backends/default/ops.py`, bucketize on fp32 midpoints),
`dequantize_4bit` (native `cdequantize_blockwise_cpu_nf4_fp32`, AVX-512 or scalar branch; torch
fallback when the last dimension is odd, or with AVX-512 and blocksize >= 2048), `quantize_blockwise` / `dequantize_blockwise` (native
`cquantize_blockwise_cpu_fp32` / `cdequantize_blockwise_cpu_fp32`), `create_dynamic_map`,
`get_4bit_type`, and the optimizers: `optimizer_update_8bit_blockwise` and `optimizer_update_32bit`
have CPU kernels (`backends/cpu/ops.py`, plain torch ops), so `bitsandbytes.optim.Adam8bit` /
`AdamW8bit` run on CPU tensors (section 3 is bitsandbytes output, not a re-implementation).

Files: `nf4.safetensors` {sizes['nf4.safetensors']} bytes, `blockwise8.safetensors`
{sizes['blockwise8.safetensors']} bytes, `adam8bit.safetensors` {sizes['adam8bit.safetensors']} bytes
(metadata: generator, seed, versions). Flat order everywhere is row-major (C) order of the input.

## 1. NF4: `nf4.safetensors`

`packed, state = bitsandbytes.functional.quantize_4bit(x, blocksize=64, quant_type="nf4",
compress_statistics=False / True)` on fp32 CPU tensors, then `dequantize_4bit(packed, state)`.

Inputs (one `torch.Generator` seeded with --seed, drawn in float64, stored fp32):

- `a` {list(CASES['a'][0])}: {CASES['a'][1]}.
- `b` {list(CASES['b'][0])}: {CASES['b'][1]}.
  bitsandbytes accepts a numel that is not a multiple of 64 and **does not pad the last block**:
  it is a short block of {b['last_block']} elements whose absmax is the max over those {b['last_block']} elements only;
  `absmax` has ceil(1850/64) = {b['blocks']} entries and `packed` has 1850/2 = {b['packed_bytes']} bytes.
- `c` {list(CASES['c'][0])}: special values, 8 blocks of 64 and a last block of 40 (flat index ranges):
  - 0..63: all zero (absmax 0);
  - 64..127: the 16 codes times 0.0375, four times (absmax 0.0375);
  - 128..191: the 16 codes reversed times 1.7, four times (absmax 1.7);
  - 192..255: absmax 1.0: element 192 = 1.0; 193..207 = the 15 fp32 midpoints
    (c[i] + c[i+1]) / 2 exactly (ties); 208..222 = one ulp above each; 223..237 = one ulp below
    each; 238 = -1.0; 239..255 random in (-0.99, 0.99);
  - 256..319: absmax 0.03: element 256 = 0.03, then {layout['rec_splitters']} values x next to
    0.03 * midpoint for which x * (1/0.03) and x / 0.03 (fp32) fall on different sides of a midpoint
    ({layout['rec_found']} such values exist within 64 ulps), one -0.01, random fill;
  - 320..383, 384..447, 448..511: normal(0, 0.02) with outliers: 8.0 at 325; -50.0 at 424; 1.5 at
    451, -1.2 at 465, 0.9 at 508;
  - 512..551 (the short last block): absmax 0.06: element 512 = -0.06, then {layout['div_splitters']}
    values next to 0.06 * midpoint that tell x / 0.06 from x * (1/0.06) ({layout['div_found']} exist), random
    fill.
- `d` {list(CASES['d'][0])}: {CASES['d'][1]}.
  An odd numel is accepted: `packed` has ceil(65/2) = {d['packed_bytes']} bytes and the low nibble of the
  last byte is padding, code {d['pad_nibble']} (the code of 0.0: bitsandbytes pads the normalised values
  with one 0.0).

{pattern_table(nf4_t, NF4_DOC, list(CASES))}

### The NF4 rule bitsandbytes implements (CPU, fp32 input), reproduced bit for bit

NF4 code values (`nf4.code`, index 0..15) equal the reference.md list exactly (as fp32):
{fmt_map(nf4_t['nf4.code'])}.

1. Blocks of 64 consecutive elements in flat order; absmax[b] = max |x| over the block (fp32; the
   last block may be shorter and uses only its own elements).
2. Normalise: for a full block s = fl(x * fl(1 / max(absmax, 1e-38f))) (torch:
   `A * (1.0 / absmax.clamp(min=1e-38))`, a multiplication by the fp32 reciprocal); for the
   **short last block** s = fl(x / max(absmax, 1e-38f)) (a true division). Then s is clamped to
   [-1, 1]. The two differ in the last bit for some x; the splitter values in `c` pin both rules
   (in `c`, using the reciprocal in the last block too would change {c['last_block_division_matters']} codes, dividing in
   the full blocks too would change {c['full_block_reciprocal_matters']}; in a, b, d: {a['full_block_reciprocal_matters'] + a['last_block_division_matters']}, {b['full_block_reciprocal_matters'] + b['last_block_division_matters']}, {d['full_block_reciprocal_matters'] + d['last_block_division_matters']}). An all-zero block
   gives s = 0 everywhere (absmax 0 is stored as 0; the clamp is only for the division).
3. Code = the number of fp32 midpoints m[i] = fl((c[i] + c[i+1]) / 2) that are < s
   (`torch.bucketize(s, m)`, right=False): nearest code, and a value exactly on a midpoint goes to
   the **lower** index, as reference.md says. Observed on `c` 193..237 (all 15 midpoints each):
   exactly on midpoint i -> code i: {yes(ties['tie_lower'])}; one ulp above -> i+1: {yes(ties['above_upper'])};
   one ulp below -> i: {yes(ties['below_lower'])}. The all-zero block gives code
   {', '.join(map(str, ties['block0']))} (0.0) everywhere, bytes 0x77.
4. Packing: byte k = (code[2k] << 4) | code[2k+1]: the **first element is in the high nibble**; an
   odd numel is padded with code 7. The packed tensor is uint8 of shape [ceil(numel/2), 1].
5. Dequantize: out = fl(code[q] * absmax[block]) (fp32; the short last block uses its own absmax).
   With double quantization the absmax used is `dq.absmax_dequant`.

Double quantization (compress_statistics=True), `functional.quantize_4bit`:

- The 4-bit codes are computed with the exact fp32 absmaxes first: `packed` is the same in both
  modes; only the stored scales differ.
- offset = `absmax.mean()` (fp32, torch's reduction; an fp64 mean rounded to fp32 differs from it by
  a: {a['offset_ulp']}, b: {b['offset_ulp']}, c: {c['offset_ulp']}, d: {d['offset_ulp']} ulp here; the codes computed
  from the fp64 mean differ in a: {a['dq_codes_with_fp64_offset_mismatches']}, b: {b['dq_codes_with_fp64_offset_mismatches']}, c: {c['dq_codes_with_fp64_offset_mismatches']}, d: {d['dq_codes_with_fp64_offset_mismatches']} places: use the stored offset to
  reproduce the codes).
- `quantize_blockwise(absmax - offset, blocksize=256)` with the default code, the signed dynamic
  map (`dq.code`), on CPU with the lookup-table rule of section 2 (not exact nearest: the exact
  nearest rule would give a: {a['dq_codes_nearest_mismatches']}, b: {b['dq_codes_nearest_mismatches']}, c: {c['dq_codes_nearest_mismatches']}, d: {d['dq_codes_nearest_mismatches']} different codes). Every case here has
  at most 96 blocks, i.e. one (short) second-level block: `dq.state2_absmax` has one entry.
- Dequantize: absmax' = fl(fl(dq.code[absmax_codes] * state2_absmax) + offset), then the 4-bit
  dequantization with absmax'. Max relative error of absmax' vs absmax (non-zero ones): a {a['absmax_dq_max_rel_err']:.3g},
  b {b['absmax_dq_max_rel_err']:.3g}, c {c['absmax_dq_max_rel_err']:.3g}, d {d['absmax_dq_max_rel_err']:.3g}. In `c` the outliers
  (absmax 50) make the second-level scale ~43, so the small absmaxes come back badly
  ({c['absmax_dq_negative']} of c's 9 dequantized absmaxes are negative, flipping those blocks'
  signs): that is bitsandbytes' behaviour, kept on purpose; the all-zero block still dequantizes to
  (signed) zeros.

QuantState fields (case `a`; `describe` of each attribute of the object bitsandbytes returns):

| field | compress_statistics=False | compress_statistics=True | meaning |
| --- | --- | --- | --- |
{qs_lines}

`state2` (True only): {st2_lines}. In a saved checkpoint (`QuantState.as_dict(packed=True)`,
Params4bit state dicts) these are `absmax`, `quant_map` (= code), `nested_absmax`
(= state2.absmax), `nested_quant_map` (= state2.code), `nested_offset` (= offset, as a float),
`nested_blocksize`, `nested_dtype`, plus `quant_type`, `blocksize`, `dtype`, `shape`.

Bits per parameter for `a` ({a['numel']} parameters, {a['blocks']} blocks):
- without double quantization: (4·{a['numel']} + 32·{a['blocks']}) / {a['numel']} = **{bits['a_false']:.4f}**
  (4 + 32/64 = 4.5);
- with: (4·{a['numel']} + 8·{a['blocks']} + 32·{a['state2_blocks']} (state2.absmax) + 32 (offset)) / {a['numel']} =
  **{bits['a_true']:.4f}**; the asymptotic figure for full 256-blocks, 4 + 8/64 + 32/(64·256) = {bits['asym']:.4f},
  is what reference.md quotes (≈4.127); `a` pays 32 + 32 bits for one short second-level block
  and the offset. The 256-entry maps are constants and not counted.

Errors vs the input (max abs): a {a['dequant_max_abs_err_vs_input_false']:.3g} / {a['dequant_max_abs_err_vs_input_true']:.3g}
(False / True), b {b['dequant_max_abs_err_vs_input_false']:.3g} / {b['dequant_max_abs_err_vs_input_true']:.3g}.

**bitsandbytes {versions['bitsandbytes']} CPU `dequantize_4bit` is wrong for some shapes on
AVX-512** (probed, not stored; each compared with code[q] * absmax of the same bytes):
{edge_lines}
{"The AVX-512 branch of `dequantizeBlockwise4bitCpu` (taken when the last dimension is a multiple of 16) indexes absmax as row * (n / blocksize) + column / blocksize, which is right only when the row length n is a multiple of the block size; the flat (correct) indexing is used by the scalar branch (other last dimensions) and by the torch fallback (odd last dimension). The stored cases avoid it (a: rows of 64; b, c, d: last dimensions 50, 24, 13 use the scalar branch or the fallback), so every stored dequant equals code[q] * absmax. The quantized bytes are right in every shape." if buggy else "No shape was wrong on this machine."}

## 2. 8-bit blockwise dynamic quantization: `blockwise8.safetensors`

`bitsandbytes.functional.create_dynamic_map(signed=True)` / `(signed=False)` and
`quantize_blockwise(x, code=map, blocksize=256)` / `dequantize_blockwise(codes, state)` on CPU: the
signed map on a signed input, the unsigned map on a non-negative one. This is the quantization of
8-bit Adam's states (section 3) and of NF4's second level.

Maps: signed: {ms['n_neg']} negative entries, 0.0 at index {ms['zero_index']}, {ms['n_pos']} positive, from {ms['min']:.9g}
(the map does **not** reach -1: x = -absmax dequantizes to {ms['min']:.7g}·absmax) to {ms['max']:g}; smallest
positive {ms['smallest_positive']:.4g}. Unsigned: 0.0 at index {mu['zero_index']}, smallest positive
{mu['smallest_positive']:.4g}, max {mu['max']:g}. Both strictly increasing. An fp64 evaluation of the formula
(`create_dynamic_map`: for i = 0..6, the means of consecutive points of linspace(0.1, 1, 2^i + 1)
(signed) or linspace(0.1, 1, 2^(i+1) + 1) (unsigned), times 10^(i-6), with both signs when signed;
plus 0 and 1; sorted) agrees within {max(ms['max_ulp_vs_fp64'], mu['max_ulp_vs_fp64']):.0f} ulp
(bitsandbytes uses fp32 torch.linspace): embed the stored fp32 values, not the formula.

Inputs: 1000 elements (blocks of 256, 256, 256 and a short one of 232), normal(0, 1) (absolute
value for the unsigned one; a generator seeded with --seed + 1). Block 1 (elements 256..511) is
clipped to |x| <= 3.9 and holds special values, with absmax exactly 4: element 256 = 4.0; 257..260 = 0.0; then tiny values
(±4e-7, ±4e-6, ±4e-5; positive only for unsigned); then 4·map[0, 8, 16, ..., 248] (32 exact entries);
then 4·midpoint[3, 11, ..., 251] (32 values exactly between entries i and i+1); then the same
midpoints one ulp above.

{pattern_table(b8_t, B8_DOC, ['signed', 'unsigned'])}

### The rule bitsandbytes' CPU quantizer implements (reproduced bit for bit) — not exact nearest

`cquantize_blockwise_cpu_fp32` (`csrc/cpu_ops.cpp`, `quantize_cpu_impl`) does not search the map;
it uses a 65536-entry lookup table:

1. absmax[b] = max |x| over the block (fp32; short last block: its own elements). If absmax is 0
   every code of the block is **0** (map[0], i.e. -0.99297 for the signed map; dequantizes to -0.0).
2. v = clamp(fl(x * fl(1/absmax)), -1, 1).
3. j = trunc(fma(fl(fl(v + 1) * 0.5), 65535, 0.5)) — the shipped x86-64 binary fuses the last
   multiply-add (vfmadd213ss); the unfused form differs only where the sum crosses a power of two
   (it changes {s['unfused_mismatches']} + {u['unfused_mismatches']} codes here).
4. code = lut[j], lut[j] = the number of fp32 midpoints fl(0.5 * (map[i] + map[i+1])) that are
   < g[j], with g[j] = fl(fl(2j) / 65535) - 1 (the nearest map entry to the grid point g[j], a grid
   point exactly on a midpoint going to the lower index).
5. dequantize: fl(map[code] * absmax[block]).

So the result is the nearest map entry to v rounded to a grid of step 2/65535 ≈ 3.05e-5, which is
coarser than the map near 0. Consequences seen in the stored data (block 1):
- **0.0 is not encoded as 0.0**: v = 0 gives j = 32768, g = +1.526e-5, code {s['zero_code']} ({s['zero_value']:.6g}) in the
  signed map, code {u['zero_code']} ({u['zero_value']:.6g}) in the unsigned one, i.e. a zero comes back as
  {s['zero_value']:.4g}·absmax (signed) / {u['zero_value']:.4g}·absmax (unsigned); all tiny |v| < ~1.5e-5 do the same;
- exact map entries: {s['code_entries_exact']}/{s['n_code_entries']} (signed), {u['code_entries_exact']}/{u['n_code_entries']} (unsigned) come back as themselves;
- values exactly on a midpoint: signed {s['mid_lower']} lower / {s['mid_upper']} upper / {s['mid_other']} other index, unsigned
  {u['mid_lower']} / {u['mid_upper']} / {u['mid_other']} of {s['n_mid']}: no consistent tie rule, it depends on the grid;
- the exact nearest rule (`codes_nearest`: nearest entry to v, exactly-on-midpoint to the lower
  index, a zero block to the index of 0.0) differs from bitsandbytes' codes in {s['nearest_mismatches']} (signed) and
  {u['nearest_mismatches']} (unsigned) of 1000 places: {s['nearest_mismatch_random']} + {u['nearest_mismatch_random']} among the random elements, the
  rest among the special values.

bitsandbytes' CUDA kernels quantize differently (`kQuantizeBlockwise` / `quantize_2D` in
`csrc/kernels.cu`, a search over the map); no CUDA output is stored here.

Max relative error of the dequantized values (over max |x|): signed {s['dequant_max_rel_err']:.3g},
unsigned {u['dequant_max_rel_err']:.3g}.

## 3. 8-bit Adam: `adam8bit.safetensors` (bitsandbytes output)

`bitsandbytes.optim.AdamW8bit([p], lr={ADAM['lr']:g}, betas={ADAM['betas']}, eps={ADAM['eps']:g},
weight_decay={ADAM['weight_decay']:g})` on a CPU fp32 parameter of N = {n_adam} elements ({nb_adam} blocks of 256,
the last one {n_adam - (nb_adam - 1) * 256} long; N >= min_8bit_size 4096, so the states are 8-bit), {ADAM['steps']} steps with the
stored gradients. `Adam8bit` with the same arguments gives bit-identical results (both call the
"adam" kernel, decoupled weight decay). Defaults otherwise: no percentile clipping, max_unorm 0,
blocksize 256, state1 = m with the signed map, state2 = v with the unsigned map (section 2's maps).
Initial state: codes 0, absmax 0 (dequantizes to m = -0.0, v = 0).
(`--adam-numel 8192` regenerates it for 8192 elements; the folder then grows by about
{(8192 - n_adam) * 31 // 1000} KB: 31 bytes per element for param0, grad_q, params and the codes.)

{table(adam_t, ADAM_DOC)}

The CPU update (`backends/cpu/ops.py`, `_optimizer_update_8bit_blockwise_cpu`), per step t, fp32:

    m = map_s[state1] * absmax1;  v = map_u[state2] * absmax2        (dequantize, blocks of 256)
    m = m * b1 + (1 - b1) * g          (torch: mul_ then add_(alpha): one fused multiply-add)
    v = v * b2 + (1 - b2) * g * g      (mul_ then addcmul_: fma(fl((1-b2)*g), g, fl(v*b2)))
    denom = sqrt(v) / sqrt(1 - b2^t) + eps
    p = p * (1 - lr*wd)                (weight decay BEFORE the Adam step)
    p = p + fl(fl((-lr / (1 - b1^t)) * m) / denom)
    state1, absmax1 = quantize_blockwise(m, map_s); state2, absmax2 = quantize_blockwise(v, map_u)
                                        (section 2's lookup-table rule, new absmax per block)

Differences from bitsandbytes' CUDA kernel (`kOptimizerStatic8bit2StateBlockwise`, read in the
source, not run): CUDA applies the decay after the step, p = (p - step) * (1 - lr*wd), with
denom sqrt(v) + sqrt(1-b2^t)*eps and step size lr*sqrt(1-b2^t)/(1-b1^t) (the same in exact
arithmetic); CUDA zeroes m and v and skips the update of elements whose gradient is NaN/inf, and
keeps m's sign through requantization (bumps the code by one if the code's sign differs from m's);
CUDA quantizes with its own search, not section 2's table. The CPU path does none of these.
Probed (not stored), one bad gradient at element 10, first step: NaN -> that parameter becomes NaN
({adam_f['nan_grad']['nan_params']} NaN); the block's absmaxes ignore it (std::max drops NaN: absmax1
{adam_f['nan_grad']['absmax1']:.4g}, absmax2 {adam_f['nan_grad']['absmax2']:.4g}, finite) and its codes become
{adam_f['nan_grad']['code1']} / {adam_f['nan_grad']['code2']} (the NaN index truncates to 0), so the next step starts from
m = map_s[0]·absmax1 = -0.993·absmax1 and v = 0 there. +inf -> that parameter NaN, the block's
absmax1 and absmax2 = {adam_f['inf_grad']['absmax1']:g} / {adam_f['inf_grad']['absmax2']:g}, and {"every other element of the block gets the zero codes (" + str(s['zero_code']) + " / " + str(u['zero_code']) + "): the block's states are lost" if adam_f['inf_grad']['block_zero_codes'] else "the other elements of the block keep their codes"}; the other blocks stay
{"finite" if adam_f['inf_grad']['other_blocks_finite'] else "NOT finite"}.

Cross-checks: an fp32 numpy emulation of the update above with section 2's quantizer reproduces
`params`, the codes and the absmaxes **bit for bit when torch's own sqrt is used**. With IEEE
(correctly rounded) sqrt the parameters differ in {', '.join(map(str, adam_f['ieee_param_mismatch_per_step']))} elements after steps 1..5
(at most {adam_f['ieee_param_max_ulp']} ulp) and the final codes/absmaxes in {', '.join(f'{k} {v}' for k, v in adam_f['ieee_state_mismatch'].items())} places: torch
{versions['torch']}'s fp32 sqrt on this CPU is not correctly rounded ({adam_f['torch_sqrt_not_ieee']} of 100000 random inputs in
[0.1, 1.1) are one ulp low; numpy: {adam_f['numpy_sqrt_not_ieee']}). An engine with IEEE sqrt should compare `params` to
a few ulp, not bitwise. Against the unquantized fp64 AdamW (the published formula) after 5 steps:
max |difference| {adam_f['fp64_max_abs_dev']:.3g}, against a total parameter change of up to {adam_f['fp64_total_change_max']:.3g}
(median {adam_f['fp64_total_change_median']:.3g}); median difference/change {adam_f['fp64_dev_over_change_median']:.3g}.

## Cross-checks (the script fails rather than write data that disagrees)

All against numpy code in `tools/make_nf4_golden.py` that does not call bitsandbytes:
NF4 packed bytes, absmax, double-quantized codes, second-level absmax, dequantized absmax and both
dequantized tensors bit for bit, for every case; the NF4 code equals reference.md; the 8-bit codes,
absmax and dequantized values bit for bit; the two maps within a few ulp of their fp64 formula;
quantize_blockwise leaves the map unmodified; the optimizer's maps equal create_dynamic_map;
Adam8bit == AdamW8bit; the Adam emulation as described above.
"""


QS_MEANING = {
    "absmax": "False: fp32 absmax per 64-block. True: uint8 codes of absmax - offset",
    "shape": "shape of the original tensor (dequantize_4bit's output shape)",
    "code": "the 16 NF4 values (`nf4.code`)",
    "dtype": "dtype of the original tensor (and of dequantize_4bit's output)",
    "blocksize": "elements per absmax block (64)",
    "quant_type": "'nf4'",
    "offset": "True: fp32 0-dim mean of the absmaxes, added back on dequantization",
    "state2": "True: QuantState of the second level (absmax per 256 absmaxes, code = signed dynamic map)",
    "nested": "True when absmax is double-quantized",
}


# --------------------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--out", default=os.path.join(here, "..", "tests", "data", "nf4"))
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--adam-numel", type=int, default=4160,
                    help="parameter elements for the 8-bit Adam run (>= 4096 for 8-bit states)")
    args = ap.parse_args()
    if args.adam_numel < 4096:
        raise SystemExit("--adam-numel must be >= 4096 (min_8bit_size), or the states stay fp32")
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    bnb, bf = bnb_modules()
    import safetensors
    versions = {"bitsandbytes": bnb.__version__, "torch": torch.__version__, "numpy": np.__version__,
                "safetensors": safetensors.__version__, "python": sys.version.split()[0],
                "machine": f"{platform.machine()} {platform.system()}",
                "cpu_capability": torch.backends.cpu.get_cpu_capability()}
    from bitsandbytes.cextension import ErrorHandlerMockBNBNativeLibrary, lib
    check(not isinstance(lib, ErrorHandlerMockBNBNativeLibrary), "bitsandbytes' native CPU library did not load")

    code = t2n(bf.get_4bit_type("nf4", device="cpu"))
    check(bits_equal(code, np.array(NF4_REFERENCE, F32)), f"NF4 code differs from reference.md: {code}")

    # 1. NF4
    inputs, layout = make_nf4_inputs(args.seed, code)
    check(layout["rec_splitters"] >= 6 and layout["div_splitters"] >= 6, f"too few splitters {layout}")
    nf4_t, nf4_f = run_nf4(bf, inputs, code)
    ties = tie_facts(inputs["c"], code, nf4_t["c.packed"])
    check(ties["tie_lower"] and ties["above_upper"] and ties["below_lower"], f"tie rule {ties}")
    edges = probe_nf4_edges(bf, code, args.seed)
    a = nf4_f["a"]
    bits = {"a_false": (4 * a["numel"] + 32 * a["blocks"]) / a["numel"],
            "a_true": (4 * a["numel"] + 8 * a["blocks"] + 32 * a["state2_blocks"] + 32) / a["numel"],
            "asym": 4 + 8 / 64 + 32 / (64 * 256)}
    check(abs(bits["a_false"] - 4.5) < 1e-12 and abs(bits["a_true"] - 4.1354) < 1e-3, f"bits {bits}")
    check(nf4_t["a.packed"].size * 8 == 4 * a["numel"], "packed size")

    # 2. 8-bit blockwise
    maps, map_f = check_maps(bf)
    b8_in, b8_layout = make_8bit_inputs(args.seed, maps)
    b8_t, b8_f = run_8bit(bf, b8_in, maps, b8_layout)

    # 3. 8-bit Adam
    adam_t, adam_f = run_adam(bnb, maps, args.seed, args.adam_numel,
                              {k: b8_f[k]["zero_code"] for k in ("signed", "unsigned")})

    os.makedirs(args.out, exist_ok=True)
    for name in os.listdir(args.out):  # only what this script writes lives here
        if name not in FILES:
            raise SystemExit(f"{args.out} holds {name}, which this script does not write")
    meta = {"format": "trainscope-golden-v1", "generator": "tools/make_nf4_golden.py",
            "seed": str(args.seed), "bitsandbytes": versions["bitsandbytes"], "torch": versions["torch"],
            "device": "cpu"}

    def save(tensors, fname, extra):
        tt = {k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in tensors.items()}
        save_safetensors(tt, os.path.join(args.out, fname), dict(meta, **extra))

    order = ["nf4.code", "dq.code"] + [k for k in nf4_t if k not in ("nf4.code", "dq.code")]
    nf4_t = {k: nf4_t[k] for k in order}
    save(nf4_t, "nf4.safetensors", {"content": "bitsandbytes quantize_4bit nf4 blocksize 64, CPU"})
    save(b8_t, "blockwise8.safetensors", {"content": "bitsandbytes quantize_blockwise blocksize 256, CPU"})
    save(adam_t, "adam8bit.safetensors",
         {"content": "bitsandbytes AdamW8bit on CPU", "lr": str(ADAM["lr"]), "betas": str(ADAM["betas"]),
          "eps": str(ADAM["eps"]), "weight_decay": str(ADAM["weight_decay"]),
          "grad_scale": f"2^-{GRAD_SHIFT}"})
    from safetensors.numpy import load_file as np_load
    for fname, tensors in (("nf4.safetensors", nf4_t), ("blockwise8.safetensors", b8_t),
                           ("adam8bit.safetensors", adam_t)):
        back = np_load(os.path.join(args.out, fname))
        check(set(back) == set(tensors) and all(bits_equal(back[k], np.asarray(tensors[k])) for k in tensors),
              f"{fname} does not load back")
    sizes = {f: os.path.getsize(os.path.join(args.out, f)) for f in FILES if f != "README.md"}
    with open(os.path.join(args.out, "README.md"), "w") as f:
        f.write(readme(args, versions, nf4_t, nf4_f, layout, ties, edges, b8_t, b8_f, map_f, adam_t,
                       adam_f, bits, sizes))
    for name in FILES:
        os.chmod(os.path.join(args.out, name), 0o644)  # safetensors writes 0600
    total = sum(os.path.getsize(os.path.join(args.out, n)) for n in FILES)
    print(f"wrote {args.out} ({total / 1024:.0f} KiB): " + ", ".join(f"{k} {v}" for k, v in sizes.items()))
    print("nf4:", {k: {kk: v[kk] for kk in ("offset_ulp", "dq_codes_nearest_mismatches",
                                             "last_block_division_matters")} for k, v in nf4_f.items()
                   if k in CASES}, "ties", ties, "edges", edges)
    print("8-bit:", b8_f)
    print("adam:", adam_f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
