"""A fast loopback provider for benchmarks: fixed latency, optional rate limit, two wire formats.

    python -m engine.loopback_server [--port 0] [--latency 0.05] [--rate R --burst B]
                                     [--headers openai|anthropic|none] [--wire openai|anthropic]

It prints `LISTENING <port>` on its first line of output and serves until killed. It runs in a
process of its own so the benchmarked engine has the other core to itself; it speaks just
enough HTTP/1.1 (keep-alive, Content-Length bodies) to answer chat-completion and Messages
requests, every one after `--latency` seconds, with a short Qiskit snippet.

With `--rate R` it enforces R requests per second with a token bucket of `--burst` tokens: a
request that finds the bucket empty is answered at once with 429, `retry-after` (whole
seconds, as providers send it) and `retry-after-ms`. `--headers` adds the rate-limit headers of
one provider family to every answer (`x-ratelimit-*-requests` with a duration reset, or
`anthropic-ratelimit-requests-*` with an RFC 3339 reset time).

`GET /stats` answers counters as JSON: requests, ok, throttled, the times of the first and
last request, and the most requests it held at once. `POST /stats/reset` zeroes them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import sys
import time
from datetime import datetime, timezone
from typing import Any

SNIPPET = ("```python\nfrom qiskit import QuantumCircuit\n\n\ndef build_circuit():\n"
           "    qc = QuantumCircuit(3, 3)\n    qc.h(0)\n    qc.cx(0, 1)\n    qc.cx(1, 2)\n"
           "    qc.measure(range(3), range(3))\n    return qc\n```")


def _openai_body(n: int) -> bytes:
    return json.dumps({
        "id": f"chatcmpl-{n}", "object": "chat.completion", "created": int(time.time()),
        "model": "loopback-1",
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": SNIPPET}}],
        "usage": {"prompt_tokens": 120, "completion_tokens": 60, "total_tokens": 180},
    }).encode()


def _anthropic_body(n: int) -> bytes:
    return json.dumps({
        "id": f"msg_{n}", "type": "message", "role": "assistant", "model": "loopback-1",
        "content": [{"type": "text", "text": SNIPPET}], "stop_reason": "end_turn",
        "stop_sequence": None, "usage": {"input_tokens": 120, "output_tokens": 60},
    }).encode()


_THROTTLED = {
    "openai": json.dumps({"error": {"message": "Rate limit reached on requests per second",
                                    "type": "requests", "param": None,
                                    "code": "rate_limit_exceeded"}}).encode(),
    "anthropic": json.dumps({"type": "error", "error": {"type": "rate_limit_error",
                                                        "message": "rate limited"}}).encode(),
}


class Bucket:
    """R tokens per second, at most `burst` stored; starts full."""

    def __init__(self, rate: float, burst: float) -> None:
        self.rate, self.burst = rate, burst
        self.tokens, self.at = burst, time.monotonic()

    def _refill(self) -> None:
        now = time.monotonic()
        self.tokens = min(self.burst, self.tokens + (now - self.at) * self.rate)
        self.at = now

    def take(self) -> bool:
        self._refill()
        if self.tokens >= 1:
            self.tokens -= 1
            return True
        return False

    def wait_for_one(self) -> float:
        return max(0.0, (1 - self.tokens) / self.rate)

    def until_full(self) -> float:
        return max(0.0, (self.burst - self.tokens) / self.rate)


class Stats:
    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.requests = self.ok = self.throttled = 0
        self.first: float | None = None
        self.last: float | None = None
        self.holding = self.max_holding = 0

    def to_dict(self) -> dict[str, Any]:
        return {"requests": self.requests, "ok": self.ok, "throttled": self.throttled,
                "first": self.first, "last": self.last, "max_concurrent": self.max_holding}


class Server:
    def __init__(self, args: argparse.Namespace) -> None:
        self.latency: float = args.latency
        self.wire: str = args.wire
        self.headers: str = args.headers
        self.bucket = Bucket(args.rate, args.burst or max(1.0, args.rate)) if args.rate else None
        self.stats = Stats()

    def limit_headers(self) -> list[tuple[str, str]]:
        b = self.bucket
        if b is None or self.headers == "none":
            return []
        remaining = str(max(0, math.floor(b.tokens)))
        if self.headers == "openai":
            return [("x-ratelimit-limit-requests", str(int(b.burst))),
                    ("x-ratelimit-remaining-requests", remaining),
                    ("x-ratelimit-reset-requests", f"{b.until_full() * 1000:.0f}ms")]
        reset = datetime.fromtimestamp(time.time() + b.until_full(), timezone.utc)
        return [("anthropic-ratelimit-requests-limit", str(int(b.burst))),
                ("anthropic-ratelimit-requests-remaining", remaining),
                ("anthropic-ratelimit-requests-reset",
                 reset.isoformat(timespec="milliseconds").replace("+00:00", "Z"))]

    async def answer(self, method: str, path: str) -> tuple[int, list[tuple[str, str]], bytes]:
        st = self.stats
        if path.startswith("/stats"):
            if method == "POST":
                st.reset()
            return 200, [], json.dumps(st.to_dict()).encode()
        now = time.time()
        st.requests += 1
        st.first = st.first or now
        st.last = now
        if self.bucket is not None and not self.bucket.take():
            st.throttled += 1
            wait = self.bucket.wait_for_one()
            return 429, [("retry-after", str(max(1, math.ceil(wait)))),
                         ("retry-after-ms", f"{wait * 1000:.0f}"),
                         *self.limit_headers()], _THROTTLED[self.wire]
        headers = self.limit_headers()
        st.holding += 1
        st.max_holding = max(st.max_holding, st.holding)
        try:
            await asyncio.sleep(self.latency)
        finally:
            st.holding -= 1
        st.ok += 1
        body = _anthropic_body(st.ok) if self.wire == "anthropic" else _openai_body(st.ok)
        return 200, headers, body


class Connection(asyncio.Protocol):
    def __init__(self, server: Server) -> None:
        self.server = server
        self.buffer = b""
        self.transport: asyncio.Transport | None = None
        self.busy = False
        self.task: asyncio.Future[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if not self.busy:
            self._next()

    def _next(self) -> None:
        head_end = self.buffer.find(b"\r\n\r\n")
        if head_end < 0:
            return
        head = self.buffer[:head_end].decode("latin-1").split("\r\n")
        length = 0
        for line in head[1:]:
            name, _, value = line.partition(":")
            if name.strip().lower() == "content-length":
                length = int(value.strip())
        end = head_end + 4 + length
        if len(self.buffer) < end:
            return
        self.buffer = self.buffer[end:]
        method, path = head[0].split(" ")[:2]
        self.busy = True
        self.task = asyncio.ensure_future(self._serve(method, path))

    async def _serve(self, method: str, path: str) -> None:
        status, headers, body = await self.server.answer(method, path)
        if self.transport is None or self.transport.is_closing():
            return
        reason = {200: "OK", 429: "Too Many Requests"}.get(status, "Status")
        lines = [f"HTTP/1.1 {status} {reason}", "content-type: application/json",
                 f"content-length: {len(body)}", *(f"{k}: {v}" for k, v in headers)]
        self.transport.write(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
        self.busy = False
        self._next()

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None


async def serve(args: argparse.Namespace) -> None:
    server = Server(args)
    loop = asyncio.get_running_loop()
    listener = await loop.create_server(lambda: Connection(server), "127.0.0.1", args.port,
                                        backlog=1024)
    port = listener.sockets[0].getsockname()[1]
    print(f"LISTENING {port}", flush=True)
    await listener.serve_forever()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m engine.loopback_server",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--latency", type=float, default=0.05, help="seconds before each answer")
    p.add_argument("--rate", type=float, default=0.0, help="requests per second (0: no limit)")
    p.add_argument("--burst", type=float, default=0.0, help="token bucket size (default: rate)")
    p.add_argument("--headers", choices=("openai", "anthropic", "none"), default="none")
    p.add_argument("--wire", choices=("openai", "anthropic"), default="openai")
    args = p.parse_args(argv)
    try:
        asyncio.run(serve(args))
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
