"""A loopback provider that injects faults on a script, in three wire formats.

It speaks OpenAI-compatible chat completions (`POST .../chat/completions`), Anthropic
Messages (`POST .../v1/messages`) and Gemini generateContent
(`POST .../models/M:generateContent`), each with its own success and error shapes.
Each prompt (recognised by its messages) follows a list of behaviours, one per request it
receives; after the list runs out it answers normally. Every request seen is logged, so a
test can hold the run's attempt history against what the server actually received.
"""

from __future__ import annotations

import hashlib
import json
import random
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def messages_key(messages: Any) -> str:
    data = json.dumps(messages, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(data.encode()).hexdigest()


def original_messages(wire: str, body: dict[str, Any]) -> Any:
    """The release messages a request body was built from, whatever the wire format."""
    if wire == "anthropic":
        system = body.get("system")
        head = [{"role": "system", "content": system}] if system else []
        return head + list(body.get("messages") or [])
    if wire == "gemini":
        sys_parts = (body.get("systemInstruction") or {}).get("parts") or []
        head = [{"role": "system", "content": "".join(p.get("text", "") for p in sys_parts)}
                ] if sys_parts else []
        return head + [{"role": "assistant" if c.get("role") == "model" else "user",
                        "content": "".join(p.get("text", "") for p in c.get("parts", []))}
                       for c in body.get("contents") or []]
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
    def for_release(cls, release: Any, plan: dict[str, list[str]] | None = None,
                    **kw: Any) -> FaultScript:
        answers = {messages_key(p.request_messages()):
                   (p.prompt_id, str(p.target_metadata.get("reference_code", "")))
                   for p in release.prompts}
        return cls(answers=answers, plan=plan or {}, **kw)


class _QuietServer(ThreadingHTTPServer):
    """Resets are injected on purpose; their tracebacks are not news."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass


class FaultServer:
    """Start with `with FaultServer(script) as srv:`; `srv.base_url` is the /v1 URL."""

    def __init__(self, script: FaultScript) -> None:
        self.script = script
        self.seen: list[Seen] = []
        self._counts: dict[str, int] = {}
        self._lock = threading.Lock()
        self._rng = random.Random(script.seed)
        handler = self._handler()
        self.httpd = _QuietServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> FaultServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

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

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            wire = "openai"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                auth = (self.headers.get("Authorization") or self.headers.get("x-api-key")
                        or self.headers.get("x-goog-api-key") or "")
                if "invalid" in auth:
                    self._send(401, b'{"error":{"message":"bad key"}}', "application/json")
                    return
                if "models" in self.path and "v1beta" in self.path:
                    payload: Any = {"models": [{"name": "models/test-model"}]}
                else:
                    payload = {"object": "list", "data": [{"id": "test-model",
                                                           "object": "model"}]}
                self._send(200, json.dumps(payload).encode(), "application/json")

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                raw = self.rfile.read(length)
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
                    server.seen.append(Seen(pid, body, {k.lower(): v for k, v in
                                                        self.headers.items()}, behaviour,
                                            time.time()))
                if server.script.hang_seconds:
                    time.sleep(server.script.hang_seconds)
                self._behave(behaviour, body, answer)

            def _send(self, status: int, data: bytes, ctype: str,
                      headers: dict[str, str] | None = None, length: int | None = None) -> None:
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data) if length is None else length))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)
                self.wfile.flush()

            def _completion(self, body: dict[str, Any], content: str | None,
                            finish: str = "stop", model: str | None = None) -> bytes:
                model = model or server.script.model_override or body.get("model")
                if self.wire == "anthropic":
                    stop = {"stop": "end_turn", "length": "max_tokens"}.get(finish, finish)
                    blocks = [] if content is None else [{"type": "text", "text": content}]
                    return json.dumps({
                        "id": "msg_test", "type": "message", "role": "assistant",
                        "model": model, "content": blocks, "stop_reason": stop,
                        "stop_sequence": None,
                        "usage": {"input_tokens": 10, "output_tokens": 20}}).encode()
                if self.wire == "gemini":
                    reason = {"stop": "STOP", "length": "MAX_TOKENS"}.get(finish, finish)
                    candidate: dict[str, Any] = {"finishReason": reason, "index": 0}
                    if content is not None:
                        candidate["content"] = {"parts": [{"text": content}], "role": "model"}
                    return json.dumps({
                        "candidates": [candidate], "modelVersion": model,
                        "responseId": "resp_test",
                        "usageMetadata": {"promptTokenCount": 10, "candidatesTokenCount": 20,
                                          "totalTokenCount": 30}}).encode()
                return json.dumps({
                    "id": "chatcmpl-test", "object": "chat.completion", "created": 0,
                    "model": model,
                    "choices": [{"index": 0, "finish_reason": finish,
                                 "message": {"role": "assistant", "content": content}}],
                    "usage": {"prompt_tokens": 10, "completion_tokens": 20,
                              "total_tokens": 30}}).encode()

            def _behave(self, behaviour: str, body: dict[str, Any], answer: str) -> None:
                name, _, arg = behaviour.partition(":")
                if name == "substitute":
                    self._send(200, self._completion(body, answer, model=arg or "other-model-9b"),
                               "application/json")
                elif name == "overloaded" and self.wire == "anthropic":
                    self._send(529, json.dumps({"type": "error", "error": {
                        "type": "overloaded_error", "message": "Overloaded"},
                        "request_id": "req_test"}).encode(), "application/json")
                elif name == "429" and self.wire == "anthropic":
                    self._send(429, json.dumps({"type": "error", "error": {
                        "type": "rate_limit_error", "message": "Rate limited"}}).encode(),
                        "application/json", {"retry-after": arg or "0.05"})
                elif name == "429-quota" and self.wire == "anthropic":
                    self._send(429, json.dumps({"type": "error", "error": {
                        "type": "rate_limit_error", "message": "spend limit reached",
                        "details": {"error_code": "enforced_spend_limit_reached"}}}).encode(),
                        "application/json")
                elif name == "429" and self.wire == "gemini":
                    self._send(429, json.dumps({"error": {
                        "code": 429, "message": "You exceeded your current quota",
                        "status": "RESOURCE_EXHAUSTED", "details": [
                            {"@type": "type.googleapis.com/google.rpc.RetryInfo",
                             "retryDelay": (arg or "0.05") + "s"}]}}).encode(),
                        "application/json")
                elif name == "overloaded" and self.wire == "gemini":
                    self._send(503, json.dumps([{"error": {
                        "code": 503, "message": "The model is overloaded. Please try again later.",
                        "status": "UNAVAILABLE"}}]).encode(), "application/json")
                elif name == "blocked" and self.wire == "gemini":
                    self._send(200, json.dumps({"promptFeedback": {"blockReason": "SAFETY"},
                                                "modelVersion": body.get("model")}).encode(),
                               "application/json")
                elif name == "length" and self.wire == "gemini":
                    self._send(200, self._completion(body, None, "length"), "application/json")
                elif name == "ok":
                    self._send(200, self._completion(body, answer), "application/json",
                               {"x-request-id": "req_test"})
                elif name == "fenced":
                    text = f"Here is the circuit:\n```python\n{answer}```\nDone."
                    self._send(200, self._completion(body, text), "application/json")
                elif name == "empty":
                    self._send(200, self._completion(body, ""), "application/json")
                elif name == "length":
                    self._send(200, self._completion(body, answer[: len(answer) // 2], "length"),
                               "application/json")
                elif name == "padding":
                    self._send(200, b"\n\n\n" + self._completion(body, answer),
                               "application/json")
                elif name == "429":
                    self._send(429, json.dumps({"error": {
                        "message": "Rate limit reached. Please try again in 1s.",
                        "type": "requests", "code": "rate_limit_exceeded"}}).encode(),
                        "application/json", {"retry-after": arg or "0.05"})
                elif name == "429-date":
                    when = time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(time.time()))
                    self._send(429, b'{"error":{"message":"later"}}', "application/json",
                               {"retry-after": when})
                elif name == "429-none":
                    self._send(429, b'{"error":{"message":"too many requests"}}',
                               "application/json")
                elif name == "429-ms":
                    self._send(429, b'{"error":{"message":"slow down"}}', "application/json",
                               {"retry-after-ms": arg or "50"})
                elif name == "429-quota":
                    self._send(429, json.dumps({"error": {
                        "message": "You exceeded your current quota.", "type": "insufficient_quota",
                        "code": "insufficient_quota"}}).encode(), "application/json")
                elif name == "500-html":
                    self._send(500, b"<html><head><title>500 Internal Server Error</title></head>"
                               b"<body><center><h1>500</h1></center></body></html>", "text/html")
                elif name == "502-html":
                    self._send(502, b"<html><head><title>502 Bad Gateway</title></head><body>"
                               b"<center>cloudflare</center></body></html>", "text/html")
                elif name == "503":
                    self._send(503, json.dumps({"error": {
                        "message": "The server is overloaded.", "type": "service_unavailable_error",
                        "code": "server_is_overloaded"}}).encode(), "application/json")
                elif name == "400":
                    self._send(400, json.dumps({"error": {
                        "message": "Unsupported parameter: 'max_tokens'", "type":
                        "invalid_request_error", "param": "max_tokens",
                        "code": "unsupported_parameter"}}).encode(), "application/json")
                elif name == "401-echo":
                    auth = self.headers.get("Authorization", "")
                    self._send(401, json.dumps({"error": {
                        "message": f"Incorrect API key provided: {auth[7:]}",
                        "type": "invalid_request_error", "code": "invalid_api_key"}}).encode(),
                        "application/json")
                elif name == "200-error":
                    self._send(200, json.dumps({"error": {"message": "Provider returned error",
                                                          "code": 502}}).encode(),
                               "application/json")
                elif name == "200-html":
                    self._send(200, b"<html><body>maintenance</body></html>", "text/html")
                elif name == "close":
                    # Drop the connection without any response.
                    self.connection.shutdown(socket.SHUT_RDWR)
                    self.close_connection = True
                elif name == "truncated":
                    # Headers promise more than the body delivers, then the connection closes.
                    data = self._completion(body, answer)
                    self._send(200, data[: len(data) // 2], "application/json",
                               length=len(data))
                    self.connection.shutdown(socket.SHUT_RDWR)
                    self.close_connection = True
                elif name == "truncated-json":
                    data = self._completion(body, answer)
                    self._send(200, data[: len(data) // 2], "application/json")
                elif name == "slow":
                    time.sleep(float(arg) if arg else server.script.slow_seconds)
                    self._send(200, self._completion(body, answer), "application/json")
                else:
                    self._send(404, b'{"error":{"message":"unknown prompt"}}', "application/json")

        return Handler
