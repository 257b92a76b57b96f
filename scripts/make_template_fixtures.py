#!/usr/bin/env python3
"""Render llama.cpp's real chat templates into the fixture stoker's tests compare to.

The issue asks that stoker lay out a conversation exactly as llama.cpp does
(`llama-server`'s `/apply-template`). Building llama.cpp is too slow for the test
setup, so this script uses Python's `jinja2` as the reference renderer instead,
configured exactly as Hugging Face `transformers.apply_chat_template` configures it
(`ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)` with loop
controls and its `{% generation %}` tag, a `tojson` filter that calls
`json.dumps(ensure_ascii=False)` with `indent`/`separators`/`sort_keys`,
`raise_exception`, `strftime_now`, and `tools` bound to None). Chat templates are written and tested against that
renderer, and llama.cpp's own Jinja engine (minja, now `common/jinja`) was written
to reproduce it, so a template that renders the same here renders the same in
llama.cpp.

Every template in `models/llama.cpp/templates/` (fetched by
`scripts/fetch-llama-cpp-data.sh`) is rendered on the fixed conversations below,
with BOS/EOS bound to the fixed strings `<BOS>`/`<EOS>` for every family (the
comparison only needs both sides to use the same strings) and the clock fixed at
FIXED_NOW. The result is written to `executor/tests/fixtures/chat_templates.json`
together with those inputs, so the Rust test reads the conversations from the
fixture instead of repeating them: `renders` maps template file name ->
conversation name -> {"ok": rendered} or {"error": message} when jinja2 raises.

Run: python3 -m venv .tools/tmpl-venv && .tools/tmpl-venv/bin/pip install jinja2
     .tools/tmpl-venv/bin/python scripts/make_template_fixtures.py
"""

import json
import sys
from datetime import datetime
from pathlib import Path

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

ROOT = Path(__file__).resolve().parent.parent
TEMPLATES = ROOT / "models" / "llama.cpp" / "templates"
OUT = ROOT / "executor" / "tests" / "fixtures" / "chat_templates.json"

BOS = "<BOS>"
EOS = "<EOS>"
FIXED_NOW = datetime(2025, 1, 15, 10, 30, 0)

CONVERSATIONS = {
    "system_user_assistant_user": {
        "messages": [
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "What is 2+2?"},
            {"role": "assistant", "content": "4."},
            {"role": "user", "content": "And 3+3?"},
        ],
        "add_generation_prompt": True,
    },
    "user_only": {
        "messages": [{"role": "user", "content": "Hi!"}],
        "add_generation_prompt": True,
    },
    "multi_turn": {
        "messages": [
            {"role": "user", "content": "Name a colour."},
            {"role": "assistant", "content": "Blue."},
            {"role": "user", "content": "Another, in  \"quotes\" ü?"},
            {"role": "assistant", "content": "\"Green\"\n"},
        ],
        "add_generation_prompt": False,
    },
}


class TemplateError(Exception):
    pass


class AssistantTracker(Extension):
    """transformers' `{% generation %}...{% endgeneration %}` tag: it marks the
    assistant's tokens for training masks and renders its body unchanged."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_generation_support"), [], [], body).set_lineno(
            lineno
        )

    def _generation_support(self, caller):
        return caller()


def raise_exception(message):
    raise TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(
        x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


def strftime_now(fmt):
    return FIXED_NOW.strftime(fmt)


def environment():
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[AssistantTracker, loopcontrols]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def render(env, source, conv):
    try:
        template = env.from_string(source)
        text = template.render(
            messages=conv["messages"],
            tools=None,
            add_generation_prompt=conv["add_generation_prompt"],
            bos_token=BOS,
            eos_token=EOS,
        )
        return {"ok": text}
    except Exception as e:  # the fixture records any failure as an error
        return {"error": f"{type(e).__name__}: {e}"}


def main():
    if not TEMPLATES.is_dir():
        sys.exit(f"{TEMPLATES} missing: run scripts/fetch-llama-cpp-data.sh")
    env = environment()
    fixture = {}
    for path in sorted(TEMPLATES.glob("*.jinja")):
        source = path.read_text(encoding="utf-8")
        fixture[path.name] = {
            name: render(env, source, conv) for name, conv in CONVERSATIONS.items()
        }
    document = {
        "generator": f"scripts/make_template_fixtures.py with jinja2 {jinja2.__version__}",
        "bos_token": BOS,
        "eos_token": EOS,
        "now": FIXED_NOW.isoformat(),
        "conversations": CONVERSATIONS,
        "renders": fixture,
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(document, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    errors = sum("error" in r for t in fixture.values() for r in t.values())
    print(
        f"jinja2 {jinja2.__version__}: {len(fixture)} templates, "
        f"{errors} renders raised; wrote {OUT.relative_to(ROOT)}"
    )


if __name__ == "__main__":
    main()
