"""The official OpenAI SDK against stoker's Batch API: upload a JSONL file, run a
batch of chat lines (two of which fail validation when run) to completion, read
its output and error files; then cancel a larger batch mid-run and check that
every line still ends up exactly once across the two files; finally the file
endpoints (retrieve, list, delete, 404)."""

import io
import json
import time

import openai

from e2e_common import check, client, fail, model_id, step

POLL_TIMEOUT_S = 300.0
TERMINAL = ("completed", "failed", "expired", "cancelled")

c = client()
MODEL = model_id(c)
step(f"model {MODEL}")
# What an online answer names in its headers, every output line names in its body.
_h = c.chat.completions.with_raw_response.create(
    model=MODEL, messages=[{"role": "user", "content": "Hi"}], max_tokens=1
).headers
ONLINE_PROVENANCE = {
    "revision": _h.get("x-stoker-revision"),
    "model_sha256": _h.get("x-stoker-model-sha256"),
    "tokenizer_sha256": _h.get("x-stoker-tokenizer-sha256"),
    "template_sha256": _h.get("x-stoker-template-sha256"),
}
for k, v in ONLINE_PROVENANCE.items():
    check(v, f"the online answer has no {k} header")

QUESTIONS = [
    "What is the capital of France?",
    "Name a primary color.",
    "Say hello.",
    "What is two plus two?",
    "Name a fruit.",
    "What sound does a cat make?",
    "Name a day of the week.",
    "What is the opposite of up?",
    "Name a planet.",
    "What color is the sky?",
]


def chat_line(custom_id, content, max_tokens=8, model=None):
    return {
        "custom_id": custom_id,
        "method": "POST",
        "url": "/v1/chat/completions",
        "body": {
            "model": model or MODEL,
            "messages": [{"role": "user", "content": content}],
            "max_tokens": max_tokens,
            "temperature": 0,
        },
    }


def jsonl(lines):
    return ("\n".join(json.dumps(line) for line in lines) + "\n").encode()


def upload(name, data):
    f = c.files.create(file=(name, io.BytesIO(data)), purpose="batch")
    step(f"uploaded {name}: {f.model_dump_json()}")
    check(f.id.startswith("file-"), f"file id {f.id!r} does not start with 'file-'")
    check(f.object == "file", f"file object {f.object!r}")
    check(f.bytes == len(data), f"file bytes {f.bytes}, uploaded {len(data)}")
    check(f.filename == name, f"filename {f.filename!r}, want {name!r}")
    check(f.purpose == "batch", f"purpose {f.purpose!r}")
    check(f.status == "processed", f"status {f.status!r}")
    check(isinstance(f.created_at, int) and f.created_at > 0, f"created_at {f.created_at!r}")
    return f


def poll(batch_id, until=TERMINAL, timeout=POLL_TIMEOUT_S, interval=0.5):
    deadline = time.monotonic() + timeout
    last = None
    while True:
        b = c.batches.retrieve(batch_id)
        if b.status != last:
            step(f"{batch_id}: {b.status} {b.request_counts}")
            last = b.status
        if b.status in until:
            return b
        if b.status in TERMINAL:
            fail(f"{batch_id} ended {b.status} while waiting for {until}: {b.model_dump_json()}")
        if time.monotonic() > deadline:
            fail(f"{batch_id} still {b.status} after {timeout}s: {b.model_dump_json()}")
        time.sleep(interval)


def lines_of(file_id):
    if file_id is None:
        return []
    text = c.files.content(file_id).text
    out = []
    for n, raw in enumerate(text.splitlines(), 1):
        if not raw.strip():
            continue
        try:
            out.append(json.loads(raw))
        except ValueError as e:
            fail(f"{file_id} line {n} is not JSON ({e}): {raw[:200]!r}")
    return out


def each_once(ids, output, errors, what):
    seen = [line["custom_id"] for line in output + errors]
    dups = sorted({i for i in seen if seen.count(i) > 1})
    check(not dups, f"{what}: custom_ids repeated across output and error files: {dups}")
    missing = sorted(set(ids) - set(seen))
    check(not missing, f"{what}: custom_ids missing from both files: {missing}")
    extra = sorted(set(seen) - set(ids))
    check(not extra, f"{what}: custom_ids that were not submitted: {extra}")


def check_output_line(line, what):
    check(line.get("id", "").startswith("batch_req_"), f"{what}: line id {line.get('id')!r}")
    check(line.get("error") is None, f"{what}: output line with an error: {line}")
    resp = line.get("response") or {}
    check(resp.get("status_code") == 200, f"{what}: status_code {resp.get('status_code')}: {line}")
    check(resp.get("request_id"), f"{what}: no request_id: {line}")
    body = resp.get("body") or {}
    fp = body.get("system_fingerprint") or ""
    check(fp.startswith("fp_"), f"{what}: system_fingerprint {fp!r}")
    prov = body.get("stoker_provenance") or {}
    for k, v in ONLINE_PROVENANCE.items():
        check(prov.get(k) == v, f"{what}: stoker_provenance.{k} {prov.get(k)!r}, online {v!r}")
    check(prov.get("executor"), f"{what}: stoker_provenance names no executor: {prov}")
    choices = body.get("choices") or []
    check(len(choices) == 1, f"{what}: {len(choices)} choices: {body}")
    message = choices[0].get("message") or {}
    content = message.get("content")
    if message.get("tool_calls"):
        # A tool row: its calls stand for its text.
        return json.dumps([c["function"] for c in message["tool_calls"]], sort_keys=True)
    check(isinstance(content, str), f"{what}: choices[0].message.content is {content!r}")
    return content


# --- a batch that completes, with two lines refused when they run -------------------
ids = [f"q-{i:02d}" for i in range(len(QUESTIONS))]
lines = [chat_line(cid, q) for cid, q in zip(ids, QUESTIONS)]
# A scoring row: a label that always parses, and its log probabilities.
SCORE = {
    "max_tokens": 24, "logprobs": True, "top_logprobs": 3,
    "response_format": {"type": "json_schema", "json_schema": {"name": "answer", "strict": True, "schema": {
        "type": "object", "additionalProperties": False, "required": ["kind"],
        "properties": {"kind": {"enum": ["animal", "day", "direction", "planet", "color"]}}}}},
}
lines[1]["body"].update(SCORE)
# A tool row: a named function's call, always parsing.
TOOL = {
    "max_tokens": 32,
    "tools": [{"type": "function", "function": {"name": "lookup", "parameters": {
        "type": "object", "additionalProperties": False, "required": ["term"],
        "properties": {"term": {"type": "string", "maxLength": 20}}}}}],
    "tool_choice": {"type": "function", "function": {"name": "lookup"}},
}
lines[2]["body"].update(TOOL)
# Refused when run, as the online API refuses them: output over the context, an
# unknown model. Structurally fine, so the upload accepts them.
BAD = {"too-long": (400, "context_length_exceeded"), "no-model": (404, "model_not_found")}
lines.insert(3, chat_line("too-long", "Say hello.", max_tokens=100000))
lines.insert(8, chat_line("no-model", "Say hello.", model="no-such-model"))
all_ids = [line["custom_id"] for line in lines]
check(len(all_ids) == 12, f"{len(all_ids)} lines")

f1 = upload("chat-12.jsonl", jsonl(lines))
step("batches.create (12 chat lines)")
b = c.batches.create(
    input_file_id=f1.id,
    endpoint="/v1/chat/completions",
    completion_window="24h",
    metadata={"suite": "sdk_batch"},
)
step(f"created: {b.model_dump_json()}")
check(b.id.startswith("batch_"), f"batch id {b.id!r}")
check(b.object == "batch", f"object {b.object!r}")
check(b.endpoint == "/v1/chat/completions", f"endpoint {b.endpoint!r}")
check(b.input_file_id == f1.id, f"input_file_id {b.input_file_id!r}")
check(b.completion_window == "24h", f"completion_window {b.completion_window!r}")
check(b.status in ("validating", "in_progress", "finalizing", "completed"), f"status {b.status!r}")
check(b.metadata == {"suite": "sdk_batch"}, f"metadata {b.metadata!r}")
check(isinstance(b.created_at, int) and b.created_at > 0, f"created_at {b.created_at!r}")

listed = [x.id for x in c.batches.list(limit=20).data]
check(b.id in listed, f"{b.id} not in batches.list(): {listed}")

b = poll(b.id)
step(f"ended: {b.model_dump_json()}")
check(b.status == "completed", f"status {b.status!r}, want completed: {b.model_dump_json()}")
rc = b.request_counts
check(
    (rc.total, rc.completed, rc.failed) == (12, 10, 2),
    f"request_counts {rc}, want total=12 completed=10 failed=2",
)
for field in ("in_progress_at", "finalizing_at", "completed_at"):
    check(getattr(b, field), f"{field} not set: {b.model_dump_json()}")
check(b.output_file_id and b.error_file_id, f"files missing: {b.model_dump_json()}")

output, errors = lines_of(b.output_file_id), lines_of(b.error_file_id)
step(f"{len(output)} output lines, {len(errors)} error lines")
check(len(output) == 10 and len(errors) == 2, f"{len(output)} output, {len(errors)} error lines")
each_once(all_ids, output, errors, "12-line batch")
texts = {}
for line in output:
    texts[line["custom_id"]] = check_output_line(line, line["custom_id"])
for line in errors:
    cid = line["custom_id"]
    check(cid in BAD, f"{cid} in the error file: {line}")
    want_status, want_code = BAD[cid]
    check(line.get("error") is None, f"{cid}: error is {line.get('error')!r}, want null")
    resp = line.get("response") or {}
    check(resp.get("status_code") == want_status, f"{cid}: status_code {resp.get('status_code')}, want {want_status}")
    err = (resp.get("body") or {}).get("error") or {}
    check(err.get("code") == want_code, f"{cid}: body.error.code {err.get('code')!r}, want {want_code}: {line}")
    check(err.get("message") and err.get("type"), f"{cid}: error body incomplete: {err}")

# The batch lane runs the same greedy decoding as the online API.
for cid, q in list(zip(ids, QUESTIONS))[:3]:
    extra = {ids[1]: SCORE, ids[2]: TOOL}.get(cid, {"max_tokens": 8})
    online = c.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": q}], temperature=0, **extra
    )
    m = online.choices[0].message
    got = json.dumps([t.function.model_dump() for t in m.tool_calls], sort_keys=True) if m.tool_calls else m.content
    check(got == texts[cid], f"{cid}: batch text {texts[cid]!r} != online {got!r}")
tooled = json.loads(texts[ids[2]])
check(len(tooled) == 1 and tooled[0]["name"] == "lookup", f"tool row: {tooled}")
check(isinstance(json.loads(tooled[0]["arguments"]).get("term"), str), f"tool row arguments: {tooled}")
scored = next(line for line in output if line["custom_id"] == ids[1])
label = json.loads(texts[ids[1]])
check(label.get("kind") in ("animal", "day", "direction", "planet", "color"), f"scoring row: {label}")
lp = scored["response"]["body"]["choices"][0]["logprobs"]["content"]
check("".join(t["token"] for t in lp) == texts[ids[1]], f"scoring row logprobs: {lp}")
check(all(len(t["top_logprobs"]) == 3 for t in lp), f"scoring row top_logprobs: {lp}")

# --- a larger batch, cancelled while it runs ---------------------------------------
ids2 = [f"long-{i:02d}" for i in range(60)]
lines2 = [chat_line(cid, f"Count from {i} to {i + 40}, one number a word.", max_tokens=32) for i, cid in enumerate(ids2)]
f2 = upload("chat-60.jsonl", jsonl(lines2))
b2 = c.batches.create(input_file_id=f2.id, endpoint="/v1/chat/completions", completion_window="24h")
step(f"created {b2.id}")
# Cancel once a few rows are done, so both files have lines: rows that ran keep
# their output, rows that never ran end as batch_cancelled.
b2 = poll(b2.id, until=("in_progress",), interval=0.1)
deadline = time.monotonic() + POLL_TIMEOUT_S
while b2.request_counts.completed < 3:
    check(b2.status == "in_progress", f"{b2.id} left in_progress before 3 rows were done: {b2.model_dump_json()}")
    check(time.monotonic() < deadline, f"{b2.id}: fewer than 3 rows done after {POLL_TIMEOUT_S}s")
    time.sleep(0.1)
    b2 = c.batches.retrieve(b2.id)
done_before_cancel = b2.request_counts.completed
cancelled = c.batches.cancel(b2.id)
step(f"cancel after {done_before_cancel} rows: {cancelled.status} {cancelled.request_counts}")
check(cancelled.status in ("cancelling", "cancelled"), f"status after cancel {cancelled.status!r}")
b2 = poll(b2.id)
step(f"ended: {b2.model_dump_json()}")
check(b2.status == "cancelled", f"status {b2.status!r}, want cancelled")
check(b2.cancelling_at and b2.cancelled_at, f"cancelling_at / cancelled_at not set: {b2.model_dump_json()}")
output2, errors2 = lines_of(b2.output_file_id), lines_of(b2.error_file_id)
step(f"{len(output2)} output lines, {len(errors2)} error lines")
check(len(output2) + len(errors2) == 60, f"{len(output2)} + {len(errors2)} lines, want 60")
each_once(ids2, output2, errors2, "cancelled batch")
for line in output2:
    check_output_line(line, line["custom_id"])
check(
    len(output2) >= done_before_cancel,
    f"{len(output2)} output lines, but {done_before_cancel} rows were done before the cancel",
)
# Every line is valid, so every error line is a row the cancel kept from running.
for line in errors2:
    check(line.get("response") is None, f"{line['custom_id']}: response {line.get('response')}, want null")
    err = line.get("error") or {}
    check(err.get("code") == "batch_cancelled", f"{line['custom_id']}: error {err}, want batch_cancelled")
    check(err.get("message"), f"{line['custom_id']}: no error message: {line}")
never_run = len(errors2)
check(never_run >= 1, "no line ended batch_cancelled although the batch was cancelled mid-run")
rc2 = b2.request_counts
check(rc2.total == 60, f"request_counts.total {rc2.total}, want 60")
check(rc2.completed == len(output2), f"request_counts.completed {rc2.completed}, output lines {len(output2)}")
step(f"cancelled batch: {len(output2)} ran, {never_run} never ran, counts {rc2}")

# --- the file endpoints ---------------------------------------------------------------
got = c.files.retrieve(f1.id)
check(got.id == f1.id and got.bytes == f1.bytes and got.purpose == "batch", f"retrieve: {got}")
check(c.files.content(f1.id).content == jsonl(lines), "input file content differs from what was uploaded")
# .data: the first page only (the SDK would follow `after` cursors for more).
check(f1.id in [x.id for x in c.files.list().data], f"{f1.id} not in files.list()")
deleted = c.files.delete(f1.id)
check(deleted.id == f1.id and deleted.deleted is True, f"delete: {deleted}")
try:
    c.files.retrieve(f1.id)
    fail(f"{f1.id} still retrievable after delete")
except openai.NotFoundError as e:
    check(e.code == "file_not_found", f"retrieve after delete: code {e.code!r}, body {e.body}")
check(f1.id not in [x.id for x in c.files.list().data], f"{f1.id} still listed after delete")

print("OK sdk_batch")
