"""Rescore: score a frozen study's archived responses again, and measure agreement with it.

Every archived response set of a PQID-Bench evidence repository (one per frozen model row:
`<batch>/responses/<slug>_responses.jsonl` beside `<batch>/evaluations/<slug>/...report.json`)
is scored in the evaluator container, under the release's contract and in its pinned
environment, and each new verdict is held against the frozen cell of the same model and
prompt on every endpoint: execution, assembly admissibility, the reference signature and its
four component checks. The result names every cell that disagrees (prompt, model, both
verdicts, both errors).

All the chosen response sets go through one evaluator container, as one stream of items (an
item is named `<model>/<prompt>`); one container per model would start the evaluator and import
Qiskit once per model for nothing.

Besides the study's own rows, any responses file in the study's format can be scored
(`responses=`), against a harness report (`frozen_report=`), against the frozen row whose
archived file it is, or against nothing (verdicts only).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from engine.errors import InputError, ReleaseError, UsageError
from engine.release import CONTRACT_PQID_BENCH, FrozenRow, Release, load_release
from engine.replay.docker import EvaluationItem, EvaluatorConfig, EvaluatorRunner, RunOutcome
from engine.replay.environment import release_environment
from engine.replay.evaluations import fact_lines, infrastructure_evaluation, md_table, table
from engine.replay.replay import (
    ResponseLine,
    environment_record,
    environment_summary,
    evaluator_runner,
    read_responses,
    stamp_evaluation,
)
from engine.rundir.storage import atomic_write_bytes, jsonl_bytes

RESCORE_FORMAT = "pqid-rescore/1"
DEFAULT_TIMEOUT_SECONDS = 20.0

# (name in the report, canonical evaluation field), in the order they are reported.
ENDPOINTS: tuple[tuple[str, str], ...] = (
    ("execution", "report_executable"),
    ("assembly", "report_assembly_admissible"),
    ("signature", "report_signature_match"),
    ("num_qubits", "num_qubits_match"),
    ("num_clbits", "num_clbits_match"),
    ("gate_count", "gate_count_match"),
    ("gate_types", "gate_types_match"),
)
HEADLINE = ("execution", "assembly", "signature")
OUTPUT_FILES = {"json": "rescore.json", "text": "rescore.txt", "markdown": "rescore.md"}
EVALUATIONS_DIR = "evaluations"


# -- what is scored ---------------------------------------------------------------------------


@dataclass(slots=True)
class ResponseSet:
    """One model's responses, and the frozen cells they are held against (None: no verdicts)."""

    label: str
    responses_path: Path
    lines: list[ResponseLine]
    frozen: dict[str, dict[str, Any]] | None
    display_name: str | None = None
    frozen_source: str | None = None


def responses_path(release: Release, row: FrozenRow) -> str:
    """Where a frozen row's archived responses are (relative to the release root)."""
    report = Path(row.evaluations.partition("#")[0])
    if len(report.parts) < 3 or report.parent.parent.name != "evaluations":
        raise ReleaseError(
            f"{release.root / report}: not a harness report of the study's layout "
            "(<batch>/evaluations/<slug>/report.json), so its responses cannot "
            "be found"
        )
    slug = report.parent.name
    return (report.parent.parent.parent / "responses" / f"{slug}_responses.jsonl").as_posix()


def _matches(row: FrozenRow, wanted: str) -> bool:
    w = wanted.casefold()
    return any(
        isinstance(v, str) and v.casefold() == w for v in (row.label, row.model, row.display_name)
    )


def select_rows(release: Release, models: Sequence[str] | None) -> list[FrozenRow]:
    """The frozen model rows to rescore: all of them, or those named (label, model or name)."""
    rows = [r for r in release.matrix_rows if r.kind == "model"]
    if not rows:
        raise ReleaseError(f"{release.root}: the frozen matrix has no model rows to rescore")
    if not models:
        return rows
    chosen: list[FrozenRow] = []
    for wanted in models:
        found = [r for r in rows if _matches(r, wanted)]
        if not found:
            labels = ", ".join(r.label for r in rows)
            raise InputError(
                f"--model {wanted}: no frozen model row has that label, model or "
                f"name; the rows are: {labels}"
            )
        chosen.extend(r for r in found if r not in chosen)
    return chosen


def _by_prompt(cells: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    return {str(c["prompt_id"]): dict(c) for c in cells}


def study_sets(release: Release, rows: Sequence[FrozenRow]) -> list[ResponseSet]:
    """The archived response set and the frozen cells of each row."""
    out: list[ResponseSet] = []
    for row in rows:
        rel = responses_path(release, row)
        path = release.require(rel, f"rescoring {row.label}")
        out.append(
            ResponseSet(
                row.label,
                path,
                read_responses(path, release),
                _by_prompt(release.frozen_evaluations(row.label)),
                row.display_name,
                row.evaluations,
            )
        )
    return out


def report_cells(path: Path, release: Release) -> dict[str, dict[str, Any]]:
    """A harness report's records as canonical frozen cells, by prompt."""
    from engine.release.pqid_bench_matrix import cell_from_record

    try:
        report = json.loads(path.read_bytes())
    except FileNotFoundError:
        raise InputError(f"--frozen-report {path}: does not exist") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"--frozen-report {path}: not a readable JSON report ({exc})") from None
    records = report.get("records") if isinstance(report, dict) else None
    if not isinstance(records, list):
        raise InputError(f"--frozen-report {path}: has no `records` list (not a harness report)")
    try:
        cells = [
            cell_from_record(
                r, contract=release.contract, predicate=release.predicate, where=str(path)
            )
            for r in records
            if isinstance(r, dict)
        ]
    except ReleaseError as exc:
        raise InputError(str(exc)) from None
    return _by_prompt(cells)


def file_set(release: Release, path: Path, frozen_report: Path | None) -> ResponseSet:
    """A responses file in the study's format, with the frozen cells it can be held against."""
    path = Path(path)
    lines = read_responses(path, release)
    label = path.name.removesuffix(".jsonl").removesuffix("_responses")
    if frozen_report is not None:
        return ResponseSet(
            label,
            path,
            lines,
            report_cells(Path(frozen_report), release),
            frozen_source=str(frozen_report),
        )
    resolved = path.resolve()
    for row in (r for r in release.matrix_rows if r.kind == "model"):
        try:
            own = (release.root / responses_path(release, row)).resolve()
        except ReleaseError:
            continue
        if own == resolved:
            return ResponseSet(
                row.label,
                path,
                lines,
                _by_prompt(release.frozen_evaluations(row.label)),
                row.display_name,
                row.evaluations,
            )
    return ResponseSet(label, path, lines, None)


# -- agreement --------------------------------------------------------------------------------


def verdict(cell: Mapping[str, Any] | None, field_name: str) -> bool | None:
    """A cell's verdict on one endpoint (None: there is no cell)."""
    if cell is None:
        return None
    return cell.get(field_name) is True


@dataclass(slots=True)
class Agreement:
    """How one model's new verdicts compare with its frozen cells (or, pooled, several)."""

    label: str
    cells: int = 0
    agree: dict[str, int] = field(default_factory=lambda: {n: 0 for n, _ in ENDPOINTS})
    frozen_true: dict[str, int] = field(default_factory=lambda: {n: 0 for n, _ in ENDPOINTS})
    new_true: dict[str, int] = field(default_factory=lambda: {n: 0 for n, _ in ENDPOINTS})
    disagreements: list[dict[str, Any]] = field(default_factory=list)
    error_type_disagreements: int = 0

    def add(self, other: Agreement) -> None:
        self.cells += other.cells
        for name, _ in ENDPOINTS:
            self.agree[name] += other.agree[name]
            self.frozen_true[name] += other.frozen_true[name]
            self.new_true[name] += other.new_true[name]
        self.disagreements.extend(other.disagreements)
        self.error_type_disagreements += other.error_type_disagreements

    @property
    def full(self) -> bool:
        return all(self.agree[n] == self.cells for n, _ in ENDPOINTS)

    def to_dict(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "cells": self.cells,
            "full_agreement": self.full,
            "endpoints": {
                n: {
                    "agree": self.agree[n],
                    "of": self.cells,
                    "frozen_true": self.frozen_true[n],
                    "new_true": self.new_true[n],
                }
                for n, _ in ENDPOINTS
            },
            "error_type_disagreements": self.error_type_disagreements,
            "disagreements": list(self.disagreements),
        }


def _error_of(cell: Mapping[str, Any] | None) -> str | None:
    if cell is None:
        return None
    error = cell.get("error")
    return str(error) if error else None


def compare_cells(
    label: str,
    frozen: Mapping[str, Mapping[str, Any]],
    new: Mapping[str, Mapping[str, Any]],
    order: Sequence[str] | None = None,
) -> Agreement:
    """Hold each new cell against the frozen cell of the same prompt, on every endpoint.

    A prompt on one side only is a cell too, and disagrees on every endpoint (the missing side
    has no verdict).
    """
    result = Agreement(label)
    ids = list(order) if order is not None else []
    ids += sorted((set(frozen) | set(new)) - set(ids))
    for pid in ids:
        old, now = frozen.get(pid), new.get(pid)
        if old is None and now is None:
            continue
        result.cells += 1
        differing: list[str] = []
        for name, key in ENDPOINTS:
            a, b = verdict(old, key), verdict(now, key)
            result.frozen_true[name] += a is True
            result.new_true[name] += b is True
            if a is not None and a == b:
                result.agree[name] += 1
            else:
                differing.append(name)
        old_type = old.get("execution_error_type") if old else None
        new_type = now.get("execution_error_type") if now else None
        if old is not None and now is not None and old_type != new_type:
            result.error_type_disagreements += 1
        if differing:
            result.disagreements.append(
                {
                    "model": label,
                    "prompt_id": pid,
                    "endpoints": differing,
                    "frozen": None if old is None else {n: verdict(old, k) for n, k in ENDPOINTS},
                    "new": None if now is None else {n: verdict(now, k) for n, k in ENDPOINTS},
                    "frozen_error_type": old_type,
                    "new_error_type": new_type,
                    "frozen_error": _error_of(old),
                    "new_error": _error_of(now),
                    "new_category": now.get("category") if now else None,
                }
            )
    return result


# -- running ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RescoreProgress:
    """One cell scored: overall and within its model."""

    label: str
    prompt_id: str
    done: int
    total: int
    model_done: int
    model_total: int


@dataclass(slots=True)
class RescoreResult:
    """What a rescore found (and wrote, when it had an output directory)."""

    report: dict[str, Any]
    evaluations: dict[str, list[dict[str, Any]]] = field(repr=False)
    files: dict[str, Path] = field(default_factory=dict)
    outcome: RunOutcome | None = field(default=None, repr=False)  # the evaluator's own timing


def _item_id(label: str, pid: str) -> str:
    return f"{label}/{pid}"


def rescore(
    release: Release | Path | str,
    *,
    acknowledge_code_execution: bool,
    models: Sequence[str] | None = None,
    responses: Path | None = None,
    frozen_report: Path | None = None,
    output_dir: Path | None = None,
    build_image: bool = False,
    base_image: str | None = None,
    wheelhouse: Path | None = None,
    runner: EvaluatorRunner | None = None,
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS,
    allow_environment_mismatch: bool = False,
    allow_modified_release: bool = False,
    progress: Callable[[object], None] | None = None,
) -> RescoreResult:
    """Score the chosen response sets in one evaluator container and compare with the frozen."""
    if not acknowledge_code_execution:
        raise UsageError(
            "rescore executes model-generated Python (untrusted code) inside a "
            "network-disabled Docker container; pass --acknowledge-code-execution to proceed"
        )
    if timeout_seconds <= 0:
        raise UsageError("--timeout-seconds must be positive")
    if frozen_report is not None and responses is None:
        raise UsageError("--frozen-report needs --responses (the file its records score)")
    if responses is not None and models:
        raise UsageError("--model and --responses are alternatives: choose one")
    if not isinstance(release, Release):
        release = load_release(Path(release), allow_modified=allow_modified_release)
    if output_dir is not None:
        output_dir = Path(output_dir)
        if output_dir.exists() and not output_dir.is_dir():
            raise UsageError(f"--output-dir {output_dir}: exists and is not a directory")
    sets = (
        [file_set(release, Path(responses), frozen_report)]
        if responses is not None
        else study_sets(release, select_rows(release, models))
    )
    if not any(s.lines for s in sets):
        names = ", ".join(str(s.responses_path) for s in sets)
        raise InputError(f"{names}: holds no response lines; nothing to rescore")
    started = time.monotonic()
    items: list[EvaluationItem] = []
    owner: dict[str, tuple[ResponseSet, str]] = {}
    for rs in sets:
        for line in rs.lines:
            iid = _item_id(rs.label, line.prompt_id)
            if iid in owner:
                raise InputError(f"{rs.responses_path}: the model {rs.label} is chosen twice")
            owner[iid] = (rs, line.prompt_id)
            items.append(
                EvaluationItem(
                    iid,
                    line.content,
                    line.generated_code,
                    release.by_id[line.prompt_id].target_metadata,
                )
            )
    pin = release_environment(release.evaluator_requirements, release.python_version)
    if runner is None:
        runner = evaluator_runner(
            pin,
            base_image=base_image,
            wheelhouse=wheelhouse,
            allow_environment_mismatch=allow_environment_mismatch,
        )
    image = runner.ensure_image(build=build_image, progress=progress)
    image_ready = time.monotonic()
    config = EvaluatorConfig(timeout_seconds=timeout_seconds, contract=release.contract)
    per_model_total = {rs.label: len(rs.lines) for rs in sets}
    per_model_done = dict.fromkeys(per_model_total, 0)
    done = 0

    def on_line(message: dict[str, Any]) -> None:
        nonlocal done
        if message.get("type") != "evaluation" or progress is None:
            return
        iid = str(message["evaluation"]["prompt_id"])
        rs, pid = owner[iid]
        done += 1
        per_model_done[rs.label] += 1
        progress(
            RescoreProgress(
                rs.label, pid, done, len(items), per_model_done[rs.label], per_model_total[rs.label]
            )
        )

    outcome = runner.run(items, config, on_line)
    scored = time.monotonic()
    environment = environment_record(runner, outcome, pin)
    evaluations: dict[str, list[dict[str, Any]]] = {}
    new_cells: dict[str, dict[str, dict[str, Any]]] = {}
    for rs in sets:
        cells: dict[str, dict[str, Any]] = {}
        for line in rs.lines:
            iid = _item_id(rs.label, line.prompt_id)
            if iid in outcome.evaluations:
                cell = stamp_evaluation(
                    dict(outcome.evaluations[iid], prompt_id=line.prompt_id), release, environment
                )
            else:
                reason = outcome.not_evaluated.get(iid, "not evaluated: no result came back")
                cell = infrastructure_evaluation(line.prompt_id, "not_evaluated", reason)
            if line.finish_reason is not None:
                cell.setdefault("finish_reason", line.finish_reason)
            cells[line.prompt_id] = cell
        order = [p.prompt_id for p in release.prompts if p.prompt_id in cells]
        evaluations[rs.label] = [cells[pid] for pid in order]
        new_cells[rs.label] = cells
    report = build_report(
        release,
        sets,
        new_cells,
        environment=environment,
        pin=pin,
        image=image,
        config=config,
        containers=outcome.sessions,
        killed=list(outcome.killed),
        not_evaluated=len(outcome.not_evaluated),
        timing={
            "image_s": round(image_ready - started, 3),
            "scoring_s": round(scored - image_ready, 3),
        },
    )
    result = RescoreResult(report, evaluations, outcome=outcome)
    if output_dir is not None:
        harness: dict[str, dict[str, Any]] | None = None
        if release.contract == CONTRACT_PQID_BENCH:
            from engine.replay.harness_report import build_report as build_harness_report

            harness = {
                rs.label: build_harness_report(
                    evaluations[rs.label], release, responses=rs.responses_path
                )
                for rs in sets
            }
        result.files = write_outputs(output_dir, report, evaluations, harness=harness)
    return result


def build_report(
    release: Release,
    sets: Sequence[ResponseSet],
    new_cells: Mapping[str, Mapping[str, Mapping[str, Any]]],
    *,
    environment: Mapping[str, Any],
    pin: Any,
    image: str | None,
    config: EvaluatorConfig,
    containers: int,
    killed: list[str],
    not_evaluated: int,
    timing: Mapping[str, Any],
) -> dict[str, Any]:
    """The rescore report: per model and in total, agreement and every disagreeing cell."""
    order = [p.prompt_id for p in release.prompts]
    total = Agreement("total")
    models: list[dict[str, Any]] = []
    unscored: list[dict[str, Any]] = []
    for rs in sets:
        cells = new_cells[rs.label]
        entry: dict[str, Any] = {
            "label": rs.label,
            "display_name": rs.display_name,
            "responses": str(rs.responses_path),
            "frozen": rs.frozen_source,
            "scored": len(cells),
        }
        superseded = {r.prompt_id: list(r.superseded) for r in rs.lines if r.superseded}
        if superseded:
            entry["superseded_lines"] = superseded
        if rs.frozen is None:
            entry["verdicts"] = {
                n: sum(verdict(c, k) is True for c in cells.values()) for n, k in ENDPOINTS
            }
            unscored.append(entry)
            models.append(entry)
            continue
        agreement = compare_cells(rs.label, rs.frozen, cells, order)
        entry.update(agreement.to_dict())
        entry["label"] = rs.label
        models.append(entry)
        total.add(agreement)
    compared = [m for m in models if "endpoints" in m]
    totals = total.to_dict() if compared else None
    if totals is not None:
        totals.pop("disagreements")
        totals.pop("label")
    return {
        "format": RESCORE_FORMAT,
        "created_at_utc": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "release": {
            "name": release.name,
            "version": release.version,
            "format": release.format,
            "digest": release.digest,
            "modified": release.modified,
        },
        "contract": release.contract,
        "predicate": release.predicate,
        "evaluator_config": {k: v for k, v in config.message().items() if k != "type"},
        "image": image,
        "containers": containers,
        "evaluator_killed": killed,
        "not_evaluated": not_evaluated,
        "timing": dict(timing),
        **environment_summary(environment, pin),
        "models": models,
        "totals": totals,
        "disagreements": list(total.disagreements),
    }


# -- output -----------------------------------------------------------------------------------


def _ratio(endpoint: Mapping[str, Any]) -> str:
    return f"{endpoint['agree']:,} / {endpoint['of']:,}"


def _agreement_rows(report: Mapping[str, Any]) -> list[list[str]]:
    rows: list[list[str]] = []
    for m in report["models"]:
        if "endpoints" in m:
            rows.append([m["label"], *(_ratio(m["endpoints"][n]) for n, _ in ENDPOINTS)])
        else:
            rows.append([m["label"], *("not compared" for _ in ENDPOINTS)])
    totals = report.get("totals")
    if totals:
        rows.append(["total", *(_ratio(totals["endpoints"][n]) for n, _ in ENDPOINTS)])
    return rows


def _count_rows(report: Mapping[str, Any]) -> list[list[str]]:
    totals = report.get("totals")
    if not totals:
        return []
    return [
        [n, f"{totals['endpoints'][n]['frozen_true']:,}", f"{totals['endpoints'][n]['new_true']:,}"]
        for n, _ in ENDPOINTS
    ]


def _disagreement_rows(report: Mapping[str, Any]) -> list[list[str]]:
    def show(v: Mapping[str, Any] | None, names: Sequence[str]) -> str:
        if v is None:
            return "no cell"
        return " ".join(f"{n}={'T' if v[n] else 'F'}" for n in names)

    rows = []
    for d in report["disagreements"]:
        names = d["endpoints"]
        rows.append(
            [
                d["model"],
                d["prompt_id"],
                show(d["frozen"], names),
                show(d["new"], names),
                str(d["frozen_error_type"] or "-"),
                " ".join(str(d["new_error"] or d["new_error_type"] or "-").split())[:160],
            ]
        )
    return rows


def _header(report: Mapping[str, Any]) -> list[tuple[str, str]]:
    env = report.get("evaluation_environment") or {}
    packages = env.get("packages") or {}
    shown = ", ".join(
        f"{k} {packages[k]}" for k in ("qiskit", "qiskit-aer", "numpy", "scipy") if k in packages
    )
    matches = report.get("environment_matches_release")
    return [
        (
            "release",
            f"{report['release']['name']} {report['release']['version']} "
            f"({report['release']['format']})",
        ),
        ("contract", f"{report['contract']} / {report['predicate']}"),
        ("image", f"{report['image']} ({env.get('image_id', '?')})"),
        ("environment", f"python {env.get('python', '?')}, {shown}"),
        (
            "matches release pin",
            "yes" if matches else f"NO: {'; '.join(report.get('environment_differences') or [])}",
        ),
        ("containers", str(report["containers"])),
        (
            "time",
            f"image {report['timing']['image_s']:.1f} s, scoring "
            f"{report['timing']['scoring_s']:.1f} s",
        ),
    ]


def render(report: Mapping[str, Any], fmt: str) -> str:
    """The rescore report as `json`, `text` or `markdown`."""
    if fmt == "json":
        return json.dumps(report, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    headers = ["model", *(n for n, _ in ENDPOINTS)]
    dis_headers = ["model", "prompt", "frozen", "new", "frozen error", "new error"]
    right = tuple(range(1, len(ENDPOINTS) + 1))
    n_dis = len(report["disagreements"])
    if fmt == "text":
        lines = [
            "pqid-tui rescore",
            "",
            *fact_lines(_header(report)),
            "",
            "agreement with the frozen cells",
            *table(headers, _agreement_rows(report), right=right),
        ]
        if report.get("totals"):
            lines += [
                "",
                "verdicts counted (true)",
                *table(["endpoint", "frozen", "new"], _count_rows(report), right=(1, 2)),
            ]
        lines += ["", f"disagreeing cells: {n_dis}"]
        if n_dis:
            lines += table(dis_headers, _disagreement_rows(report))
        return "\n".join(lines) + "\n"
    if fmt == "markdown":
        lines = [
            "# Rescore of the frozen study",
            "",
            *(f"- **{k}**: {v}" for k, v in _header(report)),
            "",
            "## Agreement with the frozen cells",
            "",
            *md_table(headers, _agreement_rows(report), right=right),
        ]
        if report.get("totals"):
            lines += [
                "",
                "## Verdicts counted (true)",
                "",
                *md_table(["endpoint", "frozen", "new"], _count_rows(report), right=(1, 2)),
            ]
        lines += ["", f"## Disagreeing cells: {n_dis}", ""]
        if n_dis:
            lines += md_table(dis_headers, _disagreement_rows(report))
        return "\n".join(lines) + "\n"
    raise ValueError(f"unknown format {fmt!r}")


def write_outputs(
    output_dir: Path,
    report: Mapping[str, Any],
    evaluations: Mapping[str, list[dict[str, Any]]],
    *,
    harness: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict[str, Path]:
    """The report in three formats and each model's canonical evaluations, replaced atomically;
    with `harness` (PQID-Bench's contract), each model's harness report in the reference's
    JSON and Markdown, in `evaluations/<model>/` as the study lays them out."""
    (output_dir / EVALUATIONS_DIR).mkdir(parents=True, exist_ok=True)
    files: dict[str, Path] = {}
    for fmt, name in OUTPUT_FILES.items():
        path = output_dir / name
        atomic_write_bytes(path, render(report, fmt).encode())
        files[fmt] = path
    for label, cells in evaluations.items():
        path = output_dir / EVALUATIONS_DIR / f"{label}.jsonl"
        atomic_write_bytes(path, jsonl_bytes(cells))
        files[f"evaluations:{label}"] = path
    if harness:
        from engine.replay.harness_report import write_report

        for label, harness_report in harness.items():
            for key, path in write_report(
                output_dir / EVALUATIONS_DIR / label, harness_report
            ).items():
                files[f"{key}:{label}"] = path
    return files
