"""The route governor: adaptive concurrency and pacing under 429s and rate-limit headers."""

from __future__ import annotations

import asyncio
import json
from datetime import datetime, timedelta, timezone
from pathlib import Path

import httpx
import pytest

from engine.config import make_config
from engine.run.live import run_live_model_async
from engine.rundir.records import RunDir
from engine.transport.governor import (
    INITIAL_WINDOW,
    Governor,
    budgets,
    header_families,
    parse_duration,
    request_budget,
)
from tests.bench.live import loopback_server, server_stats


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("1s", 1.0),
        ("6m0s", 360.0),
        ("2m59.56s", 179.56),
        ("120ms", 0.12),
        ("0.5", 0.5),
        ("1h2m", 3720.0),
        ("", None),
        ("soon", None),
        ("5x", None),
        ("1s junk", None),
    ],
)
def test_durations_of_reset_headers(text: str, seconds: float | None) -> None:
    assert (
        parse_duration(text) == pytest.approx(seconds)
        if seconds is not None
        else (parse_duration(text) is None)
    )


def test_request_budget_from_openai_and_anthropic_headers() -> None:
    assert request_budget(
        {
            "x-ratelimit-limit-requests": "60",
            "x-ratelimit-remaining-requests": "59",
            "x-ratelimit-reset-requests": "1s",
        }
    ) == (60, 59, 1.0)
    now = datetime(2026, 11, 30, 12, 0, tzinfo=timezone.utc)
    reset = (now + timedelta(seconds=4)).isoformat().replace("+00:00", "Z")
    budget = request_budget(
        {
            "anthropic-ratelimit-requests-limit": "50",
            "anthropic-ratelimit-requests-remaining": "0",
            "anthropic-ratelimit-requests-reset": reset,
        },
        now=now.timestamp(),
    )
    assert budget is not None and budget[:2] == (50, 0) and budget[2] == pytest.approx(4.0)
    # Token headers alone, unreadable values, or nothing: no budget.
    assert request_budget({"x-ratelimit-remaining-tokens": "10"}) is None
    assert (
        request_budget(
            {
                "x-ratelimit-limit-requests": "many",
                "x-ratelimit-remaining-requests": "1",
                "x-ratelimit-reset-requests": "1s",
            }
        )
        is None
    )
    assert request_budget({}) is None


async def _take(g: Governor, n: int) -> list[float]:
    return [await g.acquire() for _ in range(n)]


async def _answer_one_at_a_time(g: Governor, clock: Clock, n: int, latency: float) -> None:
    """`n` requests, one at a time, each answered `latency` seconds of the fake clock after
    it went."""
    for _ in range(n):
        ticket = await g.acquire()
        clock.now += latency
        g.answered(ticket)


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


# A 429 that says the budget is spent (the IETF draft's headers, which carry no family).
SPENT = {"ratelimit-limit": "100", "ratelimit-remaining": "0", "ratelimit-reset": "1"}


def test_a_limit_halves_the_window_once_per_round_trip_and_paces_the_route() -> None:
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
        assert g.throttled(early[0], retry_after=0.0, headers=SPENT) == "limit"
        assert g.window == 32 and g.signals == 1
        # The first signal paces at half of what was admitted (it includes any burst).
        first = g.pace
        assert first == pytest.approx(30 / 2, rel=0.05)
        for ticket in early[1:]:
            assert g.throttled(ticket, retry_after=0.0) == "limit"  # the same congestion
        assert g.window == 32 and g.signals == 1 and g.throttles == 5
        # A request sent after the cut that is throttled is a new signal: slower again.
        clock.now = 101.5
        late = await g.acquire()
        clock.now = 101.6
        g.throttled(late, retry_after=0.0, headers=SPENT)
        assert g.window == 16 and g.signals == 2
        assert g.pace is not None and first is not None and g.pace < first
        state = g.state()
        assert state["limit_429s"] == 6 and state["isolated_429s"] == 0
        assert state["limit_reasons"] == {"headers": 2, "sent before the last cut": 4}
        assert [d["kind"] for d in state["decisions"]] == ["cut", "pace", "cut", "pace"]
        assert state["headers_seen"] and state["header_families"] == sorted(SPENT)

    asyncio.run(go())


def test_retry_after_of_a_limit_pauses_every_worker_of_the_route() -> None:
    async def go() -> float:
        g = Governor(8)
        first = await g.acquire()
        g.throttled(first, retry_after=0.3, headers=SPENT)
        loop = asyncio.get_running_loop()
        started = loop.time()
        await g.acquire()
        return loop.time() - started

    assert asyncio.run(go()) >= 0.25


def test_an_isolated_429_leaves_the_route_alone() -> None:
    """One 429 without rate-limit headers on a route that is being admitted: the slot is
    freed and nothing else changes (the prompt waits by its own backoff)."""

    async def go() -> None:
        clock = Clock()
        g = Governor(32, clock=clock)
        for i in range(40):
            clock.now = 100.0 + i * 0.05
            ticket = await g.acquire()
            clock.now += 0.5
            g.answered(ticket)
        window = g.window
        ticket = await g.acquire()
        assert g.throttled(ticket, retry_after=30.0, prompt="p1") == "isolated"
        assert g.window == window and g.pace is None and g.signals == 0
        # Not paused: the next request goes at once, on the same clock.
        assert await asyncio.wait_for(g.acquire(), 1) == clock.now
        state = g.state()
        assert state["isolated_429s"] == 1 and state["limit_429s"] == 0
        assert state["decisions"] == [] and state["pauses"] == 0
        assert "no rate-limit headers" in state["latest_isolated"]["reason"]
        assert not state["headers_seen"]

    asyncio.run(go())


def test_a_429_whose_headers_show_budget_left_is_not_a_limit_but_one_that_shows_none_is() -> None:
    async def go() -> None:
        clock = Clock()
        g = Governor(32, clock=clock)
        await _answer_one_at_a_time(g, clock, 20, 0.1)
        left = {
            "x-ratelimit-limit-requests": "100",
            "x-ratelimit-remaining-requests": "60",
            "x-ratelimit-reset-requests": "20s",
        }
        assert g.throttled(await g.acquire(), 1.0, left, prompt="a") == "isolated"
        assert "headers show budget left" in g.state()["latest_isolated"]["reason"]
        spent = {
            "x-ratelimit-limit-tokens": "40000",
            "x-ratelimit-remaining-tokens": "10",
            "x-ratelimit-reset-tokens": "6s",
            **left,
        }
        assert g.throttled(await g.acquire(), 1.0, spent, prompt="b") == "limit"
        assert g.state()["limit_reasons"] == {"headers": 1}
        assert g.signals == 1
        assert g.state()["header_families"] == ["x-ratelimit-*-requests", "x-ratelimit-*-tokens"]

    asyncio.run(go())


def test_a_run_of_429s_across_prompts_is_a_limit_without_any_header() -> None:
    """A burst past a limit that states nothing (the token bucket with only Retry-After):
    most of a wave answered 429, for many prompts."""

    async def go() -> None:
        clock = Clock()
        g = Governor(64, initial=64, clock=clock)
        await _answer_one_at_a_time(g, clock, 10, 0.2)
        wave = [await g.acquire() for _ in range(30)]
        clock.now += 0.01
        kinds = [g.throttled(t, 0.05, prompt=f"p{i}") for i, t in enumerate(wave[:20])]
        # The first few are taken one by one; once they are a run, the route is cut.
        assert kinds[0] == "isolated" and "limit" in kinds
        assert g.signals == 1 and g.state()["limit_reasons"].get("run") == 1
        assert g.state()["decisions"][0]["kind"] == "pause"
        assert "run:" in g.state()["decisions"][0]["reason"]

    asyncio.run(go())


def test_a_budget_spent_in_slow_start_is_a_limit_after_a_few_429s_in_a_row() -> None:
    """A sliding window spent while the window still widens: the requests sent before the
    budget ran out are on their way (their successes take the latency), every one sent after
    it is answered 429 at once. Six such 429s in a row are a run, though they are few among
    the requests of the last round trips."""

    async def go() -> None:
        clock = Clock()
        g = Governor(128, clock=clock)
        await _answer_one_at_a_time(g, clock, 20, 0.01)
        for _ in range(30):  # admitted, still on their way
            await g.acquire()
            clock.now += 0.005
        kinds = []
        for i in range(6):
            ticket = await g.acquire()
            clock.now += 0.005
            kinds.append(g.throttled(ticket, 0.0, prompt=f"p{i}"))
        assert kinds[:5] == ["isolated"] * 5 and kinds[5] == "limit"
        assert g.signals == 1 and g.state()["limit_reasons"].get("run") == 1
        assert "from the first 429" in g.state()["decisions"][0]["reason"]

    asyncio.run(go())


async def _steady(
    g: Governor,
    clock: Clock,
    seconds: float,
    rate: float,
    latency: float,
    throttle: object,
    retry_after: float = 1.0,
    signals: int | None = None,
) -> None:
    """Send at `rate` for `seconds` of the fake clock (or until the governor has had
    `signals`); each answer comes `latency` later, a throttled one at once. `throttle(i)`
    says whether the i-th request is answered 429."""
    due: list[tuple[float, float]] = []
    end, i = clock.now + seconds, 0
    while clock.now < end and (signals is None or g.signals < signals):
        while due and due[0][0] <= clock.now:
            g.answered(due.pop(0)[1])
        ticket = await asyncio.wait_for(g.acquire(), 1)
        if throttle(i):  # type: ignore[operator]
            g.throttled(ticket, retry_after, prompt=f"p{i}")
        else:
            due.append((clock.now + latency, ticket))
        i += 1
        clock.now += 1.0 / rate


def test_one_429_in_ten_at_a_steady_rate_never_pauses_or_narrows_the_route() -> None:
    """The issue's random 429s: a tenth of the answers, no headers, at 32 requests/s for a
    minute: every one is isolated, the route is never paused, cut or paced."""

    async def go() -> None:
        clock = Clock()
        g = Governor(64, clock=clock)
        await _steady(g, clock, 60.0, 32.0, 0.5, lambda i: i % 10 == 7)
        state = g.state()
        assert state["isolated_429s"] == 192 and state["limit_429s"] == 0
        assert state["pauses"] == 0 and state["cuts"] == 0 and state["pace_per_second"] is None
        assert state["background_429_share"] == pytest.approx(0.1, abs=0.02)

    asyncio.run(go())


def test_429s_that_come_as_the_paced_rate_rises_past_the_limit_are_a_limit() -> None:
    """After a limit, the pace probes upwards; 429s that start once it is above where the
    limit was found are the limit again (the probing zone), though each alone looks
    isolated."""

    async def go() -> None:
        clock = Clock()
        g = Governor(64, clock=clock)
        for i in range(30):
            ticket = await g.acquire()
            clock.now += 0.05
            if i == 10:  # one random 429: the route is not clean, 429s are judged by counts
                g.throttled(ticket, 0.0, prompt="early")
            else:
                g.answered(ticket)
        g.throttled(await g.acquire(), 0.0, SPENT)
        found = g.state()["limit_found_per_second"]
        assert found is not None and g.pace is not None and g.pace < found
        # Below the rate where the limit was found, a 429 now and then is isolated.
        await _steady(g, clock, 0.9, g.pace, 0.1, lambda i: i == 5)
        assert g.signals == 1 and g.isolated == 2  # the early one and this one
        # Above it, every third answered 429: a limit, found by the probe. (So soon after the
        # first cut the background stands on the prior alone and is taken as up to a tenth,
        # so a fifth of 429s among 40 requests is not yet more than it could explain.)
        await _steady(
            g,
            clock,
            8.0,
            g.pace,
            0.1,
            lambda i: g.pace is not None and g.pace > found and i % 3 == 0,
            0.0,
            signals=2,
        )
        assert g.signals == 2 and g.state()["limit_reasons"].get("probe") == 1

    asyncio.run(go())


async def _limit_met_after_30_answers(g: Governor, clock: Clock) -> None:
    """30 answers 50 ms apart, then a 429 whose headers say the budget is spent: a limit."""
    await _answer_one_at_a_time(g, clock, 30, 0.05)
    g.throttled(await g.acquire(), 0.0, SPENT)


def test_a_cut_leaves_its_span_out_of_the_background_429s_and_successes_alike() -> None:
    """A tenth of the answers 429 at random, then a run of 429s: the requests sent in the span
    that ended in the cut leave the background as a whole, so it still says a tenth (taking
    out only the 429s left the successes of that span to dilute it, and random 429s then
    looked like a limit)."""

    async def go() -> None:
        clock = Clock()
        g = Governor(64, clock=clock)
        await _steady(g, clock, 15.0, 20.0, 0.2, lambda i: i % 10 == 7)
        assert g.signals == 0 and g.background_share == pytest.approx(0.1, abs=0.02)
        wave = [await g.acquire() for _ in range(40)]
        for i, ticket in enumerate(wave):
            if i % 2:
                g.throttled(ticket, 0.0, prompt=f"w{i}")
        assert g.signals == 1 and g.state()["limit_reasons"].get("run") == 1
        clock.now += 0.3
        for i, ticket in enumerate(wave):
            if not i % 2:
                g.answered(ticket)  # sent in the congested span: not background either
        assert g.background_share == pytest.approx(0.1, abs=0.02)

    asyncio.run(go())


def test_random_429s_on_a_paced_route_are_held_against_a_background_measured_on_few_answers() -> (
    None
):
    """Just after the first cut the route knows little of its background (the prior's 20
    answers): a paced route that meets a tenth of 429s at random is held against the most
    that few answers allow, so it is not cut again and again below its limit."""

    async def go() -> None:
        clock = Clock()
        g = Governor(64, clock=clock)
        await _limit_met_after_30_answers(g, clock)
        assert g.signals == 1 and g.pace is not None
        await _steady(g, clock, 20.0, g.pace, 0.1, lambda i: i % 10 == 7)
        assert g.signals == 1 and g.isolated >= 20

    asyncio.run(go())


def test_random_429s_above_a_measured_rate_slow_its_probe_without_holding_it_there() -> None:
    """A tenth of random 429s on a route paced past the rate where its limit was measured:
    each undoes a little of the probe's growth, not a whole second of it, so the pace still
    rises (a rate measured a little low is not kept for the rest of the run)."""

    async def go() -> None:
        clock = Clock()
        g = Governor(64, clock=clock)
        await _limit_met_after_30_answers(g, clock)
        assert g.pace is not None
        await _steady(g, clock, 2.0, g.pace, 0.1, lambda i: False)
        g.throttled(await g.acquire(), 0.0, SPENT)
        assert g.signals == 2 and "admitted since the previous signal" in str(g.state())
        found = g.state()["limit_found_per_second"]
        clock.now += 1.0  # past the start the last pace gave the next request
        assert found is not None and g.pace is not None
        await _steady(g, clock, 30.0, g.pace, 0.1, lambda i: i % 10 == 7)
        assert g.signals == 2 and g.isolated >= 20
        assert g.pace > 1.05 * found

    asyncio.run(go())


@pytest.mark.parametrize(("retry_after", "sustained"), [(4.6, True), (0.05, False)])
def test_a_window_refilled_in_a_long_pause_is_paced_at_what_it_sustains(
    retry_after: float, sustained: bool
) -> None:
    """A sliding window of 100 requests in 5 s, met by a burst of 100 in 0.4 s: its 429 asks
    to wait until the oldest leaves, 4.6 s. Half of the burst's rate (125/s) would spend the
    refilled window in a second and meet it again; what was admitted up to the end of the
    pause, 100 in 5 s, is what it sustains. A limit that asks for a short wait (a bucket) is
    paced from its burst as before."""

    async def go() -> None:
        clock = Clock()
        g = Governor(128, initial=128, clock=clock)
        burst = []
        for _ in range(100):
            burst.append(await g.acquire())
            clock.now += 0.004
        for ticket in burst:
            g.answered(ticket)
        assert g.throttled(await g.acquire(), retry_after, SPENT) == "limit"
        reason = g.state()["decisions"][-1]["reason"]
        assert g.pace is not None
        if sustained:
            assert 100 / 5 * 0.9 <= g.pace <= 100 / 5 * 1.1
            assert "to the end of its pause" in reason
        else:
            assert g.pace > 100 and "half of the" in reason

    asyncio.run(go())


def test_on_a_paced_route_without_random_429s_the_first_429_near_the_limit_is_the_limit() -> None:
    """After a limit, a route that has answered 100 requests without a 429 meets one while it
    is paced just below the rate where the limit was found: the limit again (a window that
    still remembers an excess), not background that would hide it."""

    async def go() -> None:
        clock = Clock()
        g = Governor(64, clock=clock)
        await _limit_met_after_30_answers(g, clock)
        assert g.pace is not None
        await _steady(g, clock, 6.0, g.pace, 0.1, lambda i: False)
        assert g.signals == 1
        assert g.throttled(await g.acquire(), 0.0, prompt="late") == "limit"
        assert (
            g.signals == 2
            and g.state()["limit_reasons"].get("excess", 0)
            + g.state()["limit_reasons"].get("probe", 0)
            == 1
        )

    asyncio.run(go())


def test_a_stated_budget_is_used_up_to_a_small_reserve_then_paced_at_its_refill_rate() -> None:
    async def go() -> tuple[float, float]:
        g = Governor(64)
        loop = asyncio.get_running_loop()
        ticket = await g.acquire()
        # 10 left of 100, full again in 0.9 s: it regains 100/s (97/s with the margin).
        g.answered(
            ticket,
            {
                "x-ratelimit-limit-requests": "100",
                "x-ratelimit-remaining-requests": "10",
                "x-ratelimit-reset-requests": "900ms",
            },
        )
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
    from tests.bench.live import synthetic_release

    return synthetic_release(root, count)


@pytest.mark.parametrize("headers", ["none", "openai"])
def test_a_rate_limited_route_finishes_without_terminal_errors_or_a_storm_of_429s(
    tmp_path: Path, headers: str
) -> None:
    """Against a real loopback server enforcing 100 requests/s: every prompt succeeds with a
    concurrency ceiling of 128, and the 429s stay a small share (without the governor, the
    first wave alone is answered 118 times out of 128 with 429)."""
    release = _release(tmp_path / "release", 300)
    with loopback_server(
        "--latency", "0.02", "--rate", "100", "--burst", "10", "--headers", headers
    ) as base:
        config = make_config(
            release_dir=release,
            output_dir=tmp_path / "run",
            provider="local",
            base_url=base + "/v1",
            model="loopback-1",
            no_auth=True,
            acknowledge_prompt_export=True,
            concurrency=128,
            max_retries=20,
            retry_backoff_seconds=0.2,
        )
        summary = asyncio.run(run_live_model_async(config)).summary
        stats = server_stats(base)
    assert summary["success"] == 300 and summary["error"] == 0
    assert stats["ok"] == 300
    assert stats["throttled"] < 0.25 * stats["requests"], stats
    attempts = RunDir(tmp_path / "run").read_attempts()
    assert sum(1 for a in attempts if a["status"] == 429) == stats["throttled"]


def test_a_run_directory_that_stops_accepting_writes_stops_the_run(
    tmp_path: Path, release_dir: Path
) -> None:
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
        return httpx.Response(
            200,
            json={
                "id": "x",
                "model": "m",
                "choices": [
                    {
                        "index": 0,
                        "finish_reason": "stop",
                        "message": {"role": "assistant", "content": "print(1)"},
                    }
                ],
            },
        )

    config = make_config(
        release_dir=release_dir,
        output_dir=out,
        provider="local",
        model="m",
        no_auth=True,
        acknowledge_prompt_export=True,
        concurrency=1,
    )
    with pytest.raises(RunWriteError, match="could not write the run's evidence"):
        asyncio.run(run_live_model_async(config, transport=httpx.MockTransport(answer)))
    assert len(seen) == 1


def test_token_headers_teach_the_cost_of_a_request_and_are_mirrored() -> None:
    """Two readings of `x-ratelimit-*-tokens` with requests sent between them give the tokens a
    request costs; the token budget then holds requests back like a request budget."""

    async def go() -> None:
        clock = Clock()
        g = Governor(64, clock=clock)

        def tokens(remaining: int) -> dict[str, str]:
            return {
                "x-ratelimit-limit-tokens": "10000",
                "x-ratelimit-remaining-tokens": str(remaining),
                "x-ratelimit-reset-tokens": "60s",
            }

        first = await g.acquire()
        between = []
        for _ in range(4):
            clock.now += 0.01
            between.append(await g.acquire())
        clock.now += 0.2
        g.answered(first, tokens(9800))
        assert g.state()["token_cost_per_request"] is None  # one reading says nothing yet
        # Four more requests of 200 tokens each (and a refill of 3 tokens in 0.04 s at the
        # rate the readings imply, 200 in 60 s... small beside them).
        g.answered(between[-1], tokens(9000))
        assert g.state()["token_cost_per_request"] == pytest.approx(200, rel=0.05)
        assert g.state()["header_families"] == ["x-ratelimit-*-tokens"]
        # 600 tokens left: three requests, less the reserve, then the route waits.
        clock.now += 0.01
        g.answered(await g.acquire(), tokens(600))
        waiter = asyncio.ensure_future(g.acquire())
        await asyncio.sleep(0.01)
        assert not waiter.done()
        waiter.cancel()

    asyncio.run(go())


def test_state_keeps_only_the_latest_decisions() -> None:
    async def go() -> None:
        clock = Clock()
        g = Governor(64, clock=clock)
        for _ in range(40):
            clock.now += 100.0  # far apart: no pace is set to wait for
            ticket = await g.acquire()
            g.answered(ticket)
            g.throttled(await asyncio.wait_for(g.acquire(), 1), 0.0, SPENT)
        state = g.state()
        assert state["cuts"] == 40 and len(state["decisions"]) == 20
        assert [d["t"] for d in state["decisions"]] == [2100.0 + 100 * i for i in range(20)]
        json.dumps(state)  # run-summary.json takes it as it is

    asyncio.run(go())


def test_budgets_reads_every_family_of_both_header_styles() -> None:
    now = datetime(2026, 11, 30, 12, 0, tzinfo=timezone.utc)
    reset = (now + timedelta(seconds=30)).isoformat().replace("+00:00", "Z")
    found = budgets(
        {
            "x-ratelimit-limit-requests": "500",
            "x-ratelimit-remaining-requests": "499",
            "x-ratelimit-reset-requests": "120ms",
            "anthropic-ratelimit-tokens-limit": "80000",
            "anthropic-ratelimit-tokens-remaining": "100",
            "anthropic-ratelimit-tokens-reset": reset,
        },
        now=now.timestamp(),
    )
    assert sorted(found) == ["requests", "tokens"]
    assert found["requests"][:3] == ("openai", 500, 499)
    assert found["requests"][3] == pytest.approx(0.12)
    assert found["tokens"][:3] == ("anthropic", 80000, 100)
    assert found["tokens"][3] == pytest.approx(30.0)
    assert header_families(
        {"x-ratelimit-reset-tokens": "1s", "Retry-After": "1", "RateLimit-Remaining": "3"}
    ) == {"x-ratelimit-*-tokens", "ratelimit-remaining"}
