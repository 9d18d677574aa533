"""A run's lifecycle in one app session: reopening, stopping, resuming, retrying, fast typing."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

from textual import events
from textual.widgets import Checkbox, DataTable, Input, Select, Static

from engine import make_config
from engine.rundir.records import RunDir
from pqid_tui.app import PqidApp, make_app
from pqid_tui.screens.dialogs import ConfirmScreen
from pqid_tui.screens.home import HomeScreen
from pqid_tui.screens.monitor import MonitorScreen
from pqid_tui.screens.new_run import NewRunScreen
from tests.app.test_app_monitor import GateTransport, grid_states, settle
from tests.app.test_app_support import (
    GROQ_ENV,
    SIZE,
    FakeReplayService,
    errored_run_app,
    make_run,
    open_run_monitor,
)
from tests.helpers import write_release

CLOSED_PORT = "http://127.0.0.1:9/v1"  # the discard port: nothing listens, connections fail


def stats_of(screen: MonitorScreen) -> str:
    return str(screen.query_one("#run-stats", Static).render())


def title_of(screen: MonitorScreen) -> str:
    return str(screen.query_one("#run-title", Static).render())


def messages(app: PqidApp) -> list[str]:
    return [n.message for n in app._notifications]


async def wait_for(pilot: Any, condition: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        await pilot.pause(0.05)


def groq_config(release: Path, out: Path, **kw: Any) -> Any:
    return make_config(
        release_dir=release,
        output_dir=out,
        provider="groq",
        model="m",
        acknowledge_prompt_export=True,
        **kw,
    )


def gated_app(tmp_path: Path) -> tuple[PqidApp, GateTransport, Any]:
    """An app whose groq provider answers only once the gate opens, and the config of a
    one-at-a-time run into runs/r."""
    release = write_release(tmp_path / "release", count=6)
    transport = GateTransport(release)
    runs = tmp_path / "runs"
    app = make_app(
        release, runs, transport=transport, env=GROQ_ENV, replay_service=FakeReplayService()
    )
    return app, transport, groq_config(release, runs / "r", concurrency=1)


async def start_gated_run(app: PqidApp, pilot: Any, config: Any) -> None:
    await pilot.pause()
    app.start_run(config)
    await pilot.pause(0.3)


async def test_reopening_a_run_in_the_same_session_shows_every_prompt(tmp_path: Path) -> None:
    app, transport, config = gated_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await start_gated_run(app, pilot, config)
        await pilot.press("escape")
        await pilot.pause(0.3)
        assert isinstance(app.screen, HomeScreen)
        await pilot.press("enter")  # the running run, from Home
        await pilot.pause(0.3)
        screen = app.screen
        assert isinstance(screen, MonitorScreen)
        screen.flush()
        states = grid_states(screen)
        assert len(states) == 6, states
        assert sorted(states.values()) == ["in flight"] + ["pending"] * 5
        transport.gate.set()
        screen = await settle(app, pilot)
        await pilot.press("escape")
        await pilot.pause(0.3)
        await pilot.press("enter")  # and again once it has ended
        await pilot.pause(0.3)
        screen = app.screen
        assert isinstance(screen, MonitorScreen)
        screen.flush()
        assert grid_states(screen) == {f"ghz_{i:02d}": "success" for i in range(6)}
        stats = stats_of(screen)
        assert "success 6" in stats and "requests 6" in stats, stats


async def test_home_marks_the_running_run(tmp_path: Path) -> None:
    app, transport, config = gated_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await start_gated_run(app, pilot, config)
        await pilot.press("escape")
        await pilot.pause(0.3)
        home = app.screen
        assert isinstance(home, HomeScreen)
        table = home.query_one("#runs", DataTable)
        await wait_for(pilot, lambda: table.row_count == 1)
        assert str(table.get_row_at(0)[-2]) == "running"
        footer_keys = [b.binding.key for b in home.active_bindings.values() if b.binding.show]
        assert "q" not in footer_keys or "ctrl+q" not in footer_keys  # one Quit, not two
        transport.gate.set()
        await app.workers.wait_for_complete()


async def test_stop_then_p_resumes_the_run_from_the_monitor(tmp_path: Path) -> None:
    app, transport, config = gated_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await start_gated_run(app, pilot, config)
        await pilot.press("s")
        transport.gate.set()
        screen = await settle(app, pilot)
        assert "stopped (resumable)" in title_of(screen)
        assert "success 1" in stats_of(screen) and "pending 5" in stats_of(screen)
        await pilot.press("p")
        await pilot.pause()
        if isinstance(app.screen, ConfirmScreen):  # the groq route: prompts leave the machine
            await pilot.press("y")
        screen = await settle(app, pilot)
        assert grid_states(screen) == {f"ghz_{i:02d}": "success" for i in range(6)}
        assert "[complete]" in title_of(screen)
        # The resume counts on from the first invocation.
        assert "requests 6" in stats_of(screen), stats_of(screen)
    assert transport.started == 6
    assert len(RunDir(config.output_dir).read_responses()) == 6


async def test_resume_from_home_sends_the_pending_prompts(tmp_path: Path) -> None:
    release = write_release(tmp_path / "release", count=6)
    runs = tmp_path / "runs"
    out = await make_run(runs, release, provider="oracle", model="oracle", name="o", max_new=2)
    app = make_app(release, runs, replay_service=FakeReplayService())
    async with app.run_test(size=SIZE) as pilot:
        await app.workers.wait_for_complete()
        await pilot.pause()
        await pilot.press("p")
        screen = await settle(app, pilot)
        assert grid_states(screen) == {f"ghz_{i:02d}": "success" for i in range(6)}
    assert len(RunDir(out).read_responses()) == 6


async def test_stop_during_a_backoff_ends_now_and_shows_pending(tmp_path: Path) -> None:
    """Against a closed port every attempt fails and waits its backoff: Stop must not wait
    the backoff out, and the grid must not promise a next try that will not happen."""
    release = write_release(tmp_path / "release", count=6)
    runs = tmp_path / "runs"
    app = make_app(release, runs, env={}, replay_service=FakeReplayService())
    config = make_config(
        release_dir=release,
        output_dir=runs / "local",
        provider="local",
        model="m",
        base_url=CLOSED_PORT,
        acknowledge_prompt_export=True,
        retry_backoff_seconds=60.0,
        concurrency=2,
        limit=6,
    )
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        progress = app.start_run(config)
        await wait_for(pilot, lambda: progress.counts["retrying"] == 2)
        await pilot.press("s")
        started = time.monotonic()
        screen = await settle(app, pilot)
        assert time.monotonic() - started < 10
        states = grid_states(screen)
        assert "retrying" not in states.values(), states
        assert list(states.values()).count("pending") == 6
        summary = json.loads(RunDir(runs / "local").summary_path.read_text())
        assert summary["pending"] == 6 and summary["stopped"] is True


async def test_cancelling_a_retry_says_nothing_was_sent(tmp_path: Path) -> None:
    app, out, seen = await errored_run_app(tmp_path, {"ghz_01": [400]})
    async with app.run_test(size=SIZE) as pilot:
        await open_run_monitor(app, pilot, out)
        await pilot.press("e")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("escape")
        await pilot.pause()
        assert any("nothing was sent" in m.lower() for m in messages(app)), messages(app)
        before = stats_of(app.screen)  # type: ignore[arg-type]
        assert "requests 6" in before, before
        await pilot.press("e")
        await pilot.pause()
        await pilot.press("y")
        screen = await settle(app, pilot)
        # A retry adds to what the run did; it does not start the counts again at zero.
        assert "requests 7" in stats_of(screen), stats_of(screen)
    assert seen == ["ghz_01"]


async def test_new_run_fills_itself_from_a_runs_manifest(tmp_path: Path) -> None:
    release = write_release(tmp_path / "release", count=6)
    runs = tmp_path / "runs"
    out = await make_run(
        runs, release, name="g", limit=4, max_new=2, temperature=0.5, concurrency=3
    )
    app = make_app(release, runs, env=GROQ_ENV, replay_service=FakeReplayService())
    async with app.run_test(size=SIZE) as pilot:
        await open_run_monitor(app, pilot, out)
        await pilot.press("n")  # resume in the New run form
        await pilot.pause()
        form = app.screen
        assert isinstance(form, NewRunScreen)
        assert form.query_one("#provider", Select).value == "groq"
        values = {i.id: i.value for i in form.query(Input)}
        assert values["model"] == "demo-model" and values["limit"] == "4"
        assert values["temperature"] == "0.5"
        assert Path(values["output_dir"]) == out
        assert form.query_one("#resume", Checkbox).value is True
        form.query_one("#acknowledge", Checkbox).value = True
        await pilot.pause()
        assert form.plan is not None and not form.errors, form.errors
        # A different model in the same directory is refused beside the field, as the run
        # itself would refuse it.
        form.query_one("#model", Input).value = "another"
        await pilot.pause()
        assert "the model differs" in form.errors.get("output_dir", ""), form.errors


async def test_keys_typed_fast_land_in_the_field_that_has_focus(tmp_path: Path) -> None:
    release = write_release(tmp_path / "release", count=6)
    app = make_app(release, tmp_path / "runs", replay_service=FakeReplayService())
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await pilot.press("n")
        await pilot.pause()
        form = app.screen
        assert isinstance(form, NewRunScreen)
        form.query_one("#temperature", Input).value = ""
        form.query_one("#top_p", Input).value = ""
        form.query_one("#temperature", Input).focus()
        await pilot.pause()
        # A paste, or a fast typist: every key is queued before the first is handled.
        keys = [("1", "1")] * 3 + [("tab", "\t")] + [("2", "2")] * 3
        for key, char in keys:
            app.post_message(events.Key(key, char))
        await pilot.pause(0.3)
        await asyncio.sleep(0)
        assert form.query_one("#temperature", Input).value == "111"
        assert form.query_one("#top_p", Input).value == "222"
