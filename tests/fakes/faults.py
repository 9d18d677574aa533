"""A loopback provider that injects faults on a script, in three wire formats.

It speaks OpenAI-compatible chat completions (`POST .../chat/completions`), Anthropic
Messages (`POST .../v1/messages`) and Gemini generateContent
(`POST .../models/M:generateContent`), each with its own success and error shapes.
Each prompt (recognised by its messages) follows a list of behaviours, one per request it
receives; after the list runs out it answers normally. Every request seen is logged, so a
test can hold the run's attempt history against what the server actually received.
"""

from __future__ import annotations

import json
import random
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.fakes.base import (
    FakeHandler,
    LoopbackServer,
    anthropic_message,
    messages_key,
    openai_completion,
    release_answers,
)

__all__ = ["FaultScript", "FaultServer", "Seen", "messages_key", "original_messages"]


def original_messages(wire: str, body: dict[str, Any]) -> Any:
    """The release messages a request body was built from, whatever the wire format."""
    if wire == "anthropic":
        system = body.get("system")
        head = [{"role": "system", "content": system}] if system else []
        return head + list(body.get("messages") or [])
    if wire == "gemini":
        sys_parts = (body.get("systemInstruction") or {}).get("parts") or []
        head = (
            [{"role": "system", "content": "".join(p.get("text", "") for p in sys_parts)}]
            if sys_parts
            else []
        )
        return head + [
            {
                "role": "assistant" if c.get("role") == "model" else "user",
                "content": "".join(p.get("text", "") for p in c.get("parts", [])),
            }
            for c in body.get("contents") or []
        ]
    return body.get("messages")


@dataclass
class Seen:
    prompt_id: str | None
    body: dict[str, Any]
    headers: dict[str, str]
    behaviour: str
    at: float


@dataclass
class FaultScript:
    """What the server does: answers by messages key, behaviours per prompt ID."""

    answers: dict[str, tuple[str, str]] = field(default_factory=dict)  # key -> (pid, text)
    # Prompts whose messages are identical cannot be told apart by the server: their
    # answers are handed out in request order, one each.
    answer_queues: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    plan: dict[str, list[str]] = field(default_factory=dict)
    default: str = "ok"
    model_override: str | None = None
    slow_seconds: float = 3.0
    hang_seconds: float = 0.0  # delay every reply (lets a crash test kill mid-flight)
    fault_rate: float = 0.0  # beyond the plan, this share of requests gets a random fault
    fault_kinds: tuple[str, ...] = ()
    seed: int = 0

    @classmethod
    def for_release(
        cls, release: Any, plan: dict[str, list[str]] | None = None, **kw: Any
    ) -> FaultScript:
        return cls(answers=release_answers(release), plan=plan or {}, **kw)


class FaultServer(LoopbackServer):
    """Start with `with FaultServer(script) as srv:`; `srv.base_url` is the /v1 URL."""

    quiet = True  # resets are injected on purpose

    def __init__(self, script: FaultScript) -> None:
        self.script = script
        self.seen: list[Seen] = []
        self._counts: dict[str, int] = {}
        self._lock = threading.Lock()
        self._rng = random.Random(script.seed)
        super().__init__()

    def requests_for(self, prompt_id: str) -> list[Seen]:
        return [s for s in self.seen if s.prompt_id == prompt_id]

    def _next_behaviour(self, pid: str | None) -> str:
        with self._lock:
            if pid is None:
                return "unknown"
            n = self._counts.get(pid, 0)
            self._counts[pid] = n + 1
            steps = self.script.plan.get(pid, [])
            if n < len(steps):
                return steps[n]
            if self.script.fault_rate and self._rng.random() < self.script.fault_rate:
                return self._rng.choice(self.script.fault_kinds)
            return self.script.default

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(FakeHandler):
            wire = "openai"

            def do_GET(self) -> None:
                auth = (
                    self.headers.get("Authorization")
                    or self.headers.get("x-api-key")
                    or self.headers.get("x-goog-api-key")
                    or ""
                )
                if "invalid" in auth:
                    self.send_bytes(401, b'{"error":{"message":"bad key"}}')
                    return
                if "models" in self.path and "v1beta" in self.path:
                    payload: Any = {"models": [{"name": "models/test-model"}]}
                else:
                    payload = {"object": "list", "data": [{"id": "test-model", "object": "model"}]}
                self.send_json(200, payload)

            def do_POST(self) -> None:
                raw = self.read_body()
                try:
                    body = json.loads(raw)
                except json.JSONDecodeError:
                    body = {}
                if self.path.endswith("/v1/messages"):
                    self.wire = "anthropic"
                elif ":generateContent" in self.path:
                    self.wire = "gemini"
                    body = dict(body, model=self.path.split("/models/")[-1].split(":")[0])
                else:
                    self.wire = "openai"
                key = messages_key(original_messages(self.wire, body))
                with server._lock:
                    queue = server.script.answer_queues.get(key)
                    queued = queue.pop(0) if queue else None
                pid, answer = queued or server.script.answers.get(key) or (None, "")
                behaviour = server._next_behaviour(pid)
                with server._lock:
                    server.seen.append(Seen(pid, body, self.header_dict(), behaviour, time.time()))
                if server.script.hang_seconds:
                    time.sleep(server.script.hang_seconds)
                self._behave(behaviour, body, answer)

            def _completion(
                self,
                body: dict[str, Any],
                content: str | None,
                finish: str = "stop",
                model: str | None = None,
            ) -> bytes:
                model = model or server.script.model_override or body.get("model")
                if self.wire == "anthropic":
                    stop = {"stop": "end_turn", "length": "max_tokens"}.get(finish, finish)
                    return json.dumps(anthropic_message("msg_test", model, content, stop)).encode()
                if self.wire == "gemini":
                    reason = {"stop": "STOP", "length": "MAX_TOKENS"}.get(finish, finish)
                    candidate: dict[str, Any] = {"finishReason": reason, "index": 0}
                    if content is not None:
                        candidate["content"] = {"parts": [{"text": content}], "role": "model"}
                    return json.dumps(
                        {
                            "candidates": [candidate],
                            "modelVersion": model,
                            "responseId": "resp_test",
                            "usageMetadata": {
                                "promptTokenCount": 10,
                                "candidatesTokenCount": 20,
                                "totalTokenCount": 30,
                            },
                        }
                    ).encode()
                return json.dumps(
                    openai_completion("chatcmpl-test", model, content, finish)
                ).encode()

            def _behave(self, behaviour: str, body: dict[str, Any], answer: str) -> None:
                name, _, arg = behaviour.partition(":")
                if name == "substitute":
                    self.send_bytes(
                        200, self._completion(body, answer, model=arg or "other-model-9b")
                    )
                elif name == "overloaded" and self.wire == "anthropic":
                    self.send_json(
                        529,
                        {
                            "type": "error",
                            "error": {"type": "overloaded_error", "message": "Overloaded"},
                            "request_id": "req_test",
                        },
                    )
                elif name == "429" and self.wire == "anthropic":
                    self.send_json(
                        429,
                        {
                            "type": "error",
                            "error": {"type": "rate_limit_error", "message": "Rate limited"},
                        },
                        {"retry-after": arg or "0.05"},
                    )
                elif name == "429-quota" and self.wire == "anthropic":
                    self.send_json(
                        429,
                        {
                            "type": "error",
                            "error": {
                                "type": "rate_limit_error",
                                "message": "spend limit reached",
                                "details": {"error_code": "enforced_spend_limit_reached"},
                            },
                        },
                    )
                elif name == "429" and self.wire == "gemini":
                    self.send_json(
                        429,
                        {
                            "error": {
                                "code": 429,
                                "message": "You exceeded your current quota",
                                "status": "RESOURCE_EXHAUSTED",
                                "details": [
                                    {
                                        "@type": "type.googleapis.com/google.rpc.RetryInfo",
                                        "retryDelay": (arg or "0.05") + "s",
                                    }
                                ],
                            }
                        },
                    )
                elif name == "overloaded" and self.wire == "gemini":
                    self.send_json(
                        503,
                        [
                            {
                                "error": {
                                    "code": 503,
                                    "message": "The model is overloaded. Please try again later.",
                                    "status": "UNAVAILABLE",
                                }
                            }
                        ],
                    )
                elif name == "blocked" and self.wire == "gemini":
                    self.send_json(
                        200,
                        {
                            "promptFeedback": {"blockReason": "SAFETY"},
                            "modelVersion": body.get("model"),
                        },
                    )
                elif name == "length" and self.wire == "gemini":
                    self.send_bytes(200, self._completion(body, None, "length"))
                elif name == "ok":
                    self.send_bytes(
                        200, self._completion(body, answer), headers={"x-request-id": "req_test"}
                    )
                elif name == "fenced":
                    text = f"Here is the circuit:\n```python\n{answer}```\nDone."
                    self.send_bytes(200, self._completion(body, text))
                elif name == "empty":
                    self.send_bytes(200, self._completion(body, ""))
                elif name == "length":
                    self.send_bytes(
                        200, self._completion(body, answer[: len(answer) // 2], "length")
                    )
                elif name == "padding":
                    self.send_bytes(200, b"\n\n\n" + self._completion(body, answer))
                elif name == "429":
                    self.send_json(
                        429,
                        {
                            "error": {
                                "message": "Rate limit reached. Please try again in 1s.",
                                "type": "requests",
                                "code": "rate_limit_exceeded",
                            }
                        },
                        {"retry-after": arg or "0.05"},
                    )
                elif name == "429-date":
                    when = time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(time.time()))
                    self.send_bytes(
                        429, b'{"error":{"message":"later"}}', headers={"retry-after": when}
                    )
                elif name == "429-none":
                    self.send_bytes(429, b'{"error":{"message":"too many requests"}}')
                elif name == "429-ms":
                    self.send_bytes(
                        429,
                        b'{"error":{"message":"slow down"}}',
                        headers={"retry-after-ms": arg or "50"},
                    )
                elif name == "429-quota":
                    self.send_json(
                        429,
                        {
                            "error": {
                                "message": "You exceeded your current quota.",
                                "type": "insufficient_quota",
                                "code": "insufficient_quota",
                            }
                        },
                    )
                elif name == "500-html":
                    self.send_bytes(
                        500,
                        b"<html><head><title>500 Internal Server Error</title>"
                        b"</head><body><center><h1>500</h1></center></body></html>",
                        "text/html",
                    )
                elif name == "502-html":
                    self.send_bytes(
                        502,
                        b"<html><head><title>502 Bad Gateway</title></head>"
                        b"<body><center>cloudflare</center></body></html>",
                        "text/html",
                    )
                elif name == "503":
                    self.send_json(
                        503,
                        {
                            "error": {
                                "message": "The server is overloaded.",
                                "type": "service_unavailable_error",
                                "code": "server_is_overloaded",
                            }
                        },
                    )
                elif name == "400":
                    self.send_json(
                        400,
                        {
                            "error": {
                                "message": "Unsupported parameter: 'max_tokens'",
                                "type": "invalid_request_error",
                                "param": "max_tokens",
                                "code": "unsupported_parameter",
                            }
                        },
                    )
                elif name == "401-echo":
                    self.refuse_key()
                elif name == "200-error":
                    self.send_json(
                        200, {"error": {"message": "Provider returned error", "code": 502}}
                    )
                elif name == "200-html":
                    self.send_bytes(200, b"<html><body>maintenance</body></html>", "text/html")
                elif name == "close":
                    # Drop the connection without any response.
                    self.connection.shutdown(socket.SHUT_RDWR)
                    self.close_connection = True
                elif name == "truncated":
                    # Headers promise more than the body delivers, then the connection closes.
                    data = self._completion(body, answer)
                    self.send_bytes(200, data[: len(data) // 2], length=len(data))
                    self.connection.shutdown(socket.SHUT_RDWR)
                    self.close_connection = True
                elif name == "truncated-json":
                    data = self._completion(body, answer)
                    self.send_bytes(200, data[: len(data) // 2])
                elif name == "slow":
                    time.sleep(float(arg) if arg else server.script.slow_seconds)
                    self.send_bytes(200, self._completion(body, answer))
                else:
                    self.send_bytes(404, b'{"error":{"message":"unknown prompt"}}')

        return Handler
