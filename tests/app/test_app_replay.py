"""Replay and compare screen: Docker status, image build log, replay with acknowledgement,
the comparison with denominators and partial marks (sortable by every column from the
keyboard, never truncated), the bar chart, the taxonomy, export."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from rich.cells import cell_len
from textual.geometry import Region
from textual.widgets import Checkbox, ProgressBar, Static

from engine.release import load_release
from engine.replay.compare import compare
from pqid_tui.app import make_app
from pqid_tui.screens.dialogs import ConfirmScreen
from pqid_tui.screens.replay import ReplayScreen
from pqid_tui.services.replay import Comparison, EngineReplayService
from pqid_tui.widgets.bar_chart import BarChart, bar
from pqid_tui.widgets.sort_table import SortableTable
from pqid_tui.widgets.wrapping import WrappingLog
from tests.app.test_app_support import SIZE, FakeReplayService, make_run
from tests.helpers import prompt_line, write_release


async def open_replay(app: Any, pilot: Any) -> ReplayScreen:
    await pilot.pause()
    await pilot.press("r")
    await app.workers.wait_for_complete()
    await pilot.pause()
    screen = app.screen
    assert isinstance(screen, ReplayScreen)
    return screen


async def open_comparison(app: Any, pilot: Any) -> ReplayScreen:
    """The replay screen once the comparison (`m`) is made."""
    screen = await open_replay(app, pilot)
    await pilot.press("m")
    await app.workers.wait_for_complete()
    await pilot.pause()
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
        log = "\n".join(screen.query_one("#log", WrappingLog).texts)
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

        table = screen.query_one("#comparison", SortableTable)
        keys = [c.key for c in table.table_columns]
        assert keys == [
            "row",
            "kind",
            "n",
            "answered",
            "execution",
            "structural_match",
            "qasm3_export",
            "equivalence",
            "partial",
        ]
        # Sorted by the first rate, highest first: the oracle (4/4) above the run (3/4).
        assert table.sort_key == "execution" and table.sort_reverse
        assert shown(table)[0][:4] == ["oracle", "reference", "4", "4"]
        cand = shown(table)[1]
        assert cand[:4] == ["groq/demo-model", "candidate", "4", "4"]
        assert "50.0% (2/4)" in cand and cand[-1] == "partial"
        assert [r.highlight for r in table.ordered] == [False, True]
        assert "PARTIAL" in str(screen.query_one("#compare-note", Static).render())
        chart = screen.query_one(BarChart)
        assert chart.title == "execution, highest first"
        assert chart.rows[1] == ("groq/demo-model", 0.75, "(3/4) partial", True)
        taxonomy = screen.query_one("#taxonomy", SortableTable)
        assert shown(taxonomy)[0] == ["ok", "2", "50.0%"]

        # From the keyboard: the focused table sorts by the column under its cursor.
        assert screen.focused is table and table.cursor_column == keys.index("execution")
        await pilot.press("s")  # the sorted column again: reversed, lowest first
        assert table.sort_key == "execution" and not table.sort_reverse
        assert shown(table)[0][0] == "groq/demo-model"
        await pilot.press(*["left"] * keys.index("execution"), "s")  # "row": A to Z
        assert table.sort_key == "row" and not table.sort_reverse
        assert [r[0] for r in shown(table)] == ["groq/demo-model", "oracle"]
        assert "row ▲" in drawn(table)[0]
        assert chart.title.startswith("execution")  # a text column leaves the chart as it was
        await pilot.press("s")  # again: reversed
        assert [r[0] for r in shown(table)] == ["oracle", "groq/demo-model"]
        await pilot.press(*["right"] * keys.index("structural_match"), "s")
        assert table.sort_key == "structural_match" and table.sort_reverse
        assert chart.title == "structural match, highest first"
        assert chart.rows[1] == ("groq/demo-model", 0.5, "(2/4) partial", True)

        # And with the mouse: a click on a header sorts by that column.
        await pilot.click(table, offset=(header_x(table, "kind"), 0))
        await pilot.pause()
        assert table.sort_key == "kind" and not table.sort_reverse
        assert [r[1] for r in shown(table)] == ["candidate", "reference"]

        await pilot.press("x")
        await app.workers.wait_for_complete()
        assert ("export", run, False) in service.calls
        # The toast says where the files went (issue 13).
        assert any(
            n.message == f"Exported pqid_bench_comparison.txt to {run / 'evaluation'}"
            for n in app._notifications
        )

        await pilot.press("ctrl+r")  # evaluated now: replacing asks first
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("y")
        await app.workers.wait_for_complete()
        assert ("replay", run, True, True) in service.calls


async def test_docker_unreachable_is_explained(tmp_path: Path) -> None:
    release = write_release(tmp_path / "release", count=6)
    app = make_app(release, tmp_path / "runs", replay_service=FakeReplayService(reachable=False))
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_replay(app, pilot)
        status = str(screen.query_one("#docker-status", Static).render())
        assert "not reachable" in status and "no Docker Engine reachable (fake)" in status
        screen.query_one("#acknowledge_execution", Checkbox).value = True
        await pilot.press("ctrl+r")  # no run to replay: a hint
        await pilot.pause()
        assert isinstance(app.screen, ReplayScreen)


def evaluation(pid: str, ok: bool) -> dict[str, Any]:
    return {
        "prompt_id": pid,
        "category": "ok" if ok else "gate_count_mismatch",
        "execution_ok": True,
        "circuit_found": True,
        "structural_match": ok,
        "width_match": True,
        "gate_types_match": True,
        "gate_counts_match": ok,
        "qasm3_ok": True,
        "equivalent": ok if ok else False,
        "error": None,
        "duration_ms": 5,
        "evaluator_version": "0.1.0",
    }


async def test_engine_service_compares_and_exports_like_the_batch_mode(tmp_path: Path) -> None:
    ids = [f"ghz_{i:02d}" for i in range(6)]
    release_dir = write_release(
        tmp_path / "release", count=6, frozen={"oracle": [evaluation(p, True) for p in ids]}
    )
    run = await make_run(
        tmp_path / "runs", release_dir, "oracle-run", provider="oracle", model="oracle"
    )
    (run / "evaluation").mkdir()
    path = run / "evaluation" / "pqid_bench_canonical_evaluations.jsonl"
    path.write_text("".join(json.dumps(evaluation(p, p != "ghz_03")) + "\n" for p in ids))
    service = EngineReplayService()
    view = service.compare(run, release_dir, allow_partial=False)
    # The run covers dev and test: the app compares the publishable test split (ghz_03 is dev).
    assert not view.partial and view.prompt_count == 4
    cand, oracle = view.rows
    assert (cand.label, cand.denominator, cand.counts["structural_match"]) == (
        "oracle/oracle",
        4,
        4,
    )
    assert (oracle.label, oracle.counts["structural_match"]) == ("oracle", 4)
    assert service.taxonomy(run) == {"ok": 5, "gate_count_mismatch": 1}
    written = service.export(run, release_dir, allow_partial=False)
    engine_view = compare(
        load_release(release_dir), path, candidate_manifest=run / "run-manifest.json", split="test"
    )
    assert {p.name for p in written} == {
        "pqid_bench_comparison.txt",
        "pqid_bench_comparison.md",
        "pqid_bench_comparison.json",
        "pqid_bench_comparison.csv",
    }
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
        screen = await open_comparison(app, pilot)
        assert isinstance(app.screen, ReplayScreen) and app.is_running
        messages = [n.message for n in app._notifications]
        assert any("the candidate is partial" in m and "\\x1b[31m" in m for m in messages)
        # Named for what the user asked, never for a worker or its group.
        log = "\n".join(screen.query_one("#log", WrappingLog).texts)
        assert "Compare failed: the candidate is partial" in log
        titles = [n.title for n in app._notifications]
        assert "Compare failed" in titles
        assert not [t for t in [*titles, log] if "replay-" in t or "_run" in t]
    assert app.return_value is None and run.exists()


def shown(table: SortableTable) -> list[list[str]]:
    """The table's cells in display order, as text."""
    return [
        [r.cells[c.key].text if c.key in r.cells else "" for c in table.table_columns]
        for r in table.ordered
    ]


def header_x(table: SortableTable, key: str) -> int:
    """The x offset of a column's header in the table (no sideways scroll)."""
    x = 0
    for column in table.table_columns:
        if column.key == key:
            return x + 1
        x += table.columns[column.key].get_render_width(table)
    raise KeyError(key)


def drawn(table: SortableTable) -> list[str]:
    """The table's lines as they would be drawn now (no idle pass in between)."""
    region = Region(0, 0, table.size.width, table.size.height)
    return ["".join(seg.text for seg in strip).rstrip() for strip in table.render_lines(region)]


def model_evaluation(pid: str, i: int, j: int) -> dict[str, Any]:
    """A synthetic evaluation: prompt i of row j, outcomes from a fixed pattern."""
    runs = (i * 7 + j * 5) % 11 != 0
    ok = runs and (i + 2 * j) % (3 + j % 4) != 0
    return {
        "prompt_id": pid,
        "category": "ok" if ok else ("gate_count_mismatch" if runs else "execution_error"),
        "execution_ok": runs,
        "circuit_found": runs,
        "structural_match": ok,
        "width_match": runs,
        "gate_types_match": runs,
        "gate_counts_match": ok,
        "qasm3_ok": runs and (i + j) % 13 != 0,
        "equivalent": None,
        "equivalence_reason": "not checked",
        "error": None,
        "duration_ms": 5,
        "evaluator_version": "0.1.0",
    }


ROW_NAMES = tuple(
    f"synthetic-model-{j:02d}" + ("-with-a-long-route-and-name" if j % 4 == 0 else "")
    for j in range(1, 22)
)


def synthetic_matrix_release(root: Path, prompts: int = 70) -> Path:
    """A pqid-release/1 with `prompts` test prompts and 21 frozen model rows whose synthetic
    evaluations follow fixed patterns (so rates, counts and paired differences vary)."""
    ids = [f"ghz_{i:03d}" for i in range(prompts)]
    frozen = {
        name: [model_evaluation(pid, i, j) for i, pid in enumerate(ids)]
        for j, name in enumerate(ROW_NAMES, start=1)
    }
    write_release(
        root, lines=[prompt_line(pid, 2 + i % 4) for i, pid in enumerate(ids)], frozen=frozen
    )
    matrix_path = root / "frozen" / "matrix.json"
    matrix = json.loads(matrix_path.read_text())
    for row in matrix["rows"]:
        row.update(kind="model", provider="synthetic", model=row["label"])
    matrix_path.write_text(json.dumps(matrix))
    manifest = json.loads((root / "release.json").read_text())
    manifest["files"]["frozen/matrix.json"] = hashlib.sha256(matrix_path.read_bytes()).hexdigest()
    (root / "release.json").write_text(json.dumps(manifest, indent=2))
    return root


async def synthetic_matrix(tmp_path: Path) -> tuple[Path, Path]:
    """The synthetic matrix release and a runs directory holding its replayed run."""
    release = synthetic_matrix_release(tmp_path / "release")
    runs = tmp_path / "runs"
    await synthetic_replayed_run(runs, release)
    return release, runs


async def synthetic_replayed_run(runs: Path, release: Path) -> Path:
    """A real run over the scripted provider, with synthetic evaluations as if replayed."""
    run = await make_run(runs, release, "groq-demo")
    ids = [p.prompt_id for p in load_release(release).prompts]
    (run / "evaluation").mkdir()
    (run / "evaluation" / "pqid_bench_canonical_evaluations.jsonl").write_text(
        "".join(json.dumps(model_evaluation(pid, i, 0)) + "\n" for i, pid in enumerate(ids))
    )
    return run


class EngineCompareService(FakeReplayService):
    """The fake Docker side, with the engine's real comparison, taxonomy and export."""

    def __init__(self) -> None:
        super().__init__(image_present=True)
        self.engine = EngineReplayService()

    def compare(self, run_dir: Path, release_dir: Path, *, allow_partial: bool) -> Comparison:
        self.calls.append(("compare", run_dir, allow_partial))
        return self.engine.compare(run_dir, release_dir, allow_partial=allow_partial)

    def taxonomy(self, run_dir: Path) -> dict[str, int]:
        return self.engine.taxonomy(run_dir)


WIDE = (260, 60)


async def test_sorting_by_every_column_from_the_keyboard_keeps_every_cell_whole(
    tmp_path: Path,
) -> None:
    """Issue 13: sorting once drew every column at its header's width (`n` read `7` for `70`,
    names cut to three letters) and worked only with the mouse. Each column is sorted here
    with `s`, twice (both directions); after each, the order is checked against the column's
    values and every cell is checked whole in what the table draws at once."""
    release, runs = await synthetic_matrix(tmp_path)
    app = make_app(release, runs, replay_service=EngineCompareService())
    async with app.run_test(size=WIDE) as pilot:
        screen = await open_comparison(app, pilot)
        table = screen.query_one("#comparison", SortableTable)
        assert screen.focused is table and len(table.ordered) == 22
        columns = table.table_columns
        assert [c.key for c in columns][:6] == ["rank", "row", "kind", "n", "answered", "execution"]
        assert any(c.key.startswith("paired:") for c in columns)
        for index, column in enumerate(columns):
            directions = set()
            for press in (0, 1):
                await pilot.press(*(["right"] if index and not press else []), "s")
                assert table.sort_key == column.key, column.key
                directions.add(table.sort_reverse)
                values = [r.cells[column.key].value for r in table.ordered]
                present = [v for v in values if v is not None]
                assert values == present + [None] * (len(values) - len(present))
                expected = sorted(
                    present,
                    key=lambda v: v if column.numeric else str(v).casefold(),
                    reverse=table.sort_reverse,
                )
                assert present == expected, (column.key, table.sort_reverse)
                check_whole(table)
                # What a terminal draws before the table's next idle pass (the old bug).
                table.sort_by(column.key, table.sort_reverse)
                check_whole(table)
            assert directions == {True, False}, column.key
        names = [r.cells["row"].text for r in table.ordered]
        assert set(names) == {*ROW_NAMES, "groq/demo-model"}


def visible_columns(table: SortableTable) -> list[str]:
    """The keys of the columns drawn in full in the table's viewport (fixed ones included)."""
    widths = [
        table.columns[table.table_columns[i].key].get_render_width(table)
        for i in range(len(table.table_columns))
    ]
    fixed = sum(widths[: table.fixed_columns])
    keys, x = [], 0
    for i, (column, width) in enumerate(zip(table.table_columns, widths, strict=True)):
        if i < table.fixed_columns or (
            x >= table.scroll_x + fixed and x + width <= table.scroll_x + table.size.width
        ):
            keys.append(column.key)
        x += width
    return keys


def check_whole(table: SortableTable, n: str = "70") -> None:
    """Every cell in view shows its full text on its row's line (`n` reads in full); the
    sorted column is in view."""
    lines = drawn(table)
    assert len(lines) >= 1 + len(table.ordered)
    keys = visible_columns(table)
    assert table.sort_key in keys
    for row, line in zip(table.ordered, lines[1:], strict=False):
        for column in table.table_columns:
            cell = row.cells.get(column.key)
            if column.key in keys and cell is not None and cell.text:
                assert cell.text in line, (column.key, cell.text, line)
            assert table.column_width(column) >= cell_len(cell.text if cell else "")
        assert row.cells["n"].text == n and ("n" not in keys or f" {n} " in line)


async def test_the_chart_has_one_bar_per_row_highest_first(tmp_path: Path) -> None:
    """22 rows: one line per row in the chart, highest first, the run marked with ▶ and its
    name in full; a label longer than the chart allows ends in an ellipsis, never mid-word
    without one."""
    release, runs = await synthetic_matrix(tmp_path)
    app = make_app(release, runs, replay_service=EngineCompareService())
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_comparison(app, pilot)
        chart = screen.query_one("#chart", BarChart)
        assert len(chart.rows) == 22
        rates = [r.rate for r in chart.rows]
        assert rates == sorted(rates, reverse=True)  # type: ignore[type-var]
        lines = chart.render().plain.splitlines()
        # The rank metric of the project's contract, as the engine names it.
        assert lines[0] == "structural match, highest first" and len(lines) == 23
        marked = [line for line in lines[1:] if line.startswith("▶ ")]
        assert len(marked) == 1 and "groq/demo-model " in marked[0]
        for row, line in zip(chart.rows, lines[1:], strict=True):
            assert f"{row.rate * 100:5.1f}% {row.note}" in line  # type: ignore[operator]
            assert row.label in line or (len(row.label) > 30 and "…" in line)
        assert any("…" in line for line in lines)  # the longest names did not fit at 120


async def test_the_names_stay_in_view_when_the_screen_is_wide_enough(tmp_path: Path) -> None:
    """Rank and name are pinned while the table scrolls sideways, unless they would take more
    than two thirds of the width (at 80 columns the long synthetic names would)."""
    release, runs = await synthetic_matrix(tmp_path)
    for size, pinned in ((SIZE, 2), ((80, 40), 0)):
        app = make_app(release, runs, replay_service=EngineCompareService())
        async with app.run_test(size=size) as pilot:
            screen = await open_comparison(app, pilot)
            table = screen.query_one("#comparison", SortableTable)
            assert table.fixed_columns == pinned, size
            await pilot.press(*["right"] * (len(table.table_columns) - 1))
            await pilot.pause()
            assert table.scroll_x > 0
            header = drawn(table)[0]
            assert ("row" in header.split()) == bool(pinned)
            assert table.table_columns[-1].label in header  # the last column came into view


class LongCountsService(FakeReplayService):
    """A replay whose summary line is longer than the log is wide."""

    def replay(
        self,
        run_dir: Path,
        release_dir: Path,
        options: Any,
        progress: Any,
        *,
        acknowledge_code_execution: bool,
        overwrite: bool,
    ) -> dict[str, int]:
        from engine.events import ReplayFinished

        counts = super().replay(
            run_dir,
            release_dir,
            options,
            lambda e: None,
            acknowledge_code_execution=acknowledge_code_execution,
            overwrite=overwrite,
        )
        progress(
            ReplayFinished(
                str(run_dir / "evaluation"),
                {
                    "execution_error": 12,
                    "gate_count_mismatch": 31,
                    "gate_type_mismatch": 9,
                    "no_circuit": 3,
                    "ok": 154,
                    "syntax_error": 2,
                    "width_mismatch": 4,
                },
            )
        )
        return counts


async def test_what_the_user_reads_is_never_cut_off(tmp_path: Path) -> None:
    """Issue 13: the acknowledgement ended mid-sentence; the log cut `ok 154` to `ok 15`."""
    from pqid_tui.screens.replay import EXECUTION_NOTE
    from pqid_tui.widgets.wrapping import WrappingLog

    release = write_release(tmp_path / "release", count=6)
    runs = tmp_path / "runs"
    await make_run(runs, release, "groq-demo")
    app = make_app(release, runs, replay_service=LongCountsService())
    async with app.run_test(size=(80, 40)) as pilot:
        screen = await open_replay(app, pilot)
        box = screen.query_one("#acknowledge_execution", Checkbox)
        drawn_box = " ".join(
            "".join(s.text for s in box.render_line(y)).strip() for y in range(box.region.height)
        )
        assert " ".join(drawn_box.split()).endswith(EXECUTION_NOTE.split()[-1])
        assert "…" not in drawn_box and "tight limits." in drawn_box
        box.value = True
        await pilot.press("ctrl+r")
        await app.workers.wait_for_complete()
        await pilot.pause()
        log = screen.query_one("#log", WrappingLog)
        text = " ".join("".join(s.text for s in line).rstrip() for line in log.lines)
        assert "ok 154, syntax_error 2, width_mismatch 4" in " ".join(text.split())
        assert log.virtual_size.width <= log.scrollable_content_region.width


async def test_switching_runs_clears_the_last_replays_line(tmp_path: Path) -> None:
    release = write_release(tmp_path / "release", count=6)
    runs = tmp_path / "runs"
    first = await make_run(runs, release, "a-run")
    second = await make_run(runs, release, "b-run")
    app = make_app(release, runs, replay_service=FakeReplayService())
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_replay(app, pilot)
        assert screen.run_dir == first
        screen.query_one("#acknowledge_execution", Checkbox).value = True
        await pilot.press("ctrl+r")
        await app.workers.wait_for_complete()
        await pilot.pause()
        line = str(screen.query_one("#progress-text", Static).render())
        assert "replay of a-run finished; outputs in" in line
        from textual.widgets import Select

        screen.query_one("#run", Select).value = str(second)
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert str(screen.query_one("#progress-text", Static).render()).strip() == ""
        assert not screen.query_one("#progress", ProgressBar).display


async def test_base_image_and_wheelhouse_are_remembered(tmp_path: Path) -> None:
    """Issue 13: forgotten each time the screen opened; no app option set them."""
    from textual.widgets import Input

    from pqid_tui.cli.main import app_parser

    ns = app_parser().parse_args(["--base-image", "local/py:3.11", "--wheelhouse", "/w"])
    assert (ns.base_image, ns.wheelhouse) == ("local/py:3.11", "/w")
    release = write_release(tmp_path / "release", count=6)
    runs = tmp_path / "runs"
    await make_run(runs, release, "groq-demo")
    settings = tmp_path / "config" / "settings.json"
    service = FakeReplayService()
    app = make_app(
        release, runs, replay_service=service, base_image="local/py:3.11", settings_path=settings
    )
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_replay(app, pilot)
        assert screen.query_one("#base_image", Input).value == "local/py:3.11"
        assert service.calls[0][1].base_image == "local/py:3.11"
        wheels = screen.query_one("#wheelhouse", Input)
        wheels.focus()
        await pilot.press(*"/wheels", "enter")
        await app.workers.wait_for_complete()
        await pilot.press("escape")
        await pilot.pause()
        screen = await open_replay(app, pilot)  # opened again in the same session
        assert screen.query_one("#wheelhouse", Input).value == "/wheels"
        assert screen.query_one("#base_image", Input).value == "local/py:3.11"
    saved = json.loads(settings.read_text())
    assert saved["wheelhouse"] == "/wheels" and saved["base_image"] == "local/py:3.11"
    # The next session starts from the file.
    app = make_app(release, runs, replay_service=FakeReplayService(), settings_path=settings)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_replay(app, pilot)
        assert screen.query_one("#wheelhouse", Input).value == "/wheels"


class FakeImages:
    def get(self, name: str) -> Any:
        from docker.errors import ImageNotFound

        raise ImageNotFound(name)


class FakeDockerClient:
    images = FakeImages()

    def version(self) -> dict[str, str]:
        return {"Version": "99.1"}


def test_a_missing_base_image_is_explained_in_the_apps_words() -> None:
    from pqid_tui.services.replay import ImageOptions

    status = EngineReplayService(FakeDockerClient()).docker_status(
        ImageOptions("local/none:1", None, None)
    )
    assert status.reachable and not status.image_present
    assert "local/none:1 is not on this Docker Engine: Build image pulls it" in status.detail
    assert "--build-image" not in status.detail and "--base-image" not in status.detail


async def test_a_run_without_one_answer_is_replayed_as_no_response(tmp_path: Path) -> None:
    """Issue 13: `responses.jsonl: responses file does not exist` for a run whose every
    prompt failed; each is scored no_response instead (no container is needed for that)."""
    from engine.replay.replay import replay

    release = write_release(tmp_path / "release", count=3)
    ids = [p.prompt_id for p in load_release(release).prompts]
    run = await make_run(tmp_path / "runs", release, plan={pid: [400] for pid in ids})
    assert not (run / "responses.jsonl").exists()
    result = replay(
        release, run / "responses.jsonl", run / "evaluation", acknowledge_code_execution=True
    )
    assert result.summary["categories"].get("no_response") == len(ids)
