#!/usr/bin/env python3
"""Checks through the official `openai` client that a tokenscale engine's completions follow
OpenAI's and vLLM's definitions of `logit_bias`, `echo` and prompt logprobs (issue 39 item 5),
greedily (temperature 0) so every answer is deterministic:
- logit_bias -100 on the greedy first token changes the answer and that token never appears;
  +100 on a token makes every generated token that token (chat and completions);
- bad logit_bias inputs (a key that is no token id, an id outside the vocabulary, a value
  outside [-100, 100], more than 300 entries) are a 400 whose param is logit_bias;
- echo: the text starts with the prompt exactly (streamed: the prompt arrives first), and the
  usage counts no prompt token as completion;
- echo + logprobs: one entry per prompt token, the first null; scoring prompt + completion
  with echo and max_tokens 0 gives the logprobs the completion's tokens had when generated.
Exits non-zero on the first failure, printing what failed.

Usage: completions_check.py BASE_URL MODEL   (BASE_URL like http://127.0.0.1:8000/v1)
"""
import sys

import openai

PROMPT = "The capital of France is"
# A prompt of token ids: scoring it plus its completion reads exactly the generated tokens.
PROMPT_IDS = [504, 3575, 282, 4649, 314, 253]
TOKEN_IDS_HEADER = {"x-tokenscale-token-ids": "1"}
# Largest difference allowed between a token's logprob when scored in the prompt and when
# generated: the same forward over a different batch shape.
TOLERANCE = 1e-2


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def generated_ids(client, model, **kw):
    """Token ids of a greedy streamed completion (the engine's token-id chunks)."""
    stream = client.completions.create(model=model, temperature=0, stream=True,
                                       extra_headers=TOKEN_IDS_HEADER, **kw)
    ids = []
    for chunk in stream:
        ids.extend((chunk.model_extra or {}).get("tokenscale_token_ids") or [])
    return ids


def chat_ids(client, model, **kw):
    stream = client.chat.completions.create(
        model=model, temperature=0, stream=True, extra_headers=TOKEN_IDS_HEADER,
        messages=[{"role": "user", "content": PROMPT}], **kw)
    ids = []
    for chunk in stream:
        ids.extend((chunk.model_extra or {}).get("tokenscale_token_ids") or [])
    return ids


def logit_bias(client, model):
    for name, run in [
        ("completions", lambda **kw: generated_ids(client, model, prompt=PROMPT, max_tokens=8, **kw)),
        ("chat", lambda **kw: chat_ids(client, model, max_tokens=8, **kw)),
    ]:
        plain = run()
        check(plain, f"{name}: no tokens")
        banned = run(logit_bias={str(plain[0]): -100})
        check(banned != plain, f"{name}: banning {plain[0]} changed nothing")
        check(plain[0] not in banned, f"{name}: banned token {plain[0]} in {banned}")
        forced = run(logit_bias={"28": 100})
        check(forced == [28] * 8, f"{name}: +100 on 28 gave {forced}")
    print("logit_bias bans and forces tokens")


def refusals(client, model):
    cases = [{"one": 1}, {"49152": 1}, {"1": 101}, {"1": -100.5},
             {str(i): 1 for i in range(301)}]
    for bias in cases:
        try:
            client.completions.create(model=model, prompt="hi", max_tokens=2, logit_bias=bias)
            raise AssertionError(f"logit_bias {bias} was accepted")
        except openai.BadRequestError as e:
            body = e.body if isinstance(e.body, dict) else {}
            got = body.get("param") or (body.get("error") or {}).get("param")
            check(got == "logit_bias", f"{bias}: param {got!r} ({e})")
    print("bad logit_bias inputs are refused by name")


def echo(client, model):
    plain = client.completions.create(model=model, prompt=PROMPT, max_tokens=8, temperature=0)
    echoed = client.completions.create(model=model, prompt=PROMPT, max_tokens=8, temperature=0,
                                       echo=True)
    text = echoed.choices[0].text
    check(text.startswith(PROMPT), f"echo text {text!r} does not start with the prompt")
    check(text == PROMPT + plain.choices[0].text, f"echo {text!r} vs {plain.choices[0].text!r}")
    check(echoed.usage.completion_tokens == plain.usage.completion_tokens,
          f"usage {echoed.usage} vs {plain.usage}")
    chunks = [c.choices[0].text for c in client.completions.create(
        model=model, prompt=PROMPT, max_tokens=8, temperature=0, echo=True, stream=True)
        if c.choices]
    check(chunks[0] == PROMPT, f"the stream began with {chunks[0]!r}")
    check("".join(chunks) == text, f"streamed {''.join(chunks)!r} vs {text!r}")
    print("echo returns the prompt first")


def prompt_logprobs(client, model):
    generated = client.completions.create(model=model, prompt=PROMPT_IDS, max_tokens=8,
                                          temperature=0, logprobs=2)
    ids = generated_ids(client, model, prompt=PROMPT_IDS, max_tokens=8)
    scored = client.completions.create(model=model, prompt=PROMPT_IDS + ids, max_tokens=0,
                                       echo=True, logprobs=2)
    choice = scored.choices[0]
    lp = choice.logprobs
    check(len(lp.token_logprobs) == len(PROMPT_IDS) + len(ids),
          f"{len(lp.token_logprobs)} entries for {len(PROMPT_IDS) + len(ids)} prompt tokens")
    check(lp.token_logprobs[0] is None and lp.top_logprobs[0] is None, "first entry not null")
    check(all(v is not None and v <= 0 for v in lp.token_logprobs[1:]), lp.token_logprobs)
    check(scored.usage.completion_tokens == 0, f"usage {scored.usage}")
    check(choice.finish_reason == "length", choice.finish_reason)
    decoded = generated.choices[0].logprobs.token_logprobs
    tail = lp.token_logprobs[len(PROMPT_IDS):]
    worst = max(abs(a - b) for a, b in zip(decoded, tail))
    check(worst < TOLERANCE, f"prompt {tail} vs decode {decoded}")
    check(lp.text_offset[0] == 0 and "".join(lp.tokens) == choice.text, "offsets or text")
    print(f"prompt logprobs agree with decoding (largest difference {worst:.2e})")


def main():
    base_url, model = sys.argv[1], sys.argv[2]
    client = openai.OpenAI(base_url=base_url, api_key="unused", max_retries=0, timeout=120)
    logit_bias(client, model)
    refusals(client, model)
    echo(client, model)
    prompt_logprobs(client, model)
    print("completions ok")


if __name__ == "__main__":
    main()
