"""Payload inspector: request and hash, attempts, raw bodies, response; untrusted text escaped."""

from __future__ import annotations

from pathlib import Path

from textual.widgets import DataTable, Static

from pqid_tui.app import make_app
from pqid_tui.screens.payload import PayloadScreen
from tests.helpers import write_release
from tests.test_app_support import HOSTILE, SIZE, FakeReplayService, make_run


def rendered(screen: PayloadScreen, selector: str) -> str:
    """The text a Static shows: a Syntax's code or a Text's plain string."""
    content = screen.query_one(selector, Static).content
    return str(getattr(content, "code", None) or getattr(content, "plain", None) or content)


async def test_every_piece_of_evidence_is_shown_and_escaped(tmp_path: Path) -> None:
    release = write_release(tmp_path / "release", count=6)
    runs = tmp_path / "runs"
    out = await make_run(runs, release, plan={"ghz_00": [503]},
                         content=lambda pid, code: HOSTILE + f"```python\n{code}```")
    app = make_app(release, runs, replay_service=FakeReplayService())
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        app.open_screen("monitor", run_dir=out)
        await pilot.pause()
        await pilot.press("enter")  # the cursor is on ghz_00
        await app.workers.wait_for_complete()
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, PayloadScreen) and screen.detail is not None
        summary = rendered(screen, "#summary")
        assert "ghz_00" in summary and "(matches the body)" in summary
        assert screen.detail.request_sha256 in summary
        assert '"messages"' in rendered(screen, "#request")
        attempts = screen.query_one("#attempts", DataTable)
        assert attempts.row_count == 2
        assert [str(c) for c in attempts.get_row_at(0)][:5] == ["1", "503", "42 ms",
                                                                 "overloaded", "retry"]
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
        await pilot.press("o")
        assert app.clipboard.startswith("\x1b]52;")  # the exact bytes, for the user's clipboard
        await pilot.press("b")
        assert '"model": "demo-model"' in app.clipboard


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
