"""The frozen matrix of a PQID-Bench evidence repository: 21 model rows and their cells.

Where the study keeps them (paths relative to the repository root):

    artifacts/external_model_batches_154/                       19 models
        evaluations/<slug>/pqid_bench_external_model_generation_harness_report.json
        requests/<slug>_requests.jsonl                           who was asked, and how
        external_model_run_matrix.json                           labels and roles (17 of them)
    artifacts/external_model_batches_154/mistral_parent_control/ one model, same layout
    artifacts/external_model_batches_154/qiskit_mistral/         one model, same layout
    artifacts/analysis_154/pqid_bench_ordered_operand_cell_audit.jsonl
                                                            the 3,234-cell audit (may be absent)

A row is one harness report (its folder name is the row's stable label). When the cell audit
is present it names the roster and its three verdicts are checked against the reports'; the
reports give every other field of a cell. Each record of a report becomes one canonical
evaluation line under the PQID-Bench contract (the same fields the project's evaluator writes
when it scores under that contract).

Retrieval-copy baselines become `reference` rows only where a baseline report carries
per-prompt records; the published copy-baseline reports hold aggregate figures only, so the
matrix of PQID-Bench v1.0.0 has no reference row. No row is ever made up from aggregates.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path, PurePosixPath
from typing import Any

from engine.errors import ReleaseError
from engine.release.model import (
    CONTRACT_PQID_BENCH,
    PREDICATE_PQID_BENCH,
    FrozenRow,
    Release,
)
from engine.rundir.storage import read_json_file, read_jsonl_objects

BATCH_DIR = "artifacts/external_model_batches_154"
SUBBATCHES = ("mistral_parent_control", "qiskit_mistral")
REPORT_NAME = "pqid_bench_external_model_generation_harness_report.json"
RUN_MATRIX = f"{BATCH_DIR}/external_model_run_matrix.json"
CELL_AUDIT = "artifacts/analysis_154/pqid_bench_ordered_operand_cell_audit.jsonl"
IDENTIFIABILITY = "artifacts/analysis_154/pqid_bench_prompt_identifiability_sensitivity.json"
COPY_BASELINE_REPORTS = (
    "artifacts/test_split_154/retrieval_copy_baseline/"
    "pqid_bench_generation_copy_baseline_report.json",
)
PROMPTS = "artifacts/test_split_154/pqid_bench_external_generation_prompts_154.jsonl"
PINNED_REQUIREMENTS = "requirements/evaluator-container.txt"
EVALUATOR_DOCKERFILE = "docker/evaluator/Dockerfile"

EXECUTION_MODE = "strict_standalone"
SYNTAX_ERRORS = frozenset({"SyntaxError", "IndentationError", "TabError"})
NOT_IN_CONTRACT = "not part of the pqid-bench contract"
COMPONENTS = ("num_qubits_match", "num_clbits_match", "gate_count_match", "gate_types_match")

# Reads a file the matrix needs: `(relative path, purpose) -> path`, verified by the caller's
# release manifest where there is one (Release.require).
Require = Callable[[str, str], Path]


def _plain(root: Path) -> Require:
    def require(rel: str, purpose: str) -> Path:
        return root / rel

    return require


# -- reading ---------------------------------------------------------------------------------


def _read_json(path: Path, what: str) -> Any:
    return read_json_file(path, ReleaseError, what=what, missing=f"{what} is missing")


def _first_json_line(path: Path) -> dict[str, Any] | None:
    try:
        with path.open("rb") as fh:
            for line in fh:
                if line.strip():
                    obj = json.loads(line)
                    return obj if isinstance(obj, dict) else None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    return None


class _ParsedCache:
    """Parsed files keyed by (path, size, mtime): loading the matrix twice reads it once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: dict[tuple[str, int, int], Any] = {}

    def get(self, kind: str, path: Path, build: Callable[[], Any]) -> Any:
        try:
            st = path.stat()
        except OSError:
            return build()  # the builder raises the error that names the file
        name = f"{kind}:{path.resolve()}"
        key = (name, st.st_size, st.st_mtime_ns)
        with self._lock:
            if key in self._items:
                return self._items[key]
        value = build()
        with self._lock:
            # Drop stale versions of the same file.
            for old in [k for k in self._items if k[0] == name]:
                del self._items[old]
            self._items[key] = value
        return value


_CACHE = _ParsedCache()


# -- one record -> one canonical evaluation line ---------------------------------------------


def _bool(value: Any) -> bool:
    return value is True


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _checks(raw: Any) -> dict[str, bool]:
    checks = raw if isinstance(raw, Mapping) else {}
    out = {name: _bool(checks.get(name)) for name in COMPONENTS}
    out["all_match"] = _bool(checks.get("all_match"))
    return out


def _verdicts(execution: Any, structural: Any) -> dict[str, Any]:
    """The contract's verdicts on one execution: executable, assembly, signature, components."""
    ex = _mapping(execution)
    checks = _checks(structural)
    qasm = _mapping(ex.get("qasm3_export"))
    return {
        "report_executable": _bool(ex.get("execution_success")) and _bool(ex.get("circuit_found")),
        "report_assembly_admissible": _bool(qasm.get("success")),
        "report_signature_match": checks["all_match"],
        **{name: checks[name] for name in COMPONENTS},
        "execution_error_type": ex.get("execution_error_type"),
        "selected_circuit_name": ex.get("selected_circuit_name"),
    }


def _category(cell: Mapping[str, Any]) -> str:
    """The project's failure taxonomy, in precedence order, from the contract's verdicts."""
    error_type = cell.get("execution_error_type")
    if cell["empty_generation"]:
        return "no_code"
    if error_type in SYNTAX_ERRORS:
        return "syntax_error"
    if isinstance(error_type, str) and "Timeout" in error_type:
        return "timeout"
    if not cell["execution_ok"]:
        return "execution_error"
    if not cell["circuit_found"]:
        return "no_circuit"
    if not cell["num_qubits_match"]:
        return "width_mismatch"
    if not cell["num_clbits_match"]:
        return "clbit_mismatch"
    if not cell["gate_types_match"]:
        return "gate_type_mismatch"
    if not cell["gate_count_match"]:
        return "gate_count_mismatch"
    return "ok"


def _simulation(raw: Any) -> dict[str, Any] | None:
    if not isinstance(raw, Mapping) or not raw:
        return None
    return {
        "eligible": _bool(raw.get("eligible")),
        "success": _bool(raw.get("success")),
        "skip_reason": raw.get("skip_reason"),
        "error_type": raw.get("error_type"),
    }


def _error_text(execution: Mapping[str, Any]) -> str | None:
    kind = execution.get("execution_error_type")
    if not kind:
        return None
    message = " ".join(str(execution.get("execution_error_message") or "").split())
    text = f"{kind}: {message}" if message else str(kind)
    return text if len(text) <= 300 else text[:299] + "…"


def cell_from_record(
    record: Mapping[str, Any],
    *,
    contract: str = CONTRACT_PQID_BENCH,
    predicate: str | None = PREDICATE_PQID_BENCH,
    evaluator_version: str | None = None,
    environment: Mapping[str, Any] | None = None,
    where: str = "record",
) -> dict[str, Any]:
    """One frozen harness record as a canonical evaluation line (PQID-Bench contract)."""
    pid = record.get("prompt_id")
    if not isinstance(pid, str) or not pid:
        raise ReleaseError(f"{where}: a record without a prompt_id")
    execution = _mapping(record.get("execution"))
    verdicts = _verdicts(execution, record.get("structural_checks"))
    components = [verdicts[name] for name in COMPONENTS]
    if verdicts["report_signature_match"] != all(components) and (
        verdicts["report_signature_match"] or record.get("structural_checks")
    ):
        raise ReleaseError(
            f"{where}: prompt {pid}: structural_checks.all_match disagrees with "
            "its four component checks"
        )
    context = record.get("target_context_recovery_execution")
    cell: dict[str, Any] = {
        "prompt_id": pid,
        "contract": contract,
        "predicate": predicate,
        **verdicts,
        "empty_generation": _bool(record.get("empty_generation")),
        "circuit_count": execution.get("circuit_count")
        if isinstance(execution.get("circuit_count"), int)
        else None,
        "execution_mode": record.get("execution_mode") or EXECUTION_MODE,
        "simulation": _simulation(execution.get("simulation")),
        "target_context_recovery": (
            _verdicts(context, record.get("target_context_recovery_structural_checks"))
            if isinstance(context, Mapping) and context
            else None
        ),
        # The project's fields, mapped.
        "execution_ok": _bool(execution.get("execution_success")),
        "circuit_found": _bool(execution.get("circuit_found")),
        "structural_match": verdicts["report_signature_match"],
        "width_match": verdicts["num_qubits_match"],
        "gate_counts_match": verdicts["gate_count_match"],
        "qasm3_ok": verdicts["report_assembly_admissible"],
        "qasm3_error": _mapping(execution.get("qasm3_export")).get("error_type"),
        "equivalent": None,
        "equivalence_reason": NOT_IN_CONTRACT,
        "error": _error_text(execution),
        "duration_ms": None,
        "finish_reason": record.get("finish_reason"),
        "evaluator_version": evaluator_version,
        "environment": dict(environment or {}),
        "frozen": True,
    }
    cell["category"] = _category(cell)
    return cell


# -- the roster ------------------------------------------------------------------------------


def _report_paths(root: Path) -> list[str]:
    """Every harness report of the 154-prompt batches, main folder first, sorted by slug."""
    out: list[str] = []
    for folder in (BATCH_DIR, *(f"{BATCH_DIR}/{s}" for s in SUBBATCHES)):
        evaluations = root / folder / "evaluations"
        if not evaluations.is_dir():
            continue
        for slug in sorted(p.name for p in evaluations.iterdir() if p.is_dir()):
            rel = f"{folder}/evaluations/{slug}/{REPORT_NAME}"
            if (root / rel).is_file():
                out.append(rel)
    return out


def _audit_rows(path: Path) -> dict[str, dict[str, dict[str, Any]]]:
    """The cell audit by report path, then by prompt: the three frozen verdicts per cell."""

    def build() -> dict[str, dict[str, dict[str, Any]]]:
        rows: dict[str, dict[str, dict[str, Any]]] = {}
        for number, obj in read_jsonl_objects(path, ReleaseError, what="the cell audit"):
            report, pid = obj.get("report_path"), obj.get("prompt_id")
            if not isinstance(report, str) or not isinstance(pid, str):
                raise ReleaseError(f"{path}:{number}: a cell without report_path and prompt_id")
            cells = rows.setdefault(_relative_report(report), {})
            if pid in cells:
                raise ReleaseError(f"{path}:{number}: prompt {pid} repeats for {report}")
            cells[pid] = {
                "report_executable": _bool(obj.get("report_executable")),
                "report_assembly_admissible": _bool(obj.get("report_assembly_admissible")),
                "report_signature_match": _bool(obj.get("report_signature_match")),
                "selected_circuit_name": obj.get("report_selected_circuit_name"),
                "model_label": obj.get("model_label"),
            }
        return rows

    result: dict[str, dict[str, dict[str, Any]]] = _CACHE.get("audit", path, build)
    return result


def _relative_report(report_path: str) -> str:
    """A report path as the audit wrote it, relative to the repository root."""
    parts = PurePosixPath(report_path.replace("\\", "/")).parts
    if "artifacts" in parts:
        parts = parts[parts.index("artifacts") :]
    return "/".join(parts)


def _run_matrix(root: Path, require: Require) -> dict[tuple[str, str], dict[str, Any]]:
    path = root / RUN_MATRIX
    if not path.is_file():
        return {}
    data = _read_json(require(RUN_MATRIX, "the frozen matrix's model labels"), "the run matrix")
    entries = data if isinstance(data, list) else []
    return {
        (str(e.get("provider")), str(e.get("api_model_id"))): e
        for e in entries
        if isinstance(e, dict)
    }


def _identity(root: Path, report_rel: str, require: Require) -> dict[str, Any]:
    """Who a row is: provider, API model ID, label and role from the archived requests."""
    folder = report_rel.rsplit("/evaluations/", 1)[0]
    slug = report_rel.split("/")[-2]
    rel = f"{folder}/requests/{slug}_requests.jsonl"
    if not (root / rel).is_file():
        return {}
    first = _first_json_line(require(rel, "the frozen matrix's model identities"))
    return first or {}


class _ReportCells:
    """A harness report's header fields and its records as canonical cells (no environment)."""

    __slots__ = ("cells", "evaluator_version", "predicate")

    def __init__(
        self, evaluator_version: str | None, predicate: str | None, cells: list[dict[str, Any]]
    ) -> None:
        self.evaluator_version = evaluator_version
        self.predicate = predicate
        self.cells = cells


def _report_cells(path: Path) -> _ReportCells:
    def build() -> _ReportCells:
        where = str(path)
        data = _read_json(path, "the harness report")
        if not isinstance(data, dict) or not isinstance(data.get("records"), list):
            raise ReleaseError(f"{where}: not a harness report (no records list)")
        version = data.get("evaluator_version")
        version = version if isinstance(version, str) and version else None
        predicate = data.get("structural_predicate_version")
        predicate = predicate if isinstance(predicate, str) and predicate else None
        seen: set[str] = set()
        cells = []
        for index, record in enumerate(data["records"]):
            if not isinstance(record, Mapping):
                raise ReleaseError(f"{where}: record {index + 1} is not an object")
            # The report's evaluator version names the contract it was scored under.
            cell = cell_from_record(
                record,
                contract=version or "unknown",
                predicate=predicate,
                evaluator_version=version,
                where=where,
            )
            if cell["prompt_id"] in seen:
                raise ReleaseError(f"{where}: prompt {cell['prompt_id']} has two records")
            seen.add(cell["prompt_id"])
            cells.append(cell)
        return _ReportCells(version, predicate, cells)

    result: _ReportCells = _CACHE.get("report", path, build)
    return result


def frozen_rows(root: Path, *, require: Require | None = None) -> tuple[FrozenRow, ...]:
    """The frozen matrix of a PQID-Bench evidence repository: one row per model report, then
    the retrieval-copy baselines that have per-prompt cells (none in v1.0.0).

    `require(rel, purpose)` reads a file (and verifies it, for a loaded release); the default
    reads it as it is.
    """
    root = Path(root)
    require = require or _plain(root)
    audit = root / CELL_AUDIT
    if audit.is_file():
        audited = _audit_rows(require(CELL_AUDIT, "the frozen matrix"))
        reports = list(audited)
    else:
        audited = {}
        reports = _report_paths(root)
    matrix = _run_matrix(root, require)
    rows: list[FrozenRow] = []
    for rel in reports:
        slug = rel.split("/")[-2]
        ident = _identity(root, rel, require)
        provider = ident.get("provider")
        model = ident.get("api_model_id") or ident.get("model")
        entry = matrix.get((str(provider), str(model)), {})
        version: str | None = None
        if (root / rel).is_file():
            version = _report_cells(require(rel, "the frozen matrix")).evaluator_version
        label = entry.get("model_label") or ident.get("model_label")
        if label is None and rel in audited:
            label = next(
                (c["model_label"] for c in audited[rel].values() if c.get("model_label")), None
            )
        rows.append(
            FrozenRow(
                label=slug,
                kind="model",
                provider=str(entry.get("provider") or provider) if (entry or provider) else None,
                model=str(entry.get("api_model_id") or model) if (entry or model) else None,
                evaluations=rel,
                display_name=str(label) if label else slug,
                role=str(entry.get("role") or ident.get("model_role") or "") or None,
                contract=version,
            )
        )
    if not rows:
        raise ReleaseError(
            f"{root / BATCH_DIR}: no frozen harness report found "
            f"(evaluations/<model>/{REPORT_NAME})"
        )
    labels = [r.label for r in rows]
    if len(set(labels)) != len(labels):
        raise ReleaseError(f"{root / BATCH_DIR}: two harness reports share a folder name")
    rows += _reference_rows(root, require)
    return tuple(rows)


def _baseline_records(report: Mapping[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Per-prompt records of each baseline in a copy-baseline report (where it has them)."""
    out: dict[str, list[dict[str, Any]]] = {}
    for result in report.get("results") or []:
        if not isinstance(result, Mapping):
            continue
        records = result.get("records")
        name = result.get("name")
        if (
            isinstance(name, str)
            and isinstance(records, list)
            and records
            and all(
                isinstance(r, Mapping) and isinstance(r.get("execution"), Mapping) for r in records
            )
        ):
            out[name] = [dict(r) for r in records]
    return out


def _reference_rows(root: Path, require: Require) -> list[FrozenRow]:
    rows: list[FrozenRow] = []
    for rel in COPY_BASELINE_REPORTS:
        if not (root / rel).is_file():
            continue

        def read(rel: str = rel) -> Any:
            return _read_json(
                require(rel, "the retrieval-copy baselines"), "the copy-baseline report"
            )

        report = _CACHE.get("baselines", root / rel, read)
        if not isinstance(report, Mapping):
            continue
        for name in _baseline_records(report):
            rows.append(
                FrozenRow(
                    label=name,
                    kind="reference",
                    provider=None,
                    model=None,
                    evaluations=f"{rel}#{name}",
                    display_name=name,
                    role="retrieval-copy baseline",
                    contract=None,
                )
            )
    return rows


# -- cells -----------------------------------------------------------------------------------


def _requirement_pins(lines: Iterable[str]) -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in lines:
        text = line.split("#", 1)[0].strip()
        if "==" in text:
            name, version = (x.strip() for x in text.split("==", 1))
            pins[name.lower().replace("-", "_").replace(".", "_")] = version
    return pins


def frozen_environment(release: Release) -> dict[str, str]:
    """The pinned environment the frozen rows were scored in (python, qiskit, qiskit_aer)."""
    pins = _requirement_pins(release.evaluator_requirements or ())
    python = release.python_version
    root = release.root
    if not pins and (root / PINNED_REQUIREMENTS).is_file():
        pins = _requirement_pins(
            (root / PINNED_REQUIREMENTS).read_text(encoding="utf-8").splitlines()
        )
    if python is None and (root / EVALUATOR_DOCKERFILE).is_file():
        for line in (root / EVALUATOR_DOCKERFILE).read_text(encoding="utf-8").splitlines():
            words = line.split()
            if len(words) >= 2 and words[0].upper() == "FROM" and words[1].startswith("python:"):
                python = words[1].split(":", 1)[1].split("-", 1)[0]
                break
    env: dict[str, str] = {}
    if python:
        env["python"] = python
    for key in ("qiskit", "qiskit_aer"):
        if key in pins:
            env[key] = pins[key]
    return env


def frozen_cells(release: Release, row: FrozenRow) -> list[dict[str, Any]]:
    """One frozen row's cells as canonical evaluation lines, in the report's record order."""
    environment = frozen_environment(release)
    if row.kind == "reference":
        rel, _, name = row.evaluations.partition("#")
        report = _read_json(
            release.require(rel, "the retrieval-copy baselines"), "the copy-baseline report"
        )
        records = _baseline_records(report).get(name)
        if records is None:
            raise ReleaseError(f"{release.root / rel}: baseline {name!r} has no per-prompt records")
        by_row_id = {p.row_id: p.prompt_id for p in release.prompts if p.row_id}
        for record in records:
            if "prompt_id" not in record and record.get("row_id") in by_row_id:
                record["prompt_id"] = by_row_id[record["row_id"]]
        return [
            cell_from_record(
                r,
                contract=release.contract,
                predicate=release.predicate,
                evaluator_version=None,
                environment=environment,
                where=f"{release.root / rel}#{name}",
            )
            for r in records
        ]

    audit: dict[str, dict[str, Any]] | None = None
    if CELL_AUDIT not in release.absent and (release.root / CELL_AUDIT).is_file():
        audit = _audit_rows(release.require(CELL_AUDIT, "the frozen matrix")).get(row.evaluations)
    rel = row.evaluations
    if audit is not None and (rel in release.absent or not (release.root / rel).is_file()):
        return _audit_only_cells(audit, release, environment)
    path = release.require(rel, f"the frozen row {row.label}")
    cells = [{**c, "environment": dict(environment)} for c in _report_cells(path).cells]
    if audit is not None:
        _check_against_audit(cells, audit, str(path))
    return cells


def _audit_only_cells(
    audit: Mapping[str, Mapping[str, Any]], release: Release, environment: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """Cells from the audit alone (its report is absent): the three verdicts, no components."""
    out = []
    for pid, a in audit.items():
        out.append(
            {
                "prompt_id": pid,
                "contract": release.contract,
                "predicate": release.predicate,
                "report_executable": a["report_executable"],
                "report_assembly_admissible": a["report_assembly_admissible"],
                "report_signature_match": a["report_signature_match"],
                **dict.fromkeys(COMPONENTS),
                "execution_error_type": None,
                "selected_circuit_name": a["selected_circuit_name"],
                "execution_ok": a["report_executable"],
                "circuit_found": a["report_executable"],
                "structural_match": a["report_signature_match"],
                "width_match": None,
                "gate_counts_match": None,
                "qasm3_ok": a["report_assembly_admissible"],
                "equivalent": None,
                "equivalence_reason": NOT_IN_CONTRACT,
                "error": None,
                "duration_ms": None,
                "category": None,
                "detail_source": "cell_audit",
                "evaluator_version": release.evaluator_version,
                "environment": dict(environment),
                "frozen": True,
            }
        )
    return out


def _check_against_audit(
    cells: list[dict[str, Any]], audit: Mapping[str, Mapping[str, Any]], where: str
) -> None:
    differ = []
    for cell in cells:
        a = audit.get(cell["prompt_id"])
        if a is None:
            differ.append(cell["prompt_id"])
            continue
        executable = cell["report_executable"]
        if (
            a["report_executable"] != executable
            or a["report_assembly_admissible"]
            != (executable and cell["report_assembly_admissible"])
            or a["report_signature_match"] != cell["report_signature_match"]
        ):
            differ.append(cell["prompt_id"])
    if differ or len(audit) != len(cells):
        raise ReleaseError(
            f"{where}: the cell audit ({CELL_AUDIT}) and this report disagree on "
            f"{max(len(differ), abs(len(audit) - len(cells)))} cells"
            + (f" (first: {differ[0]})" if differ else "")
        )


# -- the identifiability subset --------------------------------------------------------------


def identifiability_exclusions(release: Release) -> tuple[str, ...] | None:
    """The prompts the study leaves out of its 150-prompt identifiability sensitivity table;
    None where the release does not have the analysis."""
    if IDENTIFIABILITY in release.absent or not (release.root / IDENTIFIABILITY).is_file():
        return None
    data = _read_json(
        release.require(IDENTIFIABILITY, "the identifiability table"),
        "the identifiability analysis",
    )
    excluded = data.get("exceptions") if isinstance(data, dict) else None
    if not isinstance(excluded, list):
        raise ReleaseError(f"{release.root / IDENTIFIABILITY}: no list of exceptions")
    ids = [e.get("prompt_id") for e in excluded if isinstance(e, dict)]
    if not ids or not all(isinstance(i, str) for i in ids):
        raise ReleaseError(f"{release.root / IDENTIFIABILITY}: an exception without a prompt_id")
    return tuple(str(i) for i in ids)


__all__ = [
    "BATCH_DIR",
    "CELL_AUDIT",
    "IDENTIFIABILITY",
    "PROMPTS",
    "REPORT_NAME",
    "cell_from_record",
    "frozen_cells",
    "frozen_environment",
    "frozen_rows",
    "identifiability_exclusions",
]
