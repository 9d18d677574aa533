"""Home screen: the release, the runs found, the way onward on an empty runs directory."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from textual.widgets import Collapsible, DataTable, Static

from engine.release import (
    CONTRACT_PQID_BENCH,
    FORMAT_PQID_BENCH_EVIDENCE,
    PREDICATE_PQID_BENCH,
    FrozenRow,
    Release,
    load_release,
)
from pqid_tui.app import make_app
from pqid_tui.screens.home import HomeScreen
from tests.app.test_app_support import SIZE, FakeReplayService, make_run
from tests.helpers import write_release


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
            app.screen.query_one("#err-general", Static).render()
        )


async def test_the_bundled_demo_release_names_its_format_contract_and_matrix(
    tmp_path: Path,
) -> None:
    app = make_app(None, tmp_path / "runs", replay_service=FakeReplayService())
    async with app.run_test(size=SIZE) as pilot:
        await app.workers.wait_for_complete()
        await pilot.pause()
        info = str(app.screen.query_one("#release", Static).render())
        assert "Release pqid-demo 1.0.0   pqid-release/1" in info
        assert "frozen matrix: 3 reference rows" in info and "scoring pqid-tui-1" in info
        assert "absent" not in info and not app.screen.query_one("#absent").display
        footer_keys = {
            key for key, b in app.screen.active_bindings.items() if b.binding.show and b.enabled
        }
        # Nothing absent, nothing left to verify (pqid-release/1 checks every file as it loads).
        assert {"n", "r", "c"} <= footer_keys and not {"a", "v"} & footer_keys


def hand_built_bench(path: Path) -> Release:
    """A Release shaped like PQID-Bench's evidence repository (until a test has the real one):
    21 model rows and 2 reference rows, the PQID-Bench contract, absent files."""
    base = load_release(write_release(path, count=6))
    rows = tuple(
        FrozenRow(
            f"provider_model-{i:02d}",
            "model",
            "provider",
            f"model-{i:02d}",
            "x",
            display_name=f"Model {i:02d}",
        )
        for i in range(21)
    )
    rows += (
        FrozenRow("copy-baseline", "reference", None, None, "y"),
        FrozenRow("retrieval-baseline", "reference", None, None, "z"),
    )
    return replace(
        base,
        name="PQID-Bench",
        version="1.0.0",
        format=FORMAT_PQID_BENCH_EVIDENCE,
        profile="evidence",
        contract=CONTRACT_PQID_BENCH,
        predicate=PREDICATE_PQID_BENCH,
        python_version="3.13",
        matrix_rows=rows,
        absent=("data/missing.jsonl", "artifacts/gone/one.json"),
        verified_files=648,
        manifest_files=650,
        verifier=None,
    )


async def test_a_pqid_bench_release_shows_layout_contract_models_and_absent_files(
    tmp_path: Path,
) -> None:
    release = hand_built_bench(tmp_path / "release")
    app = make_app(tmp_path / "release", tmp_path / "runs", replay_service=FakeReplayService())
    app.release = release
    async with app.run_test(size=SIZE) as pilot:
        await app.workers.wait_for_complete()
        await pilot.pause()
        home = app.screen
        info = str(home.query_one("#release", Static).render())
        lines = info.splitlines()
        assert lines[0] == (
            "Release PQID-Bench 1.0.0   PQID-Bench evidence repository, profile evidence"
        )
        assert lines[1] == "6 prompts: dev 2, test 4   frozen matrix: 21 models, 2 reference rows"
        assert lines[2] == (
            "scoring pqid-bench-evaluator-1.1.0-safe-builtins   predicate "
            "pqid-bench-reference-signature-1.0.0-count-map   Python 3.13"
        )
        assert lines[4].startswith("verified 648 of 650 listed files; 2 absent (a lists them)")
        box = home.query_one("#absent", Collapsible)
        assert box.display and box.collapsed and "2 absent files" in box.title
        await pilot.press("a")
        assert not box.collapsed
        # Neither folder exists in this hand-built copy: each is named once, with its count.
        assert str(home.query_one("#absent-list", Static).render()).splitlines() == [
            "artifacts/ (1 file)",
            "data/ (1 file)",
        ]
        await pilot.press("a")
        assert box.collapsed
