"""A loopback OpenAI Files and Batches API, scripted per prompt, that counts what it creates.

It implements `POST /v1/files` (multipart, purpose=batch), `POST /v1/batches`,
`GET /v1/batches` (newest first, `limit` and `after`), `GET /v1/batches/{id}` and
`GET /v1/files/{id}/content`. A batch stays `in_progress` for a number of polls (or while
`hold` is true), then ends with the script's final status; its output and error files
answer each input line with the prompt's reference code (prompts are recognised by their
messages), or with the error the script gives that prompt.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from email.parser import BytesParser
from email.policy import default as default_policy
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.fakes.base import (
    FakeHandler,
    LoopbackServer,
    messages_key,
    openai_completion,
    release_answers,
)


@dataclass
class BatchScript:
    """What the server does.

    `line_errors` maps a prompt ID to "400" (an error-file line with a 400 response body),
    "500" (same with 500), "error" (an error-file line with `error` set and no response) or
    "missing" (in neither file). `create_faults` is consumed one per `POST /batches`:
    "500" answers 500 without creating, "500-created" creates the batch then answers 500
    (the answer is lost), "400" refuses. `poll_faults` are statuses answered to batch polls
    before the normal answers.
    """

    answers: dict[str, tuple[str, str]] = field(default_factory=dict)  # key -> (pid, code)
    polls_to_complete: int = 2
    final_status: str = "completed"
    line_errors: dict[str, str] = field(default_factory=dict)
    create_faults: list[str] = field(default_factory=list)
    poll_faults: list[int] = field(default_factory=list)
    key: str | None = None
    model_suffix: str = "-2025-01-01"

    @classmethod
    def for_release(cls, release: Any, **kw: Any) -> BatchScript:
        return cls(answers=release_answers(release), **kw)


@dataclass
class SeenRequest:
    method: str
    path: str
    headers: dict[str, str]
    at: float


class BatchServer(LoopbackServer):
    """Start with `with BatchServer(script) as srv:`; `srv.base_url` is the /v1 URL."""

    def __init__(self, script: BatchScript) -> None:
        self.script = script
        self.files: dict[str, dict[str, Any]] = {}
        self.batches: dict[str, dict[str, Any]] = {}
        self.polls: dict[str, int] = {}
        self.batch_prompts: dict[str, list[str]] = {}
        self.create_posts = 0
        self.uploads = 0
        self.hold = False  # while true, no batch completes
        self.seen: list[SeenRequest] = []
        self._lock = threading.RLock()
        self._n = 0
        super().__init__()

    @property
    def created(self) -> int:
        """Batches that exist on the server (however their create answer fared)."""
        return len(self.batches)

    def _id(self, prefix: str) -> str:
        with self._lock:
            self._n += 1
            return f"{prefix}_{self._n:04d}"

    # -- the model behind the endpoints ------------------------------------------------------------
    def add_file(self, data: bytes, purpose: str, filename: str) -> dict[str, Any]:
        file_id = self._id("file")
        obj = {
            "id": file_id,
            "object": "file",
            "bytes": len(data),
            "created_at": int(time.time()),
            "filename": filename,
            "purpose": purpose,
        }
        self.files[file_id] = dict(obj, data=data)
        return obj

    def create_batch(self, input_file_id: str, metadata: dict[str, Any]) -> dict[str, Any]:
        batch_id = self._id("batch")
        lines = [json.loads(x) for x in self.files[input_file_id]["data"].splitlines() if x.strip()]
        batch = {
            "id": batch_id,
            "object": "batch",
            "endpoint": "/v1/chat/completions",
            "errors": None,
            "input_file_id": input_file_id,
            "completion_window": "24h",
            "status": "validating",
            "output_file_id": None,
            "error_file_id": None,
            "created_at": int(time.time()),
            "in_progress_at": None,
            "expires_at": None,
            "finalizing_at": None,
            "completed_at": None,
            "failed_at": None,
            "expired_at": None,
            "cancelling_at": None,
            "cancelled_at": None,
            "request_counts": {"total": len(lines), "completed": 0, "failed": 0},
            "metadata": metadata,
        }
        with self._lock:
            self.batches[batch_id] = batch
            self.polls[batch_id] = 0
            self.batch_prompts[batch_id] = [str(x.get("custom_id")) for x in lines]
        return batch

    def _poll(self, batch_id: str) -> dict[str, Any]:
        with self._lock:
            batch = self.batches[batch_id]
            if batch["status"] in ("completed", "failed", "expired", "cancelled"):
                return batch
            self.polls[batch_id] += 1
            n = self.polls[batch_id]
            total = batch["request_counts"]["total"]
            if self.hold or n < self.script.polls_to_complete:
                batch["status"] = "in_progress"
                batch["in_progress_at"] = batch["in_progress_at"] or time.time()
                done = min(total, total * n // max(1, self.script.polls_to_complete))
                batch["request_counts"]["completed"] = done
                return batch
            self._finish(batch)
            return batch

    def _completion(self, body: dict[str, Any], code: str, n: int) -> dict[str, Any]:
        return openai_completion(
            f"chatcmpl-{n}",
            str(body.get("model")) + self.script.model_suffix,
            f"```python\n{code}```",
            usage=(11, 22),
        )

    def _finish(self, batch: dict[str, Any]) -> None:
        status = self.script.final_status
        now = time.time()
        if status == "failed":
            batch.update(
                status="failed",
                failed_at=now,
                errors={
                    "object": "list",
                    "data": [
                        {
                            "code": "invalid_request",
                            "message": "the input file is not valid",
                            "line": 1,
                        }
                    ],
                },
            )
            return
        lines = [
            json.loads(x)
            for x in self.files[batch["input_file_id"]]["data"].splitlines()
            if x.strip()
        ]
        output, errors = [], []
        for n, line in enumerate(lines, start=1):
            body = line.get("body") or {}
            pid, code = self.script.answers.get(messages_key(body.get("messages")), (None, ""))
            custom_id = line.get("custom_id")
            rid = f"batch_req_{batch['id']}_{n}"
            kind = self.script.line_errors.get(str(pid), "ok")
            if status == "expired" and kind == "ok" and n > len(lines) // 2:
                kind = "expired"
            if pid is None or line.get("url") != "/v1/chat/completions":
                errors.append(
                    {
                        "id": rid,
                        "custom_id": custom_id,
                        "response": {
                            "status_code": 404,
                            "request_id": f"req_{n}",
                            "body": {"error": {"message": "unknown prompt", "type": "not_found"}},
                        },
                        "error": None,
                    }
                )
            elif kind == "ok":
                output.append(
                    {
                        "id": rid,
                        "custom_id": custom_id,
                        "response": {
                            "status_code": 200,
                            "request_id": f"req_{n}",
                            "body": self._completion(body, code, n),
                        },
                        "error": None,
                    }
                )
            elif kind in ("400", "500"):
                errors.append(
                    {
                        "id": rid,
                        "custom_id": custom_id,
                        "response": {
                            "status_code": int(kind),
                            "request_id": f"req_{n}",
                            "body": {
                                "error": {
                                    "message": f"Unsupported value: injected {kind}",
                                    "type": "invalid_request_error",
                                    "code": "unsupported_value",
                                }
                            },
                        },
                        "error": None,
                    }
                )
            elif kind == "error":
                errors.append(
                    {
                        "id": rid,
                        "custom_id": custom_id,
                        "response": None,
                        "error": {"code": "batch_failed_line", "message": "injected line error"},
                    }
                )
            elif kind == "expired":
                errors.append(
                    {
                        "id": rid,
                        "custom_id": custom_id,
                        "response": None,
                        "error": {
                            "code": "batch_expired",
                            "message": "This request could not be executed "
                            "before the completion window expired.",
                        },
                    }
                )
            # "missing": in neither file
        if output:
            batch["output_file_id"] = self.add_file(
                b"".join(json.dumps(x).encode() + b"\n" for x in output),
                "batch_output",
                "batch_output.jsonl",
            )["id"]
        if errors:
            batch["error_file_id"] = self.add_file(
                b"".join(json.dumps(x).encode() + b"\n" for x in errors),
                "batch_output",
                "batch_errors.jsonl",
            )["id"]
        batch["request_counts"] = {
            "total": len(lines),
            "completed": len(output),
            "failed": len(errors),
        }
        batch["status"] = status
        batch[f"{status}_at"] = now

    # -- HTTP ----------------------------------------------------------------------------------
    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(FakeHandler):
            def _authorised(self) -> bool:
                with server._lock:
                    server.seen.append(
                        SeenRequest(self.command, self.path, self.header_dict(), time.time())
                    )
                if not self.bearer_is(server.script.key):
                    self.refuse_key()
                    return False
                return True

            def do_POST(self) -> None:
                body = self.read_body()
                if not self._authorised():
                    return
                path = urlsplit(self.path).path
                if path == "/v1/files":
                    ctype = self.headers.get("Content-Type", "")
                    msg = BytesParser(policy=default_policy).parsebytes(
                        b"Content-Type: " + ctype.encode() + b"\r\nMIME-Version: 1.0\r\n\r\n" + body
                    )
                    fields: dict[str, tuple[str | None, bytes]] = {}
                    for part in msg.iter_parts():
                        name = part.get_param("name", header="content-disposition")
                        payload = part.get_payload(decode=True)
                        fields[str(name)] = (
                            part.get_filename(),
                            payload if isinstance(payload, bytes) else b"",
                        )
                    if "file" not in fields or fields.get("purpose", (None, b""))[1] != b"batch":
                        self.send_json(400, {"error": {"message": "need file and purpose=batch"}})
                        return
                    with server._lock:
                        server.uploads += 1
                    filename, data = fields["file"]
                    self.send_json(200, server.add_file(data, "batch", filename or "upload"))
                elif path == "/v1/batches":
                    payload = json.loads(body)
                    with server._lock:
                        server.create_posts += 1
                        fault = (
                            server.script.create_faults.pop(0)
                            if server.script.create_faults
                            else None
                        )
                    if fault == "400":
                        self.send_json(
                            400,
                            {
                                "error": {
                                    "message": "injected refusal",
                                    "type": "invalid_request_error",
                                }
                            },
                        )
                        return
                    if fault == "500":
                        self.send_json(500, {"error": {"message": "injected server error"}})
                        return
                    if (
                        payload.get("input_file_id") not in server.files
                        or payload.get("endpoint") != "/v1/chat/completions"
                        or payload.get("completion_window") != "24h"
                    ):
                        self.send_json(400, {"error": {"message": "bad batch request"}})
                        return
                    batch = server.create_batch(
                        payload["input_file_id"], payload.get("metadata") or {}
                    )
                    if fault == "500-created":
                        self.send_json(500, {"error": {"message": "injected: answer lost"}})
                        return
                    self.send_json(200, batch)
                else:
                    self.send_json(404, {"error": {"message": f"no route {path}"}})

            def do_GET(self) -> None:
                if not self._authorised():
                    return
                parts = urlsplit(self.path)
                path, query = parts.path, parse_qs(parts.query)
                if path == "/v1/batches":
                    limit = int(query.get("limit", ["20"])[0])
                    after = query.get("after", [None])[0]
                    with server._lock:
                        items = list(reversed(server.batches.values()))
                    if after is not None:
                        ids = [b["id"] for b in items]
                        items = items[ids.index(after) + 1 :] if after in ids else []
                    page = items[:limit]
                    self.send_json(
                        200,
                        {
                            "object": "list",
                            "data": page,
                            "first_id": page[0]["id"] if page else None,
                            "last_id": page[-1]["id"] if page else None,
                            "has_more": len(items) > limit,
                        },
                    )
                elif path.startswith("/v1/batches/"):
                    batch_id = path.rsplit("/", 1)[1]
                    with server._lock:
                        fault = (
                            server.script.poll_faults.pop(0) if server.script.poll_faults else None
                        )
                    if fault is not None:
                        self.send_json(fault, {"error": {"message": f"injected {fault}"}})
                    elif batch_id not in server.batches:
                        self.send_json(404, {"error": {"message": f"no batch {batch_id}"}})
                    else:
                        self.send_json(200, server._poll(batch_id))
                elif path.startswith("/v1/files/") and path.endswith("/content"):
                    file_id = path.split("/")[3]
                    if file_id not in server.files:
                        self.send_json(404, {"error": {"message": f"no file {file_id}"}})
                    else:
                        self.send_bytes(
                            200, server.files[file_id]["data"], "application/octet-stream"
                        )
                else:
                    self.send_json(404, {"error": {"message": f"no route {path}"}})

        return Handler
