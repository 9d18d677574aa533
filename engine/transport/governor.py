"""How many requests a route may have outstanding, and how fast it may start them.

The user's `--concurrency` is a ceiling, never exceeded. Below it the governor adapts to what
the provider says:

- It starts with a window of `min(ceiling, 16)` requests in flight and, like TCP's slow start,
  widens it by one for every answer that is not throttled, so a route that never throttles
  reaches the ceiling after a few round trips.
- Every retryable 429 is judged first: is it the route's rate limit, or an error of that one
  request (an aggregator whose upstream is busy, an edge shedding load)? It is a limit when
  - it carries rate-limit headers that show a budget used up, or that cannot be read;
  - or it is one of a run: among the requests sent in the last two round trips since the
    last cut (at least the last 40; those still unanswered counted as not throttled, since
    a 429 comes back at once and a success only after the latency), more 429s, for several
    prompts, than a background of 10 % would give one time in a thousand, and (unless the
    window is still widening in slow start) at least 30 % of them; or, while it still widens,
    3 or more 429s for several prompts, those after the sample's first 429 more, among the
    requests sent after it, than that background would give one time in 10,000 (a budget
    spent in slow start answers every later request with a 429 at once, while the successes
    sent before it are still on their way);
  - or the route is paced after a limit and the 429s among its requests since the cut are
    more than the background share explains (one time in 500), the share taken as high as
    the answers it stands on allow (two standard errors above it, at most 10 %), so that
    random 429s on a route that knows little of its background are not taken for its limit.
    On a paced route whose answers outside the spans that ended in a cut, at any pace, have
    held almost no 429 (at most 1 %, and fewer than a background of 10 % would give one time
    in a hundred: 44 answers or more without one), the first 429 is the limit again, unless
    the last cut was such a 429 sent below the probing zone and this one is too: a limit
    found and paced below does not answer so again at once, random 429s do. An isolated 429
    to a request paced above a measured rate undoes the probe's growth of a second, or of
    the time it takes to send 5 requests if that is shorter (so the pace still rises while
    fewer than one in five of those requests are 429s).
  Otherwise it is isolated: the slot is freed and the window, the pace and every other worker
  are left alone; the prompt retries by its own backoff and `Retry-After`. The background
  share is that of the 429s among the last 400 answers to requests sent below the probing
  zone (a prior of one in twenty until there are answers enough): what a route sees
  whatever its rate, since a limit's 429s come only when the rate is high. The requests of a
  span that ended in a cut (from the first 429 of the judge's sample, and those unanswered
  at the cut) leave it as a whole, successes with 429s: taking out only the 429s would leave
  it diluted by that span's successes.
- A limit is a signal once per round trip: answers to requests sent before the last cut are
  taken as the same congestion. On a signal the route pauses for the shortest Retry-After a
  recent 429 asked for (every worker, not only the one that was told; a 429 refused at random
  may ask for longer than the limit's own), requests are paced at the rate the provider was
  actually admitting since the previous signal, its pause included (a little less, and allowing
  for the background share; when the previous signal came too soon for half a second of sending,
  since the latest signal before it that leaves that long, the limit having bound all along, its
  pauses left out of that half second), and the window is halved, though never below what that
  pace needs at the observed latency (twice pace x latency), so a rate limit is met by pacing,
  not by starving. After a limit that asked for a pause of a second or more (a window that
  remembers what was sent), the pace is at most what was admitted over the last 30 s up to the
  end of the pause: a window refilled in a pause, or a first burst, would otherwise look like a
  rate it cannot keep up. The pace then rises by 5 % a second; from half-way back to the rate
  where the limit was found it is probing, and past a rate that was measured (not guessed from a
  first burst) it rises by 1 % a second, because a window remembers what was sent for as long as
  it lasts and an excess shows late.
- Rate-limit headers (`x-ratelimit-{limit,remaining,reset}-{requests,tokens}` and
  `anthropic-ratelimit-{requests,tokens}-{limit,remaining,reset}`) are read on every answer
  and mirrored, one budget per family: the budget the provider had left when it took that
  request, plus what it has regained since at the refill rate the headers imply ((limit -
  remaining) / seconds to reset), minus every request sent since. Tokens are counted in
  requests, at the cost per request that successive readings imply. A request waits until
  every mirror holds one, so a route that states its budget is used up to it and not past
  it, before any 429 arrives.

Waiting is fair: workers queue in arrival order behind one gate, and only the worker at the
head waits on the clock or for a slot. `state()` says where the route ended and why: the
429s taken as limits (by reason) and as isolated, the pauses, cuts and paces with their
reasons (the latest 20), the background share and the rate-limit header families seen.
"""

from __future__ import annotations

import asyncio
import bisect
import collections
import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

INITIAL_WINDOW = 16
_PACE_FRACTION = 0.95  # of the observed admission rate, after a throttle
_DECREASE = 0.9  # at least, per signal, so a noisy estimate cannot hold the pace up
_PROBE_PER_SECOND = 0.05  # pace growth while no signal arrives ...
_PROBE_ABOVE = 0.01  # ... and once above the rate where the last limit was found
_HEADER_MARGIN = 0.97  # of the refill rate the headers imply
_SENT_MEMORY = 10.0  # seconds of tickets kept to match against the headers' counts
_ADMITTED_MEMORY = 5.0  # seconds of answers (time, ticket) kept to measure admission
_SUSTAINED_MEMORY = 30.0  # seconds of admitted tickets kept to bound the rate a limit sustains
_SUSTAINED_SPAN = 1.0  # seconds of sending, at least, before that bound is taken ...
_WINDOW_PAUSE = 1.0  # ... after a limit that asked for a pause of this many seconds at least
_RECENT = 40  # requests whose outcomes judge whether a 429 is one of a run
_RUN_SHARE = 0.30  # of them answered 429, at least, for a run ...
_RUN_ABOVE_BACKGROUND = 0.20  # ... and this much above the background share
_RUN_PROMPTS = 4  # different prompts among those 429s, at least (fewer on a small ceiling)
_PROBE_CHANCE = 0.002  # at most, that a paced route's 429s come at the background's rate
_RUN_CHANCE = 0.001  # at most, that a run's 429s come at random
_RUN_BACKGROUND = 0.1  # the background a run is held against, at least
_PRIOR = (1.0, 20.0)  # 429s and answers assumed before any are seen
_CLEAN_SHARE = 0.01  # of 429s, at most, among the answers of a route called clean, ...
_CLEAN_CHANCE = 0.01  # ... and at most this chance that a background of 10 % gives so few
_STREAK_CHANCE = 0.0001  # at most, that the 429s from the first of a run on come at random
_HOLD_SHARE = 0.2  # of 429s among the requests paced above a measured rate, that hold it
_RANDOM_ALLOWANCE = 1.1  # at most, what the pace adds for requests refused at random
_BACKGROUND = 400  # answers kept to measure the share of 429s that come whatever the rate
_BACKGROUND_MAX = 0.10  # taken as the background at most: a limit must not hide behind it
_DECISIONS = 20  # decisions kept for state()
_NOTED_PAUSE = 0.05  # seconds: shorter pauses are kept but not counted among the decisions
_EXHAUSTED = 0.02  # of a stated limit, at most, left for a family to count as used up
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")
_FAMILIES = ("requests", "tokens", "input-tokens", "output-tokens")
_RATE_LIMIT_PREFIXES = ("x-ratelimit", "anthropic-ratelimit", "ratelimit", "x-rate-limit")


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


def budgets(
    headers: dict[str, str], now: float | None = None
) -> dict[str, tuple[str, int, int, float]]:
    """family -> (header style, limit, remaining, seconds until fully replenished), for every
    family (`requests`, `tokens`, ...) whose rate-limit headers can be read."""
    now = time.time() if now is None else now
    found: dict[str, tuple[str, int, int, float]] = {}
    for family in _FAMILIES:
        for style in ("openai", "anthropic"):
            if style == "anthropic":
                names = [
                    f"anthropic-ratelimit-{family}-{part}"
                    for part in ("limit", "remaining", "reset")
                ]
            else:
                names = [f"x-ratelimit-{part}-{family}" for part in ("limit", "remaining", "reset")]
            limit, remaining, reset = (headers.get(name) for name in names)
            if limit is None or remaining is None or reset is None:
                continue
            try:
                lim, rem = int(float(limit)), int(float(remaining))
            except ValueError:
                continue
            seconds = _seconds_until(reset, now) if style == "anthropic" else parse_duration(reset)
            if seconds is None or lim <= 0:
                continue
            found[family] = (style, lim, max(0, rem), seconds)
            break
    return found


def request_budget(
    headers: dict[str, str], now: float | None = None
) -> tuple[int, int, float] | None:
    """(limit, remaining, seconds until fully replenished) from a provider's rate-limit
    headers on requests, or None when it sent none that can be read."""
    found = budgets(headers, now).get("requests")
    return None if found is None else found[1:]


def header_families(headers: dict[str, str]) -> set[str]:
    """The rate-limit header families present, by name (`x-ratelimit-*-tokens`, ...)."""
    families = set()
    for name in headers:
        low = name.lower()
        if not low.startswith(_RATE_LIMIT_PREFIXES):
            continue
        family = next(
            (
                f
                for f in sorted(_FAMILIES, key=len, reverse=True)
                if low.endswith("-" + f) or f"-{f}-" in low
            ),
            None,
        )
        if family is None:
            families.add(low)
        elif low.startswith("anthropic-"):
            families.add(f"anthropic-ratelimit-{family}-*")
        else:
            families.add(f"x-ratelimit-*-{family}")
    return families


def _binomial(ks: range, n: int, p: float) -> float:
    """The probability that the number of 429s among `n` answers, each a 429 with chance p,
    is one of `ks`."""
    return min(1.0, sum(math.comb(n, k) * p**k * (1 - p) ** (n - k) for k in ks))


def _chance(hits: int, n: int, p: float) -> float:
    """The probability of at least `hits` 429s among `n` answers each a 429 with chance p."""
    if hits <= 0:
        return 1.0
    if n <= 0 or hits > n:
        return 0.0
    return _binomial(range(hits, n + 1), n, p)


def _chance_at_most(hits: int, n: int, p: float) -> float:
    """The probability of at most `hits` 429s among `n` answers each a 429 with chance p."""
    if hits >= n:
        return 1.0
    if hits < 0:
        return 0.0
    return _binomial(range(hits + 1), n, p)


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


@dataclass(slots=True, eq=False)
class _Sent:
    """A request sent, as the judge of a 429 sees it."""

    ticket: float
    throttled: bool | None = None  # None: no answer yet
    prompt: str | None = None
    probing: bool = False  # sent in the probing zone
    pace: float | None = None  # the pace it was sent at (None: not paced)
    congested: bool = False  # sent in the span that ended in a cut, or unanswered at the cut
    retry_after: float | None = None  # what its 429 asked for


class _Mirror:
    """One family of a provider's stated budget, in requests, kept current between answers."""

    def __init__(self) -> None:
        self.level = 0.0
        self.at = 0.0
        self.limit = 0.0
        self.reset_at = 0.0
        self.refill: float | None = None  # requests per second the budget regains

    def now(self, moment: float) -> float:
        return min(self.limit, self.level + (self.refill or 0.0) * (moment - self.at))

    def spend(self, moment: float) -> None:
        self.level, self.at = self.now(moment) - 1.0, moment

    def read(
        self,
        limit: float,
        remaining: float,
        reset: float,
        ticket: float,
        now: float,
        sent_since: int,
    ) -> None:
        """What the provider had left when it took the request sent at `ticket`, plus what it
        refilled since, minus what was sent since."""
        if reset > 0 and remaining < limit:
            self.refill = (limit - remaining) / reset * _HEADER_MARGIN
        self.limit = limit
        self.level = min(limit, remaining + (self.refill or 0.0) * (now - ticket) - sent_since)
        self.at = now
        self.reset_at = now + reset

    def wait(self, moment: float) -> float:
        """Seconds until the mirror holds one request (0: it does now)."""
        # Keep a small reserve: `remaining` is rounded down and the clocks jitter, so the
        # mirror can be a request or two above the provider's own count.
        need = 1.0 + max(2.0, 0.02 * self.limit)
        left = self.now(moment)
        if left >= need:
            return 0.0
        if self.refill:
            return (need - left) / self.refill
        return max(0.0, self.reset_at - moment) or 0.05


class Governor:
    """Admission control for one route."""

    def __init__(
        self,
        ceiling: int,
        *,
        initial: int = INITIAL_WINDOW,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ceiling = max(1, ceiling)
        self.window = float(min(self.ceiling, max(1, initial)))
        self._slow_start = True
        self.in_flight = 0
        self._clock = clock
        self._born = clock()
        self._gate = asyncio.Lock()
        self._released = asyncio.Event()
        self._pause_until = 0.0
        self._last_cut = -math.inf
        self._resumed_at = -math.inf  # when the pause of the last signal ended
        self._paused = 0.0  # seconds of pauses, in all, up to _pause_until
        # The signals since the last that measured an admission rate, with the seconds paused
        # up to each: the limit has bound since every one of them.
        self._unmeasured: list[tuple[float, float]] = []
        self._pace: float | None = None  # requests per second, from throttles
        self._paced_since = 0.0
        self._next_start = 0.0
        self._admitted: collections.deque[tuple[float, float]] = collections.deque()
        self._sustained: collections.deque[float] = collections.deque()  # admitted tickets
        self._first_ticket: float | None = None
        self._latency: float | None = None  # seconds, moving average of answered requests
        self._first_answer: float | None = None
        self._sent: collections.deque[float] = collections.deque()  # tickets, recent ones
        self._mirrors: dict[str, _Mirror] = {}  # the provider's stated budgets, by family
        self._token_cost: float | None = None  # tokens a request costs, from the readings
        self._token_reading: tuple[float, float] | None = None  # (ticket, remaining)
        self._recent: collections.deque[_Sent] = collections.deque(
            maxlen=2 * self.ceiling + _RECENT
        )  # the last requests sent
        self._unanswered: dict[float, list[_Sent]] = {}  # ticket -> those of _recent
        # Answers to requests sent outside the spans that ended in a cut:
        # (ticket, whether a 429, whether sent in the probing zone, the pace it was sent at)
        self._background: collections.deque[tuple[float, bool, bool, float | None]] = (
            collections.deque(maxlen=_BACKGROUND)
        )
        self._limit_rate: float | None = None  # where the last limit was found, per second
        self._zone_rate = math.inf  # the pace from which the route is probing for it
        self._measured: float | None = None  # the limit's rate, when measured (not guessed)
        self._zone_since = math.inf  # when the pace rose above it (the probing zone)
        self._clean_below = False  # the last cut was a clean route's 429 sent below the zone
        self._judged_clean_below = False  # the 429 being judged is one
        self.throttles = 0
        self.signals = 0
        self.limits = 0
        self.isolated = 0
        self.limit_reasons: collections.Counter[str] = collections.Counter()
        self.pauses = 0
        self.decisions: collections.deque[dict[str, Any]] = collections.deque(maxlen=_DECISIONS)
        self._last_isolated: dict[str, Any] | None = None
        self._families: set[str] = set()

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
                budget_wait = max((m.wait(now) for m in self._mirrors.values()), default=0.0)
                if budget_wait > 0:
                    await asyncio.sleep(budget_wait)
                    continue
                for mirror in self._mirrors.values():
                    mirror.spend(now)
                self.in_flight += 1
                if self._first_ticket is None:
                    self._first_ticket = now
                self._sent.append(now)
                while self._sent and self._sent[0] < now - _SENT_MEMORY:
                    self._sent.popleft()
                if pace is not None:
                    self._next_start = max(now, self._next_start) + 1.0 / pace
                    if self._zone_since == math.inf and pace >= self._zone_rate:
                        self._zone_since = now
                self._remember(now, pace)
                return now

    @property
    def pace(self) -> float | None:
        """The current pacing rate in requests per second (None: not paced)."""
        if self._pace is None:
            return None
        elapsed = max(0.0, self._clock() - self._paced_since)
        found = self._measured
        if found is not None and self._pace >= found:
            return float(self._pace * (1 + _PROBE_ABOVE) ** elapsed)
        grown: float = self._pace * (1 + _PROBE_PER_SECOND) ** elapsed
        if found is not None and grown > found > self._pace:
            # Past the rate where the limit was measured it probes gently: a window remembers
            # what was sent for as long as it lasts, so an excess shows late.
            below = math.log(found / self._pace) / math.log(1 + _PROBE_PER_SECOND)
            grown = found * (1 + _PROBE_ABOVE) ** (elapsed - below)
        return grown

    def _hold_probe(self, now: float, entry: _Sent | None) -> None:
        """An isolated 429 to a request paced above the rate where the limit was measured
        undoes a second of the probe's growth (or the growth of the time it takes to send 5
        requests, if shorter): it may be random, or the limit's first excess too few to tell
        apart from the background, and a probe that went on rising through such 429s would
        creep past the limit by 1 % a second with nothing to stop it. The pace still rises
        while fewer than a fifth of those requests are 429s, so a background of random 429s
        (at most a tenth) slows the probe without holding it at a rate measured a little
        low; the limit's excess on top of them stops it. They never lower it below the
        measured rate."""
        found, pace = self._measured, self.pace
        if (
            found is None
            or pace is None
            or entry is None
            or entry.pace is None
            or entry.pace <= found
            or pace <= found
        ):
            return
        undo = min(1.0, 1.0 / (_HOLD_SHARE * pace))
        self._pace = max(found, pace / (1 + _PROBE_ABOVE) ** undo)
        self._paced_since = now

    def _free(self) -> None:
        self.in_flight = max(0, self.in_flight - 1)
        self._released.set()

    def _remember(self, ticket: float, pace: float | None) -> None:
        if len(self._recent) == self._recent.maxlen:
            oldest = self._recent[0]
            if oldest.throttled is None:
                self._forget(oldest)
        entry = _Sent(ticket, probing=ticket >= self._zone_since, pace=pace)
        self._recent.append(entry)
        self._unanswered.setdefault(ticket, []).append(entry)

    def _forget(self, entry: _Sent) -> None:
        entries = self._unanswered.get(entry.ticket)
        if entries is not None:
            if entry in entries:
                entries.remove(entry)
            if not entries:
                del self._unanswered[entry.ticket]

    def _outcome(self, ticket: float, throttled: bool, prompt: str | None = None) -> _Sent | None:
        entries = self._unanswered.get(ticket)
        if not entries:
            return None
        entry = entries.pop(0)
        if not entries:
            del self._unanswered[ticket]
        entry.throttled, entry.prompt = throttled, prompt
        return entry

    def _probing(self, ticket: float, entry: _Sent | None) -> bool:
        """Whether the request was sent in the probing zone."""
        return entry.probing if entry is not None else ticket >= self._zone_since

    def _calm(self, ticket: float, throttled: bool, entry: _Sent | None) -> None:
        """Keep an answer as evidence of what the route refuses whatever its rate, unless it
        was sent in a span that ended in a cut. Leaving out such a span as a whole, its
        successes with its 429s, keeps the share unbiased: a 429 taken as the limit there
        may as well have been refused at random."""
        if entry is None or not entry.congested:
            self._background.append(
                (
                    ticket,
                    throttled,
                    self._probing(ticket, entry),
                    entry.pace if entry is not None else None,
                )
            )

    def _sample(self, now: float, since: float = -math.inf) -> list[_Sent]:
        """The requests sent in the last two round trips (at least the last 40; after
        `since`), those still unanswered counted as not throttled: a 429 comes back at once
        while its neighbours' successes take the whole latency, so the answers alone would
        show the latest 429s before the successes sent with them."""
        horizon = now - 2 * self._latency if self._latency is not None else now
        sample: list[_Sent] = []
        for entry in reversed(self._recent):
            if entry.ticket < since or (entry.ticket < horizon and len(sample) >= _RECENT):
                break
            sample.append(entry)
        return sample

    # -- outcomes -----------------------------------------------------------------------------
    def answered(self, ticket: float, headers: dict[str, str] | None = None) -> None:
        """An answer that was not a throttle (success or another error)."""
        now = self._clock()
        self._free()
        entry = self._outcome(ticket, False)
        self._calm(ticket, False, entry)
        took = max(0.0, now - ticket)
        self._latency = took if self._latency is None else 0.9 * self._latency + 0.1 * took
        if self._first_answer is None:
            self._first_answer = now
        self._admit(now, ticket)
        if self._slow_start:
            self.window = min(float(self.ceiling), self.window + 1.0)
        else:
            self.window = min(float(self.ceiling), self.window + 1.0 / self.window)
        if self._pace is not None and self.pace is not None and self.pace >= self.ceiling * 50:
            self._pace = None  # grown far past anything the route could use
        if headers:
            self._read_headers(ticket, headers, now)

    def _admit(self, now: float, ticket: float) -> None:
        self._admitted.append((now, ticket))
        while self._admitted and self._admitted[0][0] < now - _ADMITTED_MEMORY:
            self._admitted.popleft()
        self._sustained.append(ticket)
        while self._sustained and self._sustained[0] < now - _SUSTAINED_MEMORY:
            self._sustained.popleft()

    def _sustained_at_most(self, now: float, until: float) -> tuple[float, float] | None:
        """(requests per second, over how many seconds): at most what the limit can sustain,
        or None before the route has sent for long enough. At a signal the budget is used up
        until the pause it asked for ends (`until`), so what it admitted over a long span
        ending then is its rate plus at most one burst (a full bucket, a window's worth)
        spread over that span. The requests still unanswered count as admitted, since a 429
        comes back at once."""
        if self._first_ticket is None:
            return None
        since = max(self._first_ticket, now - _SUSTAINED_MEMORY)
        span = until - since
        if span < _SUSTAINED_SPAN:
            return None
        admitted = sum(1 for t in self._sustained if t >= since) + self.in_flight
        return admitted / span, span

    def failed(self) -> None:
        """No answer (timeout, connection failure): frees the slot, changes nothing else."""
        self._free()

    def throttled(
        self,
        ticket: float,
        retry_after: float | None,
        headers: dict[str, str] | None = None,
        *,
        honour_pause: bool = True,
        prompt: str | None = None,
    ) -> str:
        """A 429 (or a provider's equivalent) for a request sent at `ticket` (for `prompt`);
        returns how it was taken: `limit` or `isolated`."""
        now = self._clock()
        self._free()
        self.throttles += 1
        entry = self._outcome(ticket, True, prompt)
        if entry is not None:
            entry.retry_after = retry_after
        headers = headers or {}
        if ticket <= self._last_cut:
            kind, reason = "limit", "sent before the last cut: the same congestion"
        else:
            kind, reason = self._judge(ticket, headers, now)
        if headers:
            self._read_headers(ticket, headers, now)
        if kind == "isolated":
            self.isolated += 1
            self._calm(ticket, True, entry)
            self._last_isolated = {"t": round(now - self._born, 3), "reason": reason}
            self._hold_probe(now, entry)
            return kind
        self.limits += 1
        self.limit_reasons[reason.split(":")[0]] += 1
        if honour_pause:
            wait = retry_after if retry_after is not None else 1.0 / (self.pace or 1.0)
            # The shortest wait a recent 429 asked for: one refused whatever the rate may ask
            # for longer than the limit's own.
            wait = min(
                [
                    wait,
                    *(
                        e.retry_after
                        for e in self._sample(now)
                        if e.throttled and e.retry_after is not None
                    ),
                ]
            )
            if wait > 0 and now + wait > self._pause_until + 0.001:
                if self._pause_until <= now and wait >= _NOTED_PAUSE:
                    self.pauses += 1
                    self._decide(now, "pause", f"{wait:.2f} s for the route ({reason})")
                self._paused += now + wait - max(now, self._pause_until)
                self._pause_until = now + wait
        if ticket > self._last_cut:
            self._cut(now, reason)
        else:
            self._resumed_at = max(self._resumed_at, self._pause_until)
        return kind

    def _judge(self, ticket: float, headers: dict[str, str], now: float) -> tuple[str, str]:
        """(`limit` or `isolated`, why) for a 429 to a request sent at `ticket`."""
        families = header_families(headers)
        note = "no rate-limit headers"
        if families:
            readable = budgets(headers, time.time() - (now - ticket))
            used_up = [
                f for f, (_, lim, rem, _) in readable.items() if rem <= self._exhausted_at(f, lim)
            ]
            # Headers without a family (`x-ratelimit-remaining`, `ratelimit-remaining`).
            bare = [
                _number(value)
                for name, value in headers.items()
                if name.lower() in header_families({name: value})
                and name.lower().endswith("remaining")
            ]
            if any(left is not None and left <= 0 for left in bare):
                used_up.append("the stated budget")
            if used_up:
                return "limit", f"headers: {', '.join(used_up)} used up on the 429"
            if not readable and not any(left is not None for left in bare):
                return "limit", "headers: rate-limit headers on the 429"
            note = "its rate-limit headers show budget left"
        # The requests sent since the last cut: the earlier ones were answered by it.
        sample = self._sample(now, since=self._last_cut)
        start = sample[-1].ticket if sample else now
        # Measured before the sample, so that a run of 429s cannot raise its own bar.
        background = min(_BACKGROUND_MAX, self._background_before(start))
        if self.pace is not None:
            # Paced after a limit: more 429s since the cut than the background explains are
            # the limit again, above the rate where it was found (probing) or below it.
            probing = ticket >= self._zone_since
            paced = [e for e in sample if e.ticket >= self._zone_since] if probing else sample
            hits = sum(1 for e in paced if e.throttled)
            bound = self._background_bound(start)
            chance = _chance(hits, len(paced), bound)
            # Twice in a row below the probing zone is not a limit met again but a route that
            # met 429s at random after answers too few to tell: such a 429 is judged by counts.
            if self._clean(start) and not (self._clean_below and not probing):
                self._judged_clean_below = not probing
                # A route whose 429s have come only with its rate: its first one, paced above
                # the rate where the limit was found or just below it, is the limit again.
                # Taken as isolated, such 429s would count as background and hide the limit.
                return "limit", (
                    f"{'probe' if probing else 'excess'}: a 429 paced "
                    f"{'above' if probing else 'near'} "
                    f"{self._limit_rate or 0:.1f}/s, where the limit was found, "
                    "on a route without random 429s"
                )
            if hits >= 2 and chance < _PROBE_CHANCE:
                assert self._limit_rate is not None
                return "limit", (
                    f"{'probe' if probing else 'excess'}: {hits} of the last "
                    f"{len(paced)} requests paced since the limit was found at "
                    f"{self._limit_rate:.1f}/s were 429, a chance of "
                    f"{chance:.1g} at a background of up to {bound:.0%}"
                )
        # While the window still widens (slow start) the rate is rising: a run needs only to be
        # more 429s than chance gives; afterwards also a large share of the requests.
        rising = self._slow_start and self.window < self.ceiling
        hits = sum(1 for e in sample if e.throttled)
        prompts = len({e.prompt or e.ticket for e in sample if e.throttled})
        need = min(_RUN_PROMPTS, max(2, self.ceiling // 2))
        share = hits / max(1, len(sample))
        if (
            hits >= 2
            and prompts >= need
            and (rising or share >= max(_RUN_SHARE, background + _RUN_ABOVE_BACKGROUND))
            and _chance(hits, len(sample), max(background, _RUN_BACKGROUND)) < _RUN_CHANCE
        ):
            return "limit", (
                f"run: {hits} of the last {len(sample)} requests were 429, for {prompts} prompts"
            )
        if rising and hits >= 3 and prompts >= need:
            # A budget spent in slow start answers every request sent after it with a 429, at
            # once: from the first 429 of the sample on, the run is nearly all of them, while
            # the requests sent before it dilute the sample for as long as their successes take.
            first = max(i for i, e in enumerate(sample) if e.throttled)
            streak = sample[: first + 1]
            if (
                _chance(hits - 1, len(streak) - 1, max(background, _RUN_BACKGROUND))
                < _STREAK_CHANCE
            ):
                return "limit", (
                    f"run: {hits} of the {len(streak)} requests sent from the first 429 of "
                    f"the last {len(sample)} on were 429, for {prompts} prompts"
                )
        return "isolated", (
            f"{note}; {hits} of the last {len(sample)} requests were 429"
            f" (background {background:.0%})"
        )

    def _exhausted_at(self, family: str, limit: int) -> float:
        floor = max(1.0, _EXHAUSTED * limit)
        if family != "requests" and self._token_cost is not None:
            floor = max(floor, 2 * self._token_cost)
        return floor

    @property
    def background_share(self) -> float:
        """The share of 429s among answers to requests sent below the probing zone."""
        return self._background_before(math.inf)

    def _unlearn(self, now: float, previous: float) -> None:
        """The span that ended in a cut is no background: its 429s (those taken as isolated
        too) were the limit's. The requests sent in it (from the first 429 of the judge's
        sample on) and those still unanswered at the cut leave the background, successes
        with 429s, so that what is left is a share of the requests sent while the limit did
        not bind."""
        sample = self._sample(now, since=previous)
        start = min((e.ticket for e in sample if e.throttled), default=now)
        for entry in self._recent:
            if entry.ticket >= start or entry.throttled is None:
                entry.congested = True
        self._background = collections.deque(
            (e for e in self._background if e[0] < start), maxlen=_BACKGROUND
        )

    def _clean(self, moment: float) -> bool:
        """Whether, before `moment`, the route has had answers enough outside the spans that
        ended in a cut, at any pace, and (almost) no 429 among them: so few that a background
        of 10 % would give them one time in a hundred at most (30 answers without a 429 are
        one time in 24, and made every random 429 of a paced route a limit)."""
        answers = [hit for ticket, hit, _, _ in self._background if ticket < moment]
        hits = sum(answers)
        return (
            hits <= _CLEAN_SHARE * len(answers)
            and _chance_at_most(hits, len(answers), _BACKGROUND_MAX) < _CLEAN_CHANCE
        )

    def _background_before(self, moment: float) -> float:
        """The share of 429s among the answers to requests sent before `moment`, below the
        probing zone (a limit's 429s come when the rate is high, the others at any rate)."""
        return self._background_counts(moment)[0]

    def _background_bound(self, moment: float) -> float:
        """The background share before `moment` as high as its answers allow (two standard
        errors above it, at most the largest share taken as background): a paced route's 429s
        are held against it, and one measured on few answers must not make random 429s look
        like a limit."""
        share, n = self._background_counts(moment)
        return min(_BACKGROUND_MAX, share + 2 * math.sqrt(share * (1 - share) / n))

    def _background_counts(self, moment: float) -> tuple[float, float]:
        """(share of 429s, answers it stands on) among the answers to requests sent before
        `moment` below the probing zone, a prior included."""
        answers = self._evidence(moment)
        # A prior of one 429 in 20 answers: until there are answers enough, the background is
        # not taken to be zero.
        n = len(answers) + _PRIOR[1]
        return (sum(answers) + _PRIOR[0]) / n, n

    def _evidence(self, moment: float) -> list[bool]:
        """Whether each answer kept was a 429, for the requests sent before `moment` below the
        probing zone, at a pace below half-way up to the rate where the limit was last
        measured: those paced faster, probing or by a guess
        that proved too high, may have met the limit, and tell nothing sure of what is
        refused whatever the rate. (Counted, the limit's 429s among them would make a route
        without random 429s look as if it had them, and hide the limit behind them.)"""
        below = math.inf if self._measured is None else self._measured * (1 + _PACE_FRACTION) / 2
        return [
            hit
            for ticket, hit, probing, pace in self._background
            if ticket < moment and not probing and (pace is None or pace < below)
        ]

    def _decide(self, now: float, kind: str, reason: str) -> None:
        self.decisions.append({"t": round(now - self._born, 3), "kind": kind, "reason": reason})

    def _cut(self, now: float, reason: str) -> None:
        previous = self._last_cut
        self._clean_below, self._judged_clean_below = self._judged_clean_below, False
        self._unlearn(now, previous)
        self.signals += 1
        self._last_cut = now
        self._slow_start = False
        before = self.window
        self.window = max(1.0, self.window / 2)
        current = self.pace
        # Over the whole span since the previous signal, its pause included (a bucket refills
        # and a window moves on while the route waits), but only if the route sent for long
        # enough in it to have met the limit. When the previous signal came too soon for that,
        # the span goes back to the latest signal before it that leaves long enough: signals
        # that came too close together to measure one are one span, the limit bound in all.
        paused = self._paused - max(0.0, self._pause_until - now)  # up to now
        active = now - (self._latency or 0.0) - max(previous, self._resumed_at)
        since = previous
        for cut, paused_then in reversed(self._unmeasured[:-1] if active < 0.5 else []):
            active = now - (self._latency or 0.0) - cut - (paused - paused_then)
            if active >= 0.5:
                since = cut
                break
        congested = self._admission_rate(since, now) if active >= 0.5 else None
        self._resumed_at = self._pause_until
        if congested is not None:
            self._unmeasured.clear()
        self._unmeasured.append((now, paused))
        while self._unmeasured[0][0] < now - _ADMITTED_MEMORY:  # beyond the answers kept
            self._unmeasured.pop(0)
        why, found = "", None
        if congested is not None:
            # Since the previous signal the provider's budget was spent, so what it admitted
            # then is its rate; the requests refused whatever the rate (the background share)
            # were sent at that rate too.
            background = min(_BACKGROUND_MAX, self.background_share)
            found = congested * min(1 / (1 - background), _RANDOM_ALLOWANCE)
            target = found * _PACE_FRACTION
            self._pace = min(target, current * _DECREASE) if current is not None else target
            why = (
                f"{congested:.1f}/s admitted since the previous signal, "
                f"{background:.0%} refused whatever the rate"
            )
        elif current is not None:
            found, self._pace = current, current * _DECREASE
            why = "no admission rate measured: the pace less 10 %"
        else:
            # The first signal: what was admitted so far includes the provider's initial burst,
            # so start from half of it and let the next signals refine it.
            answered = self._admitted_since(now - 1.0)
            span = max(0.2, now - max(now - 1.0, self._first_answer or now))
            if answered >= 2:
                self._pace = answered / span / 2
                why = f"half of the {answered / span:.1f}/s admitted in the last second"
            elif len(self._admitted) >= 2:
                # A slow route: what it admitted over the answers kept.
                span = max(1.0, now - self._admitted[0][1])
                self._pace = len(self._admitted) / span * _PACE_FRACTION
                why = f"{len(self._admitted) / span:.2f}/s admitted in the last {span:.1f} s"
        measured = congested is not None
        # A limit that asks for a long pause is a window that remembers what was sent: the
        # window it refills in the pause can make the span since the previous signal look like
        # a far higher rate than it keeps up; a long span to the end of the pause cannot.
        most = (
            self._sustained_at_most(now, self._pause_until)
            if self._pause_until - now >= _WINDOW_PAUSE
            else None
        )
        if most is not None and self._pace is not None:
            background = min(_BACKGROUND_MAX, self.background_share)
            bound = most[0] * min(1 / (1 - background), _RANDOM_ALLOWANCE)
            if self._pace > bound * _PACE_FRACTION:
                self._pace, found, measured = bound * _PACE_FRACTION, bound, True
                why = (
                    f"{most[0]:.1f}/s admitted in the {most[1]:.0f} s to the end of its pause, "
                    f"{background:.0%} refused whatever the rate"
                )
        self._paced_since = max(now, self._pause_until)  # it probes once sending resumes
        pace = self.pace
        if found is None and pace is not None:
            found = pace / _PACE_FRACTION
        self._limit_rate = found if pace is not None else None
        self._measured = found if pace is not None and measured else None
        # Probing from half-way back up to it: the requests sent below are sure to be below
        # the limit and tell what is refused whatever the rate. Only a measured admission rate
        # is sure enough for that; after a guess the route probes at once.
        self._zone_rate = (
            math.inf if pace is None or found is None else (pace + found) / 2 if measured else 0.0
        )
        self._zone_since = math.inf
        if pace is not None and self._latency is not None:
            # A rate limit is answered by the pace; keep enough requests in flight to reach it.
            needed = math.ceil(pace * self._latency * 2)
            self.window = max(self.window, min(float(self.ceiling), float(needed)))
        self._decide(now, "cut", f"window {before:.0f} -> {self.window:.0f} ({reason})")
        if pace is not None and why:
            self._decide(now, "pace", f"{pace:.1f}/s: {why}")

    def _admitted_since(self, moment: float) -> int:
        return sum(1 for answered_at, _ in self._admitted if answered_at >= moment)

    def _admission_rate(self, since: float, now: float) -> float | None:
        """Requests per second the provider admitted among those sent after `since` (whose
        answers are in by now), or None when that span is too short to tell."""
        latest = now - (self._latency or 0.0)
        if math.isfinite(since):
            since = max(since, now - _ADMITTED_MEMORY)  # the answers kept
        span = latest - since
        if not math.isfinite(span) or span < 0.1:
            return None
        sent = sum(1 for _, ticket in self._admitted if since <= ticket <= latest)
        return sent / span if sent >= 2 else None

    def _read_headers(self, ticket: float, headers: dict[str, str], now: float) -> None:
        """Mirror each family of the provider's stated budget."""
        families = header_families(headers)
        if not families:
            return
        self._families |= families
        found = budgets(headers, now=time.time() - (now - ticket))
        if not found:
            return
        self._pace = None  # the provider states its budget: pace by that, not by guesses
        sent_since = self._sent_since(ticket)
        for family, (_, limit, remaining, reset) in found.items():
            if family == "requests":
                self._mirror(family).read(limit, remaining, reset, ticket, now, sent_since)
                continue
            cost = self._learn_token_cost(ticket, limit, remaining, reset)
            if cost is not None:
                self._mirror(family).read(
                    limit / cost, remaining / cost, reset, ticket, now, sent_since
                )

    def _mirror(self, family: str) -> _Mirror:
        return self._mirrors.setdefault(family, _Mirror())

    def _learn_token_cost(
        self, ticket: float, limit: int, remaining: int, reset: float
    ) -> float | None:
        """Tokens per request, from two readings in the order the requests were sent: what the
        first had left, plus the refill in between, less what the second has left, over the
        requests sent in between."""
        refill = (limit - remaining) / reset if reset > 0 and remaining < limit else 0.0
        last, self._token_reading = self._token_reading, (ticket, float(remaining))
        if last is None or ticket <= last[0]:
            if last is not None and ticket <= last[0]:
                self._token_reading = last
            return self._token_cost
        between = self._sent_between(last[0], ticket)
        if between >= 1:
            spent = min(float(limit), last[1] + refill * (ticket - last[0])) - remaining
            if spent > 0:
                sample = spent / between
                self._token_cost = (
                    sample if self._token_cost is None else 0.8 * self._token_cost + 0.2 * sample
                )
        return self._token_cost

    def _sent_since(self, ticket: float) -> int:
        return len(self._sent) - bisect.bisect_right(self._sent, ticket)

    def _sent_between(self, after: float, until: float) -> int:
        return bisect.bisect_right(self._sent, until) - bisect.bisect_right(self._sent, after)

    def state(self) -> dict[str, Any]:
        pace = self.pace
        return {
            "window": round(self.window, 2),
            "ceiling": self.ceiling,
            "pace_per_second": round(pace, 2) if pace is not None else None,
            "throttled_answers": self.throttles,
            "throttle_signals": self.signals,
            "limit_429s": self.limits,
            "isolated_429s": self.isolated,
            "limit_reasons": dict(sorted(self.limit_reasons.items())),
            "pauses": self.pauses,
            "cuts": self.signals,
            "background_429_share": round(self.background_share, 4),
            "limit_found_per_second": (
                round(self._limit_rate, 2) if self._limit_rate is not None else None
            ),
            "headers_seen": bool(self._families),
            "header_families": sorted(self._families),
            "token_cost_per_request": (
                round(self._token_cost, 1) if self._token_cost is not None else None
            ),
            "decisions": list(self.decisions),
            "latest_isolated": self._last_isolated,
        }


__all__ = [
    "INITIAL_WINDOW",
    "Governor",
    "budgets",
    "header_families",
    "parse_duration",
    "request_budget",
]
