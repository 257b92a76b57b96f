"""The official OpenAI SDK calling tools on a stoker server that serves SmolLM2 with
llama.cpp's Hermes 2 Pro tool-use template (`chat_template` in its config, as
`stoker serve --chat-template FILE` sets it): `tool_choice` required and named
(constrained, so the calls always parse), a round trip with the call and the
tool's answer sent back, streamed calls, `auto`, the template's hash in the
headers, and bad tools refused by name."""

import hashlib
import json

import openai

from e2e_common import check, client, env, fail, step

c = client()
MODEL = c.models.list().data[0].id
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The current weather in a city.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string", "maxLength": 40}},
                "required": ["city"],
                "additionalProperties": False,
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_time",
            "description": "The time in a timezone.",
            "parameters": {
                "type": "object",
                "properties": {"tz": {"type": "string", "enum": ["UTC", "CET"]}},
                "required": ["tz"],
                "additionalProperties": False,
            },
        },
    },
]
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


def check_call(call, names):
    check(call.type == "function", f"call type {call.type!r}")
    check(call.id.startswith("call_") and len(call.id) == 29, f"call id {call.id!r}")
    check(call.function.name in names, f"called {call.function.name!r}, not one of {names}")
    args = json.loads(call.function.arguments)
    if call.function.name == "get_weather":
        check(set(args) == {"city"} and isinstance(args["city"], str), f"arguments {args}")
    else:
        check(args in ({"tz": "UTC"}, {"tz": "CET"}), f"arguments {args}")
    return args


step("tool_choice=required: an array of calls, each valid against its function's parameters")
for temperature in (0, 1.0):
    r = c.chat.completions.create(
        model=MODEL, messages=ASK, tools=TOOLS, tool_choice="required", max_tokens=120,
        temperature=temperature, seed=5,
    )
    ch = r.choices[0]
    check(ch.finish_reason == "tool_calls", f"finish_reason {ch.finish_reason!r}: {ch.message}")
    check(ch.message.content is None, f"content beside calls: {ch.message.content!r}")
    check(len(ch.message.tool_calls) >= 1, f"no calls: {ch.message}")
    for call in ch.message.tool_calls:
        check_call(call, {"get_weather", "get_time"})

step("a named tool_choice: that function's arguments, always parsing")
raw = c.chat.completions.with_raw_response.create(
    model=MODEL, messages=ASK, tools=TOOLS, max_tokens=60, temperature=0,
    tool_choice={"type": "function", "function": {"name": "get_weather"}},
)
with open(env("STOKER_TEMPLATE_PATH"), "rb") as f:
    template_sha = hashlib.sha256(f.read()).hexdigest()
check(
    raw.headers.get("x-stoker-template-sha256") == template_sha,
    f"x-stoker-template-sha256 {raw.headers.get('x-stoker-template-sha256')} is not the served file's {template_sha}",
)
named = raw.parse()
ch = named.choices[0]
check(ch.finish_reason == "stop", f"named finish_reason {ch.finish_reason!r}")
check(len(ch.message.tool_calls) == 1, f"calls: {ch.message.tool_calls}")
args = check_call(ch.message.tool_calls[0], {"get_weather"})

step("the same, streamed: one delta.tool_calls entry, equal to the whole answer's")
calls = {}
finish = None
for chunk in c.chat.completions.create(
    model=MODEL, messages=ASK, tools=TOOLS, max_tokens=60, temperature=0, stream=True,
    tool_choice={"type": "function", "function": {"name": "get_weather"}},
):
    for chc in chunk.choices:
        check(not chc.delta.content, f"content streamed beside a named call: {chc.delta.content!r}")
        for d in chc.delta.tool_calls or []:
            slot = calls.setdefault(d.index, {"id": d.id, "name": "", "arguments": ""})
            slot["name"] += d.function.name or ""
            slot["arguments"] += d.function.arguments or ""
        finish = chc.finish_reason or finish
check(finish == "stop", f"streamed finish_reason {finish!r}")
check(list(calls) == [0], f"streamed calls {calls}")
check(
    (calls[0]["name"], json.loads(calls[0]["arguments"])) == ("get_weather", args),
    f"streamed call {calls[0]} != {args}",
)

step("a round trip: the call and the tool's answer go back, the model answers")
call = ch.message.tool_calls[0]
follow = ASK + [
    ch.message.model_dump(exclude_none=True),
    {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"temperature_c": 18})},
]
final = c.chat.completions.create(
    model=MODEL, messages=follow, tools=TOOLS, tool_choice="none", max_tokens=24, temperature=0,
)
check(isinstance(final.choices[0].message.content, str), f"final answer {final.choices[0].message}")
check(final.choices[0].message.tool_calls is None, "tool_choice=none gave calls")
check(final.choices[0].finish_reason in ("stop", "length"), f"{final.choices[0].finish_reason}")
check(final.usage.prompt_tokens > named.usage.prompt_tokens, "the call and its answer were not rendered")

step("tool_choice=auto: text or calls, in OpenAI's shape either way (streamed too)")
auto = c.chat.completions.create(
    model=MODEL, messages=ASK, tools=TOOLS, max_tokens=40, temperature=0,
)
ch = auto.choices[0]
if ch.message.tool_calls:
    check(ch.finish_reason == "tool_calls", f"auto finish {ch.finish_reason}")
    for call in ch.message.tool_calls:
        check_call(call, {"get_weather", "get_time"})
else:
    check(isinstance(ch.message.content, str), f"auto answer {ch.message}")
streamed = ""
for chunk in c.chat.completions.create(
    model=MODEL, messages=ASK, tools=TOOLS, max_tokens=40, temperature=0, stream=True,
):
    for chc in chunk.choices:
        streamed += chc.delta.content or ""
if not ch.message.tool_calls:
    check(streamed == ch.message.content, f"streamed auto {streamed!r} != {ch.message.content!r}")

step("bad tools are refused by name")
for body, param in [
    ({"tools": TOOLS + [TOOLS[0]]}, "tools[2].function.name"),
    ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}},
     "tool_choice.function.name"),
    ({"tools": [{"type": "function", "function": {"name": "bad name!"}}]}, "tools[0].function.name"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"tools": TOOLS, "tool_choice": "required", "response_format": {"type": "json_object"}}, "tool_choice"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"a": {"$ref": "#/$defs/x"}}}}}],
      "tool_choice": "required"}, "tools"),
]:
    try:
        c.chat.completions.create(model=MODEL, messages=ASK, max_tokens=2, **body)
        fail(f"accepted: {body}")
    except openai.BadRequestError as e:
        check(e.param == param, f"{body}: param {e.param!r}, want {param!r} ({e.message})")

print("OK sdk_tools")
