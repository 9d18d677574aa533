"""A fast loopback provider for benchmarks: fixed latency, optional rate limits, two wire formats.

    python -m tests.fakes.loopback [--port 0] [--latency 0.05] [--rate R --burst B]
                                     [--shape bucket|sliding|fixed --limit N --window W]
                                     [--tokens-limit T --tokens-window W --tokens-per-request C]
                                     [--random-429 P --random-retry-after S --seed K]
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

Other shapes of a request limit, chosen with `--shape` (then `--limit N --window W` replace
`--rate`):

- `sliding`: at most N requests in any W seconds. A refused request is told to retry when the
  oldest request of the window leaves it; the reset header is the time until the window is
  empty again (the time until the limit "resets to its initial state", as OpenAI words it).
- `fixed`: at most N requests per window of W seconds counted from the server's start, the
  common free-tier form of "N per minute": the reset header is the time to the window's end in
  whole seconds (`x-ratelimit-reset-requests: 37s`), and a refused request gets `retry-after`
  to the window's end (whole seconds, no `retry-after-ms`). `/stats` lists the successful
  answers of each window (`windows`).

`--tokens-limit T` adds a limit on tokens: a bucket of T tokens refilled over
`--tokens-window` seconds, each request costing `--tokens-per-request`; with `--headers` its
state is sent as `x-ratelimit-{limit,remaining,reset}-tokens` (or
`anthropic-ratelimit-tokens-*`). A request is admitted only when every limit has room, and
then charged to each.

`--random-429 P` answers that share of requests (drawn at random, `--seed`) with 429 at once,
whatever the rate: `retry-after: --random-retry-after` and no rate-limit headers, before any
limit is consulted (an edge shedding load or an aggregator whose upstream is busy).

`GET /stats` answers counters as JSON: requests, ok, throttled (of which `throttled_random`,
`throttled_tokens` and `throttled_limit`, by a request limit), the times of the first and
last request, and the most requests it held at once. `POST /stats/reset` zeroes them.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import math
import random
import sys
import time
from datetime import datetime, timezone
from typing import Any

from tests.fakes.base import anthropic_message, openai_completion

SNIPPET = (
    "```python\nfrom qiskit import QuantumCircuit\n\n\ndef build_circuit():\n"
    "    qc = QuantumCircuit(3, 3)\n    qc.h(0)\n    qc.cx(0, 1)\n    qc.cx(1, 2)\n"
    "    qc.measure(range(3), range(3))\n    return qc\n```"
)


def _openai_body(n: int) -> bytes:
    return json.dumps(
        openai_completion(
            f"chatcmpl-{n}", "loopback-1", SNIPPET, usage=(120, 60), created=int(time.time())
        )
    ).encode()


def _anthropic_body(n: int) -> bytes:
    return json.dumps(
        anthropic_message(f"msg_{n}", "loopback-1", SNIPPET, usage=(120, 60))
    ).encode()


_THROTTLED = {
    "openai": json.dumps(
        {
            "error": {
                "message": "Rate limit reached on requests per second",
                "type": "requests",
                "param": None,
                "code": "rate_limit_exceeded",
            }
        }
    ).encode(),
    "anthropic": json.dumps(
        {"type": "error", "error": {"type": "rate_limit_error", "message": "rate limited"}}
    ).encode(),
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


class SlidingWindow:
    """At most `limit` admissions in any `window` seconds."""

    def __init__(self, limit: int, window: float) -> None:
        self.limit, self.window = limit, window
        self.times: collections.deque[float] = collections.deque()

    def _expire(self) -> float:
        now = time.monotonic()
        while self.times and self.times[0] <= now - self.window:
            self.times.popleft()
        return now

    def has_room(self) -> bool:
        self._expire()
        return len(self.times) < self.limit

    def take(self) -> None:
        self.times.append(self._expire())

    def remaining(self) -> int:
        self._expire()
        return max(0, self.limit - len(self.times))

    def wait_for_one(self) -> float:
        now = self._expire()
        return max(0.0, self.times[0] + self.window - now) if self.times else 0.0

    def until_full(self) -> float:
        now = self._expire()
        return max(0.0, self.times[-1] + self.window - now) if self.times else 0.0


class FixedWindow:
    """At most `limit` admissions per window of `window` seconds counted from `origin`."""

    def __init__(self, limit: int, window: float) -> None:
        self.limit, self.window = limit, window
        self.origin = time.monotonic()
        self.index, self.used = 0, 0
        self.ok_per_window: dict[int, int] = {}

    def _roll(self) -> float:
        now = time.monotonic()
        index = int((now - self.origin) // self.window)
        if index != self.index:
            self.index, self.used = index, 0
        return now

    def has_room(self) -> bool:
        self._roll()
        return self.used < self.limit

    def take(self) -> None:
        self._roll()
        self.used += 1
        self.ok_per_window[self.index] = self.ok_per_window.get(self.index, 0) + 1

    def remaining(self) -> int:
        self._roll()
        return max(0, self.limit - self.used)

    def until_end(self) -> float:
        now = self._roll()
        return max(0.0, self.origin + (self.index + 1) * self.window - now)


class Stats:
    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.requests = self.ok = self.throttled = 0
        self.throttled_random = self.throttled_tokens = self.throttled_limit = 0
        self.first: float | None = None
        self.last: float | None = None
        self.holding = self.max_holding = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "requests": self.requests,
            "ok": self.ok,
            "throttled": self.throttled,
            "throttled_random": self.throttled_random,
            "throttled_tokens": self.throttled_tokens,
            "throttled_limit": self.throttled_limit,
            "first": self.first,
            "last": self.last,
            "max_concurrent": self.max_holding,
        }


def go_duration(seconds: float) -> str:
    """A duration as OpenAI's reset headers write it: `120ms`, `1.5s`, `6m0s`."""
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    minutes, rest = divmod(seconds, 60.0)
    text = f"{rest:.3f}".rstrip("0").rstrip(".") + "s"
    return f"{minutes:.0f}m{text}" if minutes else text


class Server:
    def __init__(self, args: argparse.Namespace) -> None:
        self.latency: float = args.latency
        self.wire: str = args.wire
        self.headers: str = args.headers
        self.shape: str = args.shape
        self.bucket = (
            Bucket(args.rate, args.burst or max(1.0, args.rate))
            if args.rate and args.shape == "bucket"
            else None
        )
        self.sliding = (
            SlidingWindow(args.limit, args.window)
            if args.shape == "sliding" and args.limit
            else None
        )
        self.fixed = (
            FixedWindow(args.limit, args.window) if args.shape == "fixed" and args.limit else None
        )
        self.tokens = (
            Bucket(args.tokens_limit / args.tokens_window, args.tokens_limit)
            if args.tokens_limit
            else None
        )
        self.token_cost: float = args.tokens_per_request
        self.random_429: float = args.random_429
        self.random_retry_after: str = args.random_retry_after
        self.rng = random.Random(args.seed)
        self.stats = Stats()

    def _family(
        self, kind: str, limit: int, remaining: int, seconds: float, reset_text: str
    ) -> list[tuple[str, str]]:
        if self.headers == "openai":
            return [
                (f"x-ratelimit-limit-{kind}", str(limit)),
                (f"x-ratelimit-remaining-{kind}", str(remaining)),
                (f"x-ratelimit-reset-{kind}", reset_text),
            ]
        reset = datetime.fromtimestamp(time.time() + seconds, timezone.utc)
        return [
            (f"anthropic-ratelimit-{kind}-limit", str(limit)),
            (f"anthropic-ratelimit-{kind}-remaining", str(remaining)),
            (
                f"anthropic-ratelimit-{kind}-reset",
                reset.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            ),
        ]

    def limit_headers(self) -> list[tuple[str, str]]:
        if self.headers == "none":
            return []
        out: list[tuple[str, str]] = []
        if self.bucket is not None:
            b = self.bucket
            b._refill()
            wait = b.until_full()
            out += self._family(
                "requests", int(b.burst), max(0, math.floor(b.tokens)), wait, f"{wait * 1000:.0f}ms"
            )
        elif self.sliding is not None:
            w = self.sliding
            wait = w.until_full()
            out += self._family("requests", w.limit, w.remaining(), wait, go_duration(wait))
        elif self.fixed is not None:
            f = self.fixed
            wait = f.until_end()
            out += self._family(
                "requests", f.limit, f.remaining(), wait, f"{max(1, math.ceil(wait))}s"
            )
        if self.tokens is not None:
            t = self.tokens
            t._refill()
            wait = t.until_full()
            out += self._family(
                "tokens", int(t.burst), max(0, math.floor(t.tokens)), wait, go_duration(wait)
            )
        return out

    def _admit(self) -> tuple[str, float, bool] | None:
        """None when every limit has room (and the request is charged to each), else which
        limit refused it, the seconds until it would have room and whether to send ms."""
        if self.bucket is not None:
            self.bucket._refill()
            if self.bucket.tokens < 1:
                return "limit", self.bucket.wait_for_one(), True
        if self.sliding is not None and not self.sliding.has_room():
            return "limit", self.sliding.wait_for_one(), True
        if self.fixed is not None and not self.fixed.has_room():
            return "limit", self.fixed.until_end(), False
        if self.tokens is not None:
            self.tokens._refill()
            if self.tokens.tokens < self.token_cost:
                wait = (self.token_cost - self.tokens.tokens) / self.tokens.rate
                return "tokens", wait, True
        if self.bucket is not None:
            self.bucket.take()
        if self.sliding is not None:
            self.sliding.take()
        if self.fixed is not None:
            self.fixed.take()
        if self.tokens is not None:
            self.tokens.tokens -= self.token_cost
        return None

    async def answer(self, method: str, path: str) -> tuple[int, list[tuple[str, str]], bytes]:
        st = self.stats
        if path.startswith("/stats"):
            if method == "POST":
                st.reset()
            data = st.to_dict()
            if self.fixed is not None:
                data["windows"] = {
                    "limit": self.fixed.limit,
                    "seconds": self.fixed.window,
                    "ok": {str(k): v for k, v in sorted(self.fixed.ok_per_window.items())},
                }
            return 200, [], json.dumps(data).encode()
        now = time.time()
        st.requests += 1
        st.first = st.first or now
        st.last = now
        if self.random_429 and self.rng.random() < self.random_429:
            st.throttled += 1
            st.throttled_random += 1
            return 429, [("retry-after", self.random_retry_after)], _THROTTLED[self.wire]
        refused = self._admit()
        if refused is not None:
            which, wait, with_ms = refused
            st.throttled += 1
            if which == "tokens":
                st.throttled_tokens += 1
            else:
                st.throttled_limit += 1
            retry = [("retry-after", str(max(1, math.ceil(wait))))]
            if with_ms:
                retry.append(("retry-after-ms", f"{wait * 1000:.0f}"))
            return 429, [*retry, *self.limit_headers()], _THROTTLED[self.wire]
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
    """One client connection, answered on the event loop.

    Not the threaded server the other fakes share: every connection held for `--latency`
    would cost a thread in the process that is meant to leave the engine a core, and
    http.server would add the Date and Server headers these answers never had.
    """

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
        lines = [
            f"HTTP/1.1 {status} {reason}",
            "content-type: application/json",
            f"content-length: {len(body)}",
            *(f"{k}: {v}" for k, v in headers),
        ]
        self.transport.write(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
        self.busy = False
        self._next()

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None


async def serve(args: argparse.Namespace) -> None:
    server = Server(args)
    loop = asyncio.get_running_loop()
    listener = await loop.create_server(
        lambda: Connection(server), "127.0.0.1", args.port, backlog=1024
    )
    port = listener.sockets[0].getsockname()[1]
    print(f"LISTENING {port}", flush=True)
    await listener.serve_forever()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m tests.fakes.loopback", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--latency", type=float, default=0.05, help="seconds before each answer")
    p.add_argument("--rate", type=float, default=0.0, help="requests per second (0: no limit)")
    p.add_argument("--burst", type=float, default=0.0, help="token bucket size (default: rate)")
    p.add_argument(
        "--shape",
        choices=("bucket", "sliding", "fixed"),
        default="bucket",
        help="the request limit: a token bucket (--rate, --burst) or a sliding or "
        "fixed window (--limit, --window)",
    )
    p.add_argument("--limit", type=int, default=0, help="requests per window (0: no limit)")
    p.add_argument("--window", type=float, default=60.0, help="window length, seconds")
    p.add_argument(
        "--tokens-limit",
        type=float,
        default=0.0,
        help="tokens per --tokens-window (0: no token limit)",
    )
    p.add_argument("--tokens-window", type=float, default=60.0)
    p.add_argument("--tokens-per-request", type=float, default=180.0)
    p.add_argument(
        "--random-429",
        type=float,
        default=0.0,
        help="share of requests answered 429 at random, whatever the rate",
    )
    p.add_argument("--random-retry-after", default="1")
    p.add_argument("--seed", type=int, default=0)
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
