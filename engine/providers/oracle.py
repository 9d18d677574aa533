"""The `oracle` route: answers each prompt with its own reference code, in-process, no network."""

from __future__ import annotations

import json
import time

import httpx

from engine.release import Release
from engine.rundir.storage import canonical_json, sha256_hex


class OracleTransport(httpx.AsyncBaseTransport):
    """An OpenAI-compatible chat endpoint that knows the release's reference answers.

    It looks the prompt up by its messages alone, so it also proves that nothing but the
    messages is needed to identify the task.
    """

    def __init__(self, release: Release) -> None:
        self._answers = {
            sha256_hex(canonical_json(p.request_messages())): str(
                p.target_metadata.get("reference_code", "")
            )
            for p in release.prompts
        }

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(await request.aread())
        key = sha256_hex(canonical_json(body.get("messages")))
        answer = self._answers.get(key)
        if answer is None:
            return httpx.Response(
                404,
                json={"error": {"message": "unknown prompt", "type": "not_found", "code": None}},
            )
        completion_tokens = max(1, len(answer) // 4)
        prompt_tokens = max(1, len(json.dumps(body.get("messages"))) // 4)
        return httpx.Response(
            200,
            headers={"x-request-id": f"oracle-{key[:16]}"},
            json={
                "id": f"oracle-{key[:16]}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": body.get("model"),
                "choices": [
                    {
                        "index": 0,
                        "finish_reason": "stop",
                        "message": {"role": "assistant", "content": answer},
                    }
                ],
                "usage": {
                    "prompt_tokens": prompt_tokens,
                    "completion_tokens": completion_tokens,
                    "total_tokens": prompt_tokens + completion_tokens,
                },
            },
        )
