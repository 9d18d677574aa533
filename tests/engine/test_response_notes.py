"""Truncated, empty and redirected successes stay visible: events, the run state, the grid."""

from __future__ import annotations

from pathlib import Path

from engine import make_config, run_live_model
from engine.events import Event, PromptStateChanged
from engine.release import load_release
from engine.run.runs import RunProgress
from pqid_tui.widgets.run_grid import PromptTable
from tests.fakes.faults import FaultScript, FaultServer


def test_notes_reach_events_run_state_and_grid(release_dir: Path, tmp_path: Path) -> None:
    plan = {"ghz_00": ["length"], "ghz_01": ["empty"], "ghz_02": ["substitute:other-model-9b"]}
    events: list[Event] = []
    with FaultServer(FaultScript.for_release(load_release(release_dir), plan)) as server:
        run_live_model(
            make_config(
                release_dir=release_dir,
                output_dir=tmp_path / "run",
                provider="local",
                base_url=server.base_url,
                model="m",
                no_auth=True,
                acknowledge_prompt_export=True,
                limit=4,
            ),
            progress=events.append,
        )
    notes = {
        e.prompt_id: e.note
        for e in events
        if isinstance(e, PromptStateChanged) and e.state == "success"
    }
    assert notes == {
        "ghz_00": "truncated (length)",
        "ghz_01": "empty",
        "ghz_02": "redirected to other-model-9b",
        "ghz_03": None,
    }
    progress = RunProgress.from_run_dir(tmp_path / "run")
    assert {pid: row.note for pid, row in progress.rows.items()} == notes
    table = PromptTable()
    assert table.cells(progress.rows["ghz_00"])["error"] == "⚠ truncated (length)"
    assert table.cells(progress.rows["ghz_03"])["error"] == ""
