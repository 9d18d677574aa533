"""App-wide behaviour: F1 help, the palette's area-named commands, themes, footer bindings."""

from __future__ import annotations

from pathlib import Path

from textual.widgets import DataTable, Markdown

from pqid_tui.app import DARK, LIGHT, make_app
from pqid_tui.screens.help import HelpScreen
from pqid_tui.screens.monitor import MonitorScreen
from tests.app.test_app_support import SIZE, FakeReplayService, make_run
from tests.helpers import write_release


async def test_help_palette_theme_and_bindings(tmp_path: Path) -> None:
    release = write_release(tmp_path / "release", count=6)
    run = await make_run(tmp_path / "runs", release)
    app = make_app(release, tmp_path / "runs", replay_service=FakeReplayService())
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        titles = {c.title for c in app.get_system_commands(app.screen)}
        assert {
            "run: new",
            "credentials: open",
            "replay: open",
            "home: go home",
            "theme: toggle dark/light",
        } <= titles

        app.open_screen("monitor", run_dir=run)
        await pilot.pause()
        monitor = app.screen
        assert isinstance(monitor, MonitorScreen)
        titles = {c.title for c in app.get_system_commands(monitor)}
        assert {
            "run: retry selected",
            "run: retry all errors",
            "run: retry uncertain",
            "run: pause or resume",
            "run: stop",
        } <= titles
        # Every key the footer can show says what it does.
        for active in monitor.active_bindings.values():
            if active.binding.show:
                assert active.binding.description, active.binding

        await pilot.press("f1")
        await pilot.pause()
        help_screen = app.screen
        assert isinstance(help_screen, HelpScreen)
        assert help_screen.query_one("#help-screen", Markdown).source.startswith("# Run monitor")
        assert help_screen.query_one("#help-widget", Markdown).source.startswith("## Run grid")
        keys = help_screen.query_one("#help-keys", DataTable)
        actions = {str(keys.get_row_at(i)[1]) for i in range(keys.row_count)}
        assert {"Retry uncertain", "Inspect", "Theme", "Help"} <= actions
        await pilot.press("f1")
        await pilot.pause()
        assert app.screen is monitor

        assert app.theme == DARK
        await pilot.press("ctrl+t")
        assert app.theme == LIGHT
        await pilot.press("ctrl+t")
        assert app.theme == DARK

        app.go_home()
        await pilot.pause()
        assert type(app.screen).__name__ == "HomeScreen"
        await pilot.press("q")
        await pilot.pause()
    assert app.return_value == 0


def test_run_app_uses_the_cli_namespace(tmp_path: Path, monkeypatch: object) -> None:
    import argparse

    from pqid_tui import app as app_module

    seen = {}

    def fake_run(self: object) -> int:
        seen["release"] = self.release_dir  # type: ignore[attr-defined]
        seen["runs"] = self.runs_dir  # type: ignore[attr-defined]
        return 0

    monkeypatch.setattr(app_module.PqidApp, "run", fake_run)  # type: ignore[attr-defined]
    release = write_release(tmp_path / "release", count=6)
    ns = argparse.Namespace(release_dir=str(release), runs_dir=None)
    assert app_module.run_app(ns) == 0
    assert seen["release"] == release
    assert seen["runs"] == app_module.default_runs_dir()
    assert seen["runs"].name == "runs" and "pqid-tui" in str(seen["runs"])


async def test_the_theme_is_remembered_and_offered_once(tmp_path: Path) -> None:
    """Issue 13: the theme was forgotten; the palette had Textual's "Theme" beside ours."""
    import json

    release = write_release(tmp_path / "release", count=6)
    settings = tmp_path / "config" / "settings.json"
    app = make_app(
        release, tmp_path / "runs", replay_service=FakeReplayService(), settings_path=settings
    )
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        titles = [c.title for c in app.get_system_commands(app.screen)]
        assert "Theme" not in titles and titles.count("theme: toggle dark/light") == 1
        assert app.theme == DARK
        await pilot.press("ctrl+t")
        assert app.theme == LIGHT
    assert json.loads(settings.read_text())["theme"] == LIGHT
    app = make_app(
        release, tmp_path / "runs", replay_service=FakeReplayService(), settings_path=settings
    )
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert app.theme == LIGHT
    # An app made without a settings file (every test's) writes nothing anywhere.
    app = make_app(release, tmp_path / "runs", replay_service=FakeReplayService())
    assert app.settings.path is None
