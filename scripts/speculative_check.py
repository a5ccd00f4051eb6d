#!/usr/bin/env python3
"""Speculative decoding over HTTP, with the official `openai` client, against an engine started
with `--speculative ngram`: a repetitive task (rewrite a given text) at temperature 0 gives the
same text with speculation as with `"speculative": false` (completions and chat, streamed and
not); `/metrics` shows accepted draft tokens grow on every speculative request and stay put on
every opted-out one; `"speculative": "yes"` is refused with a 400 saying a boolean is expected.
Exits non-zero on any mismatch.

Usage: speculative_check.py BASE_URL MODEL   (BASE_URL like http://127.0.0.1:8000/v1)
"""
import sys
import urllib.request

import openai

ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
DRAFTS = "vllm:spec_decode_num_drafts_total"
TEXT = (
    "The river runs past the old mill, under the stone bridge and into the valley. "
    "Every morning the baker opens his shop by the bridge, and every evening he walks "
    "along the river to the mill and back."
)
MAX_TOKENS = 48


def counter(metrics_url: str, name: str) -> float:
    """The sum of the samples of counter `name` on the engine's /metrics."""
    with urllib.request.urlopen(metrics_url, timeout=30) as response:
        text = response.read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(name + "{") or line.startswith(name + " ")
    )


def complete(client, model, kind: str, extra: dict) -> str:
    """One temperature-0 rewrite of TEXT: `kind` is completion or chat, streamed or not."""
    common = dict(model=model, max_tokens=MAX_TOKENS, temperature=0, extra_body=extra)
    if kind.startswith("completion"):
        prompt = f"Copy the text exactly.\n\nText: {TEXT}\n\nCopy: "
        if kind == "completion":
            return client.completions.create(prompt=prompt, **common).choices[0].text
        chunks = client.completions.create(prompt=prompt, stream=True, **common)
        return "".join(c.choices[0].text for c in chunks if c.choices)
    messages = [{"role": "user", "content": f"Rewrite this text word for word:\n\n{TEXT}"}]
    if kind == "chat":
        return client.chat.completions.create(messages=messages, **common).choices[0].message.content
    chunks = client.chat.completions.create(messages=messages, stream=True, **common)
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


def main() -> int:
    base_url, model = sys.argv[1], sys.argv[2]
    metrics_url = base_url.rsplit("/v1", 1)[0] + "/metrics"
    client = openai.OpenAI(base_url=base_url, api_key="unused", timeout=120, max_retries=0)
    kinds = ["completion", "completion-stream", "chat", "chat-stream"]
    texts = {}
    for speculative in (False, True):
        extra = {} if speculative else {"speculative": False}
        for kind in kinds:
            before = (counter(metrics_url, ACCEPTED), counter(metrics_url, DRAFTS))
            text = complete(client, model, kind, extra)
            after = (counter(metrics_url, ACCEPTED), counter(metrics_url, DRAFTS))
            accepted, drafts = after[0] - before[0], after[1] - before[1]
            print(f"{kind:18} speculative={speculative!s:5} drafts={drafts:4.0f} "
                  f"accepted={accepted:4.0f} text={text!r}")
            assert text, f"{kind}: empty text"
            if speculative:
                assert accepted > 0, f"{kind}: no draft token accepted for a speculative request"
                assert text == texts[kind], f"{kind}: speculative {text!r} != plain {texts[kind]!r}"
            else:
                assert drafts == 0 and accepted == 0, f"{kind}: drafts ran for an opted-out request"
                texts[kind] = text

    try:
        client.completions.create(model=model, prompt=TEXT, max_tokens=4, extra_body={"speculative": "yes"})
        raise AssertionError('"speculative": "yes" was accepted')
    except openai.BadRequestError as err:
        message = str(err)
        assert err.status_code == 400 and "expected a boolean" in message, message
        print(f"bad value refused: {message}")

    print("speculative check ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
