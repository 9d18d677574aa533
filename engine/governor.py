"""How many requests a route may have outstanding, and how fast it may start them.

The user's `--concurrency` is a ceiling, never exceeded. Below it the governor adapts to what
the provider says:

- It starts with a window of `min(ceiling, 16)` requests in flight and, like TCP's slow start,
  widens it by one for every answer that is not throttled, so a route that never throttles
  reaches the ceiling after a few round trips.
- A throttle (HTTP 429, or the provider's rate-limit headers saying the budget is spent) is a
  signal once per round trip: answers to requests sent before the last cut are not counted
  again. On a signal the window is halved, the route pauses for the provider's Retry-After
  (every worker, not only the one that was told), and requests are paced at the rate the
  provider was actually admitting: the successful answers of the last second, a little less.
  The pace then rises by a few percent a second until the next signal, so a route finds its
  limit again if the limit grows.
- Rate-limit headers (`x-ratelimit-{limit,remaining,reset}-requests` and
  `anthropic-ratelimit-requests-{limit,remaining,reset}`) are read on every answer. The refill
  rate they imply is (limit - remaining) / seconds to reset; when the remaining budget runs
  low the pace is set to that rate before any 429 arrives, and when it is ample again the
  header pacing is lifted.

Waiting is fair: workers queue in arrival order behind one gate, and only the worker at the
head waits on the clock or for a slot.
"""

from __future__ import annotations

import asyncio
import collections
import math
import re
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

INITIAL_WINDOW = 16
_PACE_FRACTION = 0.95  # of the observed admission rate, after a throttle
_PROBE_PER_SECOND = 0.04  # pace growth while no signal arrives
_LOW_BUDGET = 0.2  # remaining / limit under which header pacing starts
_AMPLE_BUDGET = 0.5  # and over which it stops
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
        self._header_pace: float | None = None  # requests per second, from headers
        self._paced_since = 0.0
        self._next_start = 0.0
        self._admitted: collections.deque[float] = collections.deque()
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
                self.in_flight += 1
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
        if self._header_pace is not None:
            paces.append(self._header_pace)
        return min(paces) if paces else None

    def _free(self) -> None:
        self.in_flight = max(0, self.in_flight - 1)
        self._released.set()

    # -- outcomes -----------------------------------------------------------------------------
    def answered(self, ticket: float, headers: dict[str, str] | None = None) -> None:
        """An answer that was not a throttle (success or another error)."""
        now = self._clock()
        self._free()
        self._admitted.append(now)
        while self._admitted and self._admitted[0] < now - 1.0:
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
        self.signals += 1
        self._last_cut = now
        self._slow_start = False
        self.window = max(1.0, self.window / 2)
        while self._admitted and self._admitted[0] < now - 1.0:
            self._admitted.popleft()
        observed = float(len(self._admitted))  # admitted in the last second
        current = self.pace
        if observed >= 2:
            target = observed * _PACE_FRACTION
            self._pace = min(target, current) if current is not None else target
        elif current is not None:
            self._pace = current / 2
        self._paced_since = now

    def _read_headers(self, ticket: float, headers: dict[str, str], now: float) -> None:
        budget = request_budget(headers)
        if budget is None:
            return
        limit, remaining, reset = budget
        refill = (limit - remaining) / reset if reset > 0 and remaining < limit else None
        if remaining <= _LOW_BUDGET * limit and refill:
            self._header_pace = refill
            if remaining == 0:
                self._pause_until = max(self._pause_until, now + 1.0 / refill)
        elif remaining >= _AMPLE_BUDGET * limit:
            self._header_pace = None

    def state(self) -> dict[str, Any]:
        pace = self.pace
        return {"window": round(self.window, 2), "ceiling": self.ceiling,
                "pace_per_second": round(pace, 2) if pace is not None else None,
                "throttled_answers": self.throttles, "throttle_signals": self.signals}


__all__ = ["INITIAL_WINDOW", "Governor", "parse_duration", "request_budget"]
