"""The run grid as a k9s user expects: filter, only errors, sort, the error of the row under the
cursor, marks in the footer, readable at 80 columns; the clock while paused and across runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from textual.widgets import Static

from engine.demo import DEMO_RELEASE_DIR
from engine.events import PromptStateChanged, RunStarted
from engine.release import load_release
from engine.run.runs import RunProgress
from pqid_tui.app import PqidApp, make_app
from pqid_tui.screens.monitor import FilterInput, MonitorScreen
from pqid_tui.widgets.run_grid import RunGrid
from tests.app.test_app_support import SIZE, FakeReplayService, make_run, small_release

LONG_ERROR = (
    "bad_request: HTTP 400 from the provider: the field 'max_tokens' is larger than "
    "this model allows (8192); lower --max-tokens or choose another model"
)


async def open_monitor(app: PqidApp, pilot: Any, run_dir: Path) -> MonitorScreen:
    app.open_screen("monitor", run_dir=run_dir)
    await pilot.pause()
    screen = app.screen
    assert isinstance(screen, MonitorScreen)
    screen.flush(full=True)
    await pilot.pause()
    return screen


def text_of(screen: MonitorScreen, selector: str) -> str:
    return str(screen.query_one(selector, Static).render())


async def errored_app(tmp_path: Path) -> tuple[PqidApp, Path]:
    """An app over a run in which ghz_01 and ghz_04 ended in errors, and that run."""
    release = small_release(tmp_path)
    run = await make_run(
        tmp_path / "runs", release, plan={"ghz_01": [400], "ghz_04": [400]}, max_retries=0
    )
    return make_app(release, tmp_path / "runs", replay_service=FakeReplayService()), run


async def test_slash_filters_the_grid_enter_keeps_escape_clears(tmp_path: Path) -> None:
    app, run = await errored_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        screen = await open_monitor(app, pilot, run)
        grid = screen.query_one(RunGrid)
        assert grid.row_count == 6
        await pilot.press("slash")
        assert isinstance(screen.focused, FilterInput)
        await pilot.press("0", "4")  # letters typed here are text, not shortcuts
        await pilot.pause()
        assert grid.ids == ["ghz_04"]
        await pilot.press("enter")
        await pilot.pause()
        assert screen.focused is grid and grid.ids == ["ghz_04"]
        assert "1 of 6 shown" in text_of(screen, "#grid-title")
        await pilot.press("slash", "escape")
        await pilot.pause()
        assert grid.row_count == 6 and "shown" not in text_of(screen, "#grid-title")
        # The search also looks at errors.
        await pilot.press("slash", *"status 400", "enter")
        await pilot.pause()
        assert grid.ids == ["ghz_01", "ghz_04"]


async def test_f_shows_only_errors_and_o_sorts_what_needs_attention_first(tmp_path: Path) -> None:
    app, run = await errored_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        screen = await open_monitor(app, pilot, run)
        grid = screen.query_one(RunGrid)
        await pilot.press("f")
        await pilot.pause()
        assert grid.ids == ["ghz_01", "ghz_04"]
        assert "only error" in text_of(screen, "#grid-title")
        await pilot.press("f")  # only uncertain: none here
        await pilot.pause()
        assert grid.ids == []
        await pilot.press("f", "f")  # only retrying, then every row again
        await pilot.pause()
        assert grid.row_count == 6
        await pilot.press("o")  # by state: errors first
        await pilot.pause()
        assert grid.ids[:2] == ["ghz_01", "ghz_04"]
        assert "sorted by state" in text_of(screen, "#grid-title")
        await pilot.press("o", "o", "o")  # prompt, attempts, then arrival order
        await pilot.pause()
        assert grid.ids == [f"ghz_{i:02d}" for i in range(6)]
        assert "sorted" not in text_of(screen, "#grid-title")


async def test_the_whole_error_of_the_row_under_the_cursor_is_readable(tmp_path: Path) -> None:
    release = small_release(tmp_path)
    progress = RunProgress()
    progress.apply(
        RunStarted("x", "groq", "demo-model", 6, 6, 0, tuple(f"ghz_{i:02d}" for i in range(6)))
    )
    progress.apply(PromptStateChanged("ghz_02", "error", 1, LONG_ERROR))
    app = make_app(release, tmp_path / "runs", replay_service=FakeReplayService())
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        screen = MonitorScreen(tmp_path / "runs" / "x", progress, live=False)
        app.push_screen(screen)
        await pilot.pause()
        grid = screen.query_one(RunGrid)
        assert grid.line_text(2)[5] != LONG_ERROR  # the grid's column cuts it
        await pilot.press("down", "down")
        await pilot.pause()
        detail = text_of(screen, "#row-detail")
        assert "ghz_02" in detail and "attempt 1" in detail
        assert " ".join(detail.split()).endswith(LONG_ERROR.split()[-1])
        assert "".join(detail.split()).endswith("".join(LONG_ERROR.split()))


async def test_marking_is_in_the_footer(tmp_path: Path) -> None:
    app, run = await errored_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        screen = await open_monitor(app, pilot, run)
        shown = {
            b.binding.key: b.binding.description
            for b in screen.active_bindings.values()
            if b.binding.show
        }
        assert shown.get("space") == "Mark" and "slash" in shown and "f" in shown and "o" in shown


async def test_prompt_ids_stay_readable_at_80_columns(tmp_path: Path) -> None:
    release = DEMO_RELEASE_DIR
    ids = sorted((p.prompt_id for p in load_release(release).prompts), key=len)[-6:]
    run = await make_run(
        tmp_path / "runs", release, plan={ids[0]: [400]}, max_retries=0, prompt_ids=tuple(ids)
    )
    app = make_app(release, tmp_path / "runs", replay_service=FakeReplayService())
    async with app.run_test(size=(80, 30)) as pilot:
        await pilot.pause()
        screen = await open_monitor(app, pilot, run)
        grid = screen.query_one(RunGrid)
        longest = max(grid.ids, key=len)
        assert len(longest) == 40
        shown = [grid.line_text(i)[1] for i in range(grid.row_count)]
        assert shown == grid.ids, shown
        # The retry queue is still on screen, under the grid.
        queue = screen.query_one("#queue-pane")
        assert queue.region.height > 3 and queue.region.y > grid.region.y


def test_the_eta_and_the_rate_stand_still_while_paused() -> None:
    now = [1000.0]
    progress = RunProgress(clock=lambda: now[0])
    ids = tuple(f"p{i}" for i in range(10))
    progress.apply(RunStarted("x", "groq", "m", 10, 10, 0, ids))
    for pid in ids[:5]:
        progress.apply(PromptStateChanged(pid, "in_flight", 1))
        progress.apply(PromptStateChanged(pid, "success", 1))
    now[0] += 50
    assert progress.eta_seconds == 50
    progress.paused()
    now[0] += 600
    assert progress.eta_seconds == 50 and progress.elapsed == 650
    progress.resumed()
    now[0] += 10
    assert progress.sending_seconds == 60 and progress.eta_seconds == 60


async def test_elapsed_adds_up_across_a_retry_in_the_same_monitor(tmp_path: Path) -> None:
    release = small_release(tmp_path)
    now = [1000.0]
    first = RunProgress(clock=lambda: now[0])
    first.apply(RunStarted("x", "groq", "m", 6, 6, 0, tuple(f"ghz_{i:02d}" for i in range(6))))
    now[0] += 125
    first.finished_at = now[0]
    app = make_app(release, tmp_path / "runs", replay_service=FakeReplayService())
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        screen = MonitorScreen(tmp_path / "runs" / "x", first, live=False)
        app.push_screen(screen)
        await pilot.pause()
        second = RunProgress(clock=lambda: now[0])
        second.apply(RunStarted("x", "groq", "m", 6, 1, 5, ("ghz_00",)))
        now[0] += 5
        screen.attach(second, live=False)
        screen.show_stats()
        stats = text_of(screen, "#run-stats")
        assert "elapsed 0:02:10 (0:00:05 in this resume)" in stats, stats


async def test_a_run_opened_from_disk_shows_its_recorded_elapsed(tmp_path: Path) -> None:
    app, run = await errored_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        screen = await open_monitor(app, pilot, run)
        assert screen.progress.recorded_elapsed is not None
        assert "(its last invocation)" in text_of(screen, "#run-stats")
