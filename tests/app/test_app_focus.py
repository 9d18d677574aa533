"""Focus: every screen opens with a visible, sensible focus, and letters typed into a text
field are text, never shortcuts (issue 13: the Replay screen opened with nothing visibly
focused, and typing a base image name ran `b`, a build, and `m`, a comparison)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from textual.containers import ScrollableContainer, VerticalScroll
from textual.widgets import Button, DataTable, Input, Select

from pqid_tui.app import make_app
from pqid_tui.screens.credentials import CredentialsScreen
from pqid_tui.screens.dialogs import ConfirmScreen, SecretScreen
from pqid_tui.screens.payload import PayloadScreen
from pqid_tui.screens.replay import ReplayScreen
from tests.app.test_app_support import SIZE, FakeReplayService, make_run, memory_keyring  # noqa: F401
from tests.helpers import write_release


async def settle(app: Any, pilot: Any) -> None:
    await pilot.pause()
    await app.workers.wait_for_complete()
    await pilot.pause()


async def test_each_screen_opens_with_a_sensible_focus(tmp_path: Path, memory_keyring: Any) -> None:  # noqa: F811
    release = write_release(tmp_path / "release", count=6)
    runs = tmp_path / "runs"
    run = await make_run(runs, release)
    app = make_app(release, runs, replay_service=FakeReplayService(), env={})
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        expected: list[tuple[Any, type[Any], str | None]] = [
            (ReplayScreen(), Select, "run"),
            (PayloadScreen(run, "ghz_00"), DataTable, "attempts"),
            (CredentialsScreen(), DataTable, "routes"),
            (ConfirmScreen("Sure?", "It does things."), Button, "no"),
            (SecretScreen("groq"), Input, "secret"),
        ]
        for screen, kind, widget_id in expected:
            app.push_screen(screen)
            await settle(app, pilot)
            focused = screen.focused
            assert isinstance(focused, kind) and focused.id == widget_id, (screen, focused)
            # Never a bare scroll container: the user must see where keys go.
            assert type(focused) not in (ScrollableContainer, VerticalScroll)
            app.pop_screen()
            await settle(app, pilot)


async def test_letters_typed_into_the_replay_fields_are_text(tmp_path: Path) -> None:
    release = write_release(tmp_path / "release", count=6)
    runs = tmp_path / "runs"
    await make_run(runs, release)
    service = FakeReplayService()
    app = make_app(release, runs, replay_service=service)
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        app.open_screen("replay")
        await settle(app, pilot)
        screen = app.screen
        assert isinstance(screen, ReplayScreen)
        assert isinstance(screen.focused, Select)  # not an invisible scroll container
        footer_keys = {
            b.binding.key
            for b in screen.active_bindings.values()
            if screen.check_action(b.binding.action, ())
        }
        assert {"b", "m", "x"} <= footer_keys

        field = screen.query_one("#base_image", Input)
        field.focus()
        await pilot.pause()
        await pilot.press(*"my-base:mbx")
        await settle(app, pilot)
        assert field.value == "my-base:mbx"
        assert [c[0] for c in service.calls] == ["docker_status"]  # no build, no compare
        # While typing, the letter shortcuts are hidden from the footer (and refused).
        assert screen.check_action("build", ()) is False
        assert screen.check_action("compare", ()) is False
        # And the Docker status does not tell the user to press a letter.
        status = str(screen.query_one("#docker-status").render())
        assert "needs a build" in status and "press b" not in status
