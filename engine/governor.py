"""How many requests a route may have outstanding, and how fast it may start them.

The user's `--concurrency` is a ceiling, never exceeded. Below it the governor adapts to what
the provider says:

- It starts with a window of `min(ceiling, 16)` requests in flight and, like TCP's slow start,
  widens it by one for every answer that is not throttled, so a route that never throttles
  reaches the ceiling after a few round trips.
- A throttle (HTTP 429) is a signal once per round trip: answers to requests sent before the
  last cut are not counted again. On a signal the route pauses for the provider's Retry-After
  (every worker, not only the one that was told), requests are paced at the rate the
  provider was actually admitting (the successful answers of the last second, a little
  less), and the window is halved, though never below what that pace needs at the observed
  latency (twice pace x latency), so a rate limit is met by pacing, not by starving.
  The pace then rises by a few percent a second until the next signal, so a route finds its
  limit again if the limit grows.
- Rate-limit headers (`x-ratelimit-{limit,remaining,reset}-requests` and
  `anthropic-ratelimit-requests-{limit,remaining,reset}`) are read on every answer and
  mirrored: the budget the provider had left when it took that request, plus what it has
  regained since at the refill rate the headers imply ((limit - remaining) / seconds to
  reset), minus every request sent since. A request waits until the mirror holds one, so a
  route that states its budget is used up to it and not past it, before any 429 arrives.

Waiting is fair: workers queue in arrival order behind one gate, and only the worker at the
head waits on the clock or for a slot.
"""

from __future__ import annotations

import asyncio
import bisect
import collections
import math
import re
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

INITIAL_WINDOW = 16
_PACE_FRACTION = 0.95  # of the observed admission rate, after a throttle
_DECREASE = 0.9  # at least, per signal, so a noisy estimate cannot hold the pace up
_PROBE_PER_SECOND = 0.05  # pace growth while no signal arrives
_HEADER_MARGIN = 0.97  # of the refill rate the headers imply
_SENT_MEMORY = 10.0  # seconds of tickets kept to match against the headers' counts
_ADMITTED_MEMORY = 5.0  # seconds of answers (time, ticket) kept to measure admission
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")


def parse_duration(text: str) -> float | None:
    """`1s`, `6m0s`, `2m59.56s`, `120ms`, `0.5` (seconds) -> seconds."""
    text = text.strip()
    try:
        return max(0.0, float(text))
    except ValueError:
        pass
    total, pos = 0.0, 0
    for match in _DURATION.finditer(text):
        if match.start() != pos:
            return None
        value, unit = float(match.group(1)), match.group(2)
        total += value * {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}[unit]
        pos = match.end()
    return total if pos == len(text) and pos else None


def _seconds_until(text: str, now: float) -> float | None:
    try:
        moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        return None
    return max(0.0, moment.timestamp() - now)


def request_budget(headers: dict[str, str], now: float | None = None
                   ) -> tuple[int, int, float] | None:
    """(limit, remaining, seconds until fully replenished) from a provider's rate-limit
    headers on requests, or None when it sent none that can be read."""
    now = time.time() if now is None else now
    for prefix, absolute in (("x-ratelimit-", False), ("anthropic-ratelimit-", True)):
        if absolute:
            limit = headers.get(f"{prefix}requests-limit")
            remaining = headers.get(f"{prefix}requests-remaining")
            reset = headers.get(f"{prefix}requests-reset")
        else:
            limit = headers.get(f"{prefix}limit-requests")
            remaining = headers.get(f"{prefix}remaining-requests")
            reset = headers.get(f"{prefix}reset-requests")
        if limit is None or remaining is None or reset is None:
            continue
        try:
            lim, rem = int(float(limit)), int(float(remaining))
        except ValueError:
            continue
        seconds = _seconds_until(reset, now) if absolute else parse_duration(reset)
        if seconds is None or lim <= 0:
            continue
        return lim, max(0, rem), seconds
    return None


class Governor:
    """Admission control for one route."""

    def __init__(self, ceiling: int, *, initial: int = INITIAL_WINDOW,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.ceiling = max(1, ceiling)
        self.window = float(min(self.ceiling, max(1, initial)))
        self._slow_start = True
        self.in_flight = 0
        self._clock = clock
        self._gate = asyncio.Lock()
        self._released = asyncio.Event()
        self._pause_until = 0.0
        self._last_cut = -math.inf
        self._pace: float | None = None  # requests per second, from throttles
        self._paced_since = 0.0
        self._next_start = 0.0
        self._admitted: collections.deque[tuple[float, float]] = collections.deque()
        self._latency: float | None = None  # seconds, moving average of answered requests
        self._first_answer: float | None = None
        self._sent: collections.deque[float] = collections.deque()  # tickets, recent ones
        self._budget: float | None = None  # the provider's request budget, mirrored
        self._budget_at = 0.0
        self._budget_limit = 0.0
        self._budget_reset_at = 0.0
        self._refill: float | None = None  # requests per second the budget regains
        self.throttles = 0
        self.signals = 0

    # -- admission ----------------------------------------------------------------------------
    async def acquire(self) -> float:
        """Wait for a slot; return the time the request may be sent (its ticket)."""
        async with self._gate:
            while True:
                now = self._clock()
                if now < self._pause_until:
                    await asyncio.sleep(self._pause_until - now)
                    continue
                if self.in_flight >= int(self.window):
                    self._released.clear()
                    await self._released.wait()
                    continue
                pace = self.pace
                if pace is not None and now < self._next_start:
                    await asyncio.sleep(self._next_start - now)
                    continue
                budget_wait = self._budget_wait(now)
                if budget_wait > 0:
                    await asyncio.sleep(budget_wait)
                    continue
                if self._budget is not None:
                    self._budget = self._budget_now(now) - 1.0
                    self._budget_at = now
                self.in_flight += 1
                self._sent.append(now)
                while self._sent and self._sent[0] < now - _SENT_MEMORY:
                    self._sent.popleft()
                if pace is not None:
                    self._next_start = max(now, self._next_start) + 1.0 / pace
                return now

    @property
    def pace(self) -> float | None:
        """The current pacing rate in requests per second (None: not paced)."""
        paces = []
        if self._pace is not None:
            grown = self._pace * (1 + _PROBE_PER_SECOND) ** max(
                0.0, self._clock() - self._paced_since)
            paces.append(grown)
        return min(paces) if paces else None

    def _free(self) -> None:
        self.in_flight = max(0, self.in_flight - 1)
        self._released.set()

    # -- outcomes -----------------------------------------------------------------------------
    def answered(self, ticket: float, headers: dict[str, str] | None = None) -> None:
        """An answer that was not a throttle (success or another error)."""
        now = self._clock()
        self._free()
        took = max(0.0, now - ticket)
        self._latency = took if self._latency is None else 0.9 * self._latency + 0.1 * took
        if self._first_answer is None:
            self._first_answer = now
        self._admitted.append((now, ticket))
        while self._admitted and self._admitted[0][0] < now - _ADMITTED_MEMORY:
            self._admitted.popleft()
        if self._slow_start:
            self.window = min(float(self.ceiling), self.window + 1.0)
        else:
            self.window = min(float(self.ceiling), self.window + 1.0 / self.window)
        if self._pace is not None and self.pace is not None and self.pace >= self.ceiling * 50:
            self._pace = None  # grown far past anything the route could use
        if headers:
            self._read_headers(ticket, headers, now)

    def failed(self) -> None:
        """No answer (timeout, connection failure): frees the slot, changes nothing else."""
        self._free()

    def throttled(self, ticket: float, retry_after: float | None,
                  headers: dict[str, str] | None = None, *, honour_pause: bool = True) -> None:
        """A 429 (or a provider's equivalent) for a request sent at `ticket`."""
        now = self._clock()
        self._free()
        self.throttles += 1
        if honour_pause:
            wait = retry_after if retry_after is not None else 1.0 / (self.pace or 1.0)
            self._pause_until = max(self._pause_until, now + wait)
        if headers:
            self._read_headers(ticket, headers, now)
        if ticket <= self._last_cut:
            return  # sent before the last cut: the same congestion, already answered
        self._cut(now)

    def _cut(self, now: float) -> None:
        previous = self._last_cut
        self.signals += 1
        self._last_cut = now
        self._slow_start = False
        self.window = max(1.0, self.window / 2)
        current = self.pace
        congested = self._admission_rate(previous, now)
        if congested is not None:
            # Since the previous signal the provider's budget was spent, so what it admitted
            # then is its rate.
            target = congested * _PACE_FRACTION
            self._pace = min(target, current * _DECREASE) if current is not None else target
        elif current is not None:
            self._pace = current * _DECREASE
        else:
            # The first signal: what was admitted so far includes the provider's initial burst,
            # so start from half of it and let the next signals refine it.
            answered = self._admitted_since(now - 1.0)
            span = max(0.2, now - max(now - 1.0, self._first_answer or now))
            if answered >= 2:
                self._pace = answered / span / 2
        self._paced_since = now
        pace = self.pace
        if pace is not None and self._latency is not None:
            # A rate limit is answered by the pace; keep enough requests in flight to reach it.
            needed = math.ceil(pace * self._latency * 2)
            self.window = max(self.window, min(float(self.ceiling), float(needed)))

    def _admitted_since(self, moment: float) -> int:
        return sum(1 for answered_at, _ in self._admitted if answered_at >= moment)

    def _admission_rate(self, since: float, now: float) -> float | None:
        """Requests per second the provider admitted among those sent after `since` (whose
        answers are in by now), or None when that span is too short to tell."""
        latest = now - (self._latency or 0.0)
        span = latest - since
        if not math.isfinite(span) or span < 0.1:
            return None
        sent = sum(1 for _, ticket in self._admitted if since <= ticket <= latest)
        return sent / span if sent >= 2 else None

    def _read_headers(self, ticket: float, headers: dict[str, str], now: float) -> None:
        """Mirror the provider's request budget: what it had left when it took this request,
        plus what it refilled since, minus what was sent since."""
        budget = request_budget(headers, now=time.time() - (now - ticket))
        if budget is None:
            return
        limit, remaining, reset = budget
        self._pace = None  # the provider states its budget: pace by that, not by guesses
        if reset > 0 and remaining < limit:
            self._refill = (limit - remaining) / reset * _HEADER_MARGIN
        refill = self._refill or 0.0
        self._budget_limit = float(limit)
        self._budget = min(float(limit), remaining + refill * (now - ticket)
                           - self._sent_since(ticket))
        self._budget_at = now
        self._budget_reset_at = now + reset

    def _budget_now(self, now: float) -> float:
        assert self._budget is not None
        refill = self._refill or 0.0
        return min(self._budget_limit, self._budget + refill * (now - self._budget_at))

    def _budget_wait(self, now: float) -> float:
        """Seconds until the mirrored budget holds one request (0: it does now)."""
        if self._budget is None:
            return 0.0
        # Keep a small reserve: `remaining` is rounded down and the clocks jitter, so the
        # mirror can be a request or two above the provider's own count.
        need = 1.0 + max(2.0, 0.02 * self._budget_limit)
        left = self._budget_now(now)
        if left >= need:
            return 0.0
        if self._refill:
            return (need - left) / self._refill
        return max(0.0, self._budget_reset_at - now) or 0.05

    def _sent_since(self, ticket: float) -> int:
        return len(self._sent) - bisect.bisect_right(self._sent, ticket)

    def state(self) -> dict[str, Any]:
        pace = self.pace
        return {"window": round(self.window, 2), "ceiling": self.ceiling,
                "pace_per_second": round(pace, 2) if pace is not None else None,
                "throttled_answers": self.throttles, "throttle_signals": self.signals}


__all__ = ["INITIAL_WINDOW", "Governor", "parse_duration", "request_budget"]
