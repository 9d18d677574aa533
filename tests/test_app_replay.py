"""Replay and compare screen: Docker status, image build log, replay with acknowledgement,
the comparison with denominators and partial marks, the taxonomy, export."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rich.text import Text
from textual.widgets import Checkbox, DataTable, Log, ProgressBar, Static
from textual.widgets.data_table import ColumnKey

from engine.compare import compare
from engine.release import load_release
from pqid_tui.app import make_app
from pqid_tui.screens.dialogs import ConfirmScreen
from pqid_tui.screens.replay import ReplayScreen
from pqid_tui.screens.replay_service import EngineReplayService
from pqid_tui.widgets.bar_chart import BarChart, bar
from tests.helpers import write_release
from tests.test_app_support import SIZE, FakeReplayService, make_run


async def open_replay(app: Any, pilot: Any) -> ReplayScreen:
    await pilot.pause()
    await pilot.press("r")
    await app.workers.wait_for_complete()
    await pilot.pause()
    screen = app.screen
    assert isinstance(screen, ReplayScreen)
    return screen


def test_bars_have_eighth_cell_resolution() -> None:
    assert bar(0.0, 10) == "" and bar(1.0, 10) == "█" * 10
    assert bar(0.5, 10) == "█" * 5 and bar(0.0125, 10) == "▏"
    assert bar(2.0, 4) == "████"


async def test_build_replay_compare_and_export(tmp_path: Path) -> None:
    release = write_release(tmp_path / "release", count=6)
    runs = tmp_path / "runs"
    run = await make_run(runs, release, "groq-demo")
    service = FakeReplayService()
    app = make_app(release, runs, replay_service=service)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_replay(app, pilot)
        assert screen.run_dir == run
        status = str(screen.query_one("#docker-status", Static).render())
        assert "99.0-fake" in status and "needs a build" in status

        await pilot.press("b")
        await app.workers.wait_for_complete()
        await pilot.pause()
        log = "\n".join(screen.query_one("#log", Log).lines)
        assert "Step 2/4 : RUN pip install \\x1b[31mqiskit" in log and "\x1b" not in log
        assert "image ready: pqid-evaluator:0123456789abcdef (built)" in log
        assert "present" in str(screen.query_one("#docker-status", Static).render())

        await pilot.press("ctrl+r")  # not acknowledged: refused, nothing runs
        await pilot.pause()
        assert not [c for c in service.calls if c[0] == "replay"]
        screen.query_one("#acknowledge_execution", Checkbox).value = True
        await pilot.press("ctrl+r")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert ("replay", run, True, False) in service.calls
        bar_widget = screen.query_one("#progress", ProgressBar)
        assert bar_widget.total == 4 and bar_widget.progress == 4
        assert ("compare", run, False) in service.calls

        table = screen.query_one("#comparison", DataTable)
        rows = [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]
        assert rows[0][:4] == ["groq/demo-model", "candidate", "4", "4"]
        assert "50.0% (2/4)" in rows[0] and rows[0][-1] == "partial"
        assert "PARTIAL" in str(screen.query_one("#compare-note", Static).render())
        chart = screen.query_one(BarChart)
        assert chart.rows[0] == ("groq/demo-model", 0.75, "(3/4) partial")
        taxonomy = screen.query_one("#taxonomy", DataTable)
        assert [str(c) for c in taxonomy.get_row_at(0)] == ["ok", "2", "50.0%"]

        key = ColumnKey("structural_match")
        table.post_message(DataTable.HeaderSelected(table, key, 5, Text("structural match")))
        await pilot.pause()
        assert str(table.get_row_at(0)[0]) == "oracle"  # highest rate first
        assert chart.rows[0][0] == "oracle" and chart.title.startswith("structural match")

        await pilot.press("x")
        await app.workers.wait_for_complete()
        assert ("export", run, False) in service.calls

        await pilot.press("ctrl+r")  # evaluated now: replacing asks first
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("y")
        await app.workers.wait_for_complete()
        assert ("replay", run, True, True) in service.calls


async def test_docker_unreachable_is_explained(tmp_path: Path) -> None:
    release = write_release(tmp_path / "release", count=6)
    app = make_app(release, tmp_path / "runs",
                   replay_service=FakeReplayService(reachable=False))
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_replay(app, pilot)
        status = str(screen.query_one("#docker-status", Static).render())
        assert "not reachable" in status and "no Docker Engine reachable (fake)" in status
        screen.query_one("#acknowledge_execution", Checkbox).value = True
        await pilot.press("ctrl+r")  # no run to replay: a hint
        await pilot.pause()
        assert isinstance(app.screen, ReplayScreen)


def evaluation(pid: str, ok: bool) -> dict[str, Any]:
    return {"prompt_id": pid, "category": "ok" if ok else "gate_count_mismatch",
            "execution_ok": True, "circuit_found": True, "structural_match": ok,
            "width_match": True, "gate_types_match": True, "gate_counts_match": ok,
            "qasm3_ok": True, "equivalent": ok if ok else False, "error": None,
            "duration_ms": 5, "evaluator_version": "0.1.0"}


async def test_engine_service_compares_and_exports_like_the_batch_mode(tmp_path: Path) -> None:
    ids = [f"ghz_{i:02d}" for i in range(6)]
    release_dir = write_release(tmp_path / "release", count=6,
                                frozen={"oracle": [evaluation(p, True) for p in ids]})
    run = await make_run(tmp_path / "runs", release_dir, "oracle-run", provider="oracle",
                         model="oracle")
    (run / "evaluation").mkdir()
    path = run / "evaluation" / "pqid_bench_canonical_evaluations.jsonl"
    path.write_text("".join(json.dumps(evaluation(p, p != "ghz_03")) + "\n" for p in ids))
    service = EngineReplayService()
    view = service.compare(run, release_dir, allow_partial=False)
    # The run covers dev and test: the app compares the publishable test split (ghz_03 is dev).
    assert not view.partial and view.prompt_count == 4
    cand, oracle = view.rows
    assert (cand.label, cand.denominator, cand.counts["structural_match"]) == (
        "oracle/oracle", 4, 4)
    assert (oracle.label, oracle.counts["structural_match"]) == ("oracle", 4)
    assert service.taxonomy(run) == {"ok": 5, "gate_count_mismatch": 1}
    written = service.export(run, release_dir, allow_partial=False)
    engine_view = compare(load_release(release_dir), path,
                          candidate_manifest=run / "run-manifest.json", split="test")
    assert {p.name for p in written} == {"pqid_bench_comparison.txt", "pqid_bench_comparison.md",
                                         "pqid_bench_comparison.json",
                                         "pqid_bench_comparison.csv"}
    for p in written:
        fmt = {".txt": "text", ".md": "markdown", ".json": "json", ".csv": "csv"}[p.suffix]
        assert p.read_text() == engine_view.render(fmt)


class RefusingService(FakeReplayService):
    def compare(self, run_dir: Path, release_dir: Path, *, allow_partial: bool) -> Any:
        from engine.errors import CompareRefused

        self.calls.append(("compare", run_dir, allow_partial))
        raise CompareRefused("the candidate is partial (test 4/6 prompts): \x1b[31m")


async def test_an_engine_refusal_is_reported_and_the_app_carries_on(tmp_path: Path) -> None:
    release = write_release(tmp_path / "release", count=6)
    run = await make_run(tmp_path / "runs", release, "groq-demo")
    app = make_app(release, tmp_path / "runs", replay_service=RefusingService())
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_replay(app, pilot)
        await pilot.press("m")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert isinstance(app.screen, ReplayScreen) and app.is_running
        messages = [n.message for n in app._notifications]
        assert any("the candidate is partial" in m and "\\x1b[31m" in m for m in messages)
        assert "compare_run failed: the candidate is partial" in "\n".join(
            screen.query_one("#log", Log).lines)
    assert app.return_value is None and run.exists()
