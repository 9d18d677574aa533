"""Payload inspector: request and hash, attempts, raw bodies, response; untrusted text escaped."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from textual.widgets import DataTable, Static

from engine.run.runs import PromptDetail
from pqid_tui.app import PqidApp, make_app
from pqid_tui.screens.payload import PayloadScreen
from tests.app.test_app_support import HOSTILE, SIZE, FakeReplayService, make_run
from tests.helpers import write_release


def rendered(screen: PayloadScreen, selector: str) -> str:
    """The text a Static shows: a Syntax's code or a Text's plain string."""
    content = screen.query_one(selector, Static).content
    return str(getattr(content, "code", None) or getattr(content, "plain", None) or content)


async def hostile_run_app(tmp_path: Path) -> tuple[PqidApp, Path]:
    """A run whose ghz_00 was overloaded once, then answered with hostile text around its code,
    and an app over it."""
    release = write_release(tmp_path / "release", count=6)
    runs = tmp_path / "runs"
    out = await make_run(
        runs,
        release,
        plan={"ghz_00": [503]},
        content=lambda pid, code: HOSTILE + f"```python\n{code}```",
    )
    return make_app(release, runs, replay_service=FakeReplayService()), out


async def loaded_payload(app: PqidApp, pilot: Any) -> tuple[PayloadScreen, PromptDetail]:
    """The payload screen just opened, once its detail is read, and that detail."""
    await app.workers.wait_for_complete()
    await pilot.pause()
    screen = app.screen
    assert isinstance(screen, PayloadScreen) and screen.detail is not None
    return screen, screen.detail


async def test_every_piece_of_evidence_is_shown_and_escaped(tmp_path: Path) -> None:
    app, out = await hostile_run_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        app.open_screen("monitor", run_dir=out)
        await pilot.pause()
        await pilot.press("enter")  # the cursor is on ghz_00
        screen, detail = await loaded_payload(app, pilot)
        summary = rendered(screen, "#summary")
        assert "ghz_00" in summary and "(matches the body)" in summary
        assert detail.request_sha256 in summary
        assert '"messages"' in rendered(screen, "#request")
        attempts = screen.query_one("#attempts", DataTable)
        assert attempts.row_count == 2
        assert [str(c) for c in attempts.get_row_at(0)][:5] == [
            "1",
            "503",
            "42 ms",
            "overloaded",
            "retry",
        ]
        raws = [str(getattr(w.content, "plain", w.content)) for w in screen.query("#raw Static")]
        assert any("attempt 2: raw/ghz_00.attempt-2.json" in r for r in raws)
        response = rendered(screen, "#response")
        # Escapes are visible, none reaches the terminal, markup stays literal.
        assert "\x1b" not in response and "\x07" not in response
        assert "\\x1b]52;c;" in response and "\\x1b[31mred" in response
        assert "[bold]not bold[/bold]" in response
        code = rendered(screen, "#code")
        assert "def build_circuit" in code and "\x1b" not in code
        # The whole screen, as the terminal would receive it, holds no raw ESC from the model.
        svg = app.export_screenshot()
        assert "]52;" not in svg.replace("\\x1b]52;", "")

        await pilot.press("x")
        assert app.clipboard.startswith("from qiskit import QuantumCircuit")


async def test_copies_are_harmless_to_paste_and_the_request_is_what_was_hashed(
    tmp_path: Path,
) -> None:
    """Issue 13: `o` put the model's raw control sequences on the clipboard (pasting them into
    a terminal obeys them); `b` copied pretty-printed JSON whose SHA-256 was not the one
    shown; a raw provider body could not be copied at all."""
    import hashlib

    from pqid_tui.screens.dialogs import ConfirmScreen

    app, out = await hostile_run_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        app.push_screen(PayloadScreen(out, "ghz_00"))
        screen, detail = await loaded_payload(app, pilot)

        await pilot.press("o")
        assert "\x1b" not in app.clipboard and "\x07" not in app.clipboard
        assert app.clipboard.startswith("\\x1b]52;c;") and "[bold]not bold" in app.clipboard
        assert "control characters are written as" in list(app._notifications)[-1].message

        await pilot.press("b")  # the exact bytes whose SHA-256 the screen shows
        digest = hashlib.sha256(app.clipboard.encode("utf-8")).hexdigest()
        assert digest == detail.request_sha256
        assert "exactly as hashed" in list(app._notifications)[-1].message

        # The raw body of the attempt under the cursor (the 503, then the answer), escaped.
        await pilot.press("r")
        assert app.clipboard.startswith('{"error"') and "status 503" in app.clipboard
        screen.query_one("#attempts", DataTable).move_cursor(row=1)
        await pilot.press("r")
        assert '"choices"' in app.clipboard and "\x1b" not in app.clipboard
        assert "\\u001b]52" in app.clipboard  # JSON's own escape, as stored

        # Its exact bytes only after a confirmation that says what it holds.
        app.copy_to_clipboard("")
        screen.action_copy_raw_exactly()
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen) and app.clipboard == ""
        await pilot.press("y")
        await pilot.pause()
        raw = detail.raw_bodies[-1]
        assert app.clipboard.encode("utf-8") == raw.data


async def test_a_prompt_without_response_says_so(tmp_path: Path) -> None:
    release = write_release(tmp_path / "release", count=6)
    runs = tmp_path / "runs"
    out = await make_run(runs, release, plan={"ghz_00": [400]})
    app = make_app(release, runs, replay_service=FakeReplayService())
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        app.push_screen(PayloadScreen(out, "ghz_00"))
        await app.workers.wait_for_complete()
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, PayloadScreen)
        assert "state error" in rendered(screen, "#summary")
        assert "HTTP 400" in rendered(screen, "#summary")
        assert rendered(screen, "#response") == "no canonical response"
        await pilot.press("x")
        assert app.clipboard == ""
