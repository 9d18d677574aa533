"""PQID-Bench's 21 frozen models: the matrix, reproduce against the published figures, compare.

Every expected figure below is either printed in the study's own files (read here, not copied)
or the headline PQID-Bench publishes in its README (3,234 cells; execution 2,950, assembly
2,944, signature 1,703).
"""

from __future__ import annotations

import csv
import io
import json
import re
import shutil
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from engine.errors import CompareRefused, ReleaseError
from engine.release import (
    CONTRACT_PQID_BENCH,
    FORMAT_PQID_BENCH_EVIDENCE,
    PREDICATE_PQID_BENCH,
    Release,
    load_release,
)
from engine.release import pqid_bench_matrix as matrix
from engine.replay.compare import compare, competition_ranks
from engine.replay.evaluations import MODEL_CATEGORIES
from engine.replay.reproduce import reproduce
from evaluator.schema import REQUIRED_FIELDS
from tests.conftest import PqidBenchCopies, cli

BATCH = "artifacts/external_model_batches_154"
REPORT = "pqid_bench_external_model_generation_harness_report.json"
PINS = {"python": "3.13", "qiskit": "2.1.1", "qiskit_aer": "0.17.0"}
ROW = "groq_llama-3_3-70b-versatile"
CANONICAL = (
    "contract",
    "predicate",
    "report_executable",
    "report_assembly_admissible",
    "report_signature_match",
    "num_qubits_match",
    "num_clbits_match",
    "gate_count_match",
    "gate_types_match",
    "execution_error_type",
    "selected_circuit_name",
    "empty_generation",
    "circuit_count",
    "execution_mode",
    "simulation",
    "target_context_recovery",
)


@pytest.fixture(scope="module")
def evidence(pqid_bench: PqidBenchCopies) -> Path:
    return pqid_bench.evidence


@pytest.fixture(scope="module")
def release(evidence: Path) -> Release:
    return load_release(evidence)


def report_paths(root: Path) -> dict[str, Path]:
    """Each harness report of the study by its folder name, found by walking the folders."""
    found = sorted((root / BATCH).glob(f"evaluations/*/{REPORT}"))
    found += sorted((root / BATCH).glob(f"*/evaluations/*/{REPORT}"))
    return {p.parent.name: p for p in found}


def raw_records(path: Path) -> dict[str, dict[str, Any]]:
    return {r["prompt_id"]: r for r in json.loads(path.read_bytes())["records"]}


def write_jsonl(path: Path, items: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(i) + "\n" for i in items))
    return path


def hand_release(root: Path, prompts_from: Path) -> Release:
    """A PQID-Bench evidence release built by hand over a synthetic tree (no manifest)."""
    from engine.release.pqid_bench import read_prompts

    return Release(
        root=root,
        name="PQID-Bench",
        version="test",
        digest="0" * 64,
        prompts_sha256="",
        modified=False,
        prompts=read_prompts(prompts_from / matrix.PROMPTS),
        matrix_rows=matrix.frozen_rows(root),
        evaluator_version=CONTRACT_PQID_BENCH,
        evaluator_requirements=("qiskit==2.1.1", "qiskit-aer==0.17.0"),
        format=FORMAT_PQID_BENCH_EVIDENCE,
        contract=CONTRACT_PQID_BENCH,
        predicate=PREDICATE_PQID_BENCH,
        python_version="3.13",
        cells_loader=matrix.frozen_cells,
    )


# -- the matrix --------------------------------------------------------------------------------


def test_the_matrix_has_the_21_models_with_labels_providers_and_roles(
    release: Release, evidence: Path
) -> None:
    rows = release.matrix_rows
    reports = report_paths(evidence)
    assert len(reports) == 21
    assert [r.label for r in rows] == list(reports)  # one row per report, the folder its label
    assert {r.kind for r in rows} == {"model"}
    assert {r.evaluations for r in rows} == {
        p.relative_to(evidence).as_posix() for p in reports.values()
    }
    assert all(r.contract == CONTRACT_PQID_BENCH for r in rows)
    assert all(r.display_name and r.role and r.provider and r.model for r in rows)
    run_matrix = json.loads((evidence / BATCH / "external_model_run_matrix.json").read_bytes())
    by_model = {(e["provider"], e["api_model_id"]): e for e in run_matrix}
    from_matrix = [r for r in rows if (r.provider, r.model) in by_model]
    assert len(from_matrix) == len(run_matrix) == 17
    for r in from_matrix:
        entry = by_model[(r.provider, r.model)]
        assert (r.display_name, r.role) == (entry["model_label"], entry["role"])
    # The other four are named by their archived requests.
    for r in rows:
        if (r.provider, r.model) in by_model:
            continue
        folder = r.evaluations.rsplit("/evaluations/", 1)[0]
        first = json.loads(
            (evidence / folder / "requests" / f"{r.label}_requests.jsonl")
            .read_text()
            .splitlines()[0]
        )
        assert (r.provider, r.model, r.display_name, r.role) == (
            first["provider"],
            first["api_model_id"],
            first["model_label"],
            first["model_role"],
        )
    llama = release.row(ROW)
    assert (llama.provider, llama.model, llama.display_name) == (
        "groq",
        "llama-3.3-70b-versatile",
        "Llama 3.3 70B Versatile",
    )
    assert {r.provider for r in rows} == {
        "openai",
        "anthropic",
        "google",
        "deepseek",
        "groq",
        "github_models",
        "huggingface_router",
        "openrouter",
    }
    assert sorted(
        r.evaluations.split("/")[2]
        for r in rows
        if r.evaluations.split("/")[2] in matrix.SUBBATCHES
    ) == ["mistral_parent_control", "qiskit_mistral"]


def test_no_reference_row_is_made_from_aggregate_baseline_figures(evidence: Path) -> None:
    """The copy-baseline report of the 154-prompt split has aggregates only: no row."""
    report = json.loads((evidence / matrix.COPY_BASELINE_REPORTS[0]).read_bytes())
    assert report["results"] and all("records" not in r for r in report["results"])
    assert [r for r in matrix.frozen_rows(evidence) if r.kind == "reference"] == []


def test_every_cell_is_a_canonical_line_true_to_its_record(
    release: Release, evidence: Path
) -> None:
    categories: dict[str, int] = {}
    reports = report_paths(evidence)
    total = 0
    for row in release.matrix_rows:
        cells = release.frozen_evaluations(row.label)
        records = raw_records(reports[row.label])
        assert [c["prompt_id"] for c in cells] == [p.prompt_id for p in release.prompts]
        for cell in cells:
            rec = records[cell["prompt_id"]]
            ex, checks = rec["execution"], rec["structural_checks"]
            where = f"{row.label}/{cell['prompt_id']}"
            assert not [f for f in (*REQUIRED_FIELDS, *CANONICAL) if f not in cell], where
            assert (cell["contract"], cell["predicate"]) == (
                CONTRACT_PQID_BENCH,
                PREDICATE_PQID_BENCH,
            )
            assert cell["report_executable"] == (ex["execution_success"] and ex["circuit_found"])
            assert cell["report_assembly_admissible"] == bool(
                (ex.get("qasm3_export") or {}).get("success")
            )
            # The study's cell audit defines assembly as executable and exported: the same here.
            assert not cell["report_assembly_admissible"] or cell["report_executable"], where
            assert cell["report_signature_match"] == bool(checks.get("all_match"))
            for name in matrix.COMPONENTS:
                assert cell[name] == bool(checks.get(name)), (where, name)
            assert cell["execution_error_type"] == ex.get("execution_error_type")
            assert cell["selected_circuit_name"] == ex.get("selected_circuit_name")
            assert cell["structural_match"] == cell["report_signature_match"]
            assert cell["qasm3_ok"] == cell["report_assembly_admissible"]
            assert cell["equivalent"] is None
            assert cell["environment"] == PINS
            assert cell["category"] in MODEL_CATEGORIES
            assert (cell["category"] == "ok") == cell["report_signature_match"], where
            categories[cell["category"]] = categories.get(cell["category"], 0) + 1
            total += 1
    assert total == 3234
    assert categories["ok"] == 1703
    assert categories["no_code"] == sum(
        1 for p in reports.values() for r in raw_records(p).values() if r["empty_generation"]
    )
    assert categories["clbit_mismatch"] > 0 and categories["syntax_error"] > 0


def test_loading_the_21_rows_cells_is_fast(
    evidence: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    matrix._CACHE._items.clear()  # a cold load: every report parsed again
    start = time.perf_counter()
    release = load_release(evidence)
    loaded = time.perf_counter()
    cells = sum(len(release.frozen_evaluations(r.label)) for r in release.matrix_rows)
    done = time.perf_counter()
    assert cells == 3234
    with capsys.disabled():
        print(
            f"\n[timing] load_release(evidence) {loaded - start:.3f} s (21 reports parsed), "
            f"then the 3,234 cells {1000 * (done - loaded):.1f} ms"
        )
    assert done - start < 5.0  # the aim is under a second; the bound leaves room for a busy CI


# -- reproduce -----------------------------------------------------------------------------------


def test_reproduce_gives_the_published_headline_and_every_model(
    release: Release, evidence: Path
) -> None:
    result = reproduce(release)
    d = result.data
    t = d["totals"]
    assert (t["models"], t["prompts"], t["cells"]) == (21, 154, 3234)
    got = {
        k: (t["metrics"][k]["count"], f"{100 * t['metrics'][k]['rate']:.2f}%")
        for k in ("execution", "assembly", "signature")
    }
    assert got == {
        "execution": (2950, "91.22%"),
        "assembly": (2944, "91.03%"),
        "signature": (1703, "52.66%"),
    }
    rows = {r["label"]: r for r in d["rows"]}
    assert len(rows) == 21
    # Against the results summary the study publishes for its first 19 models.
    summary = json.loads(
        (evidence / BATCH / "pqid_bench_external_model_results_summary.json").read_bytes()
    )
    assert len(summary["rows"]) == 19
    for entry in summary["rows"]:
        m = rows[entry["slug"]]["metrics"]
        assert (
            m["execution"]["count"],
            m["assembly"]["count"],
            m["signature"]["count"],
            m["num_qubits"]["count"],
            m["num_clbits"]["count"],
            m["gate_count"]["count"],
            m["gate_types"]["count"],
        ) == (
            entry["execution_success"],
            entry["qasm3_export_success"],
            entry["structural_all_match"],
            entry["num_qubits_match"],
            entry["num_clbits_match"],
            entry["gate_count_match"],
            entry["gate_types_match"],
        )
    # Against the identifiability analysis, which covers all 21 (full and 150-prompt tables).
    ident = json.loads((evidence / matrix.IDENTIFIABILITY).read_bytes())
    by_id = {r["model"].split(":")[0].lower(): r for r in d["rows"]}
    sub = {r["label"]: r for r in d["identifiability"]["rows"]}
    assert len(ident["by_model"]) == 21
    for entry in ident["by_model"]:
        row = by_id[entry["model"].lower()]
        assert (row["metrics"]["execution"]["count"], row["metrics"]["signature"]["count"]) == (
            entry["full"]["execution_count"],
            entry["full"]["structural_count"],
        )
        s = sub[row["label"]]
        assert (
            s["selected"],
            s["metrics"]["execution"]["count"],
            s["metrics"]["signature"]["count"],
        ) == (
            entry["identifiable"]["n"],
            entry["identifiable"]["execution_count"],
            entry["identifiable"]["structural_count"],
        )
    it = d["identifiability"]["totals"]
    assert (
        it["prompts"],
        it["cells"],
        it["metrics"]["execution"]["count"],
        it["metrics"]["signature"]["count"],
    ) == (150, 3150, 2890, 1703)
    assert sorted(d["identifiability"]["excluded_prompt_ids"]) == sorted(
        e["prompt_id"] for e in ident["exceptions"]
    )
    # Ranks and signature rates against the study's 21-model performance table.
    perf = (
        evidence / "artifacts/analysis_154/PQID_BENCH_21_MODEL_PERFORMANCE_AND_INSIGHTS.md"
    ).read_text()
    published = sorted(
        (int(m.group(1)), m.group(2))
        for m in re.finditer(r"^\| (\d+) \| [^|]+ \| [\d.]+% \| ([\d.]+)% \|", perf, re.M)
    )
    assert len(published) == 21
    assert (
        sorted((r["rank"], f"{100 * r['metrics']['signature']['rate']:.2f}") for r in d["rows"])
        == published
    )
    assert result.agrees and len(d["checks"]) > 400


def test_reproduce_names_a_published_figure_that_no_longer_agrees(release: Release) -> None:
    def flipped(rel: Release, row: Any) -> list[dict[str, Any]]:
        cells = matrix.frozen_cells(rel, row)
        if row.label == ROW:
            first = next(c for c in cells if c["report_signature_match"])
            cells[cells.index(first)] = {**first, "report_signature_match": False}
        return cells

    result = reproduce(replace(release, cells_loader=flipped))
    assert not result.agrees
    differ = [c for c in result.data["checks"] if not c["agree"]]
    assert any(
        c["item"] == f"{ROW}: signature" and c["published"] == 71 and c["recomputed"] == 70
        for c in differ
    )
    assert any(c["item"] == "signature (all cells)" and c["recomputed"] == 1702 for c in differ)
    assert "DIFFER" in result.render("text")


@pytest.mark.parametrize("fmt", ["text", "markdown", "json", "csv"])
def test_batch_reproduce_in_every_format(evidence: Path, fmt: str) -> None:
    done = cli("--batch", "reproduce", "--release-dir", str(evidence), "--format", fmt)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    if fmt == "json":
        data = json.loads(out)
        assert data["totals"]["metrics"]["execution"] == {
            "count": 2950,
            "denominator": 3234,
            "rate": 0.912183,
        }
        assert len(data["rows"]) == 21 and data["rows"][0]["rank"] == 1
    elif fmt == "csv":
        rows = list(csv.DictReader(io.StringIO(out)))
        total = {r["metric"]: r for r in rows if r["subset"] == "all" and r["kind"] == "total"}
        assert (total["signature"]["count"], total["signature"]["denominator"]) == ("1703", "3234")
        assert len({r["row"] for r in rows if r["kind"] == "model"}) == 21
        assert {
            r["denominator"]
            for r in rows
            if r["subset"] == "identifiable" and r["kind"] == "model" and r["count"]
        } == {"150"}
    else:
        for figure in (
            "21 models, 154 prompts, 3,234 cells",
            "2,950/3,234 91.22%",
            "2,944/3,234 91.03%",
            "1,703/3,234 52.66%",
            "all agree",
            "Llama 3.3 70B Versatile",
            "150 prompts",
        ):
            assert figure in out, figure
        if fmt == "markdown":
            assert out.startswith("# Reproduction of the frozen matrix")


def test_batch_reproduce_on_the_core_distribution_says_what_it_needs(
    pqid_bench: PqidBenchCopies, tmp_path: Path
) -> None:
    done = cli(
        "--batch",
        "reproduce",
        "--release-dir",
        str(pqid_bench.core_zip),
        "--cache-dir",
        str(tmp_path / "cache"),
    )
    assert done.returncode == 2
    assert "no frozen matrix" in done.stderr and "evidence repository" in done.stderr
    assert "Traceback" not in done.stderr


def test_parser_formats_copied_from_reproduce_agree() -> None:
    from engine.replay import reproduce as engine_reproduce
    from pqid_tui.cli import reproduce as batch_reproduce

    assert batch_reproduce.FORMATS == engine_reproduce.FORMATS


# -- compare -------------------------------------------------------------------------------------


@pytest.fixture
def own_cells(release: Release, tmp_path: Path) -> Path:
    """One frozen row's own evaluations, as a candidate's evaluations file."""
    return write_jsonl(tmp_path / "cand.jsonl", release.frozen_evaluations(ROW))


def test_a_frozen_row_compared_with_the_matrix_ties_itself(
    release: Release, own_cells: Path
) -> None:
    c = compare(release, own_cells)
    d = c.data
    assert c.publishable, d["not_publishable_reasons"]
    assert d["contract"] == CONTRACT_PQID_BENCH and d["selection"]["selected"] == 154
    assert [m["key"] for m in d["metrics"]] == [
        "execution",
        "assembly",
        "signature",
        "num_qubits",
        "num_clbits",
        "gate_count",
        "gate_types",
    ]
    assert len(d["rows"]) == 21 and len(d["table"]) == 22
    assert [t["label"] for t in d["table"] if t["candidate"]] == ["candidate"]
    itself = next(r for r in d["rows"] if r["label"] == ROW)
    for key, p in itself["paired"].items():
        assert (p["candidate_only"], p["row_only"], p["mcnemar_exact_p"]) == (0, 0, 1.0), key
    assert d["candidate"]["summary"]["rates"] == itself["summary"]["rates"]
    assert d["candidate"]["summary"]["gaps_pp"] == itself["summary"]["gaps_pp"]
    assert itself["summary"]["gaps_pp"]["execution_structure_gap"][
        "over_selected"
    ] == pytest.approx(100 * (144 - 71) / 154, abs=1e-4)
    assert d["candidate"]["rank"] == itself["rank"]
    entry = next(t for t in d["table"] if t["label"] == ROW)
    assert entry["metrics"]["signature"] == {
        "count": 71,
        "denominator": 154,
        "rate": round(71 / 154, 6),
    }
    assert entry["paired"]["signature"]["candidate_only"] == 0
    assert entry["display_name"] == "Llama 3.3 70B Versatile" and entry["kind"] == "model"
    # The rank is the competition rank among the 21 models and the candidate.
    counts = [t["metrics"]["signature"]["count"] for t in d["table"]]
    assert [t["rank"] for t in d["table"]] == competition_ranks(counts)
    assert [t["rank"] for t in d["table"]] == sorted(t["rank"] for t in d["table"])
    # Paired differences are real against the other rows.
    fable = next(r for r in d["rows"] if r["label"] == "anthropic_claude-fable-5")
    assert fable["paired"]["signature"]["row_only"] > 0

    ident = d["identifiability"]
    published = json.loads((release.root / matrix.IDENTIFIABILITY).read_bytes())
    assert ident["excluded_prompt_ids"] == [e["prompt_id"] for e in published["exceptions"]]
    assert ident["selected"] == 150 and len(ident["prompt_ids"]) == 150
    assert not set(ident["prompt_ids"]) & set(ident["excluded_prompt_ids"])
    sub = next(r for r in ident["rows"] if r["label"] == ROW)
    assert all(p["candidate_only"] == p["row_only"] == 0 for p in sub["paired"].values())
    assert sub["summary"]["rates"]["signature"]["over_selected"]["denominator"] == 150
    assert ident["candidate"]["summary"]["rates"] == sub["summary"]["rates"]


def test_every_format_of_the_pqid_bench_comparison_renders(
    release: Release, own_cells: Path
) -> None:
    c = compare(release, own_cells)
    text, md = c.render("text"), c.render("markdown")
    for out in (text, md):
        assert "Llama 3.3 70B Versatile" in out and "Exec-Struct gap" in out
        assert "+0 / -0 (p=1)" in out and "identifiability subset: 150 prompts" in out.lower()
        assert "71/154 46.10%" in out and "71/150 47.33%" in out
        assert release.digest in out
    data = json.loads(c.render("json"))
    assert data["table"][0]["rank"] == 1 and "gaps_pp" in data["table"][0]
    rows = list(csv.DictReader(io.StringIO(c.render("csv"))))
    own = [
        r
        for r in rows
        if r["row"] == ROW and r["metric"] == "signature" and r["scope"] == "selected"
    ]
    assert {(r["subset"], r["denominator"], r["candidate_only"], r["row_only"]) for r in own} == {
        ("all", "154", "0", "0"),
        ("identifiable", "150", "0", "0"),
    }
    gap = [
        r
        for r in rows
        if r["row"] == ROW
        and r["metric"] == "execution_structure_gap_pp"
        and r["scope"] == "selected"
        and r["subset"] == "all"
    ]
    assert float(gap[0]["rate"]) == pytest.approx(47.4026, abs=1e-3)


def test_a_partial_candidate_restricts_all_21_rows(release: Release, tmp_path: Path) -> None:
    cells = release.frozen_evaluations(ROW)
    ids = [p.prompt_id for p in release.prompts][:45]  # includes pqid_bench_external_gen_0040
    path = write_jsonl(tmp_path / "part.jsonl", [c for c in cells if c["prompt_id"] in ids])
    with pytest.raises(CompareRefused, match="partial"):
        compare(release, path)
    d = compare(release, path, allow_partial=True).data
    assert all(r["summary"]["selected"] == 45 for r in d["rows"])
    assert d["identifiability"]["left_out_of_selection"] == ["pqid_bench_external_gen_0040"]
    assert d["identifiability"]["selected"] == 44


def test_another_environment_is_refused_or_marked_not_publishable(
    release: Release, tmp_path: Path
) -> None:
    cells = release.frozen_evaluations(ROW)
    other = write_jsonl(
        tmp_path / "env.jsonl",
        [
            {**c, "environment": {"python": "3.13.5", "qiskit": "2.6.1", "qiskit_aer": "0.17.0"}}
            for c in cells
        ],
    )
    with pytest.raises(
        CompareRefused,
        match=r"qiskit 2\.6\.1 \(the release pins 2\.1\.1\).*"
        r"--allow-environment-mismatch",
    ):
        compare(release, other)
    c = compare(release, other, allow_environment_mismatch=True)
    assert not c.publishable
    assert any(r.startswith("environment mismatch") for r in c.data["not_publishable_reasons"])
    # A patch release of the pinned Python is the same interpreter series.
    same = write_jsonl(
        tmp_path / "same.jsonl", [{**c, "environment": {**PINS, "python": "3.13.5"}} for c in cells]
    )
    assert compare(release, same).publishable
    # Scored under the project's own contract: refused, the contract named.
    project = write_jsonl(
        tmp_path / "project.jsonl",
        [{k: v for k, v in c.items() if k not in ("contract", "predicate")} for c in cells],
    )
    with pytest.raises(
        CompareRefused,
        match=r"contract pqid-tui-1 \(the release pins "
        r"pqid-bench-evaluator-1\.1\.0-safe-builtins\)",
    ):
        compare(release, project)


def test_an_image_outside_the_complete_pin_set_is_refused(release: Release, tmp_path: Path) -> None:
    """Qiskit and Aer pinned right is not enough: every package of the image must be the
    release's (without matplotlib, `draw('mpl')` fails where the frozen rows executed)."""
    from engine.replay.environment import release_environment

    pin = release_environment(release.evaluator_requirements, release.python_version)
    packages = dict(pin.pins)
    assert "matplotlib" in packages
    cells = release.frozen_evaluations(ROW)
    exact = write_jsonl(
        tmp_path / "exact.jsonl",
        [{**c, "environment": {**PINS, "python": "3.13.5", "packages": packages}} for c in cells],
    )
    assert compare(release, exact).publishable
    lacking = {k: v for k, v in packages.items() if k != "matplotlib"}
    without = write_jsonl(
        tmp_path / "without.jsonl",
        [{**c, "environment": {**PINS, "python": "3.13.5", "packages": lacking}} for c in cells],
    )
    with pytest.raises(CompareRefused, match=r"matplotlib is not installed"):
        compare(release, without)
    assert not compare(release, without, allow_environment_mismatch=True).publishable


def test_batch_compare_on_the_evidence_repository(
    evidence: Path, own_cells: Path, tmp_path: Path
) -> None:
    done = cli(
        "--batch",
        "compare",
        "--release-dir",
        str(evidence),
        "--evaluations",
        str(own_cells),
        "--format",
        "json",
    )
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert len(data["rows"]) == 21 and data["publishable"] is True
    cells = [json.loads(line) for line in own_cells.read_text().splitlines()]
    env = write_jsonl(
        tmp_path / "env.jsonl", [{**c, "environment": {**PINS, "qiskit": "2.2.0"}} for c in cells]
    )
    refused = cli("--batch", "compare", "--release-dir", str(evidence), "--evaluations", str(env))
    assert refused.returncode == 2
    assert refused.stderr.startswith(
        "pqid-tui: error: the candidate and the frozen rows were not scored in the same environment"
    )
    allowed = cli(
        "--batch",
        "compare",
        "--release-dir",
        str(evidence),
        "--evaluations",
        str(env),
        "--allow-environment-mismatch",
    )
    assert allowed.returncode == 0, allowed.stderr
    assert "publishable  NO: environment mismatch" in allowed.stdout


# -- the cell audit and per-prompt baselines (synthetic trees built from the real files) ------


def small_tree(evidence: Path, dest: Path, slugs: list[str]) -> dict[str, str]:
    """Two models' reports and requests copied into `dest`; their paths relative to it."""
    reports = report_paths(evidence)
    rels = {}
    for slug in slugs:
        rel = reports[slug].relative_to(evidence).as_posix()
        folder = rel.rsplit("/evaluations/", 1)[0]
        for part in (rel, f"{folder}/requests/{slug}_requests.jsonl"):
            (dest / part).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(evidence / part, dest / part)
        rels[slug] = rel
    return rels


def audit_lines(evidence: Path, rels: dict[str, str]) -> list[dict[str, Any]]:
    """Cell-audit lines as the study's audit script writes them (its report_* verdicts)."""
    lines = []
    for slug, rel in rels.items():
        for rec in raw_records(evidence / rel).values():
            ex = rec["execution"]
            executable = ex["execution_success"] and ex["circuit_found"]
            lines.append(
                {
                    "prompt_id": rec["prompt_id"],
                    "model": rec["model"],
                    "model_label": slug,
                    "report_executable": executable,
                    "report_assembly_admissible": executable
                    and bool((ex.get("qasm3_export") or {}).get("success")),
                    "report_signature_match": bool(rec["structural_checks"].get("all_match")),
                    "report_selected_circuit_name": ex.get("selected_circuit_name"),
                    "report_path": rel,
                    "replay_available": False,
                }
            )
    return lines


def test_the_cell_audit_names_the_roster_and_is_checked_against_the_reports(
    evidence: Path, tmp_path: Path
) -> None:
    slugs = ["openai_gpt-5_5", ROW]  # the audit's order, not the folders'
    rels = small_tree(evidence, tmp_path, slugs)
    audit = tmp_path / matrix.CELL_AUDIT
    audit.parent.mkdir(parents=True)
    lines = audit_lines(evidence, rels)
    write_jsonl(audit, lines)
    rel = hand_release(tmp_path, evidence)
    assert [r.label for r in rel.matrix_rows] == slugs
    cells = rel.frozen_evaluations(ROW)
    assert sum(c["report_signature_match"] for c in cells) == 71
    assert all(c["num_qubits_match"] is not None for c in cells)  # details from the report
    # A verdict that differs from the report is an error naming both files.
    flip = next(i for i, x in enumerate(lines) if x["report_path"] == rels[ROW])
    lines[flip] = {**lines[flip], "report_executable": not lines[flip]["report_executable"]}
    write_jsonl(audit, lines)
    with pytest.raises(ReleaseError, match=r"cell audit .* disagree on 1 cells"):
        hand_release(tmp_path, evidence).frozen_evaluations(ROW)
    # With a report absent, the audit's verdicts alone: no component is invented.
    lines[flip] = {**lines[flip], "report_executable": not lines[flip]["report_executable"]}
    write_jsonl(audit, lines)
    (tmp_path / rels[ROW]).unlink()
    only = hand_release(tmp_path, evidence).frozen_evaluations(ROW)
    assert sum(c["report_signature_match"] for c in only) == 71
    assert {c["num_qubits_match"] for c in only} == {None}
    assert {c["detail_source"] for c in only} == {"cell_audit"}


def test_a_baseline_report_with_per_prompt_records_becomes_reference_rows(
    evidence: Path, tmp_path: Path
) -> None:
    rels = small_tree(evidence, tmp_path, [ROW])
    report = json.loads((evidence / matrix.COPY_BASELINE_REPORTS[0]).read_bytes())
    # Per-prompt records keyed by row_id, as the baseline script builds them in memory.
    records = [
        {k: v for k, v in r.items() if k != "prompt_id"}
        for r in raw_records(evidence / rels[ROW]).values()
    ]
    report["results"][0]["records"] = records
    target = tmp_path / matrix.COPY_BASELINE_REPORTS[0]
    target.parent.mkdir(parents=True)
    target.write_text(json.dumps(report))
    rel = hand_release(tmp_path, evidence)
    refs = [r for r in rel.matrix_rows if r.kind == "reference"]
    assert [r.label for r in refs] == [report["results"][0]["name"]]
    cells = rel.frozen_evaluations(refs[0].label)
    assert [c["prompt_id"] for c in cells] == [p.prompt_id for p in rel.prompts]
    assert sum(c["report_signature_match"] for c in cells) == 71
    own = write_jsonl(tmp_path / "cand.jsonl", rel.frozen_evaluations(ROW))
    d = compare(rel, own).data
    assert next(t for t in d["table"] if t["kind"] == "reference")["rank"] is None


def test_a_summary_of_pqid_bench_lines_reports_the_contracts_metrics(release: Release) -> None:
    from engine.replay.evaluations import render_summary, summarize

    s = summarize(release.frozen_evaluations(ROW))
    assert [m["key"] for m in s["metrics"]][:3] == ["execution", "assembly", "signature"]
    assert s["rates"]["signature"]["over_selected"]["count"] == 71
    assert s["gaps_pp"]["execution_structure_gap"]["over_selected"] == pytest.approx(
        100 * (144 - 71) / 154, abs=1e-4
    )
    text = render_summary(s, "text")
    assert "signature" in text and "+47.40 pp" in text and "clbit_mismatch" in text
