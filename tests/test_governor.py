"""The route governor: adaptive concurrency and pacing under 429s and rate-limit headers."""

from __future__ import annotations

import asyncio
import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import httpx
import pytest

from engine.bench_live import loopback_server, server_stats
from engine.config import make_config
from engine.governor import INITIAL_WINDOW, Governor, parse_duration, request_budget
from engine.records import RunDir
from engine.runner import run_live_model_async


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(("text", "seconds"), [
    ("1s", 1.0), ("6m0s", 360.0), ("2m59.56s", 179.56), ("120ms", 0.12), ("0.5", 0.5),
    ("1h2m", 3720.0), ("", None), ("soon", None), ("5x", None), ("1s junk", None)])
def test_durations_of_reset_headers(text: str, seconds: float | None) -> None:
    assert parse_duration(text) == pytest.approx(seconds) if seconds is not None else (
        parse_duration(text) is None)


def test_request_budget_from_openai_and_anthropic_headers() -> None:
    assert request_budget({"x-ratelimit-limit-requests": "60",
                           "x-ratelimit-remaining-requests": "59",
                           "x-ratelimit-reset-requests": "1s"}) == (60, 59, 1.0)
    now = datetime(2026, 11, 30, 12, 0, tzinfo=timezone.utc)
    reset = (now + timedelta(seconds=4)).isoformat().replace("+00:00", "Z")
    assert request_budget({"anthropic-ratelimit-requests-limit": "50",
                           "anthropic-ratelimit-requests-remaining": "0",
                           "anthropic-ratelimit-requests-reset": reset},
                          now=now.timestamp()) == (50, 0, pytest.approx(4.0))
    # Token headers alone, unreadable values, or nothing: no budget.
    assert request_budget({"x-ratelimit-remaining-tokens": "10"}) is None
    assert request_budget({"x-ratelimit-limit-requests": "many",
                           "x-ratelimit-remaining-requests": "1",
                           "x-ratelimit-reset-requests": "1s"}) is None
    assert request_budget({}) is None


async def _take(g: Governor, n: int) -> list[float]:
    return [await g.acquire() for _ in range(n)]


def test_slow_start_reaches_the_ceiling_and_never_passes_it() -> None:
    async def go() -> None:
        clock = Clock()
        g = Governor(40, clock=clock)
        assert g.window == INITIAL_WINDOW
        for _ in range(200):
            ticket = await g.acquire()
            assert g.in_flight <= g.ceiling
            g.answered(ticket)
        assert g.window == 40
        tickets = await _take(g, 40)
        assert g.in_flight == 40
        waiter = asyncio.ensure_future(g.acquire())
        await asyncio.sleep(0.01)
        assert not waiter.done()  # the 41st waits for a slot
        g.answered(tickets[0])
        assert await asyncio.wait_for(waiter, 1) == clock.now

    asyncio.run(go())


def test_a_throttle_halves_the_window_once_per_round_trip_and_paces_the_route() -> None:
    async def go() -> None:
        clock = Clock()
        g = Governor(64, initial=64, clock=clock)
        # 30 answers within the last second, then a wave of 429s for requests sent before
        # the cut.
        for i in range(30):
            clock.now = 100.0 + i * 0.03
            g.answered(await g.acquire())
        early = [await g.acquire() for _ in range(5)]
        clock.now = 101.0
        g.throttled(early[0], retry_after=0.0)
        assert g.window == 32 and g.signals == 1
        # The first signal paces at half of what was admitted (it includes any burst).
        first = g.pace
        assert first == pytest.approx(30 / 2, rel=0.05)
        for ticket in early[1:]:
            g.throttled(ticket, retry_after=0.0)
        assert g.window == 32 and g.signals == 1 and g.throttles == 5
        # A request sent after the cut that is throttled is a new signal: slower again.
        clock.now = 101.5
        late = await g.acquire()
        clock.now = 101.6
        g.throttled(late, retry_after=0.0)
        assert g.window == 16 and g.signals == 2
        assert g.pace is not None and first is not None and g.pace < first

    asyncio.run(go())


def test_retry_after_pauses_every_worker_of_the_route() -> None:
    async def go() -> float:
        g = Governor(8)
        first = await g.acquire()
        g.throttled(first, retry_after=0.3)
        loop = asyncio.get_running_loop()
        started = loop.time()
        await g.acquire()
        return loop.time() - started

    assert asyncio.run(go()) >= 0.25


def test_a_stated_budget_is_used_up_to_a_small_reserve_then_paced_at_its_refill_rate(
        ) -> None:
    async def go() -> tuple[float, float]:
        g = Governor(64)
        loop = asyncio.get_running_loop()
        ticket = await g.acquire()
        # 10 left of 100, full again in 0.9 s: it regains 100/s (97/s with the margin).
        g.answered(ticket, {"x-ratelimit-limit-requests": "100",
                            "x-ratelimit-remaining-requests": "10",
                            "x-ratelimit-reset-requests": "900ms"})
        assert g.signals == 0
        started = loop.time()
        for _ in range(7):  # 10 left, 3 kept in reserve
            await g.acquire()
        burst = loop.time() - started
        started = loop.time()
        for _ in range(5):
            await g.acquire()
        return burst, loop.time() - started

    _, paced = asyncio.run(go())
    assert paced >= 4 / 100  # five more need four more refills at under 100/s


def _release(root: Path, count: int) -> Path:
    from engine.bench_live import synthetic_release

    return synthetic_release(root, count)


@pytest.mark.parametrize("headers", ["none", "openai"])
def test_a_rate_limited_route_finishes_without_terminal_errors_or_a_storm_of_429s(
        tmp_path: Path, headers: str) -> None:
    """Against a real loopback server enforcing 100 requests/s: every prompt succeeds with a
    concurrency ceiling of 128, and the 429s stay a small share (without the governor, the
    first wave alone is answered 118 times out of 128 with 429)."""
    release = _release(tmp_path / "release", 300)
    with loopback_server("--latency", "0.02", "--rate", "100", "--burst", "10",
                         "--headers", headers) as base:
        config = make_config(release_dir=release, output_dir=tmp_path / "run",
                             provider="local", base_url=base + "/v1", model="loopback-1",
                             no_auth=True, acknowledge_prompt_export=True, concurrency=128,
                             max_retries=20, retry_backoff_seconds=0.2)
        summary = asyncio.run(run_live_model_async(config)).summary
        stats = server_stats(base)
    assert summary["success"] == 300 and summary["error"] == 0
    assert stats["ok"] == 300
    assert stats["throttled"] < 0.25 * stats["requests"], stats
    attempts = RunDir(tmp_path / "run").read_attempts()
    assert sum(1 for a in attempts if a["status"] == 429) == stats["throttled"]


def test_a_run_directory_that_stops_accepting_writes_stops_the_run(tmp_path: Path,
                                                                     release_dir: Path) -> None:
    """The records folder disappears after the first answer: sending stops, the run ends with
    one clear error, and nothing more is sent."""
    from engine.errors import RunWriteError

    out = tmp_path / "run"
    seen: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(json.loads(request.content)["messages"][-1]["content"])
        if len(seen) == 1:
            (out / "records").rename(tmp_path / "moved-records")
            (out / "records").write_text("not a folder")
        return httpx.Response(200, json={
            "id": "x", "model": "m", "choices": [{"index": 0, "finish_reason": "stop",
                                                  "message": {"role": "assistant",
                                                              "content": "print(1)"}}]})

    config = make_config(release_dir=release_dir, output_dir=out, provider="local",
                         model="m", no_auth=True, acknowledge_prompt_export=True,
                         concurrency=1)
    with pytest.raises(RunWriteError, match="could not write the run's evidence"):
        asyncio.run(run_live_model_async(config, transport=httpx.MockTransport(answer)))
    assert len(seen) == 1
