#!/usr/bin/env python3
"""Checks through the official `openai` client that a tokenscale engine's tool calls are whole
(issue 39): with tool_choice "required" or a named function, over 30 seeds at temperature 1 and
max_tokens budgets from too small for one call to ample, every reply is either exactly one call
whose arguments parse and validate (finish_reason "tool_calls") or, cut by max_tokens, no call
at all (finish_reason "length"): never a second call, never an argument string that does not
parse. Streamed replies add up to the same; a cut stream sends no tool-call delta. With
parallel_tool_calls=true every call returned parses, cut or not.
Exits non-zero on the first failure, printing what failed.

Usage: tool_calls_check.py BASE_URL MODEL   (BASE_URL like http://127.0.0.1:8000/v1)
"""
import json
import sys
from concurrent.futures import ThreadPoolExecutor

import openai

# The reproduction: `add` named, max_tokens 60.
ADD = {
    "type": "function",
    "function": {
        "name": "add",
        "description": "Add two integers",
        "parameters": {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
            "additionalProperties": False,
        },
    },
}
NEGATE = {
    "type": "function",
    "function": {
        "name": "negate",
        "description": "The negative of an integer",
        "parameters": {
            "type": "object",
            "properties": {"x": {"type": "integer"}},
            "required": ["x"],
            "additionalProperties": False,
        },
    },
}
TOOLS = [ADD, NEGATE]
KEYS = {"add": {"a", "b"}, "negate": {"x"}}
ASK = [{"role": "user", "content": "What is 2 + 3? And what is -7 negated? Use the tools."}]
NAMED = {"type": "function", "function": {"name": "add"}}
SEEDS = range(30)
# Too small for one call (8), about one call (16, 24), room for more than one (60, 120).
BUDGETS = [8, 16, 24, 60, 120]


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def valid_call(name, arguments, what):
    """The call's arguments parse and have exactly its function's integer parameters."""
    try:
        args = json.loads(arguments)
    except json.JSONDecodeError as e:
        raise AssertionError(f"{what}: {name} has arguments that do not parse: {arguments!r} ({e})")
    check(name in KEYS, f"{what}: called {name!r}")
    check(isinstance(args, dict) and set(args) == KEYS[name], f"{what}: {name}({arguments})")
    check(all(isinstance(v, int) for v in args.values()), f"{what}: {name}({arguments})")


def plain(client, model, choice, seed, budget, parallel):
    """(finish_reason, [(name, arguments)]) of one non-streamed reply."""
    extra = {} if parallel is None else {"parallel_tool_calls": parallel}
    r = client.chat.completions.create(model=model, messages=ASK, tools=TOOLS, tool_choice=choice,
                                       temperature=1.0, seed=seed, max_tokens=budget, **extra)
    c = r.choices[0]
    calls = [(t.function.name, t.function.arguments) for t in c.message.tool_calls or []]
    return c.finish_reason, calls


def streamed(client, model, choice, seed, budget, parallel):
    """(finish_reason, [(name, arguments)]) rebuilt from the deltas of one streamed reply."""
    extra = {} if parallel is None else {"parallel_tool_calls": parallel}
    stream = client.chat.completions.create(model=model, messages=ASK, tools=TOOLS, tool_choice=choice,
                                            temperature=1.0, seed=seed, max_tokens=budget, stream=True,
                                            **extra)
    return calls_from_stream(stream, check)


def calls_from_stream(stream, check):
    """(finish_reason, [(name, arguments)]) rebuilt from a streamed chat reply's tool-call
    deltas, as a client does; `check` fails the run when a call comes without an id. Shared with
    structured_outputs_check.py."""
    built, finish = {}, None
    for chunk in stream:
        for c in chunk.choices:
            finish = c.finish_reason or finish
            for d in c.delta.tool_calls or []:
                entry = built.setdefault(d.index, {"id": None, "name": None, "arguments": ""})
                entry["id"] = d.id or entry["id"]
                if d.function and d.function.name:
                    entry["name"] = d.function.name
                if d.function and d.function.arguments:
                    entry["arguments"] += d.function.arguments
    check(all(e["id"] for e in built.values()), f"a streamed call has no id: {built}")
    return finish, [(e["name"], e["arguments"]) for _, e in sorted(built.items())]


def forced(client, model):
    """Named and required choices: one whole call or none, streamed and not."""
    jobs = [(label, choice, seed, BUDGETS[seed % len(BUDGETS)], run)
            for label, choice in (("named", NAMED), ("required", "required"))
            for seed in SEEDS
            for run in (plain, streamed)]

    def one(job):
        label, choice, seed, budget, run = job
        what = f"{label} seed {seed} max_tokens {budget} {run.__name__}"
        finish, calls = run(client, model, choice, seed, budget, None)
        if finish == "tool_calls":
            check(len(calls) == 1, f"{what}: {len(calls)} calls: {calls}")
            valid_call(*calls[0], what)
            check(label == "required" or calls[0][0] == "add", f"{what}: named add, got {calls}")
        else:
            check(finish == "length", f"{what}: finish {finish}: {calls}")
            check(calls == [], f"{what}: a cut reply returned calls: {calls}")
        return (label, seed, budget, run.__name__), (finish, calls)

    with ThreadPoolExecutor(max_workers=16) as pool:
        results = dict(pool.map(one, jobs))
    finishes = [f for f, _ in results.values()]
    check("length" in finishes, "no reply was cut: the budgets do not test the cut")
    check("tool_calls" in finishes, "no reply completed a call")
    # Seeded sampling does not depend on the batch: a stream is the plain reply in pieces.
    for (label, seed, budget, run), got in results.items():
        if run == "plain":
            other = results[(label, seed, budget, "streamed")]
            check(got == other, f"{label} seed {seed} max_tokens {budget}: plain {got}, streamed {other}")
    whole = finishes.count("tool_calls")
    print(f"named and required: {len(jobs)} replies over {len(SEEDS)} seeds, {whole} with one whole call, "
          f"{len(jobs) - whole} cut with none; streamed equals plain; e.g. {results[('named', 3, 60, 'plain')]}")


def parallel(client, model):
    """parallel_tool_calls=true: every call returned parses, also when the reply is cut."""
    jobs = [(seed, BUDGETS[seed % len(BUDGETS)]) for seed in SEEDS]

    def one(job):
        seed, budget = job
        what = f"parallel seed {seed} max_tokens {budget}"
        finish, calls = plain(client, model, "required", seed, budget, True)
        check(finish in ("tool_calls", "length"), f"{what}: finish {finish}")
        check(finish == "length" or calls, f"{what}: finished without a call")
        for call in calls:
            valid_call(*call, what)
        return len(calls)

    with ThreadPoolExecutor(max_workers=16) as pool:
        counts = list(pool.map(one, jobs))
    print(f"parallel_tool_calls=true: {sum(counts)} calls over {len(jobs)} replies, every one parses "
          f"(most in one reply: {max(counts)})")


def main() -> int:
    base_url, model = sys.argv[1], sys.argv[2]
    client = openai.OpenAI(base_url=base_url, api_key="unused", timeout=300, max_retries=0)
    forced(client, model)
    parallel(client, model)
    print("tool calls whole ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
