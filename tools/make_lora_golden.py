#!/usr/bin/env python3
"""Golden data for LoRA adapters, made with the real PEFT library on the tiny golden models.

Writes to tests/data/lora_tiny/ (committed; CI never runs this script):
  r4_all/           LoRA r=4, alpha=8 on every Llama projection (q k v o gate up down)
  r8_rslora_qv/     rsLoRA r=8, alpha=16 on q_proj and v_proj only (scaling alpha/sqrt(r))
  gpt2_base/        the tiny GPT-2 of tests/data/golden as a Hugging Face GPT2LMHeadModel:
                    config.json + model.safetensors (save_pretrained: Conv1D weights (in, out)) and
                    engine.safetensors (the engine's names and (out, in) layout)
  gpt2_r4/          LoRA r=4, alpha=8 on GPT-2's c_attn, attn.c_proj, c_fc, mlp.c_proj (Conv1D,
                    fan_in_fan_out=True)
  README.md         how it was made, versions, the PEFT semantics it pins, observed tolerances
Each adapter folder holds
  adapter_config.json, adapter_model.safetensors   exactly as PeftModel.save_pretrained writes them
                                                     (fp32; keys base_model.model.<module>.lora_A.weight)
  expected.safetensors   inputs I32 [B,T], targets I32 [B,T] (the base model's golden batch: -1 =
                         ignored, already aligned so logits[b,t] is scored against targets[b,t]),
                         logits F32 [B,T,V] and loss F32 [1] / loss_f64 F64 [1] of the adapted model,
                         base_logits F32 [B,T,V] (the unadapted model), merged.<HF base weight name>
                         F32 for every base weight merge_and_unload() changes, and
                         grad.<PEFT key> F32, d loss / d every LoRA tensor (base frozen, as in PEFT).

The Llama base is tests/data/llama_tiny (loaded, not regenerated; its batch is reused), the GPT-2
base is tests/data/golden/tiny_gpt (its weights and batch). LoRA A and B are set to seeded random
values (PEFT's own init has B = 0, which would make the adapter a no-op).

The reference is PEFT on the Hugging Face model in float64 (from the stored fp32 weights and
adapters), with the three float32 upcasts of stock transformers' Llama patched out exactly as in
tools/make_llama_golden.py (GPT-2 has none). Before anything is written it is cross-checked (the
script fails rather than write data that disagrees):
  a. an independent plain-ops float64 forward y = W0 x + scaling * B (A x) (no transformers, no
     PEFT; for GPT-2 on the engine layout of engine.safetensors): logits, loss and LoRA gradients;
  b. merge_and_unload(): the merged model's logits equal the adapter's (float64) and differ from
     the base model's; the merged weights equal W0 + scaling * B @ A (transposed for Conv1D);
  c. central differences in float64 on random elements of every LoRA tensor;
  d. the adapter files load back (PeftModel.from_pretrained) to exactly the values drawn;
  e. stock transformers + PEFT in float32 (what README.md's observed fp32 tolerances are).

Usage: python3 tools/make_lora_golden.py [--out tests/data/lora_tiny] [--seed 1234]
Needs: pip install -r tools/requirements-golden.txt   (torch, transformers, peft, safetensors, numpy)
The script re-executes itself with PYTHONHASHSEED=0: PEFT keeps target_modules as a Python set and
save_pretrained writes it in set order, which otherwise changes run to run.
"""
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # everything is local; never ask the Hub
if __name__ == "__main__" and os.environ.get("PYTHONHASHSEED") != "0":
    os.environ["PYTHONHASHSEED"] = "0"  # adapter_config.json's target_modules order (a set)
    os.execv(sys.executable, [sys.executable] + sys.argv)

import argparse
import contextlib
import json
import math
import shutil
import tempfile

import torch
import torch.nn.functional as F
from safetensors import safe_open
from safetensors.torch import load_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_golden import param_names as gpt2_engine_names  # noqa: E402
from make_llama_golden import Float64Patches, ce_loss, compare, max_abs, max_rel, save_safetensors  # noqa: E402

LLAMA_ALL = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
GPT2_TARGETS = ["c_attn", "attn.c_proj", "c_fc", "mlp.c_proj"]
# name -> base model and LoraConfig arguments (lora_dropout=0.0, bias="none" for all). seed: added
# to --seed for the generator that draws this adapter's A and B.
CONFIGS = {
    "r4_all": dict(base="llama", seed=1, lora=dict(r=4, lora_alpha=8, target_modules=LLAMA_ALL)),
    "r8_rslora_qv": dict(base="llama", seed=2, lora=dict(r=8, lora_alpha=16, use_rslora=True,
                                                         target_modules=["q_proj", "v_proj"])),
    "gpt2_r4": dict(base="gpt2", seed=3, lora=dict(r=4, lora_alpha=8, target_modules=GPT2_TARGETS,
                                                   fan_in_fan_out=True)),
}
A_STD, B_STD = 0.1, 0.05  # LoRA A ~ N(0, A_STD), B ~ N(0, B_STD), drawn in float64, stored fp32
ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors", "expected.safetensors")
GPT2_BASE_FILES = ("config.json", "model.safetensors", "engine.safetensors")
GPT2_LINEARS = ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj")  # Conv1D modules
REL_LLAMA = "tests/data/llama_tiny"          # recorded as base_model_name_or_path (repo-relative)
REL_GPT2 = "tests/data/lora_tiny/gpt2_base"


def quiet():
    import warnings
    from transformers.utils import logging as hf_logging
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*")


# --------------------------------------------------------------------------- base models

class Base:
    """A base model on disk (HF config.json + model.safetensors) and its golden batch."""

    def __init__(self, arch, path, rel, inputs, targets):
        self.arch, self.path, self.rel = arch, path, rel
        self.inputs, self.targets = inputs, targets
        with open(os.path.join(path, "config.json")) as f:
            self.config = json.load(f)
        self.weights = load_file(os.path.join(path, "model.safetensors"))  # fp32, HF names/layout

    def load(self, dtype):
        from transformers import AutoModelForCausalLM
        m = AutoModelForCausalLM.from_pretrained(self.path, dtype=dtype, attn_implementation="eager")
        m.name_or_path = self.rel  # what PEFT records as base_model_name_or_path
        sd = m.state_dict()
        for k, v in self.weights.items():  # loaded as stored
            assert torch.equal(sd[k], v.to(dtype)), k
        return m.eval()

    def patches(self, dtype):
        return Float64Patches() if self.arch == "llama" and dtype == torch.float64 else contextlib.nullcontext()

    def forward(self, model, dtype):
        pos = torch.arange(self.inputs.shape[1]).unsqueeze(0).expand_as(self.inputs)
        with self.patches(dtype):
            out = model(input_ids=self.inputs, position_ids=pos, use_cache=False)
            return out.logits, ce_loss(out.logits, self.targets)


def llama_base(path):
    exp = load_file(os.path.join(path, "expected.safetensors"))
    b = Base("llama", path, REL_LLAMA, exp["inputs"].long(), exp["targets"].long())
    b.golden_logits = exp["logits"]
    return b


def gpt2_hf_name(k):
    """engine name (tests/data/golden/tiny_gpt.safetensors) -> Hugging Face GPT2LMHeadModel name."""
    return "transformer." + k + (".weight" if k in ("wte", "wpe") else "")


def is_conv1d_weight(k):
    return k.endswith(".weight") and any("." + m + "." in "." + k for m in GPT2_LINEARS)


def make_gpt2_base(golden, out):
    """The tiny GPT-2 of tests/data/golden (engine layout) as a Hugging Face GPT2LMHeadModel in out/:
    config.json + model.safetensors by save_pretrained (Conv1D weights (in, out)), and
    engine.safetensors (engine names, (out, in)), which must equal tiny_gpt.safetensors."""
    from transformers import GPT2Config, GPT2LMHeadModel
    with open(os.path.join(golden, "tiny_gpt.json")) as f:
        spec = json.load(f)
    m = spec["model"]
    assert spec["gelu"] == "tanh" and spec["tied_lm_head"] and m["dropout"] == 0.0, spec
    eng = load_file(os.path.join(golden, "tiny_gpt.safetensors"))
    cfg = GPT2Config(vocab_size=m["vocab"], n_positions=m["seq_len"], n_embd=m["d_model"],
                     n_layer=m["layers"], n_head=m["heads"], n_inner=None,
                     activation_function="gelu_new", layer_norm_epsilon=spec["layernorm_eps"],
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, summary_first_dropout=0.0,
                     tie_word_embeddings=True, bos_token_id=0, eos_token_id=0, use_cache=False,
                     architectures=["GPT2LMHeadModel"])
    torch.manual_seed(0)
    model = GPT2LMHeadModel._from_config(cfg, attn_implementation="eager", dtype=torch.float32)
    hf = {gpt2_hf_name(k): (v.T.contiguous() if is_conv1d_weight(k) else v) for k, v in eng.items()}
    missing, unexpected = model.load_state_dict(hf, strict=False)
    assert not unexpected and set(missing) <= {"lm_head.weight"}, (missing, unexpected)
    assert model.lm_head.weight.data_ptr() == model.transformer.wte.weight.data_ptr()  # tied
    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp)
        for name in ("config.json", "model.safetensors"):
            shutil.copyfile(os.path.join(tmp, name), os.path.join(out, name))
    back = load_file(os.path.join(out, "model.safetensors"))
    assert set(back) == set(hf), set(back) ^ set(hf)
    assert set(gpt2_engine_names(m["layers"])) == set(eng), set(eng)
    engine = {}
    for k in gpt2_engine_names(m["layers"]):  # back to the engine layout, from what save_pretrained wrote
        v = back[gpt2_hf_name(k)]
        engine[k] = v.T.contiguous() if is_conv1d_weight(k) else v
        assert torch.equal(engine[k], eng[k]), k
    save_safetensors(engine, os.path.join(out, "engine.safetensors"),
                     {"format": "trainscope-engine-gpt2", "generator": "tools/make_lora_golden.py",
                      "layout": "(out, in) as nn.Linear: y = x W^T + b; tied head = wte",
                      "source": "tests/data/golden/tiny_gpt.safetensors"})
    exp = load_file(os.path.join(golden, "tiny_gpt_expected.safetensors"))
    b = Base("gpt2", out, REL_GPT2, exp["inputs"].long(), exp["targets"].long())
    b.golden_logits = exp["logits"]
    b.engine = engine
    return b


# --------------------------------------------------------------------------- adapters

def lora_config(spec):
    from peft import LoraConfig
    return LoraConfig(lora_dropout=0.0, bias="none", **spec["lora"])


def scaling_of(spec):
    lo = spec["lora"]
    return lo["lora_alpha"] / (math.sqrt(lo["r"]) if lo.get("use_rslora") else lo["r"])


def peft_key(param_name):
    """named_parameters() name -> the key save_pretrained writes (the adapter name removed)."""
    assert ".default." in param_name, param_name
    return param_name.replace(".lora_A.default.", ".lora_A.").replace(".lora_B.default.", ".lora_B.")


def make_adapter(base, spec, seed, out):
    """get_peft_model on the fp32 base, A and B set to seeded random values, save_pretrained to out/.
    Returns {PEFT key: fp32 tensor} as drawn."""
    from peft import get_peft_model
    torch.manual_seed(seed)  # PEFT's own init (overwritten below) draws from the global generator
    pm = get_peft_model(base.load(torch.float32), lora_config(spec))
    g = torch.Generator().manual_seed(seed)
    drawn = {}
    with torch.no_grad():
        for name, p in pm.named_parameters():
            if not p.requires_grad:
                continue
            assert ".lora_A." in name or ".lora_B." in name, name  # nothing else is trainable
            std = A_STD if ".lora_A." in name else B_STD
            t = (std * torch.randn(p.shape, generator=g, dtype=torch.float64)).float()
            p.copy_(t)
            drawn[peft_key(name)] = t
    with tempfile.TemporaryDirectory() as tmp:
        # save_embedding_layers=False: the embeddings are not targeted nor resized; "auto" would
        # look for the base's config.json under base_model_name_or_path (or on the Hub) to check.
        pm.save_pretrained(tmp, save_embedding_layers=False)
        for name in ("adapter_config.json", "adapter_model.safetensors"):
            shutil.copyfile(os.path.join(tmp, name), os.path.join(out, name))
    saved = load_file(os.path.join(out, "adapter_model.safetensors"))
    assert set(saved) == set(drawn), set(saved) ^ set(drawn)
    for k, v in saved.items():
        assert v.dtype == torch.float32 and torch.equal(v, drawn[k]), k
    return drawn


def lora_modules(tensors):
    """{PEFT key: tensor} -> {HF module path: (A, B)}; the key is base_model.model.<path>.lora_X.weight."""
    mods = {}
    for k in tensors:
        assert k.startswith("base_model.model.") and k.endswith((".lora_A.weight", ".lora_B.weight")), k
        path = k[len("base_model.model."):-len(".lora_A.weight")]
        mods[path] = (tensors[f"base_model.model.{path}.lora_A.weight"],
                      tensors[f"base_model.model.{path}.lora_B.weight"])
    return dict(sorted(mods.items()))


# --------------------------------------------------------------------------- runs

def run_adapted(base, adapter_dir, dtype):
    """PeftModel.from_pretrained on the base in dtype (float64: the patched reference): logits,
    loss and {PEFT key: grad} of every LoRA tensor; also the model (for finite differences)."""
    from peft import PeftModel, get_peft_model_state_dict
    pm = PeftModel.from_pretrained(base.load(dtype), adapter_dir, is_trainable=True).eval()
    trainable = {n: p for n, p in pm.named_parameters() if p.requires_grad}
    assert trainable and all(".lora_A." in n or ".lora_B." in n for n in trainable), list(trainable)
    logits, loss = base.forward(pm, dtype)
    loss.backward()
    grads = {peft_key(n): p.grad.detach().clone() for n, p in trainable.items()}
    via_peft = get_peft_model_state_dict(pm, state_dict={n: p.grad for n, p in trainable.items()},
                                         save_embedding_layers=False)
    assert set(via_peft) == set(grads), set(via_peft) ^ set(grads)  # PEFT's own key mapping
    return logits.detach(), loss.detach(), grads, pm


def run_merged(base, adapter_dir, dtype):
    from peft import PeftModel
    merged = PeftModel.from_pretrained(base.load(dtype), adapter_dir).merge_and_unload()
    with torch.no_grad():
        logits, loss = base.forward(merged, dtype)
    return logits, loss, {k: v.detach().clone() for k, v in merged.state_dict().items()}


def run_base(base, dtype):
    with torch.no_grad():
        return base.forward(base.load(dtype), dtype)


def plain_llama(cfg, w, lora, scaling, inputs, targets):
    """Independent plain-ops Llama + LoRA: every targeted projection is
    y = h @ W0^T + scaling * ((h @ A^T) @ B^T); w: HF names, lora: {module path: (A, B)}."""
    B, T = inputs.shape
    H, KV, C = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["hidden_size"]
    hd = C // H
    eps = cfg["rms_norm_eps"]
    theta = cfg.get("rope_parameters", {}).get("rope_theta", cfg.get("rope_theta"))

    def lin(h, path):
        y = h @ w[path + ".weight"].T
        if path in lora:
            a, b = lora[path]
            y = y + ((h @ a.T) @ b.T) * scaling
        return y

    def rms(x, g):
        return g * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))

    def rot(x):
        return torch.cat((-x[..., hd // 2:], x[..., :hd // 2]), dim=-1)

    inv = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
    ang = torch.arange(T, dtype=torch.float64)[:, None] * inv[None, :]
    cos, sin = torch.cat((ang, ang), -1).cos(), torch.cat((ang, ang), -1).sin()
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    x = w["model.embed_tokens.weight"][inputs]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        h = rms(x, w[p + "input_layernorm.weight"])
        q = lin(h, p + "self_attn.q_proj").view(B, T, H, hd).transpose(1, 2)
        k = lin(h, p + "self_attn.k_proj").view(B, T, KV, hd).transpose(1, 2)
        v = lin(h, p + "self_attn.v_proj").view(B, T, KV, hd).transpose(1, 2)
        q, k = q * cos + rot(q) * sin, k * cos + rot(k) * sin
        k, v = k.repeat_interleave(H // KV, dim=1), v.repeat_interleave(H // KV, dim=1)
        s = (q @ k.transpose(-2, -1)) / math.sqrt(hd)
        y = s.masked_fill(~mask, float("-inf")).softmax(-1) @ v
        x = x + lin(y.transpose(1, 2).reshape(B, T, H * hd), p + "self_attn.o_proj")
        h = rms(x, w[p + "post_attention_layernorm.weight"])
        x = x + lin(F.silu(lin(h, p + "mlp.gate_proj")) * lin(h, p + "mlp.up_proj"), p + "mlp.down_proj")
    logits = rms(x, w["model.norm.weight"]) @ w["lm_head.weight"].T
    return logits, ce_loss(logits, targets)


def plain_gpt2(cfg, w, lora, scaling, inputs, targets):
    """Independent plain-ops GPT-2 + LoRA on the ENGINE layout (engine.safetensors: names wte,
    h.0.attn.c_attn.weight, ..., every weight (out, in)): y = h @ W^T + b + scaling * ((h @ A^T) @ B^T);
    lora: {engine module path (h.0.attn.c_attn): (A, B)}, A and B exactly as PEFT stores them."""
    B, T = inputs.shape
    C, H, eps = cfg["n_embd"], cfg["n_head"], cfg["layer_norm_epsilon"]
    hd = C // H

    def lin(h, path):
        y = h @ w[path + ".weight"].T + w[path + ".bias"]
        if path in lora:
            a, b = lora[path]
            y = y + ((h @ a.T) @ b.T) * scaling
        return y

    def ln(x, name):
        return F.layer_norm(x, (C,), w[name + ".weight"], w[name + ".bias"], eps)

    def gelu_new(x):  # transformers' NewGELUActivation (the tanh approximation)
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x.pow(3))))

    mask = torch.ones(T, T, dtype=torch.bool).tril()
    x = w["wte"][inputs] + w["wpe"][:T].unsqueeze(0)
    for i in range(cfg["n_layer"]):
        p = f"h.{i}."
        q, k, v = lin(ln(x, p + "ln_1"), p + "attn.c_attn").split(C, dim=-1)  # c_attn = [q | k | v]
        q, k, v = (t.view(B, T, H, hd).transpose(1, 2) for t in (q, k, v))
        s = (q @ k.transpose(-2, -1)) / math.sqrt(hd)
        y = (s.masked_fill(~mask, float("-inf")).softmax(-1) @ v).transpose(1, 2).reshape(B, T, C)
        x = x + lin(y, p + "attn.c_proj")
        x = x + lin(gelu_new(lin(ln(x, p + "ln_2"), p + "mlp.c_fc")), p + "mlp.c_proj")
    logits = ln(x, "ln_f") @ w["wte"].T  # tied head
    return logits, ce_loss(logits, targets)


def engine_path(hf_path):
    """GPT-2 HF module path (transformer.h.0.attn.c_attn) -> engine path (h.0.attn.c_attn)."""
    assert hf_path.startswith("transformer."), hf_path
    return hf_path[len("transformer."):]


def run_plain(base, adapter, scaling):
    """The independent forward in float64 from the stored fp32 base and adapter; returns logits,
    loss and {PEFT key: grad}."""
    lora64 = {k: v.double().clone().requires_grad_(True) for k, v in adapter.items()}
    mods = lora_modules(lora64)
    if base.arch == "llama":
        w = {k: v.double() for k, v in base.weights.items()}
        logits, loss = plain_llama(base.config, w, mods, scaling, base.inputs, base.targets)
    else:
        w = {k: v.double() for k, v in base.engine.items()}
        mods = {engine_path(p): ab for p, ab in mods.items()}
        logits, loss = plain_gpt2(base.config, w, mods, scaling, base.inputs, base.targets)
    loss.backward()
    return logits.detach(), loss.detach(), {k: v.grad for k, v in lora64.items()}


def finite_differences(base, pm, ref_grads, per_tensor=3, eps=1e-6):
    """Central differences in float64 through the PEFT model itself, on random elements of every
    LoRA tensor; returns the worst |fd - grad| / max(|grad|, 1e-4)."""
    params = {peft_key(n): p for n, p in pm.named_parameters() if p.requires_grad}
    assert set(params) == set(ref_grads)
    g = torch.Generator().manual_seed(99)
    worst = 0.0
    with torch.no_grad():
        for k in sorted(params):
            flat = params[k].data.view(-1)
            for idx in torch.randint(0, flat.numel(), (per_tensor,), generator=g).tolist():
                old = flat[idx].item()
                flat[idx] = old + eps
                lp = base.forward(pm, torch.float64)[1].item()
                flat[idx] = old - eps
                lm = base.forward(pm, torch.float64)[1].item()
                flat[idx] = old
                an = ref_grads[k].view(-1)[idx].item()
                worst = max(worst, abs((lp - lm) / (2 * eps) - an) / max(abs(an), 1e-4))
    return worst


def merged_formula(base, adapter, scaling):
    """{HF base weight name: W0 + scaling * B @ A} in float64, transposed for GPT-2's Conv1D
    ((in, out) storage: W0 + (scaling * B @ A)^T)."""
    out = {}
    for path, (a, b) in lora_modules(adapter).items():
        delta = scaling * (b.double() @ a.double())  # (out, in)
        w0 = base.weights[path + ".weight"].double()
        out[path + ".weight"] = w0 + (delta.T if base.arch == "gpt2" else delta)
    return out


# --------------------------------------------------------------------------- one adapter

def build(name, spec, base, seed, out):
    """Make, check and write one adapter folder (out/<name>/ in a temp tree); returns its summary."""
    scaling = scaling_of(spec)
    d = os.path.join(out, name)
    os.makedirs(d)
    adapter = make_adapter(base, spec, seed, d)
    with open(os.path.join(d, "adapter_config.json")) as f:
        acfg = json.load(f)
    assert acfg["r"] == spec["lora"]["r"] and acfg["lora_alpha"] == spec["lora"]["lora_alpha"]
    assert acfg["use_rslora"] == bool(spec["lora"].get("use_rslora")) and acfg["lora_dropout"] == 0.0
    assert sorted(acfg["target_modules"]) == sorted(spec["lora"]["target_modules"])
    assert acfg["fan_in_fan_out"] == (base.arch == "gpt2")
    print(f"== {name}: r {acfg['r']}, alpha {acfg['lora_alpha']}, rslora {acfg['use_rslora']}, "
          f"scaling {scaling:.6g}, {len(lora_modules(adapter))} adapted modules, "
          f"{sum(v.numel() for v in adapter.values())} LoRA parameters")

    ref = run_adapted(base, d, torch.float64)
    logits, loss, grads, pm = ref
    ref = ref[:3]
    # d. the files loaded back: the float64 model holds exactly the drawn fp32 values, and the
    # scaling PEFT uses is the one this script documents.
    for n, p in pm.named_parameters():
        if p.requires_grad:
            assert torch.equal(p.detach(), adapter[peft_key(n)].double()), n
    for mod in pm.modules():
        if hasattr(mod, "scaling") and isinstance(mod.scaling, dict) and "default" in mod.scaling:
            assert mod.scaling["default"] == scaling, (mod.scaling, scaling)

    chk = {"scaling": scaling}
    # a. independent formula, the whole forward and backward
    chk["plain"] = compare("  plain-ops float64 (W0 x + s B(A x)) vs reference", *run_plain(base, adapter, scaling), ref)
    assert chk["plain"]["logits_max_rel"] < 1e-12 and chk["plain"]["grad_max_rel"] < 1e-11, chk["plain"]
    # c. central differences through PEFT
    chk["fd"] = finite_differences(base, pm, grads)
    print(f"  central differences (float64, 3 elements per LoRA tensor): max relative error {chk['fd']:.2e}")
    assert chk["fd"] < 1e-5, chk["fd"]
    # base model: unadapted logits (and the base's own golden logits, as a check of the load)
    base_logits, base_loss = run_base(base, torch.float64)
    chk["base_vs_golden"] = max_abs(base_logits.float(), base.golden_logits)
    assert chk["base_vs_golden"] < 1e-5 * base.golden_logits.abs().max().item(), chk["base_vs_golden"]
    # b. merge_and_unload
    m_logits, m_loss, m_sd = run_merged(base, d, torch.float64)
    chk["merged_logits"] = max_abs(m_logits, logits)
    chk["merged_loss"] = abs(m_loss.item() - loss.item())
    chk["adapter_vs_base"] = max_abs(logits, base_logits)
    chk["adapter_vs_base_rel"] = max_rel(logits, base_logits)
    chk["base_loss"] = base_loss.item()
    print(f"  merge_and_unload float64: logits max abs vs adapter {chk['merged_logits']:.2e} "
          f"(loss {chk['merged_loss']:.1e}); adapter vs base logits max abs {chk['adapter_vs_base']:.3f} "
          f"(rel {chk['adapter_vs_base_rel']:.3f}); loss {loss.item():.6f} vs base {base_loss.item():.6f}")
    assert chk["merged_logits"] < 1e-10, chk["merged_logits"]
    assert chk["adapter_vs_base_rel"] > 0.05 and abs(loss.item() - base_loss.item()) > 1e-3, chk
    changed = {k: v for k, v in m_sd.items() if k in base.weights and not torch.equal(v, base.weights[k].double())}
    formula = merged_formula(base, adapter, scaling)
    assert set(changed) == set(formula), set(changed) ^ set(formula)
    chk["merged_weights"] = max(max_abs(changed[k], formula[k]) for k in formula)
    print(f"  merged weights vs W0 + s B@A{'^T' if base.arch == 'gpt2' else ''} (float64): max abs {chk['merged_weights']:.1e}")
    assert chk["merged_weights"] < 1e-14, chk["merged_weights"]
    # e. float32: stock transformers + PEFT, and PEFT's fp32 merge, against the float64 reference
    chk["fp32"] = compare("  stock transformers + PEFT float32 vs reference", *run_adapted(base, d, torch.float32)[:3], ref)
    assert chk["fp32"]["logits_max_rel"] < 1e-4 and chk["fp32"]["grad_max_rel"] < 1e-3, chk["fp32"]
    m32 = run_merged(base, d, torch.float32)
    chk["fp32_merged_w"] = max(max_rel(m32[2][k], changed[k]) for k in changed)
    chk["fp32_merged_w_abs"] = max(max_abs(m32[2][k], changed[k]) for k in changed)
    chk["fp32_merged_logits"] = max_abs(m32[0], logits)
    print(f"  PEFT float32 merge vs reference: weights max abs {chk['fp32_merged_w_abs']:.2e} "
          f"(rel-to-tensor-max {chk['fp32_merged_w']:.2e}), merged-model logits max abs {chk['fp32_merged_logits']:.2e}")
    assert chk["fp32_merged_w"] < 1e-6, chk
    # sanity: every LoRA tensor gets a real gradient
    for k, g in grads.items():
        assert g.abs().max().item() > 1e-6, k

    import peft
    import transformers
    meta = {"format": "trainscope-golden-v1", "generator": "tools/make_lora_golden.py",
            "config": name, "seed": str(seed), "scaling": repr(scaling), "torch": torch.__version__,
            "transformers": transformers.__version__, "peft": peft.__version__,
            "reference": "float64, stored fp32"}
    expected = {"inputs": base.inputs.to(torch.int32), "targets": base.targets.to(torch.int32),
                "logits": logits.float().contiguous(), "loss": loss.float().reshape(1),
                "loss_f64": loss.double().reshape(1), "base_logits": base_logits.float().contiguous()}
    for k in m_sd:  # the base model's parameter order
        if k in changed:
            expected["merged." + k] = changed[k].float().contiguous()
    for k in sorted(grads):
        expected["grad." + k] = grads[k].float().contiguous()
    save_safetensors(expected, os.path.join(d, "expected.safetensors"), meta)
    sh = shapes(os.path.join(d, "expected.safetensors"))
    return dict(name=name, spec=spec, acfg=acfg, chk=chk, loss=loss.item(), adapter=adapter,
                shapes={k: sh[k] for k in expected},
                adapter_shapes=shapes(os.path.join(d, "adapter_model.safetensors")))


def shapes(path):
    with safe_open(path, "pt") as f:
        keys = list(f.keys())
        return {k: (str(f.get_slice(k).get_dtype()), f.get_slice(k).get_shape()) for k in keys}


# --------------------------------------------------------------------------- README

def readme(args, base_g, results, sizes):
    import peft
    import safetensors
    import transformers
    R = {r["name"]: r for r in results}

    def table(sh, order=None):
        keys = order or list(sh)
        return "\n".join(f"| `{k}` | {sh[k][0]} | {list(sh[k][1])} |" for k in keys)

    def config_row(r):
        lo, c = r["spec"]["lora"], r["chk"]
        s = "alpha/sqrt(r)" if lo.get("use_rslora") else "alpha/r"
        return (f"| `{r['name']}/` | {r['spec']['base']} | {lo['r']} | {lo['lora_alpha']} | "
                f"{'yes' if lo.get('use_rslora') else 'no'} | {s} = {c['scaling']:.6g} | "
                f"{', '.join(lo['target_modules'])} | {len(lora_modules(r['adapter']))} | "
                f"{sum(v.numel() for v in r['adapter'].values())} | {r['loss']:.6f} | {c['base_loss']:.6f} | "
                f"{c['adapter_vs_base']:.3f} ({100 * c['adapter_vs_base_rel']:.0f}%) |")

    def check_row(r):
        c = r["chk"]
        return (f"| `{r['name']}` | {c['plain']['logits_max_abs']:.1e} | {c['plain']['grad_max_rel']:.1e} | "
                f"{c['fd']:.1e} | {c['merged_logits']:.1e} | {c['merged_weights']:.1e} | {c['base_vs_golden']:.1e} |")

    def fp32_row(r):
        f = r["chk"]["fp32"]
        c = r["chk"]
        return (f"| `{r['name']}` | {f['logits_max_abs']:.2e} | {f['logits_max_rel']:.2e} | "
                f"{100 * f['logits_tol_use']:.1f}% | {f['loss_abs']:.2e} | {f['grad_max_rel']:.2e} "
                f"(`{f['grad_worst_tensor']}`) | {100 * f['grad_max_rel'] / 1e-3:.1f}% | "
                f"{c['fp32_merged_w_abs']:.1e} ({c['fp32_merged_w']:.1e}) | {c['fp32_merged_logits']:.1e} |")

    def adapter_section(r):
        return f"""
### `{r['name']}/`

`adapter_model.safetensors` (F32, metadata `format: pt`; listed sorted, as safetensors keeps them):

| name | dtype | shape |
| --- | --- | --- |
{table(r['adapter_shapes'])}

`expected.safetensors` (metadata: generator, config, seed, scaling, versions):

| name | dtype | shape |
| --- | --- | --- |
{table(r['shapes'])}
"""

    g2 = R.get("gpt2_r4")
    eng_rows = "\n".join(
        f"| `{gpt2_hf_name(k)}` | {list(base_g.weights[gpt2_hf_name(k)].shape)} | `{k}` | {list(base_g.engine[k].shape)} | "
        f"{'transposed' if is_conv1d_weight(k) else 'as is'} |"
        for k in base_g.engine) if base_g else ""
    gpt2_part = "" if not g2 else f"""
## GPT-2: Conv1D, fan_in_fan_out and the engine's layout

`gpt2_base/` is the tiny GPT-2 of `tests/data/golden/tiny_gpt.safetensors` (same random weights, so
`base_logits` here equal `tests/data/golden/tiny_gpt_expected.safetensors`' logits, max abs
{g2['chk']['base_vs_golden']:.1e}) as a Hugging Face `GPT2LMHeadModel`: n_embd 32, n_layer 2, n_head 4,
n_positions 16, vocab 64, n_inner 128, activation_function gelu_new (= the tanh GELU),
layer_norm_epsilon 1e-5, every dropout 0, tied head. `config.json` and `model.safetensors` are
what `save_pretrained` writes (`lm_head.weight` is tied, so not stored); `engine.safetensors`
holds the same tensors with the engine's names and layout (tensor-for-tensor equal to
`tiny_gpt.safetensors`). The batch is `tiny_gpt_expected.safetensors`' (B=3, T=16; targets -1 at
(0,0), (1,5), (1,6), (2,15)).

Hugging Face GPT-2 uses `transformers.pytorch_utils.Conv1D`, whose weight is stored **(in, out)**:
y = x @ W_hf + b. The engine stores every linear weight **(out, in)** (y = x W^T + b), so
`W_engine = W_hf^T` for c_attn (engine (3C, C) = [q | k | v] rows), attn.c_proj (C, C), mlp.c_fc
(4C, C) and mlp.c_proj (C, 4C); biases, norms, `wte` and `wpe` are the same either way.

| Hugging Face (`model.safetensors`) | shape | engine (`engine.safetensors`) | shape | |
| --- | --- | --- | --- | --- |
{eng_rows}

PEFT and Conv1D: the target names `c_attn`, `attn.c_proj`, `c_fc`, `mlp.c_proj` are accepted as
given (a target matches a module whose full name equals it or ends with `.` + it, so `attn.c_proj`
picks `transformer.h.N.attn.c_proj` only; a bare `c_proj` would pick both attn.c_proj and
mlp.c_proj). With the default `fan_in_fan_out=False` PEFT warns "fan_in_fan_out is set to False but
the target module is `Conv1D`. Setting fan_in_fan_out to True." and sets it; this script passes
`fan_in_fan_out=True` itself, and `adapter_config.json` says `"fan_in_fan_out": true`.
**fan_in_fan_out changes nothing about A and B**: they are plain nn.Linear weights, A (r, in),
B (out, r), exactly as for Llama, and the adapter forward is the same
y = base(x) + scaling * B (A x). It only transposes the delta when merging into the (in, out)
Conv1D weight: `W_hf += (scaling * B @ A)^T`, i.e. in the engine's layout, as for every other
linear, **`W_engine += scaling * B @ A`** (no transpose). c_attn's adapter is one adapter on the
fused (3C, C) projection: B is (3C, r), its rows 0..C-1 / C..2C-1 / 2C..3C-1 feed q / k / v.

Names: the adapter key `base_model.model.transformer.h.0.attn.c_attn.lora_A.weight` is, in the
engine's GPT-2 naming, `h.0.attn.c_attn.lora_A.weight` (drop `base_model.model.transformer.`);
A and B need no transpose. The
`merged.*` tensors of `gpt2_r4/expected.safetensors` keep the Hugging Face name and **Conv1D
(in, out) layout** (`merged.transformer.h.0.attn.c_attn.weight` is [32, 96]); for the engine's
`h.0.attn.c_attn.weight` (96, 32), drop `transformer.` and transpose. The cross-check (a) above runs on the engine layout: `engine.safetensors` +
y = h W^T + b + scaling (h A^T) B^T reproduces PEFT's logits and gradients.
"""

    llama_names = "" if "r4_all" not in R else f"""
Names (Llama): the adapter key is `base_model.model.` + the Hugging Face module path +
`.lora_A.weight` / `.lora_B.weight`, e.g. `base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight`
(in `named_parameters()` it is `...q_proj.lora_A.default.weight`; save_pretrained drops the adapter name
`default`). The base weight it adapts is `model.layers.0.self_attn.q_proj.weight` (the key without
`base_model.model.` and `.lora_A`). The adapter file holds only A and B (bias="none": no LoRA
biases; the base is untouched).

PEFT behaviour worth knowing (peft {peft.__version__}):
- `get_peft_model` / `PeftModel.from_pretrained` modify the base model **in place** (its Linear
  modules become `lora.Linear` with a `base_layer`); save the base before wrapping it.
- `LoraConfig.target_modules` is kept as a set; `adapter_config.json` lists it in set order
  (string-hash order, so PYTHONHASHSEED-dependent): compare it as a set.
- A target matches a module whose full name equals it or ends with `.` + target.
- `save_pretrained` also writes a `README.md` model card (not kept here), and with
  `save_embedding_layers="auto"` looks for the base's `config.json` under `base_model_name_or_path`
  (or on the Hub) to see if the vocabulary was resized; this script passes
  `save_embedding_layers=False` (nothing is resized), which writes the same adapter file.
"""
    return f"""# lora_tiny: golden data for LoRA adapters (Hugging Face PEFT)

LoRA adapters made by the real PEFT library on the tiny golden models, their logits, loss, the
gradient of every LoRA tensor (base frozen), the unadapted logits and the merged weights.

Made by (deterministic: with the same versions a rerun writes byte-identical files; the script
re-executes itself with PYTHONHASHSEED=0 because PEFT keeps `target_modules` as a set and
`save_pretrained` writes it in set order; about 10 s on one core):

    pip install -r tools/requirements-golden.txt
    python3 tools/make_lora_golden.py --out tests/data/lora_tiny --seed {args.seed}

Versions used: torch {torch.__version__}, transformers {transformers.__version__}, peft {peft.__version__},
safetensors {safetensors.__version__}, Python {sys.version.split()[0]}.

| folder | what | size |
| --- | --- | --- |
| `r4_all/` | LoRA on every projection of `tests/data/llama_tiny` | {sizes.get('r4_all', 0) / 1024:.0f} KiB |
| `r8_rslora_qv/` | rsLoRA on q_proj, v_proj of `tests/data/llama_tiny` | {sizes.get('r8_rslora_qv', 0) / 1024:.0f} KiB |
| `gpt2_base/` | the tiny GPT-2 (`tests/data/golden/tiny_gpt`) as HF GPT2LMHeadModel + engine layout | {sizes.get('gpt2_base', 0) / 1024:.0f} KiB |
| `gpt2_r4/` | LoRA on GPT-2's c_attn, attn.c_proj, c_fc, mlp.c_proj | {sizes.get('gpt2_r4', 0) / 1024:.0f} KiB |

Each adapter folder: `adapter_config.json` and `adapter_model.safetensors` exactly as
`PeftModel.save_pretrained` writes them (fp32; `base_model_name_or_path` is the base's folder,
repo-relative; `inference_mode: true` and, as no task_type is given, an `auto_mapping` entry are
what PEFT writes), and `expected.safetensors`.

## The adapters

`LoraConfig(r, lora_alpha, lora_dropout=0.0, bias="none", target_modules=..., use_rslora=...)`,
no task_type, applied with `peft.get_peft_model` to the fp32 base loaded by `from_pretrained`:

| folder | base | r | lora_alpha | rslora | scaling | target_modules | modules | LoRA params | loss | base loss | max abs logits - base_logits (of max abs base) |
| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |
{chr(10).join(config_row(r) for r in results)}

Initialisation: PEFT initialises A kaiming-uniform and **B = 0** (the adapter starts as a no-op);
for useful golden data **both A and B are overwritten with seeded random values**: A ~ N(0, {A_STD}),
B ~ N(0, {B_STD}), drawn in float64 from one `torch.Generator` seeded with `--seed` + 1 / 2 / 3
(r4_all / r8_rslora_qv / gpt2_r4), in `named_parameters()` order (per module lora_A then lora_B),
rounded to fp32, then saved. The adapter therefore changes the logits a lot (table above).

## PEFT semantics pinned here

For an adapted module with base weight W0 (nn.Linear, (out, in)):

    y = W0 x (+ b) + scaling * B (A x)      A = lora_A.weight (r, in), B = lora_B.weight (out, r)
    scaling = lora_alpha / r                 (use_rslora=False)
    scaling = lora_alpha / sqrt(r)           (use_rslora=True, rsLoRA)
    merged:  W = W0 + scaling * B @ A        (merge_and_unload; GPT-2 Conv1D: W_hf += (scaling B@A)^T)

lora_dropout 0 (dropout is identity). The base model is frozen: PEFT marks only the lora_A/lora_B
weights trainable, so `grad.*` holds only LoRA tensors. Scalings here: r4_all 8/4 = 2,
r8_rslora_qv 16/sqrt(8) = {16 / math.sqrt(8):.6f} (plain LoRA would be 2), gpt2_r4 8/4 = 2.
Llama target names are the module names (`q_proj` ... `down_proj`); PEFT's default targets
(`target_modules=None`) would be q_proj, v_proj for Llama and c_attn for GPT-2.
Each targeted Llama projection has its own A and B. An engine that stores q|k|v (and gate|up) as
one fused weight applies them per part: the fused output is [q | k | v] with q += scaling B_q (A_q x)
etc., i.e. the fused delta is the row-wise stack of scaling * B_q @ A_q, B_k @ A_k, B_v @ A_v (not
one rank-r adapter, as the A's differ); a projection without an adapter contributes zero rows.
{llama_names}
## `expected.safetensors`

`inputs`, `targets`: the base's golden batch, copied (Llama: `tests/data/llama_tiny/expected.safetensors`,
B=2, T=16; GPT-2: `tests/data/golden/tiny_gpt_expected.safetensors`, B=3, T=16), already shifted
(`logits[b,t]` is scored against `targets[b,t]`), -1 = ignored. `logits`, `loss` (mean cross-entropy
over the non-ignored targets), `loss_f64`: the adapted model. `base_logits`: the base model without
the adapter (equal to the base's own golden logits). `merged.<HF base weight name>`: every base
weight merge_and_unload() changes (the targeted projections), float64 merge rounded to fp32, in
the Hugging Face layout (nn.Linear (out, in) for Llama; Conv1D (in, out) for GPT-2).
`grad.<PEFT key>`: d loss / d every LoRA tensor, same key and shape as in `adapter_model.safetensors`.

Precision: the reference is PEFT + transformers in **float64** from the stored fp32 base and
adapter, with transformers' three float32 upcasts in Llama (RMSNorm variance, eager softmax, RoPE
cos/sin) patched to stay in float64 (as tools/make_llama_golden.py does; GPT-2 has no upcast).
Everything is stored **fp32** rounded from float64, `loss_f64` in fp64.

Cross-checks the script runs before writing (it fails rather than write data that disagrees):

| config | (a) plain W0x + s B(Ax), logits max abs | (a) grads max rel | (c) central diff. max rel | (b) merged vs adapter logits max abs | (b) merged W vs W0 + s B@A max abs | base_logits vs base golden logits max abs |
| --- | --- | --- | --- | --- | --- | --- |
{chr(10).join(check_row(r) for r in results)}

(a) is an independent float64 forward/backward in the script (no transformers, no PEFT), over the
whole model; (c) is central differences (eps 1e-6) through the PEFT model on 3 random elements of
every LoRA tensor, relative to max(|grad|, 1e-4); (b) compares merge_and_unload() in float64; the
last column checks that the loaded base is the golden one (fp32 vs fp32). Also checked: the adapter
file holds exactly the drawn values and loads back (PeftModel.from_pretrained) to them, and the
scaling on every LoRA layer is the one above.

## Observed fp32 vs fp64 (for the C++ test's tolerance)

Stock transformers + PEFT in float32 (same base, same adapter file, same batch) against the float64
reference; "rel" is max abs diff over the tensor's max abs, "use" is the share of the engine's golden
tolerance (logits and loss within 1e-5 + 1e-4 |expected| per element; gradients within 1e-3 of the
tensor's max |g|, as tests/engine/GoldenTest.cpp) that PyTorch's own fp32 run needs. Last two columns:
PEFT's merge_and_unload() in float32 vs the stored (float64-merged) weights, and the fp32 merged
model's logits vs the reference.

| config | logits max abs | logits rel | logits tol use | loss abs | LoRA grads worst rel (tensor) | grad tol use | fp32 merge: W max abs (rel) | fp32 merged logits max abs |
| --- | --- | --- | --- | --- | --- | --- | --- | --- |
{chr(10).join(fp32_row(r) for r in results)}

A float32 engine should meet the same tolerances as the other golden tests: logits/loss
1e-5 + 1e-4 |expected|, LoRA gradients 1e-3 of the tensor's max |g|, merged weights ~1e-6 of the
tensor's max (an fp32 W0 + s B@A differs from the float64 merge by an fp32 rounding or two).
{gpt2_part}
## Tensors
{''.join(adapter_section(r) for r in results)}"""


# --------------------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    here = os.path.dirname(os.path.abspath(__file__))
    data = os.path.join(here, "..", "tests", "data")
    ap.add_argument("--out", default=os.path.join(data, "lora_tiny"))
    ap.add_argument("--llama", default=os.path.join(data, "llama_tiny"), help="the Llama base (read only)")
    ap.add_argument("--gpt2-golden", default=os.path.join(data, "golden"), help="tiny_gpt.* (read only)")
    ap.add_argument("--seed", type=int, default=1234)
    args = ap.parse_args()
    torch.set_num_threads(1)  # modest CPU use, and one summation order run to run
    torch.manual_seed(args.seed)
    torch.use_deterministic_algorithms(True)
    quiet()

    out = os.path.abspath(args.out)
    if os.path.isdir(out):
        for name in os.listdir(out):  # only what this script writes lives here
            if name not in set(CONFIGS) | {"gpt2_base", "README.md"}:
                raise SystemExit(f"{out} holds {name}, which this script does not write")

    base_l = llama_base(os.path.abspath(args.llama))
    results, base_g = [], None
    with tempfile.TemporaryDirectory() as tmp:  # everything is checked before it reaches out/
        for name, spec in CONFIGS.items():
            if spec["base"] == "gpt2" and base_g is None:
                os.makedirs(os.path.join(tmp, "gpt2_base"))
                base_g = make_gpt2_base(os.path.abspath(args.gpt2_golden), os.path.join(tmp, "gpt2_base"))
            base = base_l if spec["base"] == "llama" else base_g
            results.append(build(name, spec, base, args.seed + spec["seed"], tmp))

        sizes = {}
        for d in sorted(os.listdir(tmp)):
            files = sorted(os.listdir(os.path.join(tmp, d)))
            assert tuple(files) == tuple(sorted(GPT2_BASE_FILES if d == "gpt2_base" else ADAPTER_FILES)), (d, files)
            sizes[d] = sum(os.path.getsize(os.path.join(tmp, d, f)) for f in files)
        text = readme(args, base_g, results, sizes)
        os.makedirs(out, exist_ok=True)
        for d in sorted(os.listdir(tmp)):
            dst = os.path.join(out, d)
            shutil.rmtree(dst, ignore_errors=True)
            shutil.copytree(os.path.join(tmp, d), dst)
            for f in os.listdir(dst):
                os.chmod(os.path.join(dst, f), 0o644)  # safetensors writes 0600
    with open(os.path.join(out, "README.md"), "w") as f:
        f.write(text)
    os.chmod(os.path.join(out, "README.md"), 0o644)
    total = sum(sizes.values()) + os.path.getsize(os.path.join(out, "README.md"))
    print(f"wrote {out}: " + ", ".join(f"{d} {s / 1024:.0f} KiB" for d, s in sizes.items())
          + f"; {total / 1024:.0f} KiB in all")
    return 0


if __name__ == "__main__":
    sys.exit(main())
