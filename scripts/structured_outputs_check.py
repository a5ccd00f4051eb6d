#!/usr/bin/env python3
"""Drives a tokenscale engine's structured outputs and tool calling with the official `openai`
client and checks every output with `jsonschema`: json_schema and json_object replies to 20
prompts at temperature 0 and 1 parse and validate; guided_choice and guided_regex replies are
in their language; tool_choice "required" and a named function always give a call whose
arguments validate; streamed tool-call deltas add up to the non-streamed call; a conversation
with a tool result goes back through the template; unimplemented fields get a 400 naming them.
Exits non-zero on the first failure, printing what failed.

Usage: structured_outputs_check.py BASE_URL MODEL   (BASE_URL like http://127.0.0.1:8000/v1)
"""
import json
import re
import sys
from concurrent.futures import ThreadPoolExecutor

import jsonschema
import openai

# The script's own folder is on sys.path when run as a script.
from tool_calls_check import calls_from_stream

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 40},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "role": {"enum": ["engineer", "teacher", "artist", "doctor"]},
        "skills": {"type": "array", "items": {"type": "string", "maxLength": 24}, "maxItems": 4},
        "address": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "maxLength": 30},
                "country": {"type": "string", "maxLength": 30},
            },
            "required": ["city", "country"],
            "additionalProperties": False,
        },
    },
    "required": ["name", "age", "role", "skills", "address"],
    "additionalProperties": False,
}

SUBJECTS = [
    "a baker in Lyon", "a retired pilot", "a young violinist", "a nurse in Oslo",
    "a chess champion", "a farmer in Kenya", "a student of physics", "a painter in Kyoto",
    "a bus driver", "a marine biologist", "a street musician", "a software engineer in Lima",
    "a school teacher", "a surgeon in Boston", "a potter", "a mountain guide", "a librarian",
    "a chef in Naples", "a firefighter", "an astronomer",
]
assert len(SUBJECTS) == 20

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "maxLength": 40},
                "unit": {"enum": ["celsius", "fahrenheit"]},
            },
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}
TIME = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "Current time in a timezone",
        "parameters": {
            "type": "object",
            "properties": {"timezone": {"type": "string", "maxLength": 40}},
            "required": ["timezone"],
        },
    },
}
TOOLS = [WEATHER, TIME]
SCHEMAS = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def chat(client, model, **kw):
    return client.chat.completions.create(model=model, max_tokens=kw.pop("max_tokens", 200), **kw)


def json_replies(client, model, response_format, validate, max_cut=0):
    """20 prompts at temperature 0 and 1, concurrently: every finished reply must parse and
    validate; at most `max_cut` may be cut by max_tokens (each is printed)."""
    jobs = [(s, t) for t in (0.0, 1.0) for s in SUBJECTS]
    # OpenAI's JSON-mode advice: say in the conversation which JSON is wanted.
    system = {"role": "system", "content": "Answer with a JSON object with the keys name, age and occupation."}

    def one(job):
        subject, temperature = job
        r = chat(client, model, temperature=temperature, seed=7, response_format=response_format,
                 messages=[system, {"role": "user", "content": f"Describe {subject} as a JSON object."}])
        c = r.choices[0]
        if c.finish_reason == "length":
            return None, f"{subject} at {temperature}: cut by max_tokens: {c.message.content[:120]!r}"
        check(c.finish_reason == "stop", f"{subject} at {temperature}: finish {c.finish_reason}: {c.message.content!r}")
        try:
            value = json.loads(c.message.content)
        except json.JSONDecodeError as e:
            raise AssertionError(f"{subject} at {temperature}: not JSON ({e}): {c.message.content!r}")
        validate(value)
        return c.message.content, None

    with ThreadPoolExecutor(max_workers=len(jobs)) as pool:
        results = list(pool.map(one, jobs))
    cut = [why for _, why in results if why]
    for why in cut:
        print(why)
    check(len(cut) <= max_cut, f"{len(cut)} replies cut by max_tokens, at most {max_cut} allowed")
    return [text for text, _ in results if text], len(jobs) - len(cut)


def structured(client, model):
    schema_format = {"type": "json_schema",
                     "json_schema": {"name": "person", "schema": PERSON, "strict": True}}
    replies, done = json_replies(client, model, schema_format, lambda v: jsonschema.validate(v, PERSON))
    print(f"json_schema: {done}/40 valid, e.g. {replies[0]}")
    # JSON mode bounds nothing: a 135M model at temperature 0 can repeat itself inside a string
    # until max_tokens, and at temperature 1 wander off in invented keys. The grammar still never
    # lets it write anything but JSON. The bound on cut replies (a tenth) guards against a
    # grammar that cannot close; which seeded replies run long moves with the logits' last
    # bits (2 of 40 with Q4_1 row by row, 3 interleaved, all at temperature 1).
    replies, done = json_replies(client, model, {"type": "json_object"},
                                 lambda v: check(isinstance(v, dict), f"not an object: {v!r}"), max_cut=4)
    print(f"json_object: {done}/40 finished, all objects, e.g. {replies[-1]}")

    choices = ["positive", "negative", "neutral"]
    for i in range(10):
        r = chat(client, model, temperature=1.0, seed=i, max_tokens=10,
                 messages=[{"role": "user", "content": "Is 'I love this film' positive or negative?"}],
                 extra_body={"guided_choice": choices})
        check(r.choices[0].message.content in choices, f"guided_choice gave {r.choices[0].message.content!r}")
    pattern = r"[A-Z]{2}-[0-9]{4}"
    for i in range(10):
        r = chat(client, model, temperature=1.0, seed=i, max_tokens=12,
                 messages=[{"role": "user", "content": "Invent a licence plate."}],
                 extra_body={"guided_regex": pattern})
        check(re.fullmatch(pattern, r.choices[0].message.content or ""), f"guided_regex gave {r.choices[0].message.content!r}")
    print("guided_choice and guided_regex: 10/10 each in the language")


def calls_of(message):
    return [(c.function.name, c.function.arguments) for c in (message.tool_calls or [])]


def tools(client, model):
    ask = [{"role": "user", "content": "What is the weather in Paris, and what time is it in Tokyo?"}]
    named_choice = {"type": "function", "function": {"name": "get_time"}}
    # Arguments may hold extra members where a schema allows them (get_time's does): room for them.
    jobs = [(choice, t, i) for choice in ("required", "named") for t in (0.0, 1.0) for i in range(5)]

    def one(job):
        choice, temperature, seed = job
        r = chat(client, model, messages=ask, tools=TOOLS, temperature=temperature, seed=seed, max_tokens=400,
                 tool_choice="required" if choice == "required" else named_choice)
        c = r.choices[0]
        what = f"{choice} at {temperature} seed {seed}"
        check(c.finish_reason == "tool_calls", f"{what}: finish {c.finish_reason}: {calls_of(c.message)}")
        check(c.message.tool_calls, f"{what}: no tool_calls")
        for call in c.message.tool_calls:
            check(call.id and call.type == "function", f"{what}: call shape {call}")
            check(choice == "required" or call.function.name == "get_time", f"{what}: called {call.function.name}")
            jsonschema.validate(json.loads(call.function.arguments), SCHEMAS[call.function.name])
        return calls_of(c.message)

    with ThreadPoolExecutor(max_workers=len(jobs)) as pool:
        results = list(pool.map(one, jobs))
    print(f"tool_choice required and named: 20/20 replies are calls with valid arguments, e.g. {results[0]}")

    plain = chat(client, model, messages=ask, tools=TOOLS, tool_choice="required", temperature=0)
    stream = chat(client, model, messages=ask, tools=TOOLS, tool_choice="required", temperature=0,
                  stream=True)
    finish, streamed = calls_from_stream(stream, check)
    check(streamed == calls_of(plain.choices[0].message), f"stream {streamed} != {calls_of(plain.choices[0].message)}")
    check(finish == "tool_calls", f"stream finish {finish}")
    print(f"streamed tool-call deltas add up to the plain call: {streamed}")

    one = chat(client, model, messages=ask, tools=TOOLS, tool_choice="required",
               parallel_tool_calls=False, temperature=1.0, seed=3)
    check(len(one.choices[0].message.tool_calls or []) == 1, "parallel_tool_calls=false gave several calls")

    call = plain.choices[0].message.tool_calls[0]
    history = ask + [
        {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
        {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"result": "sunny, 21 C"})},
    ]
    answer = chat(client, model, messages=history, tools=TOOLS, temperature=0, max_tokens=40)
    check(answer.usage.prompt_tokens > plain.usage.prompt_tokens, "the tool result did not reach the prompt")
    check(answer.choices[0].finish_reason in ("stop", "length", "tool_calls"), answer.choices[0].finish_reason)
    auto = chat(client, model, messages=ask, tools=TOOLS, temperature=0, max_tokens=60)
    check(auto.choices[0].message.content or auto.choices[0].message.tool_calls, "auto: empty message")
    print("a conversation with a tool result round-trips; auto answers")


def refusals(client, model):
    cases = [
        ({"logit_bias": {"11": 500}}, "logit_bias"),
        ({"frobnicate": True}, "frobnicate"),
        ({"guided_json": {"type": "array", "uniqueItems": True}}, "guided_json"),
        ({"guided_choice": ["a"], "guided_regex": "b"}, "guided_choice"),
    ]
    for extra, param in cases:
        try:
            chat(client, model, messages=[{"role": "user", "content": "hi"}], max_tokens=4, extra_body=extra)
            raise AssertionError(f"{extra} was accepted")
        except openai.BadRequestError as e:
            body = e.body if isinstance(e.body, dict) else {}
            got = body.get("param") or (body.get("error") or {}).get("param")
            check(got == param, f"{extra}: param {got!r}, want {param!r} ({e})")
    ok = chat(client, model, messages=[{"role": "user", "content": "hi"}], max_tokens=2,
              store=False, metadata={"k": "v"}, user="u1")
    check(ok.choices, "accepted-and-ignored fields failed")
    print("unimplemented fields: 400 naming each; store/metadata/user accepted")


def main() -> int:
    base_url, model = sys.argv[1], sys.argv[2]
    client = openai.OpenAI(base_url=base_url, api_key="unused", timeout=300, max_retries=0)
    structured(client, model)
    tools(client, model)
    refusals(client, model)
    print("structured outputs ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
