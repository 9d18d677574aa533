"""Home screen: the release, the runs found, the way onward on an empty runs directory."""

from __future__ import annotations

from pathlib import Path

from textual.widgets import DataTable, Static

from pqid_tui.app import make_app
from pqid_tui.screens.home import HomeScreen
from tests.helpers import write_release
from tests.test_app_support import SIZE, FakeReplayService, make_run


async def test_empty_runs_dir_shows_what_to_do_first(tmp_path: Path) -> None:
    release = write_release(tmp_path / "release", count=6)
    app = make_app(release, tmp_path / "runs", replay_service=FakeReplayService())
    async with app.run_test(size=SIZE) as pilot:
        await app.workers.wait_for_complete()
        await pilot.pause()
        home = app.screen
        assert isinstance(home, HomeScreen)
        info = str(home.query_one("#release", Static).render())
        assert "test-release 0.0.1" in info and "6 prompts" in info and "verified" in info
        assert "dev 2, test 4" in info
        hint = home.query_one("#runs-hint", Static)
        assert hint.display and "Press n to plan a first run" in str(hint.render())
        await pilot.press("enter")  # nothing to open: a hint, no crash
        assert isinstance(app.screen, HomeScreen)
        await pilot.press("n")
        assert type(app.screen).__name__ == "NewRunScreen"


async def test_runs_are_listed_with_counts_and_replay_state(tmp_path: Path) -> None:
    release = write_release(tmp_path / "release", count=6)
    runs = tmp_path / "runs"
    await make_run(runs, release, "a-run", plan={"ghz_01": [400]})
    replayed = await make_run(runs, release, "b-run")
    (replayed / "evaluation").mkdir()
    (replayed / "evaluation" / "pqid_bench_canonical_evaluations.jsonl").write_text("")
    (runs / "not-a-run").mkdir()
    app = make_app(release, runs, replay_service=FakeReplayService())
    async with app.run_test(size=SIZE) as pilot:
        await app.workers.wait_for_complete()
        await pilot.pause()
        table = app.screen.query_one("#runs", DataTable)
        assert table.row_count == 2
        first = [str(c) for c in table.get_row_at(0)]
        assert first[:3] == ["a-run", "groq", "demo-model"]
        assert first[3:] == ["6", "5", "1", "0", "0", "yes", "no"]
        second = [str(c) for c in table.get_row_at(1)]
        assert second[-1] == "yes"
        await pilot.press("down", "enter")
        assert type(app.screen).__name__ == "MonitorScreen"
        assert app.screen.run_dir == replayed  # type: ignore[attr-defined]


async def test_a_broken_release_is_explained(tmp_path: Path) -> None:
    release = write_release(tmp_path / "release", count=6)
    (release / "prompts.jsonl").write_text("tampered\n")
    app = make_app(release, tmp_path / "runs", replay_service=FakeReplayService())
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        info = str(app.screen.query_one("#release", Static).render())
        assert "not usable" in info and "SHA-256" in info
        await pilot.press("n")
        await pilot.pause()
        assert "the release cannot be used" in str(
            app.screen.query_one("#err-general", Static).render())
