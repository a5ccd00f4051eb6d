#!/usr/bin/env python3
"""Runs a Batch API job through a tokenscale gateway with the official `openai` Python client:
uploads 200 chat lines plus one the engine refuses (`"temperature": "hot"`), creates the
batch, polls it to `completed`, and checks the output and error files line by line (OpenAI's
line format, each custom_id once, 200s in the output, the one 400 in the error file). Also
lists batches page by page (`limit=1`, with a second, cancelled batch on the list), lists,
reads and deletes files. Exits non-zero on any mismatch.

Usage: batch_sdk_check.py BASE_URL MODEL   (BASE_URL like http://127.0.0.1:8080/v1)
Prints the timings, then a last line `batch sdk ok: {json}` with the ids it made.
"""
import json
import os
import sys
import tempfile
import time

import openai

LINES = 200
BAD_ID = "bad-temperature"
POLL_TIMEOUT_S = 300
TERMINAL = {"completed", "failed", "expired", "cancelled"}

TOPICS = ["the sea", "a mountain", "bread", "a library", "rain", "a clock", "the moon",
          "a garden", "snow", "a train"]
ASKS = ["Write one line about {}.", "Name a colour that fits {}.", "Describe {} in three words.",
        "What sound does {} make?", "Give a title for a story about {}."]


def input_lines(model: str) -> list[dict]:
    """200 varied chat lines, then one whose body the engine refuses (400)."""
    lines = []
    for i in range(LINES):
        prompt = ASKS[i % len(ASKS)].format(TOPICS[(i // len(ASKS)) % len(TOPICS)]) + f" ({i})"
        lines.append({
            "custom_id": f"line-{i:03}",
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": {"model": model, "messages": [{"role": "user", "content": prompt}],
                     "max_tokens": 8, "temperature": 0},
        })
    lines.append({
        "custom_id": BAD_ID,
        "method": "POST",
        "url": "/v1/chat/completions",
        "body": {"model": model, "messages": [{"role": "user", "content": "Hi"}],
                 "max_tokens": 8, "temperature": "hot"},
    })
    return lines


def check(condition: bool, message: str) -> None:
    if not condition:
        raise AssertionError(message)


def wait_terminal(client: openai.OpenAI, batch_id: str) -> tuple[object, float]:
    """Polls the batch until it ends; returns it and the seconds it took."""
    start = time.monotonic()
    last = None
    while True:
        batch = client.batches.retrieve(batch_id)
        counts = batch.request_counts
        seen = (batch.status, counts.completed if counts else None, counts.failed if counts else None)
        if seen != last:
            done = f"{counts.completed}+{counts.failed}/{counts.total}" if counts else "-"
            print(f"  {time.monotonic() - start:6.1f}s {batch.status:<12} {done}", flush=True)
            last = seen
        if batch.status in TERMINAL:
            return batch, time.monotonic() - start
        check(time.monotonic() - start < POLL_TIMEOUT_S,
              f"batch {batch_id} still {batch.status} after {POLL_TIMEOUT_S}s")
        time.sleep(0.5)


def read_jsonl(client: openai.OpenAI, file_id: str) -> list[dict]:
    text = client.files.content(file_id).text
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def check_output(lines: list[dict]) -> None:
    """Every good line once, each a 200 with a whole chat completion, in OpenAI's format."""
    ids = [line["custom_id"] for line in lines]
    check(len(lines) == LINES, f"output file has {len(lines)} lines, expected {LINES}")
    check(sorted(ids) == [f"line-{i:03}" for i in range(LINES)],
          f"output custom_ids are not each good line once: {sorted(set(ids))[:5]}...")
    for line in lines:
        where = line["custom_id"]
        check(line["id"].startswith("batch_req"), f"{where}: id {line['id']!r}")
        check(line["error"] is None, f"{where}: error {line['error']}")
        response = line["response"]
        check(response["status_code"] == 200, f"{where}: status {response['status_code']}")
        check(isinstance(response.get("request_id"), str), f"{where}: no request_id")
        body = response["body"]
        check(body.get("object") == "chat.completion", f"{where}: object {body.get('object')!r}")
        choice = body["choices"][0]
        check(choice["message"]["role"] == "assistant", f"{where}: {choice['message']}")
        check(isinstance(choice["message"]["content"], str), f"{where}: {choice['message']}")
        check(choice["finish_reason"] in ("stop", "length"), f"{where}: {choice['finish_reason']}")
        usage = body["usage"]
        check(usage["prompt_tokens"] >= 1 and 1 <= usage["completion_tokens"] <= 8,
              f"{where}: usage {usage}")


def check_errors(lines: list[dict]) -> None:
    """Only the bad line, answered 400 by the engine."""
    check([line["custom_id"] for line in lines] == [BAD_ID],
          f"error file custom_ids {[line['custom_id'] for line in lines]}, expected [{BAD_ID!r}]")
    response = lines[0]["response"]
    check(response is not None and response["status_code"] == 400,
          f"the bad line's answer: {lines[0]}")


def check_listing(client: openai.OpenAI, batch_id: str, input_id: str) -> None:
    """The batch list pages one at a time and holds this batch; the files are listed."""
    # A second batch, cancelled at once, so that the list has more than one page.
    other = client.batches.create(input_file_id=input_id, endpoint="/v1/chat/completions",
                                  completion_window="24h", metadata={"check": "cancel"})
    cancelled = client.batches.cancel(other.id)
    check(cancelled.status in ("cancelling", "cancelled"), f"cancel answered {cancelled.status}")
    ended, _ = wait_terminal(client, other.id)
    check(ended.status == "cancelled", f"the cancelled batch ended {ended.status}")
    first = client.batches.list(limit=1)
    check(len(first.data) == 1 and first.has_more, f"first page of one: {first}")
    paged = [b.id for b in client.batches.list(limit=1)]
    check(batch_id in paged and other.id in paged, f"{batch_id}, {other.id} not in {paged}")
    check(len(paged) == len(set(paged)), f"a batch listed twice: {paged}")

    files = {f.id: f for f in client.files.list()}
    check(input_id in files, f"input {input_id} not in files.list()")
    meta = client.files.retrieve(input_id)
    check(meta.purpose == "batch" and meta.bytes > 0, f"files.retrieve: {meta}")


def main() -> int:
    base_url, model = sys.argv[1], sys.argv[2]
    client = openai.OpenAI(base_url=base_url, api_key="unused", timeout=120, max_retries=0)

    lines = input_lines(model)
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        f.writelines(json.dumps(line) + "\n" for line in lines)
        path = f.name
    try:
        with open(path, "rb") as handle:
            upload = client.files.create(file=handle, purpose="batch")
    finally:
        os.unlink(path)
    check(upload.purpose == "batch", f"upload: {upload}")

    batch = client.batches.create(input_file_id=upload.id, endpoint="/v1/chat/completions",
                                  completion_window="24h", metadata={"check": "batch_sdk"})
    check(batch.metadata == {"check": "batch_sdk"}, f"metadata: {batch.metadata}")
    print(f"batch {batch.id}: {len(lines)} lines", flush=True)
    batch, seconds = wait_terminal(client, batch.id)
    counts = batch.request_counts
    check(batch.status == "completed", f"batch ended {batch.status}: {batch.errors}")
    check((counts.total, counts.completed, counts.failed) == (LINES + 1, LINES, 1),
          f"request_counts {counts}, expected total {LINES + 1}, completed {LINES}, failed 1")
    print(f"completed in {seconds:.1f}s: {len(lines) / seconds:.1f} lines/s, "
          f"{batch.usage.output_tokens / seconds:.1f} output tokens/s", flush=True)

    check_output(read_jsonl(client, batch.output_file_id))
    check_errors(read_jsonl(client, batch.error_file_id))
    check_listing(client, batch.id, upload.id)

    deleted = client.files.delete(upload.id)
    check(deleted.deleted, f"delete: {deleted}")
    check(upload.id not in {f.id for f in client.files.list()}, "a deleted file is still listed")
    try:
        client.files.retrieve(upload.id)
        raise AssertionError("a deleted file is still readable")
    except openai.NotFoundError:
        pass

    summary = {"batch_id": batch.id, "output_file_id": batch.output_file_id,
               "error_file_id": batch.error_file_id, "seconds": round(seconds, 2)}
    print(f"batch sdk ok: {json.dumps(summary)}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (AssertionError, openai.OpenAIError) as error:
        print(f"batch sdk check FAILED: {type(error).__name__}: {error}", file=sys.stderr)
        sys.exit(1)
