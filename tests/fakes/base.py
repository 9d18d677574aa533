"""What the fake servers share: a threaded loopback HTTP server and the bodies providers answer.

`LoopbackServer` binds 127.0.0.1 on a free port when it is constructed, so `port` and
`base_url` are known before it serves, and serves from a daemon thread between `start()` and
`stop()` (or inside `with`). A subclass answers through the `FakeHandler` class it returns
from `_handler()`. The completion bodies are here because every fake answers in the same
shapes, whatever numbers it puts in them.
"""

from __future__ import annotations

import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar, TypeVar

S = TypeVar("S", bound="LoopbackServer")


def messages_key(messages: Any) -> str:
    """How a fake recognises a prompt: a hash of the messages it was sent."""
    data = json.dumps(messages, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(data.encode()).hexdigest()


def release_answers(release: Any) -> dict[str, tuple[str, str]]:
    """Messages key -> (prompt ID, reference code) for every prompt of a release."""
    return {
        messages_key(p.request_messages()): (
            p.prompt_id,
            str(p.target_metadata.get("reference_code", "")),
        )
        for p in release.prompts
    }


def openai_completion(
    id_: str,
    model: Any,
    content: str | None,
    finish: str = "stop",
    usage: tuple[int, int] = (10, 20),
    created: int = 0,
) -> dict[str, Any]:
    """A chat completion; `usage` is (prompt tokens, completion tokens)."""
    prompt, completion = usage
    return {
        "id": id_,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [
            {
                "index": 0,
                "finish_reason": finish,
                "message": {"role": "assistant", "content": content},
            }
        ],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        },
    }


def anthropic_message(
    id_: str,
    model: Any,
    content: str | None,
    stop: str = "end_turn",
    usage: tuple[int, int] = (10, 20),
) -> dict[str, Any]:
    """A Messages reply; no content (None) is an empty list of blocks."""
    blocks = [] if content is None else [{"type": "text", "text": content}]
    return {
        "id": id_,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": blocks,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {"input_tokens": usage[0], "output_tokens": usage[1]},
    }


class FakeHandler(BaseHTTPRequestHandler):
    """Keep-alive HTTP/1.1 without an access log, with what every fake does to a request."""

    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def read_body(self) -> bytes:
        return self.rfile.read(int(self.headers.get("Content-Length", "0")))

    def header_dict(self) -> dict[str, str]:
        """The request's headers with lower-case names, as a test compares them."""
        return {k.lower(): v for k, v in self.headers.items()}

    def send_bytes(
        self,
        status: int,
        data: bytes,
        ctype: str = "application/json",
        headers: dict[str, str] | None = None,
        length: int | None = None,
    ) -> None:
        """Answer `data`; `length` lets a fault promise more bytes than it sends."""
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data) if length is None else length))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()

    def send_json(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        self.send_bytes(status, json.dumps(payload).encode(), "application/json", headers)

    def bearer_is(self, key: str | None) -> bool:
        """Whether the request carries `Authorization: Bearer <key>` (any request, for None)."""
        return key is None or self.headers.get("Authorization", "") == f"Bearer {key}"

    def refuse_key(self) -> None:
        """The 401 OpenAI answers to a wrong key, which echoes the key it was given."""
        auth = self.headers.get("Authorization", "")
        self.send_json(
            401,
            {
                "error": {
                    "message": f"Incorrect API key provided: {auth[7:]}",
                    "type": "invalid_request_error",
                    "code": "invalid_api_key",
                }
            },
        )


class _QuietServer(ThreadingHTTPServer):
    """For fakes that reset connections on purpose: those tracebacks are not news."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass


class LoopbackServer:
    """A threaded HTTP server on a free loopback port; `base_url` is its /v1 URL."""

    # True: an exception in a handler prints no traceback.
    quiet: ClassVar[bool] = False

    def __init__(self) -> None:
        server_class = _QuietServer if self.quiet else ThreadingHTTPServer
        self.httpd = server_class(("127.0.0.1", 0), self._handler())
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        raise NotImplementedError

    def start(self: S) -> S:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self: S) -> S:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
