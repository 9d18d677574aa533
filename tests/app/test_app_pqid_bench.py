"""The app on the real PQID-Bench v1.0.0 (skipped without ../shared): Home on each layout, a
New run plan with the study's long prompt IDs, and Replay and compare with the candidate among
the 21 frozen models, sortable from the keyboard, and the identifiability table."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from textual.widgets import Collapsible, Input, Select, Static

from engine import make_config, run_live_model_async
from engine.release import load_release
from pqid_tui.app import make_app
from pqid_tui.screens.home import HomeScreen
from pqid_tui.screens.replay import ReplayScreen
from pqid_tui.widgets.bar_chart import BarChart
from pqid_tui.widgets.sort_table import SortableTable
from tests.app.test_app_replay import check_whole, drawn, open_replay
from tests.app.test_app_support import SIZE, FakeReplayService, normalize_run
from tests.conftest import PqidBenchCopies
from tests.fakes.faults import messages_key

ROW = "groq_llama-3_3-70b-versatile"  # the frozen row the candidate replays
BATCHES = "artifacts/external_model_batches_154"


def archived_transport(release_dir: Path, slug: str) -> httpx.MockTransport:
    """An OpenAI-compatible provider answering each prompt with one frozen model's archived
    response content (what that model really returned in the study)."""
    release = load_release(release_dir)
    content: dict[str, str] = {}
    path = release_dir / BATCHES / "responses" / f"{slug}_responses.jsonl"
    for line in path.read_text().splitlines():
        record = json.loads(line)
        content[record["prompt_id"]] = record["generated_code"]
    by_key = {messages_key(p.request_messages()): p.prompt_id for p in release.prompts}

    async def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        text = content[by_key[messages_key(body["messages"])]]
        return httpx.Response(
            200,
            json={
                "id": "x",
                "model": body["model"],
                "choices": [
                    {
                        "index": 0,
                        "finish_reason": "stop",
                        "message": {"role": "assistant", "content": text},
                    }
                ],
                "usage": {"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12},
            },
        )

    return httpx.MockTransport(handler)


async def replayed_evidence_run(runs: Path, release_dir: Path, name: str = "groq-llama") -> Path:
    """A real run on the evidence release answered with the frozen row's archived responses;
    its evaluation is that row's frozen verdicts (what a replay under the same contract and
    environment reproduces, 154/154; the Docker replay itself is tested elsewhere)."""
    out = runs / name
    config = make_config(
        release_dir=release_dir,
        output_dir=out,
        provider="groq",
        model="llama-3.3-70b-versatile",
        acknowledge_prompt_export=True,
        retry_backoff_seconds=0.0,
        max_retries=0,
        concurrency=8,
    )
    await run_live_model_async(
        config,
        transport=archived_transport(release_dir, ROW),
        env={"GROQ_API_KEY": "gsk_test_key_value_0123456789"},
    )
    normalize_run(out)
    cells = load_release(release_dir).frozen_evaluations(ROW)
    (out / "evaluation").mkdir()
    (out / "evaluation" / "pqid_bench_canonical_evaluations.jsonl").write_text(
        "".join(
            json.dumps({k: v for k, v in cell.items() if k != "frozen"}, sort_keys=True) + "\n"
            for cell in cells
        )
    )
    return out


class CompareOnly(FakeReplayService):
    """No Docker: the engine's own comparison and taxonomy of an already evaluated run."""

    def __init__(self) -> None:
        super().__init__(image_present=True)
        from pqid_tui.services.replay import EngineReplayService

        self.engine = EngineReplayService()

    def compare(self, run_dir: Path, release_dir: Path, *, allow_partial: bool) -> Any:
        self.calls.append(("compare", run_dir, allow_partial))
        return self.engine.compare(run_dir, release_dir, allow_partial=allow_partial)

    def taxonomy(self, run_dir: Path) -> dict[str, int]:
        return self.engine.taxonomy(run_dir)


async def settle(app: Any, pilot: Any) -> None:
    await app.workers.wait_for_complete()
    await pilot.pause()


async def test_home_shows_the_evidence_repository(
    pqid_bench: PqidBenchCopies, tmp_path: Path
) -> None:
    app = make_app(pqid_bench.evidence, tmp_path / "runs", replay_service=FakeReplayService())
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        home = app.screen
        assert isinstance(home, HomeScreen)
        info = str(home.query_one("#release", Static).render())
        assert "Release PQID-Bench 1.0.0   PQID-Bench evidence repository, profile evidence" in info
        assert "154 prompts: test 154" in info and "frozen matrix: 21 models" in info
        assert "scoring pqid-bench-evaluator-1.1.0-safe-builtins" in info
        assert "predicate pqid-bench-reference-signature-1.0.0-count-map" in info
        assert "Python 3.13" in info
        # Every present file checked against ARTIFACT_MANIFEST.tsv; the absent ones counted.
        assert "verified 650 of 1087 listed files; 437 absent (a lists them)" in info
        hint = str(home.query_one("#runs-hint", Static).render())
        assert "choose a route and a model" in hint and "oracle" not in hint
        box = home.query_one("#absent", Collapsible)
        assert box.display and box.collapsed
        await pilot.press("a")
        assert not box.collapsed
        listed = str(home.query_one("#absent-list", Static).render()).splitlines()
        assert listed == [
            "artifacts/analysis_154/pqid_bench_ordered_operand_cell_audit.jsonl",
            "artifacts/stochastic_repeatability_21x72/ (435 files)",
            "data/pqid_bench_clean_generation_734.jsonl",
        ]
        await pilot.press("v")  # check every listed file again
        await settle(app, pilot)
        assert "verified 650 of 1087 listed files" in str(
            home.query_one("#release", Static).render()
        )


async def test_home_shows_the_core_distribution_and_its_zip(
    pqid_bench: PqidBenchCopies, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # where the .zip extracts
    for source, origin in ((pqid_bench.core, None), (pqid_bench.core_zip, pqid_bench.core_zip)):
        app = make_app(source, tmp_path / "runs", replay_service=FakeReplayService())
        async with app.run_test(size=SIZE) as pilot:
            await settle(app, pilot)
            info = str(app.screen.query_one("#release", Static).render())
            listed = load_release(source).manifest_files if origin is None else None
            assert "PQID-Bench core distribution, profile core" in info, info
            assert "154 prompts: test 154" in info
            assert (
                "frozen matrix: none in the core profile (compare needs the PQID-Bench "
                "evidence repository)" in info
            )
            assert "absent" not in info and not app.screen.query_one("#absent").display
            if listed is not None:
                assert f"verified {listed} of {listed} listed files" in info
            else:
                assert f"from {origin}" in info.replace("\n", "")
                assert (tmp_path / "cache").exists()


async def test_a_new_run_plans_the_study_prompts(
    pqid_bench: PqidBenchCopies, tmp_path: Path
) -> None:
    app = make_app(
        pqid_bench.evidence, tmp_path / "runs", replay_service=FakeReplayService(), env={}
    )
    async with app.run_test(size=(160, 48)) as pilot:
        await settle(app, pilot)
        await pilot.press("n")
        await settle(app, pilot)
        screen = app.screen
        screen.query_one("#provider", Select).value = "groq"
        await pilot.pause()
        screen.query_one("#model", Input).value = "llama-3.3-70b-versatile"
        screen.query_one("#limit", Input).value = "3"
        await settle(app, pilot)
        plan = str(screen.query_one("#plan", Static).render())
        assert "PQID-Bench 1.0.0 (154 prompts)" in plan, plan
        assert (
            "pqid_bench_external_gen_0001, pqid_bench_external_gen_0002, "
            "pqid_bench_external_gen_0003"
        ) in " ".join(plan.split())
        assert "selected prompts      3" in plan and "target metadata sent  no" in plan
        # The same requests as the study's row for this route and model (engine.release.trace).
        assert (
            "frozen study row replicates Llama 3.3 70B Versatile request for request on 3 "
            "of its 154 prompts"
        ) in " ".join(plan.split())


async def test_compare_puts_the_candidate_among_the_21_frozen_models(
    pqid_bench: PqidBenchCopies, tmp_path: Path
) -> None:
    """A candidate that answered with one frozen model's archived responses, scored with its
    frozen verdicts: 22 rows, the candidate highlighted with that model's rank and rates, +0/−0
    against it; every column sorts from the keyboard with every cell whole; the chart has one
    bar per row; the identifiability table covers 150 prompts."""
    runs = tmp_path / "runs"
    await replayed_evidence_run(runs, pqid_bench.evidence)
    app = make_app(pqid_bench.evidence, runs, replay_service=CompareOnly())
    async with app.run_test(size=(260, 60)) as pilot:
        screen = await open_replay(app, pilot)
        assert isinstance(screen, ReplayScreen)
        await pilot.press("m")
        await settle(app, pilot)
        table = screen.query_one("#comparison", SortableTable)
        keys = [c.key for c in table.table_columns]
        assert keys[:5] == ["rank", "row", "kind", "n", "answered"] and "label" in keys
        for metric in (
            "execution",
            "assembly",
            "signature",
            "num_qubits",
            "num_clbits",
            "gate_count",
            "gate_types",
            "gap:execution_structure_gap",
            "gap:assembly_structure_gap",
            "paired:signature",
        ):
            assert metric in keys, metric
        assert keys[keys.index("signature") + 1 : keys.index("signature") + 3] == [
            "gap:execution_structure_gap",
            "gap:assembly_structure_gap",
        ]
        # The 21 frozen rows add up to the published headline (3,234 cells).
        frozen = [r for r in table.ordered if not r.highlight]
        for key, published in (("execution", 2950), ("assembly", 2944), ("signature", 1703)):
            assert (
                sum(int(r.cells[key].text.split("(")[1].split("/")[0]) for r in frozen) == published
            )
        rows = {r.cells["label"].text: r for r in table.ordered}
        assert len(rows) == 22 and screen.focused is table
        cand = next(r for r in table.ordered if r.highlight)
        twin = rows[ROW]
        assert cand.cells["kind"].text == "candidate" and cand.cells["n"].text == "154"
        assert cand.cells["signature"].text == "46.10% (71/154)"  # two decimals, as published
        for key in keys:
            if key not in ("row", "label", "kind") and not key.startswith("paired:"):
                assert cand.cells[key].text == twin.cells[key].text, key
        assert twin.cells["paired:signature"].text == "+0 −0 p=1"
        chart = screen.query_one("#chart", BarChart)
        assert chart.title == "signature, highest first" and len(chart.rows) == 22
        assert sum(1 for r in chart.rows if r.highlight) == 1
        assert table.sort_key == "rank" and not table.sort_reverse
        assert [r.cells["rank"].value for r in table.ordered][:1] == [1]
        for index, column in enumerate(table.table_columns):
            await pilot.press(*(["right"] if index else []), "s")
            assert table.sort_key == column.key
            check_whole(table, n="154")
        assert "Mistral Small 3.2 24B Instruct 2506 (OpenRouter/Mistral)" in "\n".join(drawn(table))

        sub = screen.query_one("#subtable-0", SortableTable)
        assert len(sub.ordered) == 22
        assert {r.cells["n"].text for r in sub.ordered} == {"150"}
        titles = [str(w.render()) for w in screen.query("#subtables Static")]
        assert titles[0] == "Identifiability subset: 150 prompts"
        for pid in (
            "pqid_bench_external_gen_0040",
            "pqid_bench_external_gen_0117",
            "pqid_bench_external_gen_0141",
            "pqid_bench_external_gen_0142",
        ):
            assert pid in titles[1]


async def test_home_names_a_file_that_differs_from_the_manifest(
    pqid_bench: PqidBenchCopies, tmp_path: Path
) -> None:
    """A flipped byte in an archived response (a file checked on use, not at load): the
    release loads, and Home's check of every listed file names it."""
    import shutil

    copy = tmp_path / "evidence"
    shutil.copytree(pqid_bench.evidence, copy)
    rel = f"{BATCHES}/responses/{ROW}_responses.jsonl"
    data = bytearray((copy / rel).read_bytes())
    data[100] ^= 0x01
    (copy / rel).write_bytes(bytes(data))
    app = make_app(copy, tmp_path / "runs", replay_service=FakeReplayService())
    async with app.run_test(size=SIZE) as pilot:
        await settle(app, pilot)
        info = " ".join(str(app.screen.query_one("#release", Static).render()).split())
        assert "MODIFIED: not publishable;" in info and f"{copy / rel}: SHA-256 is" in info
        assert "ARTIFACT_MANIFEST.tsv says" in info
