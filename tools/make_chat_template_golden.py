#!/usr/bin/env python3
"""Goldens for the chat-template renderer (engine/src/tokenizer/ChatTemplate*.cpp).

Renders every tests/data/chat_templates/<name>.jinja (the models' own chat templates, copied
verbatim from their tokenizer_config.json) on a few conversations with transformers' own
renderer (render_jinja_template: what tokenizer.apply_chat_template(..., tokenize=False) calls,
with the tokenizer's special tokens as keyword arguments), plus short snippets that exercise
one construct each, and writes tests/data/chat_templates/golden.json. A template that raises
(Gemma refuses a system turn) records the error message instead of an output.

strftime_now is pinned to NOW (Llama 3.2 prints today's date): the C++ test injects the same
clock. Needs transformers and jinja2 (no torch):

    python3 -m venv /tmp/venv && /tmp/venv/bin/pip install transformers jinja2
    /tmp/venv/bin/python tools/make_chat_template_golden.py
"""

import datetime as real_datetime
import json
import os

import jinja2
import transformers
from transformers.utils import chat_template_utils

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
DIR = os.path.join(ROOT, "tests", "data", "chat_templates")
NOW = real_datetime.datetime(2025, 3, 9, 14, 5, 6)


class PinnedDatetime(real_datetime.datetime):
    @classmethod
    def now(cls, tz=None):
        return NOW


chat_template_utils.datetime = PinnedDatetime

# name -> the tokenizer's special tokens (what apply_chat_template passes to the template).
TEMPLATES = {
    "llama-3.1": {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
    "llama-3.2": {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
    "llama-3.3": {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
    "qwen2.5": {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"},
    "qwen3": {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"},
    "gemma-2": {"bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>"},
    "gemma-3": {"bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>"},
    "phi-3": {"bos_token": "<s>", "eos_token": "<|endoftext|>", "unk_token": "<unk>"},
    "phi-3.5": {"bos_token": "<s>", "eos_token": "<|endoftext|>", "unk_token": "<unk>"},
    "phi-4-mini": {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>"},
    "olmo-2": {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>"},
    "mistral-v0.1": {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"},
    "mistral-v0.3": {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"},
}

SYSTEM = {"role": "system", "content": "You are a terse assistant.  "}
CONVERSATIONS = {
    "system_multi_turn": [
        SYSTEM,
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": " 4. "},
        {"role": "user", "content": "And \"café\" ☕ in French?\n"},
        {"role": "assistant", "content": "Café; it's the same word."},
    ],
    "no_system": [
        {"role": "user", "content": "Hi there"},
        {"role": "assistant", "content": "Hello! How can I help?"},
        {"role": "user", "content": "  Tell me a joke.  "},
        {"role": "assistant", "content": "Why did the GPU cross the bus?\nTo fetch more data."},
    ],
    "system_prompt": [SYSTEM, {"role": "user", "content": "Name a prime."}],
    "user_prompt": [{"role": "user", "content": "Name a prime."}],
    "thinking": [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "<think>\nA greeting.\n</think>\n\nHello!"},
        {"role": "user", "content": "Bye"},
        {"role": "assistant", "content": "<think>\nA farewell.\n</think>\n\nGoodbye!"},
    ],
}
# (conversation, add_generation_prompt)
RENDERS = [
    ("system_multi_turn", False),
    ("no_system", False),
    ("no_system", True),
    ("system_prompt", True),
    ("user_prompt", True),
    ("user_prompt", False),
    ("thinking", False),
]

# One construct each: (name, template, context). Rendered with the same environment.
SNIPPETS = [
    ("text", "plain text", {}),
    ("output", "a{{ x }}b{{ missing }}c", {"x": "X"}),
    ("literals", "{{ none }} {{ true }} {{ false }} {{ 'it''s' }} {{ \"q\\\"\\n\" }}", {}),
    ("numbers", "{{ 1 + 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 10 / 4 }} {{ 2 ** 10 }} "
     "{{ 1.5 * 2 }} {{ 1e20 }} {{ 0.1 + 0.2 }} {{ 3 - 5 }}", {}),
    ("repr", "{{ [1, 'a', none, true, 1.0, {'k': \"it's\"}] }} {{ {'a': [1, 2]} }}", {}),
    ("concat", "{{ 'n=' ~ 3 ~ none ~ [1] }} {{ 'a' + 'b' }} {{ [1] + [2] }}", {}),
    ("comparisons", "{{ 1 < 2 }}{{ 2 <= 1 }}{{ 'a' == 'a' }}{{ 'a' != 'b' }}{{ 1 == 1.0 }}"
     "{{ true == 1 }}{{ [1, 2] == [1, 2] }}{{ {'a': 1} == {'a': 1} }}{{ 1 < 2 < 3 }}", {}),
    ("logic", "{{ true and 'x' }} {{ false or 'y' }} {{ not none }} {{ '' or [] }}", {}),
    ("in", "{{ 'b' in 'abc' }}{{ 2 in [1, 2] }}{{ 'k' in d }}{{ 'q' not in d }}",
     {"d": {"k": 1}}),
    ("tests", "{{ x is defined }}{{ y is defined }}{{ y is undefined }}{{ n is none }}"
     "{{ s is string }}{{ d is mapping }}{{ s is iterable }}{{ 3 is iterable }}"
     "{{ l is sequence }}{{ 3 is number }}{{ 3 is integer }}{{ 3.0 is float }}"
     "{{ true is boolean }}{{ 4 is even }}{{ 4 is odd }}{{ 9 is divisibleby 3 }}"
     "{{ x is not none }}{{ 'ab' is lower }}{{ 3 is eq 3 }}",
     {"x": 1, "n": None, "s": "s", "d": {}, "l": [1]}),
    ("conditional expression", "{{ 'yes' if flag else 'no' }}|{{ 'a' if false }}|"
     "{{ 1 if none else 2 if true else 3 }}", {"flag": True}),
    ("subscripts", "{{ l[0] }}{{ l[-1] }}{{ l[1:] }}{{ l[:-1] }}{{ l[::-1] }}{{ l[::2] }}"
     "{{ s[1:3] }}{{ s[::-1] }}{{ s[-1] }}{{ d['k'] }}{{ d.k }}{{ l[9] }}",
     {"l": [1, 2, 3], "s": "héllo", "d": {"k": "v"}}),
    ("string methods", "{{ '  a b  '.strip() }}|{{ 'xxaxx'.strip('x') }}|{{ '\\n a'.lstrip() }}|"
     "{{ 'a \\n'.rstrip() }}|{{ 'abc'.startswith('ab') }}{{ 'abc'.endswith('bc') }}|"
     "{{ 'a b  c'.split() }}{{ 'a,b,,c'.split(',') }}{{ 'a,b,c'.split(',', 1) }}|"
     "{{ 'Ab'.upper() }}{{ 'Ab'.lower() }}|{{ 'aXa'.replace('a', 'b') }}|"
     "{{ 'hello world'.title() }}|{{ 'hello'.capitalize() }}|{{ 'a-b'.find('-') }}", {}),
    ("dict methods", "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}"
     "{{ d.keys() | list }}{{ d.values() | list }}{{ d.get('a') }}{{ d.get('z') }}"
     "{{ d.get('z', 'dflt') }}", {"d": {"a": 1, "b": "two"}}),
    ("filters", "{{ '  t  ' | trim }}|{{ [1, 2] | length }}|{{ 'abc' | length }}|"
     "{{ 'Ab' | upper }}{{ 'Ab' | lower }}|{{ 'aXa' | replace('a', 'b') }}|"
     "{{ [1, 2] | first }}{{ [1, 2] | last }}{{ 'xyz' | first }}|{{ missing | default('d') }}"
     "{{ '' | default('e', true) }}{{ none | default('f') }}|{{ [1, 'a'] | join(', ') }}|"
     "{{ 'ab' | list }}|{{ 3 | string }}{{ '4' | int + 1 }}{{ '2.5' | float }}|"
     "{{ -3 | abs }}|{{ 'hello' | capitalize }}|{{ [3, 1] | reverse | list }}|"
     "{{ {'b': 1, 'a': 2} | items | list }}|{{ [3, 1, 2] | sort }}|{{ [1, 1, 2] | unique | list }}"
     "|{{ 'ab' | count }}", {}),
    ("tojson", "{{ d | tojson }}|{{ d | tojson(indent=2) }}|{{ 'é\"\\n' | tojson }}|"
     "{{ [1, 2.5, none, true] | tojson }}|{{ {} | tojson(indent=4) }}|{{ d | tojson(sort_keys=true) }}",
     {"d": {"z": [1, {"y": "ü"}], "a": None, "e": [], "f": {}}}),
    ("selectattr map", "{{ msgs | selectattr('role', 'equalto', 'user') | list | length }} "
     "{{ (msgs | selectattr('role', 'equalto', 'user') | list)[-1].content }} "
     "{{ msgs | rejectattr('role', 'equalto', 'user') | map(attribute='content') | join('/') }} "
     "{{ items | selectattr('on') | map(attribute='n') | list }} "
     "{{ [1, 2, 3, 4] | select('even') | list }}{{ ['a', 'b'] | reject('equalto', 'a') | list }}"
     "{{ ['a', 'b'] | map('upper') | join }}",
     {"msgs": [{"role": "user", "content": "u1"}, {"role": "assistant", "content": "a1"},
               {"role": "user", "content": "u2"}],
      "items": [{"n": 1, "on": True}, {"n": 2, "on": False}, {"n": 3}]}),
    ("comment and whitespace", "a{# gone #}b\n  {% if true %}\n  c\n  {% endif %}\n"
     "  {{- ' d ' -}}  \n e {%- if true -%}  f  {%- endif %}\n{%+ if true %}g{% endif %}\n", {}),
    ("trim_blocks", "{% if true %}\nx\n{% endif %}\ny\n{# c #}\nz", {}),
    ("if elif else", "{% for n in [1, 2, 3] %}{% if n == 1 %}one{% elif n == 2 %}two"
     "{% else %}many{% endif %},{% endfor %}", {}),
    ("for loop", "{% for x in items %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}"
     "{{ loop.last }}{{ loop.length }}{{ loop.revindex }}{{ loop.revindex0 }};{% endfor %}",
     {"items": ["a", "b"]}),
    ("for filter else", "{% for x in [1, 2, 3, 4] if x % 2 == 0 %}{{ loop.index }}:{{ x }}"
     "{% if not loop.last %},{% endif %}{% endfor %}|{% for x in [] %}x{% else %}empty"
     "{% endfor %}|{% for k, v in d.items() if k != 'b' %}{{ k }}={{ v }};{% endfor %}|"
     "{% for c in 'ab' %}{{ c }}.{% endfor %}|{% for k in d %}{{ k }}{% endfor %}",
     {"d": {"a": 1, "b": 2, "c": 3}}),
    ("break continue", "{% for n in [1, 2, 3, 4] %}{% if n == 2 %}{% continue %}{% endif %}"
     "{% if n == 4 %}{% break %}{% endif %}{{ n }}{% endfor %}", {}),
    ("set and scope", "{% set a = 1 %}{% for x in [1, 2] %}{{ a }}{% set a = a + x %}{{ a }};"
     "{% endfor %}{{ a }}{% if true %}{% set b = 3 %}{% endif %}{{ b }}"
     "{% set c, d = [4, 5] %}{{ c }}{{ d }}{% set blk %}in {{ a }}{% endset %}[{{ blk }}]", {}),
    ("namespace", "{% set ns = namespace(total=0, seen=false) %}{% for x in [1, 2, 3] %}"
     "{% set ns.total = ns.total + x %}{% if x == 2 %}{% set ns.seen = true %}{% endif %}"
     "{% endfor %}{{ ns.total }} {{ ns.seen }}{% set ns2 = namespace() %}{% set ns2.a = 'x' %}"
     "{{ ns2.a }}", {}),
    ("macro", "{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}"
     "{{ greet('Ann') }} {{ greet('Bo', punct='?') }} {{ greet(name='Cy') }}", {}),
    ("globals", "{{ strftime_now('%d %b %Y') }} {{ strftime_now('%Y-%m-%d %H:%M:%S %A %B') }}"
     " {{ range(3) | list }} {{ range(1, 7, 2) | list }} {{ dict(a=1) }}", {}),
    ("generation", "{% for m in msgs %}{% generation %}[{{ m }}]{% endgeneration %}{% endfor %}",
     {"msgs": ["a", "b"]}),
    ("raise_exception", "a{{ raise_exception('Bad role: ' + r) }}", {"r": "bot"}),
    ("trailing newline", "x\n", {}),
]


def environment_render(template, context):
    compiled = chat_template_utils._compile_jinja_template(template)
    return compiled.render(**context)


def attempt(fn):
    try:
        return {"output": fn()}
    except jinja2.exceptions.TemplateError as e:
        return {"error": str(e)}


def write_chat_tokenizer():
    """tests/data/chat_tokenizer: the tiny LLaMA-3-style tokenizer of tests/data/tokenizers with
    ChatML's <|im_start|>/<|im_end|> added, and Qwen2.5's chat template in its
    tokenizer_config.json: the jsonl conversation tests' tokenizer."""
    src = os.path.join(ROOT, "tests", "data", "tokenizers", "llama3", "tokenizer.json")
    out = os.path.join(ROOT, "tests", "data", "chat_tokenizer")
    os.makedirs(out, exist_ok=True)
    with open(src, encoding="utf-8") as f:
        tok = json.load(f)
    next_id = 1 + max(max(tok["model"]["vocab"].values()), max(a["id"] for a in tok["added_tokens"]))
    for k, content in enumerate(["<|im_start|>", "<|im_end|>"]):
        tok["added_tokens"].append({"id": next_id + k, "content": content, "single_word": False,
                                    "lstrip": False, "rstrip": False, "normalized": False,
                                    "special": True})
    with open(os.path.join(out, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False, indent=1)
        f.write("\n")
    with open(os.path.join(DIR, "qwen2.5.jinja"), encoding="utf-8") as f:
        template = f.read()
    config = {"bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|end_of_text|>",
              "chat_template": template, "tokenizer_class": "TokenizersBackend"}
    with open(os.path.join(out, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f, ensure_ascii=False, indent=2)
        f.write("\n")


def main():
    write_chat_tokenizer()
    cases = []
    for name, tokens in TEMPLATES.items():
        with open(os.path.join(DIR, name + ".jinja"), encoding="utf-8") as f:
            template = f.read()
        for conv, gen in RENDERS:

            def render():
                out, _ = chat_template_utils.render_jinja_template(
                    conversations=[CONVERSATIONS[conv]],
                    chat_template=template,
                    add_generation_prompt=gen,
                    **tokens,
                )
                return out[0]

            case = {"template": name, "conversation": conv, "add_generation_prompt": gen}
            case.update(attempt(render))
            cases.append(case)
    snippets = []
    for name, template, context in SNIPPETS:
        snippet = {"name": name, "template": template, "context": context}
        snippet.update(attempt(lambda: environment_render(template, context)))
        snippets.append(snippet)
    golden = {
        "generator": "tools/make_chat_template_golden.py",
        "transformers": transformers.__version__,
        "jinja2": jinja2.__version__,
        "now": NOW.isoformat(),
        "special_tokens": TEMPLATES,
        "conversations": CONVERSATIONS,
        "cases": cases,
        "snippets": snippets,
    }
    with open(os.path.join(DIR, "golden.json"), "w", encoding="utf-8") as f:
        json.dump(golden, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"{len(cases)} renders, {len(snippets)} snippets -> {DIR}/golden.json")


if __name__ == "__main__":
    main()
