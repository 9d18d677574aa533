"""Run monitor: live runs end to end (oracle, loopback fault server), run control, retries."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
from textual.widgets import Static

from engine import make_config
from engine.release import load_release
from engine.rundir.records import RunDir
from pqid_tui.app import PqidApp, make_app
from pqid_tui.screens.dialogs import ConfirmScreen
from pqid_tui.screens.monitor import MonitorScreen
from pqid_tui.screens.new_run import NewRunScreen
from pqid_tui.widgets.run_grid import RetryQueue, RunGrid
from tests.app.test_app_support import (
    GROQ_ENV,
    SIZE,
    FakeReplayService,
    errored_run_app,
    open_run_monitor,
    scripted_transport,
    uncertain_run_app,
)
from tests.fakes.faults import FaultScript, FaultServer
from tests.helpers import write_release


def grid_states(screen: MonitorScreen) -> dict[str, str]:
    grid = screen.query_one(RunGrid)
    return {grid.ids[i]: grid.line_text(i)[2] for i in range(grid.row_count)}


async def settle(app: PqidApp, pilot: Any) -> MonitorScreen:
    await app.workers.wait_for_complete()
    await pilot.pause(0.2)
    screen = app.screen
    assert isinstance(screen, MonitorScreen)
    screen.flush()
    return screen


async def test_oracle_run_end_to_end_through_the_app(tmp_path: Path) -> None:
    release = write_release(tmp_path / "release", count=6)
    runs = tmp_path / "runs"
    app = make_app(release, runs, replay_service=FakeReplayService())
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await pilot.press("n")
        await pilot.pause()
        assert isinstance(app.screen, NewRunScreen)
        await pilot.press("ctrl+s")
        screen = await settle(app, pilot)
        assert grid_states(screen) == {f"ghz_{i:02d}": "success" for i in range(6)}
        stats = str(screen.query_one("#run-stats", Static).render())
        assert "success 6" in stats and "requests 6" in stats
        assert "[complete]" in str(screen.query_one("#run-title", Static).render())
    run = RunDir(runs / "oracle-oracle")
    assert len(run.read_responses()) == 6
    assert json.loads(run.summary_path.read_text())["success"] == 6


async def test_local_route_against_the_loopback_fault_server(tmp_path: Path) -> None:
    release_dir = write_release(tmp_path / "release", count=6)
    script = FaultScript.for_release(
        load_release(release_dir), {"ghz_01": ["429"], "ghz_03": ["fenced"], "ghz_04": ["400"]}
    )
    runs = tmp_path / "runs"
    with FaultServer(script) as server:
        app = make_app(release_dir, runs, replay_service=FakeReplayService())
        async with app.run_test(size=SIZE) as pilot:
            await pilot.pause()
            await pilot.press("n")
            await pilot.pause()
            form = app.screen
            assert isinstance(form, NewRunScreen)
            from textual.widgets import Checkbox, Input, Select

            form.query_one("#provider", Select).value = "local"
            await pilot.pause()
            form.query_one("#model", Input).value = "test-model"
            form.query_one("#base_url", Input).value = server.base_url
            form.query_one("#acknowledge", Checkbox).value = True
            await pilot.pause()
            assert form.plan is not None, form.errors
            await pilot.press("ctrl+s")
            screen = await settle(app, pilot)
            states = grid_states(screen)
            assert states["ghz_04"] == "error"
            assert all(states[f"ghz_{i:02d}"] == "success" for i in (0, 1, 2, 3, 5))
            queue = screen.query_one(RetryQueue)
            assert queue.ids == ["ghz_04"]
            assert queue.line_text(0)[4].startswith("bad_request: HTTP 400"), queue.line_text(0)
    run = RunDir(runs / "local-test-model")
    assert len(run.read_responses()) == 5
    assert [s.behaviour for s in server.requests_for("ghz_01")] == ["429", "ok"]
    manifest = json.loads(run.manifest_path.read_text())
    assert manifest["route"]["base_url"] == server.base_url
    assert manifest["credential_source"] == "none"


class GateTransport(httpx.AsyncBaseTransport):
    """A provider that answers only when the test opens the gate."""

    def __init__(self, release_dir: Path) -> None:
        self.gate = asyncio.Event()
        self.inner = scripted_transport(release_dir)
        self.started = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.started += 1
        await self.gate.wait()
        return await self.inner.handle_async_request(request)


async def test_pause_resume_and_stop_drive_the_run_control(tmp_path: Path) -> None:
    release = write_release(tmp_path / "release", count=6)
    transport = GateTransport(release)
    app = make_app(
        release,
        tmp_path / "runs",
        transport=transport,
        env=GROQ_ENV,
        replay_service=FakeReplayService(),
    )
    config = make_config(
        release_dir=release,
        output_dir=tmp_path / "runs" / "r",
        provider="groq",
        model="m",
        acknowledge_prompt_export=True,
        concurrency=1,
    )
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        app.start_run(config)
        await pilot.pause(0.3)
        screen = app.screen
        assert isinstance(screen, MonitorScreen)
        control = app.session.control
        assert control is not None and app.session.active
        await pilot.press("p")
        assert control.paused
        assert "[paused]" in str(screen.query_one("#run-title", Static).render())
        await pilot.press("p")
        assert not control.paused
        await pilot.press("s")
        assert control.stopped
        transport.gate.set()
        screen = await settle(app, pilot)
        assert not app.session.active
        assert "stopped (resumable)" in str(screen.query_one("#run-title", Static).render())
    # One request was in flight when the stop came; it finished, nothing new started.
    assert transport.started == 1
    summary = json.loads(RunDir(tmp_path / "runs" / "r").summary_path.read_text())
    assert summary["stopped"] is True and summary["success"] == 1 and summary["pending"] == 5


async def test_quitting_during_a_run_asks_and_stops_it_resumably(tmp_path: Path) -> None:
    release = write_release(tmp_path / "release", count=6)
    transport = GateTransport(release)
    app = make_app(
        release,
        tmp_path / "runs",
        transport=transport,
        env=GROQ_ENV,
        replay_service=FakeReplayService(),
    )
    out = tmp_path / "runs" / "r"
    config = make_config(
        release_dir=release,
        output_dir=out,
        provider="groq",
        model="m",
        acknowledge_prompt_export=True,
        concurrency=2,
    )
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        app.start_run(config)
        await pilot.pause(0.3)
        await pilot.press("ctrl+q")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)
        assert "resumable" in str(app.screen.query_one(".dialog-body", Static).render())
        await pilot.press("escape")  # keep running
        await pilot.pause()
        assert app.session.active and not app.session.control.stopped  # type: ignore[union-attr]
        await pilot.press("ctrl+q")
        await pilot.pause()
        await pilot.press("y")
        await pilot.pause()
        assert app.session.control is not None and app.session.control.stopped
        transport.gate.set()
        await pilot.pause(0.5)
    assert app.return_value == 0
    summary = json.loads(RunDir(out).summary_path.read_text())
    assert summary["stopped"] is True and summary["success"] == 2 and summary["pending"] == 4


async def test_retry_all_errors_resends_only_the_errors(tmp_path: Path) -> None:
    app, out, seen = await errored_run_app(tmp_path, {"ghz_01": [400], "ghz_04": [400]})
    async with app.run_test(size=SIZE) as pilot:
        await app.workers.wait_for_complete()
        await pilot.pause()
        await pilot.press("enter")
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, MonitorScreen)
        assert grid_states(screen)["ghz_01"] == "error"
        await pilot.press("e")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)
        assert "groq" in str(app.screen.query_one(".dialog-body", Static).render())
        await pilot.press("y")
        screen = await settle(app, pilot)
        assert set(grid_states(screen).values()) == {"success"}
    assert sorted(seen) == ["ghz_01", "ghz_04"]
    assert app.session.config is not None and app.session.config.retry_errors
    assert len(RunDir(out).read_responses()) == 6


async def test_retry_selected_sends_just_the_marked_prompt(tmp_path: Path) -> None:
    app, out, seen = await errored_run_app(tmp_path, {"ghz_01": [400], "ghz_03": [400]})
    async with app.run_test(size=SIZE) as pilot:
        await open_run_monitor(app, pilot, out)
        await pilot.press("down", "down", "down", "space")
        screen = app.screen
        assert isinstance(screen, MonitorScreen)
        assert screen.selected_prompts() == ["ghz_03"]
        await pilot.press("r")
        await pilot.pause()
        await pilot.press("y")
        screen = await settle(app, pilot)
        states = grid_states(screen)
        assert states["ghz_03"] == "success" and states["ghz_01"] == "error"
    assert seen == ["ghz_03"]


async def test_retry_uncertain_explains_the_extra_paid_draw(tmp_path: Path) -> None:
    app, out = await uncertain_run_app(tmp_path, "oracle-run")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        app.open_screen("monitor", run_dir=out)
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, MonitorScreen)
        assert grid_states(screen)["ghz_02"] == "uncertain"
        assert screen.query_one(RetryQueue).ids == ["ghz_02"]
        await pilot.press("u")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)
        body = str(app.screen.query_one(".dialog-body", Static).render())
        assert "extra paid draw" in body and "stays in the attempt history" in body
        await pilot.press("escape")
        await pilot.pause()
        assert not app.session.active and len(RunDir(out).read_responses()) == 5
        await pilot.press("u")
        await pilot.pause()
        await pilot.press("y")
        screen = await settle(app, pilot)
        assert grid_states(screen)["ghz_02"] == "success"
    decisions = [a["decision"] for a in RunDir(out).read_attempts() if a["prompt_id"] == "ghz_02"]
    assert decisions == ["uncertain", "success"]
    assert len(RunDir(out).read_responses()) == 6


async def test_grid_shows_hostile_errors_escaped_and_scrolls_to_the_cursor(tmp_path: Path) -> None:
    from engine.events import PromptStateChanged, RunStarted
    from engine.run.runs import RunProgress
    from tests.app.test_app_support import HOSTILE

    release = write_release(tmp_path / "release", count=6)
    app = make_app(release, tmp_path / "runs", replay_service=FakeReplayService())
    progress = RunProgress()
    ids = tuple(f"p{i:04d}" for i in range(500))
    progress.apply(RunStarted("d", "local", "m", 500, 500, 0, ids))
    progress.apply(PromptStateChanged("p0000", "error", 1, HOSTILE))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await app.push_screen(MonitorScreen(tmp_path / "runs" / "x", progress, live=False))
        await pilot.pause()
        grid = app.screen.query_one(RunGrid)
        cells = grid.line_text(0)
        assert cells[2] == "error" and cells[5].startswith("\\x1b]52;c;")
        strips = [grid.render_line(y) for y in range(3)]
        assert all("\x1b" not in seg.text for strip in strips for seg in strip)
        await pilot.press("end")
        assert grid.cursor_prompt() == "p0499" and grid.scroll_offset.y > 400
        await pilot.press("home", "down", "space")
        assert app.screen.selected_prompts() == ["p0001"]  # type: ignore[attr-defined]
