"""The canonical evaluation record: its categories, their precedence, and its builder."""

from __future__ import annotations

from typing import Any

from evaluator import __version__
from evaluator.contracts import CONTRACT_PROJECT

__all__ = [
    "CATEGORIES",
    "EXTRACTION_METHODS",
    "REQUIRED_FIELDS",
    "categorize",
    "make_evaluation",
    "short_error",
]

# Failure categories, earliest first: an evaluation gets the first one that applies.
CATEGORIES: tuple[str, ...] = (
    "no_code",
    "syntax_error",
    "timeout",
    "execution_error",
    "no_circuit",
    "width_mismatch",
    "clbit_mismatch",  # only under a contract that requires the classical width
    "gate_type_mismatch",
    "gate_count_mismatch",
    "ok",
)

EXTRACTION_METHODS: tuple[str, ...] = ("fenced", "raw", "none", "provided")

# Fields every canonical evaluation line carries; consumers may rely on them being present.
REQUIRED_FIELDS: tuple[str, ...] = (
    "prompt_id",
    "category",
    "execution_ok",
    "circuit_found",
    "structural_match",
    "width_match",
    "gate_types_match",
    "gate_counts_match",
    "qasm3_ok",
    "equivalent",
    "equivalence_reason",
    "error",
    "duration_ms",
)

_ERROR_LIMIT = 300
EXCERPT_LIMIT = 400


def short_error(kind: str, message: str, limit: int = _ERROR_LIMIT) -> str:
    """Format an error as "Kind: message", on one line and capped."""
    text = " ".join(f"{kind}: {message}".split()) if message else kind
    return text if len(text) <= limit else text[: limit - 1] + "…"


def categorize(
    *,
    has_code: bool,
    compiled: bool,
    timed_out: bool,
    execution_ok: bool,
    circuit_found: bool,
    width_match: bool,
    gate_types_match: bool,
    gate_counts_match: bool,
    clbits_match: bool = True,
) -> str:
    """Pick the first category that applies, in precedence order."""
    if not has_code:
        return "no_code"
    if not compiled:
        return "syntax_error"
    if timed_out:
        return "timeout"
    if not execution_ok:
        return "execution_error"
    if not circuit_found:
        return "no_circuit"
    if not width_match:
        return "width_mismatch"
    if not clbits_match:
        return "clbit_mismatch"
    if not gate_types_match:
        return "gate_type_mismatch"
    if not gate_counts_match:
        return "gate_count_mismatch"
    return "ok"


def make_evaluation(
    *,
    prompt_id: str,
    category: str,
    execution_ok: bool,
    circuit_found: bool,
    width_match: bool = False,
    gate_types_match: bool = False,
    gate_counts_match: bool = False,
    qasm3_ok: bool = False,
    qasm3_error: str | None = None,
    equivalent: bool | None = None,
    equivalence_reason: str = "not checked: no circuit",
    error: str | None = None,
    duration_ms: int = 0,
    extraction: dict[str, Any] | None = None,
    circuit_source: str | None = None,
    structure: dict[str, Any] | None = None,
    stdout_excerpt: str = "",
    stdout_truncated: bool = False,
    stderr_excerpt: str = "",
    stderr_truncated: bool = False,
    stray_processes_killed: int = 0,
    environment: dict[str, Any] | None = None,
    structural_match: bool | None = None,
    contract: str = CONTRACT_PROJECT,
    predicate: str | None = None,
    contract_fields: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Build one canonical evaluation line, with every required field present.

    `structural_match` defaults to the project's rule (width, operation types and counts);
    a contract with another predicate passes its own, and its own fields in `contract_fields`.
    """
    if category not in CATEGORIES:
        raise ValueError(f"unknown category {category!r}")
    if structural_match is None:
        structural_match = width_match and gate_types_match and gate_counts_match
    evaluation = {
        "prompt_id": prompt_id,
        "category": category,
        "execution_ok": execution_ok,
        "circuit_found": circuit_found,
        "structural_match": structural_match,
        "width_match": width_match,
        "gate_types_match": gate_types_match,
        "gate_counts_match": gate_counts_match,
        "qasm3_ok": qasm3_ok,
        "qasm3_error": qasm3_error,
        "equivalent": equivalent,
        "equivalence_reason": equivalence_reason,
        "error": error,
        "duration_ms": duration_ms,
        "extraction": extraction or {"method": "none", "prose_removed": False, "fences": 0},
        "circuit_source": circuit_source,
        "structure": structure,
        "stdout_excerpt": stdout_excerpt[:EXCERPT_LIMIT],
        "stdout_truncated": stdout_truncated or len(stdout_excerpt) > EXCERPT_LIMIT,
        "stderr_excerpt": stderr_excerpt[-EXCERPT_LIMIT:],
        "stderr_truncated": stderr_truncated or len(stderr_excerpt) > EXCERPT_LIMIT,
        "stray_processes_killed": stray_processes_killed,
        "evaluator_version": __version__,
        "environment": environment or {},
        "contract": contract,
        "predicate": predicate,
    }
    evaluation.update(contract_fields or {})
    return evaluation
