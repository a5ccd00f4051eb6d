#!/usr/bin/env python3
"""Drives a tokenscale engine with the official `openai` Python client: a completion, a
streamed completion, a chat and a streamed chat (with usage). Exits non-zero on any mismatch.

Usage: openai_client_check.py BASE_URL MODEL   (BASE_URL like http://127.0.0.1:8000/v1)
"""
import sys

import openai


def main() -> int:
    base_url, model = sys.argv[1], sys.argv[2]
    client = openai.OpenAI(base_url=base_url, api_key="unused", timeout=120, max_retries=0)

    models = [m.id for m in client.models.list().data]
    assert model in models, f"{model} not in {models}"

    prompt = "The capital of France is"
    plain = client.completions.create(model=model, prompt=prompt, max_tokens=8, temperature=0)
    text = plain.choices[0].text
    assert text, "empty completion"
    assert plain.choices[0].finish_reason in ("stop", "length"), plain.choices[0].finish_reason
    assert plain.usage.completion_tokens >= 1 and plain.usage.prompt_tokens >= 1, plain.usage

    streamed = client.completions.create(
        model=model, prompt=prompt, max_tokens=8, temperature=0, stream=True,
        stream_options={"include_usage": True},
    )
    pieces, usage = [], None
    for chunk in streamed:
        pieces.extend(c.text for c in chunk.choices)
        usage = chunk.usage or usage
    assert "".join(pieces) == text, f"stream {''.join(pieces)!r} != {text!r}"
    assert usage is not None and usage.completion_tokens == plain.usage.completion_tokens, usage

    messages = [{"role": "user", "content": "What is the capital of France?"}]
    chat = client.chat.completions.create(model=model, messages=messages, max_tokens=12, temperature=0)
    reply = chat.choices[0].message.content
    assert chat.choices[0].message.role == "assistant"
    assert reply, "empty chat reply"

    stream = client.chat.completions.create(
        model=model, messages=messages, max_tokens=12, temperature=0, stream=True,
        stream_options={"include_usage": True},
    )
    pieces, usage = [], None
    for chunk in stream:
        for c in chunk.choices:
            if c.delta.content:
                pieces.append(c.delta.content)
        usage = chunk.usage or usage
    assert "".join(pieces) == reply, f"chat stream {''.join(pieces)!r} != {reply!r}"
    assert usage is not None and usage.total_tokens == usage.prompt_tokens + usage.completion_tokens, usage

    try:
        client.completions.create(model="no-such-model", prompt=prompt, max_tokens=2)
        raise AssertionError("an unknown model was accepted")
    except openai.NotFoundError:
        pass

    print(f"openai client ok: completion {text!r}, chat {reply!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
