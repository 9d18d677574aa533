"""The harness report in PQID-Bench's reference layout, held against the study's own files.

The archived reports of PQID-Bench v1.0.0 (`evaluations/<model>/...harness_report.json` and
`.md`) pin the summary logic and the record layout: built from the frozen canonical
evaluations of a row, the report must give exactly the archived `summary` and, record by
record, the archived verdict fields. Replay and rescore are run without Docker: with a runner
that plays the frozen cells back, with the real evaluator on the host (a test-only runner) for
what only a real evaluation carries (observed structures, code lengths), and with the scripted
runner of the rescore tests.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from engine.release import Release, load_release
from engine.replay.docker import EvaluationItem, EvaluatorConfig, LocalEvaluatorRunner, RunOutcome
from engine.replay.evaluations import infrastructure_evaluation
from engine.replay.harness_report import (
    HARNESS_REPORT_FILES,
    LEFT_OUT_OF_HEADER,
    build_report,
    render_markdown,
    summarize,
)
from engine.replay.replay import OUTPUT_FILES, replay
from engine.replay.rescore import rescore
from tests.engine.test_rescore import ScriptedRunner, two_models  # noqa: F401  (a fixture)

ROOT = Path(__file__).resolve().parents[2]
BATCHES = "artifacts/external_model_batches_154"
REPORT_JSON = HARNESS_REPORT_FILES["harness_json"]
REPORT_MD = HARNESS_REPORT_FILES["harness_markdown"]
LLAMA_70B = "groq_llama-3_3-70b-versatile"
LLAMA_8B = "groq_llama-3_1-8b-instant"
QISKIT_MISTRAL = "huggingface_router_qiskit_mistral-small-3_2-24b-qiskit_featherless-ai"
# Empty generations and a circuit-less run; many error classes; the three the brief names.
ROWS = (
    LLAMA_70B,
    LLAMA_8B,
    QISKIT_MISTRAL,
    "deepseek_deepseek-v4-flash",
    "huggingface_router_qwen_qwen3-coder-next_novita",
    "groq_qwen_qwen3-32b",
)

# The per-record verdict fields (paths into a record), compared with their presence: a field
# the reference leaves out of a record must be absent here too.
VERDICT_PATHS: tuple[tuple[str, ...], ...] = (
    ("prompt_id",),
    ("row_id",),
    ("label",),
    ("provider",),
    ("model",),
    ("finish_reason",),
    ("empty_generation",),
    ("execution_mode",),
    ("structural_checks",),
    ("target_context_recovery_structural_checks",),
    ("execution", "execution_success"),
    ("execution", "circuit_found"),
    ("execution", "execution_error_type"),
    ("execution", "selected_circuit_name"),
    ("execution", "circuit_count"),
    ("execution", "structural", "checks"),
    ("execution", "qasm3_export", "success"),
    ("execution", "qasm3_export", "error_type"),
    ("execution", "simulation", "eligible"),
    ("execution", "simulation", "success"),
    ("execution", "simulation", "skip_reason"),
    ("target_context_recovery_execution", "execution_success"),
    ("target_context_recovery_execution", "circuit_found"),
    ("target_context_recovery_execution", "execution_error_type"),
    ("target_context_recovery_execution", "selected_circuit_name"),
    ("target_context_recovery_execution", "structural", "checks"),
    ("target_context_recovery_execution", "qasm3_export", "success"),
)
ABSENT = "<absent>"


def at(record: Any, path: Sequence[str]) -> Any:
    for key in path:
        if not isinstance(record, dict) or key not in record:
            return ABSENT
        record = record[key]
    return record


def archived(release: Release, label: str) -> dict[str, Any]:
    report: dict[str, Any] = json.loads(
        (release.root / release.row(label).evaluations).read_text(encoding="utf-8")
    )
    return report


def archived_markdown(release: Release, label: str) -> str:
    path = release.root / release.row(label).evaluations
    return path.with_suffix(".md").read_text(encoding="utf-8")


def responses_of(release: Release, label: str) -> Path:
    folder = release.row(label).evaluations.rsplit("/evaluations/", 1)[0]
    return release.root / folder / "responses" / f"{label}_responses.jsonl"


def record_differences(
    want: Sequence[dict[str, Any]],
    got: Sequence[dict[str, Any]],
    paths: Sequence[tuple[str, ...]] = VERDICT_PATHS,
) -> list[str]:
    out = [f"{len(want)} archived records, {len(got)} built"] if len(want) != len(got) else []
    for a, b in zip(want, got, strict=False):
        out += [
            f"{a['prompt_id']} {'.'.join(p)}: archived {at(a, p)!r}, built {at(b, p)!r}"
            for p in paths
            if at(a, p) != at(b, p)
        ]
    return out


@pytest.fixture(scope="module")
def evidence(pqid_bench: Any) -> Release:
    return load_release(pqid_bench.evidence)


# -- the summary and the records, from the frozen evaluations ---------------------------------


@pytest.mark.parametrize("label", ROWS)
def test_the_summary_is_the_archived_summary(evidence: Release, label: str) -> None:
    """Every count and rate, the failures by class and the failed checks, exactly."""
    want = archived(evidence, label)
    report = build_report(evidence.frozen_evaluations(label), evidence)
    assert report["summary"] == want["summary"]
    for key in (
        "evaluator_version",
        "structural_predicate_version",
        "prompt_count",
        "missing_response_count",
        "missing_responses",
        "response_supplied",
    ):
        assert report[key] == want[key], key


def test_every_frozen_row_gives_its_archived_summary(evidence: Release) -> None:
    """All 21 rows of the frozen matrix (3,234 cells): no row's figures move."""
    rows = [r.label for r in evidence.matrix_rows if r.kind == "model"]
    assert len(rows) == 21
    differing = [
        label
        for label in rows
        if build_report(evidence.frozen_evaluations(label), evidence)["summary"]
        != archived(evidence, label)["summary"]
    ]
    assert differing == []


def test_every_frozen_row_gives_its_archived_record_verdicts(evidence: Release) -> None:
    """Record by record, in the archived order, every verdict field and its presence."""
    problems: list[str] = []
    for row in (r for r in evidence.matrix_rows if r.kind == "model"):
        report = build_report(
            evidence.frozen_evaluations(row.label),
            evidence,
            responses=responses_of(evidence, row.label),
        )
        problems += [
            f"{row.label}: {p}"
            for p in record_differences(archived(evidence, row.label)["records"], report["records"])
        ]
    assert problems == [], "\n".join(problems[:20])


def test_error_messages_are_the_archived_ones_as_far_as_kept(evidence: Release) -> None:
    """The message is the evaluation's `error` without its class: whitespace collapsed."""
    want = archived(evidence, LLAMA_8B)["records"]
    got = build_report(evidence.frozen_evaluations(LLAMA_8B), evidence)["records"]
    compared = 0
    for a, b in zip(want, got, strict=True):
        message = a["execution"].get("execution_error_message")
        if message is None:
            assert "execution_error_message" not in b["execution"]
            continue
        compared += 1
        assert b["execution"]["execution_error_message"] == " ".join(message.split())
    errors = archived(evidence, LLAMA_8B)["summary"]["execution_errors"]
    assert compared == sum(errors.values()) - errors["NoCircuitReturned"] == 27


def test_target_metadata_is_left_out_unless_asked_for(evidence: Release) -> None:
    """By default no record has `target_metadata` or `structural.expected`, and the Markdown
    says so; asked for, both are the archived ones."""
    cells = evidence.frozen_evaluations(LLAMA_70B)
    report = build_report(cells, evidence)
    text = json.dumps(report)
    assert '"target_metadata"' not in text and '"expected"' not in text
    assert report["target_metadata_included"] is False
    assert "target metadata: left out" in render_markdown(report)
    full = build_report(cells, evidence, include_target_metadata=True)
    want = archived(evidence, LLAMA_70B)["records"]
    assert [r["target_metadata"] for r in full["records"]] == [r["target_metadata"] for r in want]
    expected = [at(r, ("execution", "structural", "expected")) for r in full["records"]]
    assert expected == [at(r, ("execution", "structural", "expected")) for r in want]
    assert "target metadata: included" in render_markdown(full)


def _table_rows(markdown: str) -> dict[str, tuple[str, str]]:
    rows = {}
    for line in markdown.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and re.fullmatch(r"[\d,]+", cells[1]) and cells[2].endswith("%"):
            rows[cells[0]] = (cells[1], cells[2])
    return rows


# The archived Markdown's metric labels, and the summary key each one reports.
ARCHIVED_LABELS = {
    "empty generation": "empty_generation",
    "Python execution success": "python_execution_success",
    "executable circuit returned, E": "execution_success",
    "reference-signature match": "structural_all_match",
    "gate-type count-map match": "gate_types_match",
    "gate count match": "gate_count_match",
    "qubit count match": "num_qubits_match",
    "QASM3 export success": "qasm3_export_success",
    "target-context recovery execution success": "target_context_execution_success",
    "target-context recovery reference-signature match": "target_context_structural_all_match",
}


@pytest.mark.parametrize("label", ROWS[:3])
def test_the_markdown_shows_the_archived_headline_figures(evidence: Release, label: str) -> None:
    from engine.replay.harness_report import METRICS

    ours = dict(METRICS)
    want = _table_rows(archived_markdown(evidence, label))
    assert set(want) == set(ARCHIVED_LABELS)
    report = build_report(evidence.frozen_evaluations(label), evidence)
    markdown = render_markdown(report)
    got = _table_rows(markdown)
    for archived_label, key in ARCHIVED_LABELS.items():
        assert got[ours[key]] == want[archived_label], archived_label
    assert "- evaluated responses: `154`" in markdown and "- missing prompts: `0`" in markdown
    errors = archived(evidence, label)["summary"]["execution_errors"]
    for kind, count in errors.items():
        assert f"| {kind} | {count} |" in markdown
    for key in LEFT_OUT_OF_HEADER:
        assert f"`{key}`" in markdown


def test_infrastructure_failures_are_not_records(evidence: Release) -> None:
    """A prompt without a response is a missing one (as in the reference); a response the
    evaluator could not score is listed apart; neither is in the denominator."""
    cells = evidence.frozen_evaluations(LLAMA_70B)
    first, second = cells[0]["prompt_id"], cells[1]["prompt_id"]
    evaluations = [
        infrastructure_evaluation(first, "no_response", "no line"),
        infrastructure_evaluation(second, "not_evaluated", "evaluator stopped"),
        *cells[2:],
    ]
    report = build_report(evaluations, evidence)
    assert report["prompt_count"] == 154 and report["summary"]["rows"] == 152
    assert report["missing_response_count"] == 1 and report["missing_responses"] == [first]
    assert report["not_evaluated"] == [second] and report["not_evaluated_count"] == 1
    assert report["summary"] == summarize(cells[2:])
    assert [r["prompt_id"] for r in report["records"]] == [c["prompt_id"] for c in cells[2:]]
    markdown = render_markdown(report)
    assert "- missing prompts: `1`" in markdown and "not evaluated" in markdown


def test_no_evaluations_give_zero_rates(evidence: Release) -> None:
    summary = build_report([], evidence)["summary"]
    assert summary["rows"] == 0 and set(summary["rates"].values()) == {0.0}
    assert summary["execution_errors"] == {} and summary["structural_mismatch_checks"] == {}


# -- replay and rescore write the two files ---------------------------------------------------


class PlaybackRunner:
    """Scores nothing: hands back a frozen row's canonical cells as the evaluator's output."""

    def __init__(self, cells: Sequence[dict[str, Any]]) -> None:
        self.cells = {c["prompt_id"]: c for c in cells}

    def ensure_image(self, *, build: bool, progress: Any = None) -> str:
        return "playback:frozen"

    def run(
        self, items: Sequence[EvaluationItem], config: EvaluatorConfig, on_line: Any = None
    ) -> RunOutcome:
        outcome = RunOutcome(environment={"python": "3.13.5", "qiskit": "2.1.1"})
        for item in items:
            cell = {k: v for k, v in self.cells[item.prompt_id].items() if k != "frozen"}
            outcome.evaluations[item.prompt_id] = cell
        return outcome


def test_a_replay_under_the_pqid_contract_writes_both_files(
    evidence: Release, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    result = replay(
        evidence.root,
        responses_of(evidence, LLAMA_70B),
        out,
        acknowledge_code_execution=True,
        runner=PlaybackRunner(evidence.frozen_evaluations(LLAMA_70B)),
    )
    assert sorted(p.name for p in out.iterdir()) == sorted((*OUTPUT_FILES, REPORT_JSON, REPORT_MD))
    assert result.files["harness_json"] == out / REPORT_JSON
    written = json.loads((out / REPORT_JSON).read_text(encoding="utf-8"))
    want = archived(evidence, LLAMA_70B)
    assert written["summary"] == want["summary"]
    assert record_differences(want["records"], written["records"]) == []
    assert written["expected_response_path"] == str(responses_of(evidence, LLAMA_70B))
    markdown = (out / REPORT_MD).read_text(encoding="utf-8")
    assert "| executable: ran and left a circuit (E) | 144 | 93.51% |" in markdown


def test_a_replay_of_part_of_the_panel_reports_the_rest_as_missing(
    evidence: Release, tmp_path: Path
) -> None:
    lines = responses_of(evidence, LLAMA_70B).read_text(encoding="utf-8").splitlines()
    responses = tmp_path / "responses.jsonl"
    dropped = json.loads(lines[0])["prompt_id"]
    responses.write_text(
        json.dumps({"prompt_id": dropped, "error": "HTTP 500"})
        + "\n"
        + "\n".join(lines[1:])
        + "\n",
        encoding="utf-8",
    )
    replay(
        evidence.root,
        responses,
        tmp_path / "out",
        acknowledge_code_execution=True,
        runner=PlaybackRunner(evidence.frozen_evaluations(LLAMA_70B)),
    )
    written = json.loads((tmp_path / "out" / REPORT_JSON).read_text(encoding="utf-8"))
    assert written["missing_responses"] == [dropped] and written["summary"]["rows"] == 153


def test_a_replay_by_the_real_evaluator_fills_what_frozen_cells_lack(
    evidence: Release, tmp_path: Path
) -> None:
    """The real evaluator (on the host: a test-only runner, no container) on Llama 3.3 70B's
    archived responses, which score on this venv's Qiskit as on the frozen one: the same
    summary and verdicts, and the fields only a real evaluation carries (observed structure,
    code length, the recovery run's circuit count) equal the archived ones too."""
    runner = LocalEvaluatorRunner(
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(ROOT)}, cwd=tmp_path
    )
    out = tmp_path / "out"
    replay(
        evidence.root,
        responses_of(evidence, LLAMA_70B),
        out,
        acknowledge_code_execution=True,
        runner=runner,
        allow_environment_mismatch=True,
    )
    written = json.loads((out / REPORT_JSON).read_text(encoding="utf-8"))
    want = archived(evidence, LLAMA_70B)
    assert written["summary"] == want["summary"]
    extra = (
        ("generated_code_length",),
        ("execution", "structural", "observed"),
        ("target_context_recovery_execution", "circuit_count"),
    )
    assert record_differences(want["records"], written["records"], (*VERDICT_PATHS, *extra)) == []
    assert '"target_metadata"' not in json.dumps(written)
    assert '"expected"' not in json.dumps(written["records"])


def test_a_rescore_writes_each_models_harness_report(
    two_models: Release,  # noqa: F811
    tmp_path: Path,
) -> None:
    out = tmp_path / "out"
    result = rescore(
        two_models, acknowledge_code_execution=True, runner=ScriptedRunner(), output_dir=out
    )
    for label in ("alpha", "beta"):
        folder = out / "evaluations" / label
        assert result.files[f"harness_json:{label}"] == folder / REPORT_JSON
        assert (folder / REPORT_MD).is_file()
    alpha = json.loads((out / "evaluations" / "alpha" / REPORT_JSON).read_text())
    summary = alpha["summary"]
    # The scripted verdicts: p1 matches, p2 runs without matching, p3 fails with NameError.
    assert (summary["rows"], summary["execution_success"], summary["structural_all_match"]) == (
        3,
        2,
        1,
    )
    assert summary["execution_errors"] == {"NameError": 1}
    assert [r["row_id"] for r in alpha["records"]] == ["row-p1", "row-p2", "row-p3"]
    beta = json.loads((out / "evaluations" / "beta" / REPORT_JSON).read_text())
    assert beta["summary"]["structural_all_match"] == 3


@pytest.mark.docker
def test_a_rescore_in_the_pinned_environment_writes_the_archived_reports(
    pqid_bench: Any, pqid_bench_image: str, docker_client: Any, tmp_path: Path
) -> None:
    """In PQID-Bench's pinned environment (the container), the written report of Llama 3.1 8B
    Instant (verdicts moved by the built-in correction) and Qiskit Mistral (a repeated prompt
    line) is the archived one: summary, verdicts, observed structures and code lengths."""
    from tests.conftest import PQID_BENCH_BASE_IMAGE
    from tests.engine.test_rescore import _evidence_runner

    release = load_release(pqid_bench.evidence)
    runner = _evidence_runner(docker_client, release, PQID_BENCH_BASE_IMAGE)
    out = tmp_path / "out"
    rescore(
        release,
        acknowledge_code_execution=True,
        models=[LLAMA_8B, QISKIT_MISTRAL],
        runner=runner,
        output_dir=out,
    )
    extra = (
        ("generated_code_length",),
        ("execution", "structural", "observed"),
        ("target_context_recovery_execution", "circuit_count"),
    )
    for label in (LLAMA_8B, QISKIT_MISTRAL):
        written = json.loads((out / "evaluations" / label / REPORT_JSON).read_text())
        want = archived(release, label)
        assert written["summary"] == want["summary"], label
        assert (
            record_differences(want["records"], written["records"], (*VERDICT_PATHS, *extra)) == []
        ), label
