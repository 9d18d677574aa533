"""Snapshot tests: every screen at 120x40 over fixed runs (no clock, no random paths).

Regenerate after an intended change with `pytest tests/app/test_app_snapshots.py
--snapshot-update` and look at the pictures before committing them.
"""

from __future__ import annotations

import asyncio
import fcntl
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pqid_tui.app import PqidApp, make_app
from tests.app.test_app_support import (  # noqa: F401
    HOSTILE,
    SIZE,
    FakeReplayService,
    frozen_clock,
    make_run,
    memory_keyring,
)
from tests.helpers import write_release

ROOT = Path("/tmp/pqid-tui-snapshots")


@pytest.fixture
def place(request: pytest.FixtureRequest) -> Iterator[Path]:
    """A fixed directory per test, so the paths on screen are the same on every machine.

    Held under a lock: two test runs on one machine must not share it at the same time.
    """
    ROOT.mkdir(parents=True, exist_ok=True)
    with (ROOT.parent / "pqid-tui-snapshots.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        path = ROOT / request.node.name
        shutil.rmtree(path, ignore_errors=True)
        path.mkdir(parents=True)
        try:
            yield path
        finally:
            shutil.rmtree(path, ignore_errors=True)


def app_with_runs(
    place: Path, *, runs: bool = True, service: FakeReplayService | None = None
) -> PqidApp:
    release = write_release(place / "release", count=6)
    if runs:
        asyncio.run(
            make_run(
                place / "runs",
                release,
                "groq-demo",
                plan={"ghz_01": [503], "ghz_04": [400]},
                uncertain=("ghz_05",),
                content=lambda pid, code: (HOSTILE if pid == "ghz_00" else "") + code,
            )
        )
        asyncio.run(
            make_run(place / "runs", release, "oracle-full", provider="oracle", model="reference")
        )
    return make_app(
        release,
        place / "runs",
        env={},
        clock=frozen_clock,
        replay_service=service or FakeReplayService(),
    )


async def settle(pilot: Any) -> None:
    await pilot.app.workers.wait_for_complete()
    await pilot.pause()


def test_home_empty(snap_compare: Any, place: Path) -> None:
    """Home on an empty runs directory: the release panel (test-release 0.0.1, 6 prompts:
    dev 2, test 4, verified digest) and the hint to press n for a first oracle run."""
    assert snap_compare(app_with_runs(place, runs=False), terminal_size=SIZE, run_before=settle)


def test_home_with_runs(snap_compare: Any, place: Path) -> None:
    """Home listing two runs: groq-demo (6 selected, 4 success, 1 error, 1 uncertain, not
    complete) and oracle-full (6 success, complete), neither replayed."""
    assert snap_compare(app_with_runs(place), terminal_size=SIZE, run_before=settle)


def test_new_run_form_and_plan(snap_compare: Any, place: Path) -> None:
    """New run with the default oracle route: the form on the left, and on the right the
    dry-run plan (contacts provider: no, 6 selected prompts, the digests, output dir
    runs/oracle-reference-2... or oracle-reference) with no errors."""

    async def before(pilot: Any) -> None:
        await settle(pilot)
        await pilot.press("n")
        await settle(pilot)

    assert snap_compare(app_with_runs(place, runs=False), terminal_size=SIZE, run_before=before)


def test_new_run_validation_errors(snap_compare: Any, place: Path) -> None:
    """New run on the groq route with temperature 5 and a credential-shaped extra body field:
    the red messages sit under the temperature and extra-body fields, the plan panel says there
    is no plan, and Start is disabled."""

    async def before(pilot: Any) -> None:
        from textual.widgets import Input, Select

        await settle(pilot)
        await pilot.press("n")
        await settle(pilot)
        screen = pilot.app.screen
        screen.query_one("#provider", Select).value = "groq"
        await pilot.pause()
        screen.query_one("#temperature", Input).value = "5"
        screen.query_one("#extra_body", Input).value = '{"api_key": "x"}'
        await settle(pilot)

    assert snap_compare(app_with_runs(place, runs=False), terminal_size=SIZE, run_before=before)


def test_monitor_final_state(snap_compare: Any, place: Path) -> None:
    """Run monitor of groq-demo opened from disk: six rows (ghz_01 success after a retry,
    ghz_04 error with its HTTP 400, ghz_05 uncertain), the totals line without clock values,
    and the retry queue holding ghz_04 and ghz_05."""

    async def before(pilot: Any) -> None:
        await settle(pilot)
        await pilot.press("enter")
        await settle(pilot)

    assert snap_compare(app_with_runs(place), terminal_size=SIZE, run_before=before)


def test_monitor_at_80_columns_filtered_to_errors(snap_compare: Any, place: Path) -> None:
    """The same monitor in an 80-column terminal after `f`: the retry queue under the grid,
    the grid showing only ghz_04 ("1 of 6 shown, only error"), and under it the error of the
    row under the cursor in full."""

    async def before(pilot: Any) -> None:
        await settle(pilot)
        await pilot.press("enter")
        await settle(pilot)
        await pilot.press("f")
        await settle(pilot)

    assert snap_compare(app_with_runs(place), terminal_size=(80, 30), run_before=before)


def test_retry_uncertain_confirmation(snap_compare: Any, place: Path) -> None:
    """The confirmation before resending an uncertain prompt: it names the groq route and
    explains the possible extra paid draw and that the uncertain attempt stays in history."""

    async def before(pilot: Any) -> None:
        await settle(pilot)
        await pilot.press("enter")
        await settle(pilot)
        await pilot.press("u")
        await settle(pilot)

    assert snap_compare(app_with_runs(place), terminal_size=SIZE, run_before=before)


def test_payload_inspector_escapes_hostile_output(snap_compare: Any, place: Path) -> None:
    """Payload inspector of ghz_00, whose model output carries OSC 52, colour, hyperlink and
    clear-screen escapes and Rich markup: the summary with the request hash (matches the body),
    the highlighted JSON request body; scrolled down, the attempts and raw body. No escape is
    interpreted: the picture has no red text and no link."""

    async def before(pilot: Any) -> None:
        await settle(pilot)
        await pilot.press("enter")
        await settle(pilot)
        await pilot.press("enter")
        await settle(pilot)

    assert snap_compare(app_with_runs(place), terminal_size=SIZE, run_before=before)


def test_payload_inspector_response(snap_compare: Any, place: Path) -> None:
    """The bottom of ghz_00's payload inspector: the canonical response shown with visible
    \\x1b escapes and a literal [bold]not bold[/bold], and the extracted code highlighted as
    Python."""

    async def before(pilot: Any) -> None:
        await settle(pilot)
        await pilot.press("enter")
        await settle(pilot)
        await pilot.press("enter")
        await settle(pilot)
        pilot.app.screen.query_one("#payload").scroll_end(animate=False)
        await pilot.pause()

    assert snap_compare(app_with_runs(place), terminal_size=SIZE, run_before=before)


def test_credentials(snap_compare: Any, place: Path, memory_keyring: Any) -> None:  # noqa: F811
    """Credentials with no environment variables and an empty keyring: every route listed,
    sources "missing" for keyed routes and "none" for local and oracle, the check note."""
    assert snap_compare(
        app_with_runs(place, runs=False), terminal_size=SIZE, press=["c"], run_before=settle
    )


def test_replay_and_compare(snap_compare: Any, place: Path) -> None:
    """Replay & compare after a fake build and replay of groq-demo: Docker 99.0-fake with the
    image present, the log, progress 4/4, the comparison table with denominators and partial
    marks, sorted by execution (▼, the cursor on that column), the run's row in bold accent,
    the bar chart of execution rates (the run marked ▶) and the failure taxonomy (scrolled to
    the end)."""

    async def before(pilot: Any) -> None:
        from textual.widgets import Checkbox

        await settle(pilot)
        await pilot.press("r")
        await settle(pilot)
        screen = pilot.app.screen
        await pilot.press("b")
        await settle(pilot)
        screen.query_one("#acknowledge_execution", Checkbox).value = True
        await pilot.press("ctrl+r")
        await settle(pilot)
        await settle(pilot)
        screen.query_one("#replay").scroll_end(animate=False)
        await pilot.pause()

    assert snap_compare(app_with_runs(place), terminal_size=SIZE, run_before=before)


def compare_app(place: Path) -> PqidApp:
    """The synthetic 21-row matrix release of test_app_replay and a replayed 70-prompt run."""
    from tests.app.test_app_replay import (
        EngineCompareService,
        synthetic_matrix_release,
        synthetic_replayed_run,
    )

    release = synthetic_matrix_release(place / "release")
    asyncio.run(synthetic_replayed_run(place / "runs", release))
    return make_app(
        release, place / "runs", env={}, clock=frozen_clock, replay_service=EngineCompareService()
    )


def open_comparison(widget: str) -> Any:
    """Open Replay and compare, compare (m), scroll `widget` to the top of the screen."""

    async def before(pilot: Any) -> None:
        await settle(pilot)
        await pilot.press("r")
        await settle(pilot)
        await pilot.press("m")
        await settle(pilot)
        screen = pilot.app.screen
        screen.query_one("#replay").scroll_to_widget(
            screen.query_one(widget), top=True, animate=False
        )
        await settle(pilot)

    return before


def test_compare_with_22_rows(snap_compare: Any, place: Path) -> None:
    """The comparison of groq/demo-model with 21 synthetic frozen model rows on 70 prompts:
    the note (70 prompts), then all 22 rows at once sorted by rank (rank ▲ in the header, the
    rank column under the cursor), every name whole (the long synthetic names included),
    kind, n = 70, answered and the rate columns as `rate% (count/70)`, the run's row in bold
    accent; the rest of the columns are to the right (horizontal scrollbar)."""
    assert snap_compare(
        compare_app(place), terminal_size=SIZE, run_before=open_comparison("#compare-note")
    )


def test_compare_chart_with_22_rows(snap_compare: Any, place: Path) -> None:
    """The bar chart of the same comparison: title `structural match, highest first`, 22
    lines, one bar per row in decreasing order, each with its rate and (count/70); the run's
    line marked ▶ in the accent colour; the two names too long for a third of the width end
    in an ellipsis."""
    assert snap_compare(
        compare_app(place), terminal_size=SIZE, run_before=open_comparison("#chart")
    )


def test_compare_pqid_bench_21_models(snap_compare: Any, place: Path, pqid_bench: Any) -> None:
    """PQID-Bench v1.0.0 at 160x48: a run that answered with Llama 3.3 70B Versatile's
    archived responses, scored with its frozen verdicts, among the 21 frozen models: the note
    naming the 150-prompt identifiability subset and `publishable`; 22 rows by rank (Claude
    Fable 5 and GPT-5.6 Sol 1, ..., Llama 3.1 8B Instant and Qwen3 32B 21), the run at rank 17
    beside its twin with the same rates; full model names (Mistral Small 3.2 24B Instruct 2506
    (OpenRouter/Mistral)); execution, assembly and signature columns as `rate% (count/154)`."""
    from tests.app.test_app_pqid_bench import CompareOnly, replayed_evidence_run

    asyncio.run(replayed_evidence_run(place / "runs", pqid_bench.evidence))
    app = make_app(
        pqid_bench.evidence,
        place / "runs",
        env={},
        clock=frozen_clock,
        replay_service=CompareOnly(),
    )
    assert snap_compare(app, terminal_size=(160, 48), run_before=open_comparison("#compare-note"))


def test_help_screen(snap_compare: Any, place: Path) -> None:
    """F1 over the run monitor: the monitor's help text, the run grid's help (the focused
    widget) and the table of keys with their actions."""

    async def before(pilot: Any) -> None:
        await settle(pilot)
        await pilot.press("enter")
        await settle(pilot)
        await pilot.press("f1")
        await settle(pilot)

    assert snap_compare(app_with_runs(place), terminal_size=SIZE, run_before=before)


def test_light_theme(snap_compare: Any, place: Path) -> None:
    """Home with runs in the light theme (ctrl+t)."""
    assert snap_compare(
        app_with_runs(place), terminal_size=SIZE, press=["ctrl+t"], run_before=settle
    )
