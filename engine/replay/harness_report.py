"""The harness report of a PQID-Bench scoring, in the shape the benchmark's reference writes.

PQID-Bench users read one JSON and one Markdown file per model run,
`pqid_bench_external_model_generation_harness_report.{json,md}`: a header naming the evaluator
and the structural predicate, a `summary` of counts and rates, and one record per evaluated
response. Replay and rescore write them (under the PQID-Bench contract only), built here from
the canonical evaluations the evaluator emits, so that the figures are this run's verdicts in
the layout those users already parse.

What a record holds, and where each part comes from:

- `prompt_id`, `row_id`, `label` (the release's prompt), `provider`, `model` (the responses
  file's line for the prompt, the last one when it repeats), `finish_reason`,
  `generated_code_length`, `empty_generation`, `execution_mode`;
- `execution`: success, error class and message, circuit found, circuit count, the chosen
  circuit's name, its structural checks and observed structure, QASM 3 export, the statevector
  check; shaped by outcome as the reference shapes it (a failed run has no circuit fields, a
  run without a circuit has `circuit_count` 0, an empty generation its fixed failure);
- `structural_checks`: the four checks and `all_match` when a circuit was found, else `{}`;
- the same two for the target-context recovery run (a diagnostic).

What the canonical evaluation does not carry, so the record leaves it out (`LEFT_OUT_OF_RECORDS`):
the statevector `norm`, the QASM 3 text `length`, the recovery run's error message, QASM 3 error
class, observed structure and statevector check. Frozen evaluations (converted from an archived
report) carry no observed structure and no code length either. An error message is the
canonical `error` without its class prefix: whitespace collapsed and capped.

The target metadata (`target_metadata` and `execution.structural.expected`) is left out unless
asked for: the report goes into a run's evaluation folder, and users publish those folders.

Header keys of the reference that describe how the study built its prompts from its 734-row
source (input file, row and label counts, split policy and manifest, response template and
prompt paths) have no meaning for a replay and are left out (`LEFT_OUT_OF_HEADER`).
"""

from __future__ import annotations

import copy
import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from engine.release.model import Prompt, Release
from engine.release.pqid_bench_matrix import REPORT_NAME
from engine.replay.evaluations import is_infrastructure, md_table
from engine.rundir.storage import atomic_write_bytes
from evaluator.contracts.pqid_bench import expected_counts, grader_target

HARNESS_REPORT_STEM = REPORT_NAME.removesuffix(".json")
HARNESS_REPORT_FILES = {
    "harness_json": f"{HARNESS_REPORT_STEM}.json",
    "harness_markdown": f"{HARNESS_REPORT_STEM}.md",
}
HARNESS_REPORT_FORMAT = "pqid-tui-harness-report/1"
STRICT_MODE = "strict_standalone"
EMPTY_GENERATION = "EmptyGeneration"
MISSING_LISTED = 20  # the reference lists the first 20 missing prompts
COMPONENTS = ("num_qubits_match", "num_clbits_match", "gate_count_match", "gate_types_match")
LEFT_OUT_OF_HEADER = (
    "input_file",
    "row_count",
    "label_counts",
    "split_policy",
    "split_manifest",
    "split_summary",
    "prompt_path",
    "response_template_path",
)
LEFT_OUT_OF_RECORDS = (
    "execution.simulation.norm",
    "execution.qasm3_export.length",
    "target_context_recovery_execution.execution_error_message",
    "target_context_recovery_execution.qasm3_export.error_type",
    "target_context_recovery_execution.qasm3_export.length",
    "target_context_recovery_execution.structural.observed",
    "target_context_recovery_execution.simulation",
)

# (summary key, Markdown label), in the order the Markdown lists them.
METRICS: tuple[tuple[str, str], ...] = (
    ("empty_generation", "empty generation"),
    ("python_execution_success", "Python ran without an exception"),
    ("circuit_found", "a circuit was found"),
    ("execution_success", "executable: ran and left a circuit (E)"),
    ("structural_all_match", "reference signature matched"),
    ("gate_types_match", "operation count map matched"),
    ("gate_count_match", "gate count matched"),
    ("num_qubits_match", "qubit count matched"),
    ("num_clbits_match", "classical-bit count matched"),
    ("qasm3_export_success", "OpenQASM 3 export (assembly)"),
    ("target_context_python_execution_success", "target-context recovery: Python ran"),
    ("target_context_execution_success", "target-context recovery: executable"),
    ("target_context_structural_all_match", "target-context recovery: signature matched"),
)


# -- one evaluation -> one record ----------------------------------------------------------------


def _true(value: Any) -> bool:
    return value is True


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _error_type(ev: Mapping[str, Any]) -> str | None:
    """The run's error class; an evaluation without one (a killed evaluator's) is named by the
    class its `error` text starts with."""
    kind = ev.get("execution_error_type")
    if isinstance(kind, str) and kind:
        return kind
    if _true(ev.get("execution_ok")):
        return None
    head = str(ev.get("error") or "").split(":", 1)[0]
    return head if head.isidentifier() else None


def _error_message(ev: Mapping[str, Any], kind: str | None) -> str:
    error = str(ev.get("error") or "")
    if kind and error == kind:
        return ""
    if kind and error.startswith(f"{kind}: "):
        return error[len(kind) + 2 :]
    return error


def _checks(source: Mapping[str, Any], signature_key: str) -> dict[str, bool]:
    checks = {name: _true(source.get(name)) for name in COMPONENTS}
    checks["all_match"] = _true(source.get(signature_key))
    return checks


def _simulation(raw: Any) -> dict[str, Any] | None:
    sim = _mapping(raw)
    if not sim:
        return None
    return {key: sim.get(key) for key in ("eligible", "success", "skip_reason", "error_type")}


def _expected(ev: Mapping[str, Any], prompt: Prompt | None) -> dict[str, Any] | None:
    """The target's signature as the predicate reads it (evaluator-only data)."""
    structure = _mapping(ev.get("structure"))
    if isinstance(structure.get("expected"), Mapping):
        return dict(structure["expected"])
    if prompt is None:
        return None
    target = grader_target(prompt.target_metadata)
    target["gate_types"] = expected_counts(target["gate_types"])
    return target


def _strict_execution(
    ev: Mapping[str, Any], prompt: Prompt | None, include_target: bool
) -> dict[str, Any]:
    kind = _error_type(ev)
    if _true(ev.get("empty_generation")):
        return {
            "execution_success": False,
            "circuit_found": False,
            "execution_error_type": kind or EMPTY_GENERATION,
            "execution_error_message": _error_message(ev, kind),
            "qasm3_export": {
                "success": False,
                "error_type": ev.get("qasm3_error") or EMPTY_GENERATION,
            },
            "simulation": _simulation(ev.get("simulation")),
        }
    if not _true(ev.get("execution_ok")):
        return {
            "execution_success": False,
            "execution_error_type": kind,
            "execution_error_message": _error_message(ev, kind),
            "circuit_found": False,
        }
    if not _true(ev.get("circuit_found")):
        return {
            "execution_success": True,
            "execution_error_type": None,
            "circuit_found": False,
            "circuit_count": ev.get("circuit_count") or 0,
        }
    structural: dict[str, Any] = {"checks": _checks(ev, "report_signature_match")}
    observed = _mapping(ev.get("structure")).get("found")
    if isinstance(observed, Mapping):
        structural["observed"] = dict(observed)
    if include_target:
        structural["expected"] = _expected(ev, prompt)
    return {
        "execution_success": True,
        "execution_error_type": None,
        "circuit_found": True,
        "circuit_count": ev.get("circuit_count"),
        "selected_circuit_name": ev.get("selected_circuit_name"),
        "structural": structural,
        "qasm3_export": {
            "success": _true(ev.get("report_assembly_admissible")),
            "error_type": ev.get("qasm3_error"),
        },
        "simulation": _simulation(ev.get("simulation")),
    }


def _recovery_execution(ev: Mapping[str, Any], strict: Mapping[str, Any]) -> dict[str, Any]:
    rec = _mapping(ev.get("target_context_recovery"))
    if _true(ev.get("empty_generation")):
        return copy.deepcopy(dict(strict))  # nothing ran in either mode: the same failure
    if not rec:
        return {}
    kind = rec.get("execution_error_type")
    if kind is not None:
        return {"execution_success": False, "execution_error_type": kind, "circuit_found": False}
    if not _true(rec.get("report_executable")):
        return {
            "execution_success": True,
            "execution_error_type": None,
            "circuit_found": False,
            "circuit_count": rec.get("circuit_count") or 0,
        }
    out: dict[str, Any] = {
        "execution_success": True,
        "execution_error_type": None,
        "circuit_found": True,
    }
    if rec.get("circuit_count") is not None:
        out["circuit_count"] = rec["circuit_count"]
    out.update(
        {
            "selected_circuit_name": rec.get("selected_circuit_name"),
            "structural": {"checks": _checks(rec, "report_signature_match")},
            "qasm3_export": {"success": _true(rec.get("report_assembly_admissible"))},
        }
    )
    return out


def harness_record(
    ev: Mapping[str, Any],
    prompt: Prompt | None,
    *,
    identity: Mapping[str, Any] | None = None,
    include_target_metadata: bool = False,
) -> dict[str, Any]:
    """One scored canonical evaluation as a harness-report record."""
    who = identity or {}
    execution = _strict_execution(ev, prompt, include_target_metadata)
    recovery = _recovery_execution(ev, execution)
    record: dict[str, Any] = {
        "prompt_id": ev["prompt_id"],
        "row_id": prompt.row_id if prompt else None,
        "label": prompt.label if prompt else None,
        "provider": who.get("provider"),
        "model": who.get("model"),
        "finish_reason": ev.get("finish_reason"),
        "generated_code_length": ev.get("generated_code_length"),
        "empty_generation": _true(ev.get("empty_generation")),
        "execution_mode": ev.get("execution_mode") or STRICT_MODE,
        "execution": execution,
        "structural_checks": _mapping(execution.get("structural")).get("checks") or {},
        "target_context_recovery_execution": recovery,
        "target_context_recovery_structural_checks": _mapping(recovery.get("structural")).get(
            "checks"
        )
        or {},
    }
    if include_target_metadata:
        record["target_metadata"] = (
            grader_target(prompt.target_metadata) if prompt is not None else None
        )
    return record


# -- the summary ---------------------------------------------------------------------------------


def _recovery(ev: Mapping[str, Any]) -> Mapping[str, Any]:
    return _mapping(ev.get("target_context_recovery"))


def summarize(evaluations: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The reference's `summary` over scored canonical evaluations: counts, their rates over
    the evaluated responses, execution failures by class, failed checks of found circuits."""
    total = len(evaluations)

    def count(test: Any) -> int:
        return sum(1 for ev in evaluations if test(ev))

    counts: dict[str, int] = {
        "empty_generation": count(lambda ev: _true(ev.get("empty_generation"))),
        "python_execution_success": count(lambda ev: _true(ev.get("execution_ok"))),
        "execution_success": count(lambda ev: _true(ev.get("report_executable"))),
        "circuit_found": count(lambda ev: _true(ev.get("circuit_found"))),
        "structural_all_match": count(lambda ev: _true(ev.get("report_signature_match"))),
        **{name: count(lambda ev, name=name: _true(ev.get(name))) for name in COMPONENTS},
        "qasm3_export_success": count(lambda ev: _true(ev.get("report_assembly_admissible"))),
        # A recovery run succeeded in Python exactly when it names no error class (an empty
        # generation names EmptyGeneration); an evaluation without one did not succeed.
        "target_context_python_execution_success": count(
            lambda ev: bool(_recovery(ev)) and _recovery(ev).get("execution_error_type") is None
        ),
        "target_context_execution_success": count(
            lambda ev: _true(_recovery(ev).get("report_executable"))
        ),
        "target_context_structural_all_match": count(
            lambda ev: _true(_recovery(ev).get("report_signature_match"))
        ),
    }
    failures: Counter[str] = Counter()
    mismatches: Counter[str] = Counter()
    for ev in evaluations:
        if not _true(ev.get("report_executable")):
            if _true(ev.get("execution_ok")):
                failures["NoCircuitReturned"] += 1
            else:
                failures[_error_type(ev) or "ExecutionFailure"] += 1
        if _true(ev.get("circuit_found")) and not _true(ev.get("report_signature_match")):
            mismatches.update(name for name in COMPONENTS if not _true(ev.get(name)))
    return {
        "rows": total,
        **counts,
        "rates": {key: (value / total if total else 0.0) for key, value in counts.items()},
        "execution_errors": dict(failures),
        "structural_mismatch_checks": dict(mismatches),
    }


# -- the report ----------------------------------------------------------------------------------


def response_identities(path: Path | None) -> dict[str, dict[str, Any]]:
    """Each prompt's `provider` and `model` as its responses line gives them (the last line of
    a repeated prompt); unreadable lines are skipped (replay has already refused a bad file)."""
    out: dict[str, dict[str, Any]] = {}
    if path is None:
        return out
    try:
        raw = Path(path).read_bytes()
    except OSError:
        return out
    for line in raw.split(b"\n"):
        try:
            obj = json.loads(line) if line.strip() else None
        except (UnicodeDecodeError, json.JSONDecodeError):
            continue
        if isinstance(obj, dict) and isinstance(obj.get("prompt_id"), str):
            out[obj["prompt_id"]] = {"provider": obj.get("provider"), "model": obj.get("model")}
    return out


def _contract(evaluations: Iterable[Mapping[str, Any]], release: Release) -> str:
    named = {ev.get("contract") for ev in evaluations} - {None}
    return str(named.pop()) if len(named) == 1 else release.contract


def build_report(
    evaluations: Sequence[Mapping[str, Any]],
    release: Release,
    *,
    responses: Path | None = None,
    include_target_metadata: bool = False,
) -> dict[str, Any]:
    """The harness report of one model's canonical evaluations (in the order given).

    Infrastructure evaluations are not records: a prompt without a response is a missing
    response, as in the reference; a response the evaluator could not score is listed in
    `not_evaluated`. Neither is in the summary's denominator.
    """
    prompts = release.by_id
    identities = response_identities(responses)
    missing = [
        str(ev["prompt_id"])
        for ev in evaluations
        if is_infrastructure(ev) and ev.get("category") != "not_evaluated"
    ]
    not_evaluated = [
        str(ev["prompt_id"]) for ev in evaluations if ev.get("category") == "not_evaluated"
    ]
    scored = [ev for ev in evaluations if not is_infrastructure(ev)]
    records = [
        harness_record(
            ev,
            prompts.get(str(ev["prompt_id"])),
            identity=identities.get(str(ev["prompt_id"])),
            include_target_metadata=include_target_metadata,
        )
        for ev in scored
    ]
    return {
        "evaluator_version": _contract(scored, release),
        "structural_predicate_version": release.predicate,
        "prompt_count": len(evaluations),
        "expected_response_path": str(responses) if responses is not None else None,
        "response_supplied": True,
        "missing_response_count": len(missing),
        "missing_responses": missing[:MISSING_LISTED],
        "summary": summarize(scored),
        "records": records,
        # pqid-tui's own keys.
        "format": HARNESS_REPORT_FORMAT,
        "written_by": "pqid-tui",
        "release": {
            "name": release.name,
            "version": release.version,
            "digest": release.digest,
            "modified": release.modified,
        },
        "not_evaluated_count": len(not_evaluated),
        "not_evaluated": not_evaluated,
        "target_metadata_included": include_target_metadata,
        "left_out": {"header": list(LEFT_OUT_OF_HEADER), "records": list(LEFT_OUT_OF_RECORDS)},
    }


def _pct(rate: float) -> str:
    return f"{100 * rate:.2f}%"


def render_markdown(report: Mapping[str, Any]) -> str:
    """The report's Markdown: its header, the counts and rates, the failures."""
    summary = report["summary"]
    rates = summary["rates"]
    release = report.get("release") or {}
    lines = [
        "# PQID-Bench harness report",
        "",
        "Written by pqid-tui from its canonical evaluations, in the layout of the report "
        "PQID-Bench's reference harness writes.",
        "",
        f"- evaluator version: `{report['evaluator_version']}`",
        f"- structural predicate: `{report['structural_predicate_version']}`",
        f"- release: {release.get('name')} {release.get('version')} "
        f"(`{str(release.get('digest') or '')[:12]}`)"
        + (" MODIFIED" if release.get("modified") else ""),
        f"- responses: `{report.get('expected_response_path')}`",
        f"- evaluated responses: `{summary['rows']:,}`",
        f"- missing prompts: `{report['missing_response_count']:,}`",
    ]
    if report.get("not_evaluated_count"):
        lines.append(
            f"- not evaluated (the evaluator could not score them): "
            f"`{report['not_evaluated_count']:,}`"
        )
    lines += [
        "- target metadata: "
        + (
            "included (`target_metadata` and `execution.structural.expected` in each record)"
            if report.get("target_metadata_included")
            else "left out (no `target_metadata` and no `execution.structural.expected` in the "
            "records), because evaluation folders get published"
        ),
        "",
        "Rates are over the evaluated responses; missing and unscored prompts are not in the "
        "denominator.",
        "",
        *md_table(
            ["metric", "count", "rate"],
            [[label, f"{summary[key]:,}", _pct(rates[key])] for key, label in METRICS],
            right=(1, 2),
        ),
    ]
    errors = summary["execution_errors"]
    if errors:
        lines += [
            "",
            "## Not executable, by error class",
            "",
            *md_table(
                ["error class", "count"],
                [[k, f"{errors[k]:,}"] for k in sorted(errors)],
                right=(1,),
            ),
        ]
    checks = summary["structural_mismatch_checks"]
    if checks:
        lines += [
            "",
            "## Failed checks of executable circuits without a signature match",
            "",
            *md_table(
                ["check", "count"],
                [[k, f"{checks[k]:,}"] for k in COMPONENTS if k in checks],
                right=(1,),
            ),
        ]
    left_out = report.get("left_out") or {}
    lines += [
        "",
        "## Left out",
        "",
        "- The study's prompt-building fields ("
        + ", ".join(f"`{k}`" for k in left_out.get("header", ()))
        + "): they describe how the "
        "benchmark drew its prompts from its source pool, not this scoring.",
        "- Fields the canonical evaluation does not carry ("
        + ", ".join(f"`{k}`" for k in left_out.get("records", ()))
        + ").",
        "",
    ]
    return "\n".join(lines)


def render_json(report: Mapping[str, Any]) -> str:
    return json.dumps(report, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def write_report(output_dir: Path, report: Mapping[str, Any]) -> dict[str, Path]:
    """Write the JSON and the Markdown into `output_dir`, each replaced atomically."""
    output_dir.mkdir(parents=True, exist_ok=True)
    files: dict[str, Path] = {}
    for key, text in (
        ("harness_json", render_json(report)),
        ("harness_markdown", render_markdown(report)),
    ):
        path = output_dir / HARNESS_REPORT_FILES[key]
        atomic_write_bytes(path, text.encode())
        files[key] = path
    return files


__all__ = [
    "HARNESS_REPORT_FILES",
    "HARNESS_REPORT_STEM",
    "build_report",
    "harness_record",
    "render_json",
    "render_markdown",
    "response_identities",
    "summarize",
    "write_report",
]
