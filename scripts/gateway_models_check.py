#!/usr/bin/env python3
"""Lists a gateway's models with the official `openai` Python client (`client.models.list()`)
and prints them as JSON lines `{"id", "parent", "root"}`, for a test to compare.

Usage: gateway_models_check.py BASE_URL API_KEY   (BASE_URL like http://127.0.0.1:8080/v1)
"""
import json
import sys

import openai


def main() -> int:
    base_url, key = sys.argv[1], sys.argv[2]
    client = openai.OpenAI(base_url=base_url, api_key=key, timeout=30, max_retries=0)
    for model in client.models.list():
        # `parent` and `root` are vLLM's extra fields: the client keeps them as extras.
        extra = model.model_dump()
        print(json.dumps({"id": model.id, "parent": extra.get("parent"), "root": extra.get("root")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
