#!/usr/bin/env python3
"""Checks through the official `openai` client that a tokenscale engine serving a reasoning model
whose output stays inside its think block (the DeepSeek-R1 parser on a random-weight model, as
engine/tests/reasoning.rs serves it) returns that output as `reasoning_content` (issue 39):
the whole answer has it on the message (the client shows it in `model_extra`) with no content,
the streamed deltas' `reasoning_content` joined equal it, and `usage` counts every completion
token as reasoning. Exits non-zero on the first failure, printing what failed.

Usage: reasoning_check.py BASE_URL MODEL   (BASE_URL like http://127.0.0.1:8000/v1)
"""
import sys

import openai

ASK = [{"role": "user", "content": "hi"}]
# Greedy and without EOS, so the whole and streamed answers are the same tokens.
PARAMS = {"max_tokens": 16, "temperature": 0, "extra_body": {"ignore_eos": True}}


def check(ok, what):
    if not ok:
        sys.exit(f"FAIL: {what}")


def main():
    base_url, model = sys.argv[1], sys.argv[2]
    client = openai.OpenAI(base_url=base_url, api_key="unused", max_retries=0)
    whole = client.chat.completions.create(model=model, messages=ASK, **PARAMS)
    message = whole.choices[0].message
    reasoning = (message.model_extra or {}).get("reasoning_content")
    check(isinstance(reasoning, str) and reasoning, f"no reasoning_content: {message}")
    check(not message.content, f"content beside the reasoning: {message.content!r}")
    details = whole.usage.completion_tokens_details
    check(details is not None and details.reasoning_tokens == whole.usage.completion_tokens,
          f"reasoning tokens: {whole.usage}")

    stream = client.chat.completions.create(
        model=model, messages=ASK, stream=True, stream_options={"include_usage": True}, **PARAMS)
    pieces, content, usage = [], "", None
    for chunk in stream:
        usage = chunk.usage or usage
        for choice in chunk.choices:
            pieces.append((choice.delta.model_extra or {}).get("reasoning_content") or "")
            content += choice.delta.content or ""
    check("".join(pieces) == reasoning, f"streamed {''.join(pieces)!r} != whole {reasoning!r}")
    check(content == "", f"streamed content {content!r}")
    check(usage is not None and usage.completion_tokens_details.reasoning_tokens
          == usage.completion_tokens, f"streamed usage: {usage}")
    print("reasoning_check: ok")


if __name__ == "__main__":
    main()
