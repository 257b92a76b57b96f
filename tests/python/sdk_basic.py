"""The official OpenAI SDK against a stoker server with no API keys: models, chat and
completions (plain and streamed, with usage), log probabilities, structured outputs, the x-stoker-*
headers, and the context-length error."""

import json
from typing import Literal

import openai
import pydantic

from e2e_common import artifact_sha256, check, client, env, fail, step

CHAT = [{"role": "user", "content": "Say hello and introduce yourself in one sentence."}]
PROMPT = "The three primary colors are"
MAX_TOKENS = 16
ALLOWED_FINISH = ("stop", "length")

c = client()

# --- models ---------------------------------------------------------------------
step("models.list()")
models = c.models.list()
check(len(models.data) >= 1, f"no models listed: {models}")
m = models.data[0]
fields = m.to_dict()
step(f"model: {fields}")
check(isinstance(m.id, str) and m.id, f"model id missing: {fields}")
check(m.object == "model", f"model object is {m.object!r}, want 'model'")
check(fields.get("owned_by"), f"owned_by missing: {fields}")
revision = fields.get("revision")
check(isinstance(revision, str) and revision, f"revision missing: {fields}")
sha = fields.get("sha256")
file_sha = artifact_sha256(env("STOKER_MODEL_PATH"))
check(sha == file_sha, f"model sha256 is {sha!r}, the artifact's is {file_sha}")
MODEL = m.id

# --- chat, non-streaming, with the raw response for headers -------------------------
step("chat.completions (non-stream, with_raw_response)")
raw = c.chat.completions.with_raw_response.create(
    model=MODEL, messages=CHAT, max_tokens=MAX_TOKENS, temperature=0
)
check(raw.status_code == 200, f"status {raw.status_code}")
headers = raw.headers
step("headers: " + ", ".join(f"{k}={v}" for k, v in headers.items() if k.startswith("x-stoker")))
check(headers.get("x-stoker-revision"), "x-stoker-revision header missing")
check(
    headers.get("x-stoker-revision") == revision,
    f"x-stoker-revision {headers.get('x-stoker-revision')!r} != models revision {revision!r}",
)
check(
    headers.get("x-stoker-model-sha256") == file_sha,
    f"x-stoker-model-sha256 {headers.get('x-stoker-model-sha256')!r} != {file_sha}",
)
check(headers.get("x-stoker-executor"), "x-stoker-executor header missing")
for h in ("x-stoker-tokenizer-sha256", "x-stoker-template-sha256"):
    v = headers.get(h) or ""
    check(len(v) == 64 and all(ch in "0123456789abcdef" for ch in v), f"{h} {v!r} is not a sha256")
queue_ms = headers.get("x-stoker-queue-ms")
try:
    check(float(queue_ms) >= 0, f"x-stoker-queue-ms negative: {queue_ms!r}")
except (TypeError, ValueError):
    fail(f"x-stoker-queue-ms missing or not a number: {queue_ms!r}")

chat = raw.parse()
step(f"chat: {chat.model_dump_json()}")
check(chat.object == "chat.completion", f"object {chat.object!r}")
check(chat.id, "chat id missing")
check(chat.system_fingerprint, f"system_fingerprint missing: {chat.system_fingerprint!r}")
check(len(chat.choices) == 1, f"{len(chat.choices)} choices, want 1")
choice = chat.choices[0]
check(choice.message.role == "assistant", f"role {choice.message.role!r}")
chat_text = choice.message.content
check(isinstance(chat_text, str) and chat_text.strip(), f"empty content: {chat_text!r}")
check(choice.finish_reason in ALLOWED_FINISH, f"finish_reason {choice.finish_reason!r}")
u = chat.usage
check(u is not None, "usage missing")
check(u.prompt_tokens > 0, f"prompt_tokens {u.prompt_tokens}")
check(0 < u.completion_tokens <= MAX_TOKENS, f"completion_tokens {u.completion_tokens}")
check(u.total_tokens == u.prompt_tokens + u.completion_tokens, f"total_tokens {u}")
if choice.finish_reason == "length":
    check(u.completion_tokens == MAX_TOKENS, f"finish 'length' with {u.completion_tokens} tokens")

# --- chat, streaming with include_usage ------------------------------------------
step("chat.completions (stream, include_usage)")
stream = c.chat.completions.create(
    model=MODEL,
    messages=CHAT,
    max_tokens=MAX_TOKENS,
    temperature=0,
    stream=True,
    stream_options={"include_usage": True},
)
chunks = list(stream)
step(f"{len(chunks)} chunks")
check(len(chunks) >= 2, f"only {len(chunks)} chunks")
last = chunks[-1]
check(last.choices == [], f"last chunk has choices: {last.model_dump_json()}")
check(last.usage is not None, f"last chunk has no usage: {last.model_dump_json()}")
pieces, finishes = [], []
for ch in chunks:
    check(ch.object == "chat.completion.chunk", f"chunk object {ch.object!r}")
    check(ch.id == chunks[0].id, "chunk ids differ within one stream")
    check(ch.system_fingerprint, f"chunk without system_fingerprint: {ch.model_dump_json()}")
    if ch is not last:
        check(ch.usage is None, f"usage before the final chunk: {ch.model_dump_json()}")
    for chc in ch.choices:
        if chc.delta.content:
            pieces.append(chc.delta.content)
        if chc.finish_reason is not None:
            finishes.append(chc.finish_reason)
check(len(pieces) >= 1, "no content deltas")
check(len(finishes) == 1, f"finish_reason given {len(finishes)} times: {finishes}")
check(finishes[0] in ALLOWED_FINISH, f"finish_reason {finishes[0]!r}")
stream_text = "".join(pieces)
check(
    stream_text == chat_text,
    f"temperature 0: streamed text {stream_text!r} != non-streamed {chat_text!r}",
)
check(last.usage.prompt_tokens == u.prompt_tokens, f"stream usage {last.usage} vs {u}")
check(last.usage.completion_tokens == u.completion_tokens, f"stream usage {last.usage} vs {u}")
check(
    last.usage.total_tokens == last.usage.prompt_tokens + last.usage.completion_tokens,
    f"stream usage total {last.usage}",
)

# --- completions, non-streaming --------------------------------------------------
step("completions (non-stream)")
comp = c.completions.create(model=MODEL, prompt=PROMPT, max_tokens=MAX_TOKENS, temperature=0)
step(f"completion: {comp.model_dump_json()}")
check(comp.object == "text_completion", f"object {comp.object!r}")
check(comp.system_fingerprint, f"system_fingerprint missing: {comp.system_fingerprint!r}")
check(len(comp.choices) == 1, f"{len(comp.choices)} choices")
comp_text = comp.choices[0].text
check(isinstance(comp_text, str) and comp_text.strip(), f"empty text {comp_text!r}")
check(comp.choices[0].finish_reason in ALLOWED_FINISH, f"finish_reason {comp.choices[0].finish_reason!r}")
cu = comp.usage
check(cu is not None and cu.prompt_tokens > 0 and cu.completion_tokens > 0, f"usage {cu}")
check(cu.completion_tokens <= MAX_TOKENS, f"usage {cu}")

# --- completions, streaming ---------------------------------------------------------
step("completions (stream, include_usage)")
chunks = list(
    c.completions.create(
        model=MODEL,
        prompt=PROMPT,
        max_tokens=MAX_TOKENS,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
)
step(f"{len(chunks)} chunks")
check(len(chunks) >= 2, f"only {len(chunks)} chunks")
last = chunks[-1]
check(last.choices == [], f"last chunk has choices: {last.model_dump_json()}")
check(last.usage is not None, f"last chunk has no usage: {last.model_dump_json()}")
text = "".join(chc.text for ch in chunks for chc in ch.choices if chc.text)
check(text.strip(), "no text in completion chunks")
check(text == comp_text, f"temperature 0: streamed {text!r} != non-streamed {comp_text!r}")
check(last.usage.completion_tokens == cu.completion_tokens, f"usage {last.usage} vs {cu}")


# --- log probabilities ------------------------------------------------------------
step("chat.completions with logprobs=True, top_logprobs=5 (plain and streamed)")
lp_chat = c.chat.completions.create(
    model=MODEL, messages=CHAT, max_tokens=8, temperature=0, logprobs=True, top_logprobs=5
)
content = lp_chat.choices[0].logprobs.content
check(
    len(content) == lp_chat.usage.completion_tokens,
    f"{len(content)} logprobs for {lp_chat.usage.completion_tokens} tokens",
)
for t in content:
    check(t.logprob <= 0 and len(t.top_logprobs) == 5, f"bad entry {t}")
    check(t.top_logprobs[0].token == t.token, f"greedy token is not the likeliest: {t}")
spelled = b"".join(bytes(t.bytes) for t in content).decode()
check(spelled == lp_chat.choices[0].message.content, f"{spelled!r} != the answer")
streamed = [
    t
    for ch in c.chat.completions.create(
        model=MODEL, messages=CHAT, max_tokens=8, temperature=0, logprobs=True, top_logprobs=5,
        stream=True,
    )
    for chc in ch.choices
    if chc.logprobs and chc.logprobs.content
    for t in chc.logprobs.content
]
check(
    [(t.token, t.logprob) for t in streamed] == [(t.token, t.logprob) for t in content],
    "streamed logprobs differ from the whole answer's",
)
step("completions with logprobs=3")
lp_comp = c.completions.create(model=MODEL, prompt=PROMPT, max_tokens=5, temperature=0, logprobs=3)
lp = lp_comp.choices[0].logprobs
check(len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset), f"{lp}")
check("".join(lp.tokens) == lp_comp.choices[0].text, f"{lp.tokens} != {lp_comp.choices[0].text!r}")
step("completions echo=True, max_tokens=0: score a text without generating")
scored = c.completions.create(model=MODEL, prompt=PROMPT, max_tokens=0, echo=True, logprobs=1, temperature=0)
sc = scored.choices[0]
check(sc.text == PROMPT, f"echo text {sc.text!r} != {PROMPT!r}")
check(scored.usage.completion_tokens == 0, f"{scored.usage}")
check(len(sc.logprobs.tokens) == scored.usage.prompt_tokens, f"{sc.logprobs}")
check(sc.logprobs.token_logprobs[0] is None and sc.logprobs.top_logprobs[0] is None, f"{sc.logprobs}")
check(all(l is not None and l <= 0 for l in sc.logprobs.token_logprobs[1:]), f"{sc.logprobs}")
echoed = c.completions.create(model=MODEL, prompt=PROMPT, max_tokens=5, echo=True, logprobs=3, temperature=0)
check(echoed.choices[0].text == PROMPT + lp_comp.choices[0].text, f"{echoed.choices[0].text!r}")
check(echoed.choices[0].logprobs.token_logprobs[len(sc.logprobs.tokens):] == lp.token_logprobs, "echoed output logprobs differ")
step("completions with logit_bias, penalties and vLLM's min_tokens (extra_body)")
biased = c.completions.create(
    model=MODEL, prompt=PROMPT, max_tokens=4, temperature=0, logprobs=0,
    logit_bias={"1000": 100}, presence_penalty=0.5, frequency_penalty=0.5,
)
toks = biased.choices[0].logprobs.tokens
check(len(toks) == 4 and len(set(toks)) == 1, f"logit_bias +100 did not force one token: {toks}")
long = c.chat.completions.create(
    model=MODEL, messages=CHAT, max_tokens=50, temperature=0, extra_body={"min_tokens": 50},
)
check(long.usage.completion_tokens == 50, f"min_tokens=50 gave {long.usage.completion_tokens}")
step("n=4 choices, streamed and not")
many = c.chat.completions.create(model=MODEL, messages=CHAT, max_tokens=8, temperature=1.0, seed=1, n=4)
check([ch.index for ch in many.choices] == [0, 1, 2, 3], f"choices: {many.choices}")
check(len({ch.message.content for ch in many.choices}) > 1, "four seeds gave one answer")
streamed_n = ["", "", "", ""]
for ch in c.chat.completions.create(
    model=MODEL, messages=CHAT, max_tokens=8, temperature=1.0, seed=1, n=4, stream=True
):
    for chc in ch.choices:
        streamed_n[chc.index] += chc.delta.content or ""
check(streamed_n == [ch.message.content for ch in many.choices], f"streamed n=4 differ: {streamed_n}")
step("chat.completions.parse with a Pydantic response_format, and the label's logprobs")


class Verdict(pydantic.BaseModel):
    label: Literal["positive", "negative", "neutral"]
    confidence: int = pydantic.Field(ge=0, le=100)


REVIEW = [{"role": "user", "content": "Classify this review: 'The soup was cold and the waiter rude.'"}]
for temperature in (0, 1.2):
    parsed = c.chat.completions.parse(
        model=MODEL, messages=REVIEW, response_format=Verdict, max_tokens=60,
        temperature=temperature, seed=3, logprobs=True, top_logprobs=3,
    )
    choice = parsed.choices[0]
    check(isinstance(choice.message.parsed, Verdict), f"not parsed: {choice.message}")
    check(choice.finish_reason == "stop", f"finish_reason {choice.finish_reason}")
    tokens = choice.logprobs.content
    check("".join(t.token for t in tokens) == choice.message.content, "logprob tokens != content")
    check(all(len(t.top_logprobs) == 3 for t in tokens), "top_logprobs count")
obj = c.chat.completions.create(
    model=MODEL, messages=[{"role": "user", "content": "Describe a cat in JSON."}],
    response_format={"type": "json_object"}, max_tokens=80, temperature=0,
)
if obj.choices[0].finish_reason == "stop":
    check(isinstance(json.loads(obj.choices[0].message.content), dict), f"{obj.choices[0].message}")
try:
    c.chat.completions.create(
        model=MODEL, messages=CHAT, max_tokens=2,
        response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": {"$ref": "#/$defs/nope"}}},
    )
    fail("a schema with a dangling $ref was accepted")
except openai.BadRequestError as e:
    check(e.param == "response_format", f"dangling $ref: param {e.param!r}")
try:
    c.chat.completions.create(model=MODEL, messages=CHAT, max_tokens=2, logit_bias={"x": 1})
    fail("a logit_bias key that is not a token id was accepted")
except openai.BadRequestError as e:
    check(e.param == "logit_bias", f"logit_bias: param {e.param!r}")
try:
    c.chat.completions.create(
        model=MODEL, messages=CHAT, max_tokens=2,
        tools=[{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}],
    )
    fail("tool_choice auto was accepted under a template that renders no tools")
except openai.BadRequestError as e:
    check(e.param == "tools" and "sha256" in e.message, f"auto without tool support: {e.param!r} {e.message}")
try:
    c.chat.completions.create(model=MODEL, messages=CHAT, max_tokens=2, logprobs=True, top_logprobs=21)
    fail("top_logprobs=21 was accepted")
except openai.BadRequestError as e:
    check(e.code == "invalid_value", f"top_logprobs=21: code {e.code!r}")


# --- context length exceeded -----------------------------------------------------
def expect_context_error(what, fn):
    step(f"context overflow: {what}")
    try:
        resp = fn()
    except openai.BadRequestError as e:
        check(e.status_code == 400, f"{what}: status {e.status_code}")
        check(e.code == "context_length_exceeded", f"{what}: code {e.code!r}, body {e.body}")
        step(f"  400 {e.code}: {e.message[:200]}")
        return
    except openai.APIStatusError as e:
        fail(f"{what}: want BadRequestError 400, got {type(e).__name__} {e.status_code}: {e.body}")
    fail(f"{what}: want BadRequestError, got a response: {resp}")


HUGE = "hello " * 9000  # about 9000 tokens, over the 8192-token context
expect_context_error(
    "chat with a ~9000-token prompt",
    lambda: c.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": HUGE}], max_tokens=8
    ),
)
expect_context_error(
    "chat with max_tokens=100000",
    lambda: c.chat.completions.create(model=MODEL, messages=CHAT, max_tokens=100000),
)
expect_context_error(
    "completions with a ~9000-token prompt",
    lambda: c.completions.create(model=MODEL, prompt=HUGE, max_tokens=8),
)

print("OK sdk_basic")
