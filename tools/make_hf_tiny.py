#!/usr/bin/env python3
"""Golden data for Trainscope's Hugging Face tokenizer.json reader and for evaluating real text
through a Hugging Face folder: three small tokenizers trained here with the `tokenizers` library
and configured the way the real models' tokenizer.json files are (GPT-2 byte-level BPE, Llama 3
regex-split byte-level BPE with ignore_merges, Llama 2 SentencePiece-style BPE with byte fallback
as transformers' LlamaConverter writes it), a hostile multilingual test text with their ids, and
two tiny random Hugging Face models (GPT-2, Llama) saved with their tokenizers.

Writes
  tests/data/tokenizers/: text.txt (the test text, UTF-8, CRLF and trailing blanks kept; a
    .gitattributes beside it keeps git from touching them),
    gpt2/, llama3/, llama2/ (each tokenizer.json + tokenizer_config.json as save_pretrained
    writes them), expected.json ({text_file, corpus, versions, cases: {name: {folder,
    special_tokens, vocab_size, ids, ids_special, decoded, pieces, extra: [{text, ids,
    ids_special, pieces, decoded}]}}}).
  tests/data/hf_tiny/: gpt2/ and llama/ (config.json, generation_config.json, model.safetensors
    fp32, tokenizer files), eval.txt (English text), expected.json ({case: {folder, text_file,
    seq, ids, loss, tokens, perplexity, windows, logits_check: {shape, logits_sum, logits_sumsq,
    loss}}}); the loss is float64 over consecutive windows as tools/make_eval_golden.py does
    (window i = ids[i*N : i*N + N + 1]: the first N read, each next token scored; a trailing
    partial window left out), logits_check is float32 on the first two windows.

Training corpus: /usr/share/common-licenses/GPL-3 + /usr/share/common-licenses/Apache-2.0
(other files of /usr/share/common-licenses if those are missing; expected.json names them).
Deterministic: with the same versions a rerun writes byte-identical files.

Usage: python3 tools/make_hf_tiny.py [--tokenizers-out tests/data/tokenizers]
                                     [--hf-out tests/data/hf_tiny]
Needs: pip install -r tools/requirements-golden.txt
"""
import os

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # one thread: light and deterministic

import argparse
import json
import math
import re

import tokenizers
import torch
import torch.nn.functional as F
import transformers
from tokenizers import (AddedToken, Regex, Tokenizer, decoders, models, normalizers,
                        pre_tokenizers, processors, trainers)

LICENSES = "/usr/share/common-licenses"
CORPUS_PREFERRED = ("GPL-3", "Apache-2.0")
CORPUS_FALLBACK = ("GPL-2", "LGPL-2.1", "MPL-2.0", "Artistic", "BSD")

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                  r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

# The test text: every line is hostile in its own way. Written with newline="" so that the
# "\r\n" stays; trailing blanks are kept (tests/data/tokenizers/.gitattributes: -text).
TEXT = (
    "I'm sure they'll say DON'T, but we've done it. She's here; you'd know. IT'S FINE.\r\n"
    "  Two leading spaces, then three   and eight        gaps.\tTab\there.\t\r\n"
    "Trailing spaces before the newline   \n\n\n"
    "Deutsch: Größe, Straße, übermäßig schön — ÄÖÜ äöü ß ẞ.\n"
    "Français : élève, garçon, où est la fenêtre ? « Très bien » ! Noël, cœur.\n"
    "Русский: Съешь же ещё этих мягких французских булок, да выпей чаю.\n"
    "Ελληνικά: Γειά σου Κόσμε, αβγδ ΑΒΓΔ ς.\n"
    "中文：你好，世界！我们今天学习分词。\n"
    "日本語：こんにちは、世界。カタカナとひらがな、漢字。\n"
    "العربية: مرحبا بالعالم\n"
    "हिन्दी: नमस्ते दुनिया\n"
    "한국어: 안녕하세요 세계\n"
    "Emoji: 👩\u200d👩\u200d👧 family, 🇩🇪 flag, 👍🏽 thumbs, 😀🎉✨ ok\n"
    "Numbers: 1234567 and 3.14159, date 2026-12-02, phone +49 (30) 1234-5678, 555-0199, 007.\n"
    "Specials: hello<|endoftext|>world <s> begin </s> end <unk> "
    "<|begin_of_text|>x<|end_of_text|> <0x41> <|endoftext|>\n"
    "Punctuation?!... --- «» (([{}])) ''' \"\"\" ...!!!??? @#$%^&*_+=~`|\\/\n"
    "Code: if (x != 0) { return x*2; } else { y += 0x1F; }\n"
    "Combining: e\u0301 vs \u00e9, n\u0303 a\u0308; NBSP:\u00a0here;"
    " ideographic space:\u3000there.\n"
    "    indented line with a trailing tab\t\n"
    "\r\n"
    "It's 12:30 -- they're late, we'll wait; I'd've said WE'LL GO.\n"
    "End without a newline"
)

# Short extra strings per tokenizer; SPECIALS is replaced by that tokenizer's own special tokens.
EXTRA = ["", " ", "   leading", "trailing   ", "a\n\n\nb", "SPECIALS", "12345678901",
         "👩\u200d👩\u200d👧", "ß", "\u00a0x", "don't WE'LL", "<0x41>", "\t\r\n"]

EVAL_TEXT = """\
The lighthouse keeper kept a small notebook on the shelf beside the lamp. Every evening at
seven he wrote down the wind, the height of the waves and the number of ships he had seen
pass the point. On a calm night there might be 3 or 4; in the autumn storms there were
sometimes none at all, and the page held only a line about the rain.

His daughter visited twice a year. She worked in the city, in an office on the ninth floor,
and she liked to say that she counted things for a living too: orders, invoices, the 250
emails that arrived before lunch. When she came she brought coffee beans and a newspaper,
and they sat at the narrow table and read each other the strangest headlines.

One winter the lamp failed. The motor that turned the lens stopped at 2:15 in the morning,
and the keeper turned it by hand until dawn, counting the turns so that the flashes would
keep their rhythm: one long, two short, a pause of ten seconds. By sunrise his arms ached
and he had counted more than 1,800 turns. He wrote the number in the notebook and under it,
in smaller letters, "not again".

The engineers arrived three days later with a new motor and a crate of spare parts. They
were polite and quick, and they asked him whether he would like an automatic system, one
that would need no keeper at all. He said he would think about it. That night he sat in the
café in the village, the only one that stayed open in January, and watched the beam sweep
over the roofs.

In the spring the letter came. The station would be automated by the end of the year, and
he would be offered a cottage in the village and a pension. He read it twice, folded it
into the notebook, and went up the stairs to wind the clock. There were 117 steps; he had
climbed them perhaps forty thousand times. He decided that he would climb them every day
until the last one, and then he would write a final entry: the wind, the waves, the ships,
and the date.
"""


# --------------------------------------------------------------------------- tokenizers

def corpus_files():
    names = [n for n in CORPUS_PREFERRED if os.path.isfile(os.path.join(LICENSES, n))]
    if len(names) < len(CORPUS_PREFERRED):
        names += [n for n in CORPUS_FALLBACK if os.path.isfile(os.path.join(LICENSES, n))]
        names = names[:2]
    if not names:
        raise SystemExit(f"no training corpus: none of {CORPUS_PREFERRED + CORPUS_FALLBACK} "
                         f"in {LICENSES}")
    return [os.path.join(LICENSES, n) for n in names]


def read_corpus(files):
    docs = []
    for p in files:
        with open(p, encoding="utf-8", newline="") as f:
            docs.append(f.read())
    return docs


def train_gpt2(docs):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=384, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=["<|endoftext|>"])
    tok.train_from_iterator(docs, trainer=trainer)
    return tok, {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>",
                 "unk_token": "<|endoftext|>"}


def train_llama3(docs):
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=["<|begin_of_text|>", "<|end_of_text|>"])
    tok.train_from_iterator(docs, trainer=trainer)
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<|begin_of_text|> $A",
                                      pair="<|begin_of_text|> $A <|begin_of_text|> $B",
                                      special_tokens=[("<|begin_of_text|>", bos)])])
    return tok, {"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>"}


LLAMA2_SPECIALS = ["<unk>", "<s>", "</s>"]
LLAMA2_BYTES = [f"<0x{b:02X}>" for b in range(256)]


def llama2_pipeline(tok):
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"),
                                           normalizers.Replace(" ", "▁")])
    tok.pre_tokenizer = None
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(),
                                     decoders.Fuse(), decoders.Strip(content=" ", left=1,
                                                                     right=0)])


def train_llama2(docs):
    """SentencePiece-style BPE with byte fallback. The trainer puts the 3 specials and the 256
    byte tokens first (ids 0..258) into the model's vocab, but also makes every byte token an
    added special token (so a literal "<0x41>" in text would be split out as one token); the
    real Llama 2 tokenizer.json has only <unk>, <s>, </s> as added tokens, so the model is
    rebuilt from the trained vocab and merges with just those three added.

    Training only: lines without their newlines (so "\\n" is not in the alphabet and encodes
    as <0x0A> like Llama 2), split before each "▁" so that pieces never span a word boundary
    (as SentencePiece's pieces don't); the saved tokenizer has no pre_tokenizer."""
    train = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    llama2_pipeline(train)
    train.pre_tokenizer = pre_tokenizers.Split("▁", behavior="merged_with_next")
    trainer = trainers.BpeTrainer(vocab_size=512, show_progress=False, limit_alphabet=60,
                                  special_tokens=LLAMA2_SPECIALS + LLAMA2_BYTES)
    lines = [ln for d in docs for ln in d.splitlines() if ln.strip()]
    train.train_from_iterator(lines, trainer=trainer)
    trained = json.loads(train.to_str())["model"]
    vocab = trained["vocab"]
    for i, t in enumerate(LLAMA2_SPECIALS + LLAMA2_BYTES):
        assert vocab.get(t) == i, (t, vocab.get(t), i)
    merges = [tuple(m) if isinstance(m, list) else tuple(m.split(" ")) for m in trained["merges"]]
    tok = Tokenizer(models.BPE(vocab, merges, unk_token="<unk>", byte_fallback=True,
                               fuse_unk=True))
    llama2_pipeline(tok)
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                            for t in LLAMA2_SPECIALS])
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B",
                                                       special_tokens=[("<s>", 1)])
    return tok, {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}


TRAINERS = {"gpt2": train_gpt2, "llama3": train_llama3, "llama2": train_llama2}


def save_tokenizer(tok, special, folder):
    """save_pretrained of the PreTrainedTokenizerFast wrapper: tokenizer.json (the one it writes
    is the one kept) + tokenizer_config.json (+ special_tokens_map.json if this version writes
    one). Checks the saved file and AutoTokenizer give the raw object's ids."""
    from transformers import AutoTokenizer, PreTrainedTokenizerFast
    os.makedirs(folder, exist_ok=True)
    PreTrainedTokenizerFast(tokenizer_object=tok, **special).save_pretrained(folder)
    saved = Tokenizer.from_file(os.path.join(folder, "tokenizer.json"))
    auto = AutoTokenizer.from_pretrained(folder)
    for s in [TEXT] + EXTRA + [special_text(tok)]:
        want = tok.encode(s, add_special_tokens=False).ids
        want_sp = tok.encode(s).ids
        assert saved.encode(s, add_special_tokens=False).ids == want, (folder, s)
        assert saved.encode(s).ids == want_sp, (folder, s)
        assert auto.encode(s, add_special_tokens=False) == want, (folder, s)
        assert auto.encode(s) == want_sp, (folder, s)


def special_text(tok):
    sp = [t.content for t in tok.get_added_tokens_decoder().values() if t.special]
    if "<s>" in sp:
        return "<s>hi</s> hello<s>world</s><unk>x"
    return "hello" + "world".join(sp) + "!" + sp[0] + " " + sp[0]


def encode_case(tok, s):
    e = tok.encode(s, add_special_tokens=False)
    return {"text": s, "ids": e.ids, "ids_special": tok.encode(s).ids, "pieces": e.tokens,
            "decoded": tok.decode(e.ids, skip_special_tokens=False)}


def make_tokenizers(out):
    files = corpus_files()
    docs = read_corpus(files)
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "text.txt"), "w", encoding="utf-8", newline="") as f:
        f.write(TEXT)
    with open(os.path.join(out, ".gitattributes"), "w") as f:
        f.write("# text.txt keeps its CRLF line and trailing blanks byte for byte\n"
                "text.txt -text -diff whitespace=-trailing-space,-space-before-tab\n")
    cases, toks = {}, {}
    for name, train in TRAINERS.items():
        tok, special = train(docs)
        folder = os.path.join(out, name)
        save_tokenizer(tok, special, folder)
        e = tok.encode(TEXT, add_special_tokens=False)
        specials = {t.content: i for i, t in sorted(tok.get_added_tokens_decoder().items())}
        extra = [encode_case(tok, special_text(tok) if s == "SPECIALS" else s) for s in EXTRA]
        cases[name] = {
            "folder": name, "special_tokens": specials,
            "vocab_size": tok.get_vocab_size(with_added_tokens=True),
            "ids": e.ids, "ids_special": tok.encode(TEXT).ids,
            "decoded": tok.decode(e.ids, skip_special_tokens=False),
            "decoded_roundtrip": tok.decode(e.ids, skip_special_tokens=False) == TEXT,
            "pieces": e.tokens[:40], "extra": extra}
        toks[name] = (tok, special)
        print(f"{name}: vocab {cases[name]['vocab_size']}, specials {specials}, "
              f"{len(e.ids)} ids, roundtrip {cases[name]['decoded_roundtrip']}")
    expected = {"text_file": "text.txt", "corpus": files,
                "versions": {"tokenizers": tokenizers.__version__,
                             "transformers": transformers.__version__},
                "cases": cases}
    write_json(os.path.join(out, "expected.json"), expected)
    return toks


# --------------------------------------------------------------------------- models

def gpt2_model(tok):
    from transformers import GPT2Config, GPT2LMHeadModel
    eot = tok.token_to_id("<|endoftext|>")
    cfg = GPT2Config(vocab_size=tok.get_vocab_size(with_added_tokens=True), n_positions=64,
                     n_embd=32, n_layer=2, n_head=4, activation_function="gelu_new",
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=eot,
                     eos_token_id=eot, tie_word_embeddings=True)
    torch.manual_seed(0)
    return GPT2LMHeadModel(cfg)


def llama_model(tok):
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(vocab_size=tok.get_vocab_size(with_added_tokens=True), hidden_size=32,
                      intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, hidden_act="silu", max_position_embeddings=64,
                      rms_norm_eps=1e-5,
                      rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
                      tie_word_embeddings=False, attention_bias=False, mlp_bias=False,
                      bos_token_id=1, eos_token_id=2, pad_token_id=None)
    torch.manual_seed(0)
    return LlamaForCausalLM(cfg)


MODELS = {"gpt2": ("gpt2", gpt2_model), "llama": ("llama2", llama_model)}
SEQ = 16


def make_models(out, toks):
    from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerFast
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "eval.txt"), "w", encoding="utf-8", newline="") as f:
        f.write(EVAL_TEXT)
    expected = {}
    for name, (tok_name, make) in MODELS.items():
        tok, special = toks[tok_name]
        folder = os.path.join(out, name)
        model = make(tok).to(torch.float32).eval()
        model.save_pretrained(folder)
        PreTrainedTokenizerFast(tokenizer_object=tok, **special).save_pretrained(folder)
        auto_tok = AutoTokenizer.from_pretrained(folder)
        ids = auto_tok.encode(EVAL_TEXT, add_special_tokens=False)
        assert ids == tok.encode(EVAL_TEXT, add_special_tokens=False).ids
        t = torch.tensor(ids, dtype=torch.int64)
        windows = (len(ids) - 1) // SEQ
        m64 = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float64,
                                                   attn_implementation="eager").eval()
        total, count = 0.0, 0
        with torch.no_grad():
            for w in range(windows):
                chunk = t[w * SEQ: w * SEQ + SEQ + 1]
                logits = m64(chunk[:-1].unsqueeze(0)).logits[0]
                total += F.cross_entropy(logits, chunk[1:], reduction="sum").item()
                count += SEQ
        loss = total / count
        m32 = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32,
                                                   attn_implementation="eager").eval()
        inputs = torch.stack([t[w * SEQ: w * SEQ + SEQ] for w in range(2)])
        labels = torch.stack([t[w * SEQ + 1: w * SEQ + SEQ + 1] for w in range(2)])
        with torch.no_grad():
            lg = m32(inputs).logits
            ce = F.cross_entropy(lg.reshape(-1, lg.shape[-1]), labels.reshape(-1))
        assert lg.dtype == torch.float32
        lg64 = lg.double()
        expected[name] = {
            "folder": name, "text_file": "eval.txt", "seq": SEQ, "ids": ids, "loss": loss,
            "tokens": count, "perplexity": math.exp(loss), "windows": windows,
            "logits_check": {"shape": list(lg.shape), "logits_sum": lg64.sum().item(),
                             "logits_sumsq": (lg64 * lg64).sum().item(), "loss": ce.item()}}
        print(f"{name}: {len(ids)} ids, {windows} windows, loss {loss:.6f} "
              f"(ln V = {math.log(model.config.vocab_size):.6f}), "
              f"logits_check {expected[name]['logits_check']}")
    write_json(os.path.join(out, "expected.json"), expected)


def write_json(path, obj):
    """Indented JSON with every list of integers (the ids) on one line."""
    text = json.dumps(obj, indent=1, ensure_ascii=False)
    text = re.sub(r"\[\s+(-?\d+(?:,\s+-?\d+)*)\s+\]",
                  lambda m: "[" + re.sub(r",\s+", ", ", m.group(1)) + "]", text)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text + "\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenizers-out", default="tests/data/tokenizers")
    ap.add_argument("--hf-out", default="tests/data/hf_tiny")
    args = ap.parse_args()
    torch.set_num_threads(1)
    toks = make_tokenizers(args.tokenizers_out)
    make_models(args.hf_out, toks)


if __name__ == "__main__":
    main()
