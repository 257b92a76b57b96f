"""With API keys configured: a wrong key gets AuthenticationError (401,
invalid_api_key) from the SDK, the right one works."""

import openai

from e2e_common import check, client, env, fail, step

good = client(api_key=env("STOKER_GOOD_KEY"))
bad = client(api_key=env("STOKER_BAD_KEY"))


def expect_401(what, fn):
    step(f"wrong key: {what}")
    try:
        resp = fn()
    except openai.AuthenticationError as e:
        check(e.status_code == 401, f"{what}: status {e.status_code}")
        check(e.code == "invalid_api_key", f"{what}: code {e.code!r}, body {e.body}")
        return
    except openai.APIStatusError as e:
        fail(f"{what}: want AuthenticationError 401, got {type(e).__name__} {e.status_code}: {e.body}")
    fail(f"{what}: want AuthenticationError, got a response: {resp}")


step("right key: models.list()")
models = good.models.list()
check(len(models.data) >= 1, f"no models: {models}")
MODEL = models.data[0].id
MESSAGES = [{"role": "user", "content": "Say hi."}]

expect_401(
    "chat.completions",
    lambda: bad.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=4, temperature=0),
)
expect_401("models.list", lambda: bad.models.list())
expect_401(
    "completions",
    lambda: bad.completions.create(model=MODEL, prompt="Hi", max_tokens=4, temperature=0),
)

step("right key: chat.completions")
chat = good.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=8, temperature=0)
check(chat.choices and chat.choices[0].message.content, f"empty chat: {chat}")
check(chat.usage and chat.usage.completion_tokens > 0, f"usage {chat.usage}")

print("OK sdk_bad_key")
