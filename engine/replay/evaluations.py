"""Canonical evaluations: reading them, summarising them, and the four renderings of a summary.

Shared by replay (the candidate summary) and compare (one summary per row). The text, Markdown
and CSV renderings use the standard library only.

Categories. The evaluator assigns one of the model categories below, in this order of
precedence (DESIGN.md). Three more categories are infrastructure failures, never the model's:

- `no_response`: the responses file has no usable response for the prompt (a terminal
  provider error, or a line with neither content nor generated code); nothing was run.
- `not_evaluated`: the evaluator could not score the response (its run exceeded the
  wall-clock limit, or it stopped before reaching the prompt).
- `missing`: a selected prompt has no evaluation line at all (seen by compare only).

Rates are reported twice: over all selected prompts (an infrastructure failure counts as a
failure) and over answered prompts (selected minus infrastructure failures).
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from engine.errors import InputError
from engine.release.model import CONTRACT_PQID_BENCH
from engine.rundir.storage import iter_jsonl_objects

MODEL_CATEGORIES: tuple[str, ...] = (
    "no_code",
    "syntax_error",
    "timeout",
    "execution_error",
    "no_circuit",
    "width_mismatch",
    "clbit_mismatch",
    "gate_type_mismatch",
    "gate_count_mismatch",
    "ok",
)
INFRA_CATEGORIES: tuple[str, ...] = ("no_response", "not_evaluated", "missing")
CATEGORIES: tuple[str, ...] = MODEL_CATEGORIES + INFRA_CATEGORIES

# (key in the summary, label, field of the canonical evaluation that must be true)
Metric = tuple[str, str, str]
METRICS: tuple[Metric, ...] = (
    ("execution", "execution", "execution_ok"),
    ("structural_match", "structural match", "structural_match"),
    ("qasm3_export", "QASM 3 export", "qasm3_ok"),
    ("equivalence", "equivalence", "equivalent"),
)
# The PQID-Bench contract's verdicts (pqid-bench-evaluator-1.1.0-safe-builtins): execution is
# "ran and defined a circuit", assembly is QASM 3 export, signature is the reference-signature
# predicate (all four components at once).
PQID_BENCH_METRICS: tuple[Metric, ...] = (
    ("execution", "execution", "report_executable"),
    ("assembly", "assembly", "report_assembly_admissible"),
    ("signature", "signature", "report_signature_match"),
    ("num_qubits", "qubits", "num_qubits_match"),
    ("num_clbits", "clbits", "num_clbits_match"),
    ("gate_count", "gate count", "gate_count_match"),
    ("gate_types", "gate types", "gate_types_match"),
)
# (key, label, minuend metric, subtrahend metric): differences of rates in percentage points.
Gap = tuple[str, str, str, str]
PQID_BENCH_GAPS: tuple[Gap, ...] = (
    ("execution_structure_gap", "Exec-Struct gap", "execution", "signature"),
    ("assembly_structure_gap", "Asm-Struct gap", "assembly", "signature"),
)
SUMMARY_FORMAT = "pqid-candidate-summary/1"


def metrics_for(contract: str | None) -> tuple[Metric, ...]:
    """The metrics a scoring contract reports (the project's own for any other contract)."""
    return PQID_BENCH_METRICS if contract == CONTRACT_PQID_BENCH else METRICS


def gaps_for(contract: str | None) -> tuple[Gap, ...]:
    return PQID_BENCH_GAPS if contract == CONTRACT_PQID_BENCH else ()


def contract_of(evaluations: Iterable[Mapping[str, Any]]) -> str | None:
    """The one contract every scored evaluation names (None: the project's, or mixed)."""
    found = {ev.get("contract") for ev in evaluations if not is_infrastructure(ev)}
    return found.pop() if len(found) == 1 else None


_BOOL_FIELDS = (
    "execution_ok",
    "circuit_found",
    "structural_match",
    "width_match",
    "gate_types_match",
    "gate_counts_match",
    "qasm3_ok",
)


def is_infrastructure(evaluation: Mapping[str, Any]) -> bool:
    return evaluation.get("category") in INFRA_CATEGORIES


def infrastructure_evaluation(
    prompt_id: str, category: str, error: str, **extra: Any
) -> dict[str, Any]:
    """The canonical evaluation of a prompt that was never scored (not the model's failure)."""
    if category not in INFRA_CATEGORIES:
        raise ValueError(f"{category!r} is not an infrastructure category")
    evaluation: dict[str, Any] = {"prompt_id": prompt_id, "category": category}
    evaluation.update({name: False for name in _BOOL_FIELDS})
    evaluation.update(
        {
            "equivalent": None,
            "equivalence_reason": "not checked: not evaluated",
            "error": error,
            "duration_ms": None,
            "infrastructure_failure": True,
        }
    )
    evaluation.update(extra)
    return evaluation


def load_evaluations(path: Path, *, known_ids: Iterable[str] | None = None) -> list[dict[str, Any]]:
    """Read a canonical evaluations file; any unusable line refuses the whole file."""
    lines = iter_jsonl_objects(path, InputError, missing="file does not exist", brief=True)
    known = set(known_ids) if known_ids is not None else None
    seen: dict[str, int] = {}
    out: list[dict[str, Any]] = []
    for number, obj in lines:
        where = f"{path}:{number}"
        pid = obj.get("prompt_id")
        if not isinstance(pid, str) or not pid:
            raise InputError(f"{where}: no prompt_id")
        if known is not None and pid not in known:
            raise InputError(f"{where}: prompt {pid!r} is not in the release")
        if pid in seen:
            raise InputError(f"{where}: prompt {pid!r} repeats line {seen[pid]}")
        if obj.get("category") not in CATEGORIES:
            raise InputError(f"{where}: unknown category {obj.get('category')!r}")
        seen[pid] = number
        out.append(obj)
    return out


# -- numbers -------------------------------------------------------------------------------------


def rate(count: int, denominator: int) -> dict[str, Any]:
    """A count with its denominator; `rate` is None when nothing was counted."""
    return {
        "count": count,
        "denominator": denominator,
        "rate": round(count / denominator, 6) if denominator else None,
    }


def succeeded(evaluation: Mapping[str, Any] | None, field: str) -> bool:
    return evaluation is not None and evaluation.get(field) is True


def qiskit_version(environment: Mapping[str, Any] | None) -> str | None:
    """The Qiskit version an environment record names, wherever the evaluator put it."""
    if not isinstance(environment, Mapping):
        return None
    for holder in (environment, environment.get("packages"), environment.get("versions")):
        if isinstance(holder, Mapping) and isinstance(holder.get("qiskit"), str):
            return str(holder["qiskit"])
    return None


def environments(evaluations: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The distinct (evaluator version, environment) pairs of scored evaluations."""
    found: list[dict[str, Any]] = []
    for ev in evaluations:
        if is_infrastructure(ev):
            continue
        env = ev.get("environment") if isinstance(ev.get("environment"), dict) else {}
        item = {"evaluator_version": ev.get("evaluator_version"), "environment": env}
        if item not in found:
            found.append(item)
    return found


def gap_pp(
    rates: Mapping[str, Any], minuend: str, subtrahend: str, scope: str = "over_selected"
) -> float | None:
    """`minuend` rate minus `subtrahend` rate in percentage points (None without a rate)."""
    a, b = rates[minuend][scope], rates[subtrahend][scope]
    if a["rate"] is None or b["rate"] is None:
        return None
    return round(100 * (int(a["count"]) - int(b["count"])) / int(a["denominator"]), 4)


def summarize(
    evaluations: Sequence[Mapping[str, Any]],
    selected: Sequence[str] | None = None,
    *,
    metrics: Sequence[Metric] | None = None,
    gaps: Sequence[Gap] | None = None,
) -> dict[str, Any]:
    """Counts and rates over the selected prompts (default: every evaluation given).

    A selected prompt without an evaluation counts as the infrastructure category `missing`.
    `metrics` defaults to those of the contract every evaluation names (`metrics_for`).
    """
    by_id = {str(ev["prompt_id"]): ev for ev in evaluations}
    ids = list(selected) if selected is not None else list(by_id)
    chosen = [by_id.get(pid) for pid in ids]
    if metrics is None:
        contract = contract_of(ev for ev in chosen if ev is not None)
        metrics = metrics_for(contract)
        gaps = gaps_for(contract) if gaps is None else gaps
    categories = Counter(str(ev.get("category")) if ev is not None else "missing" for ev in chosen)
    infra = sum(categories[c] for c in INFRA_CATEGORIES)
    n = len(ids)
    answered = [ev for ev in chosen if ev is not None and not is_infrastructure(ev)]
    rates: dict[str, Any] = {}
    for key, _label, field in metrics:
        hits = sum(1 for ev in answered if succeeded(ev, field))
        rates[key] = {"over_selected": rate(hits, n), "over_answered": rate(hits, len(answered))}
    if "equivalence" in rates:
        checked = sum(1 for ev in answered if ev.get("equivalent") is not None)
        rates["equivalence"]["checked"] = checked
        rates["equivalence"]["not_checked"] = len(answered) - checked
    envs = environments(answered)
    summary: dict[str, Any] = {
        "selected": n,
        "answered": len(answered),
        "infrastructure_failures": {
            **rate(infra, n),
            "by_category": {c: categories[c] for c in INFRA_CATEGORIES if categories[c]},
        },
        "rates": rates,
        "categories": {c: categories.get(c, 0) for c in CATEGORIES},
        "evaluator_version": envs[0]["evaluator_version"] if len(envs) == 1 else None,
        "environment": envs[0]["environment"] if len(envs) == 1 else None,
        "environments": envs if len(envs) > 1 else None,
    }
    if tuple(metrics) != METRICS:
        summary["metrics"] = [{"key": k, "label": lab, "field": f} for k, lab, f in metrics]
    if gaps:
        summary["gaps_pp"] = {
            key: {scope: gap_pp(rates, a, b, scope) for scope in ("over_selected", "over_answered")}
            for key, _label, a, b in gaps
        }
    unknown = sorted(set(categories) - set(CATEGORIES))
    if unknown:
        summary["unknown_categories"] = {c: categories[c] for c in unknown}
    if any(ev is not None and "finish_reason" in ev for ev in chosen):
        summary["finish_reasons"] = _finish_reasons(chosen, metrics)
    return summary


def summary_metrics(summary: Mapping[str, Any]) -> tuple[Metric, ...]:
    """The metrics a summary holds, in order (the project's unless it names others)."""
    named = summary.get("metrics")
    if isinstance(named, list):
        return tuple((str(m["key"]), str(m["label"]), str(m["field"])) for m in named)
    return METRICS


def _finish_reasons(
    chosen: Sequence[Mapping[str, Any] | None], metrics: Sequence[Metric]
) -> dict[str, Any]:
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for ev in chosen:
        if ev is None:
            continue
        reason = ev.get("finish_reason")
        groups.setdefault(str(reason) if reason is not None else "(none)", []).append(ev)
    fields = {key: field for key, _label, field in metrics}
    execution = fields.get("execution", "execution_ok")
    structure = fields.get("structural_match") or fields.get("signature") or "structural_match"
    return {
        reason: {
            "count": len(evs),
            "execution": sum(1 for ev in evs if succeeded(ev, execution)),
            "structural_match": sum(1 for ev in evs if succeeded(ev, structure)),
        }
        for reason, evs in sorted(groups.items())
    }


# -- paired comparison -----------------------------------------------------------------------------


def mcnemar_exact_p(b: int, c: int) -> float:
    """Two-sided exact McNemar test on the discordant pairs (binomial, p = 1/2)."""
    n = b + c
    if n == 0:
        return 1.0
    k = min(b, c)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2**n
    return min(1.0, 2.0 * float(tail))


def paired(
    candidate: Mapping[str, Mapping[str, Any]],
    row: Mapping[str, Mapping[str, Any]],
    ids: Sequence[str],
    field: str,
) -> dict[str, Any]:
    """Prompt by prompt: where the candidate succeeds and the row fails, and vice versa."""
    only_candidate: list[str] = []
    only_row: list[str] = []
    both = neither = 0
    for pid in ids:
        a, b = succeeded(candidate.get(pid), field), succeeded(row.get(pid), field)
        if a and b:
            both += 1
        elif a:
            only_candidate.append(pid)
        elif b:
            only_row.append(pid)
        else:
            neither += 1
    n = len(ids)
    return {
        "n": n,
        "both": both,
        "neither": neither,
        "candidate_only": len(only_candidate),
        "row_only": len(only_row),
        "difference": round((len(only_candidate) - len(only_row)) / n, 6) if n else None,
        "mcnemar_exact_p": round(mcnemar_exact_p(len(only_candidate), len(only_row)), 6),
        "candidate_only_ids": only_candidate,
        "row_only_ids": only_row,
    }


# -- renderings ------------------------------------------------------------------------------------


def fmt_rate(r: Mapping[str, Any]) -> str:
    """`140/154 90.9%`, or `0/0 -`."""
    value = r.get("rate")
    shown = "-" if value is None else f"{100 * value:.1f}%"
    return f"{r['count']}/{r['denominator']} {shown}"


def fact_lines(facts: Sequence[tuple[str, str]], notes: Iterable[str] = ()) -> list[str]:
    """Name-value lines with the values aligned, then a `note` line for each note."""
    width = max(len(k) for k, _ in facts)
    return [f"{k.ljust(width)}  {v}" for k, v in facts] + [
        f"{'note'.ljust(width)}  {n}" for n in notes
    ]


def table(
    headers: Sequence[str], rows: Sequence[Sequence[str]], *, right: Sequence[int] = ()
) -> list[str]:
    """A plain text table with aligned columns."""
    widths = [max(len(str(x)) for x in col) for col in zip(headers, *rows, strict=False)]
    out = []
    for i, line in enumerate([list(headers), *[list(r) for r in rows]]):
        cells = [
            str(c).rjust(w) if j in right else str(c).ljust(w)
            for j, (c, w) in enumerate(zip(line, widths, strict=False))
        ]
        out.append("  ".join(cells).rstrip())
        if i == 0:
            out.append("  ".join("-" * w for w in widths))
    return out


def md_table(
    headers: Sequence[str], rows: Sequence[Sequence[str]], *, right: Sequence[int] = ()
) -> list[str]:
    def esc(text: str) -> str:
        return str(text).replace("|", "\\|").replace("\n", " ")

    align = ["---:" if i in right else "---" for i in range(len(headers))]
    return [
        "| " + " | ".join(esc(h) for h in headers) + " |",
        "| " + " | ".join(align) + " |",
        *["| " + " | ".join(esc(c) for c in row) + " |" for row in rows],
    ]


def _env_line(summary: Mapping[str, Any]) -> str:
    if summary.get("environments"):
        return "several environments (see the JSON summary)"
    env = summary.get("environment") or {}
    parts = [
        f"evaluator {summary.get('evaluator_version') or 'unknown'}",
        f"qiskit {qiskit_version(env) or 'unknown'}",
    ]
    for key in ("python", "qiskit_aer", "numpy"):
        value = env.get(key) if isinstance(env, dict) else None
        if isinstance(value, str):
            parts.append(f"{key} {value}")
    return ", ".join(parts)


def _metric_rows(summary: Mapping[str, Any]) -> list[list[str]]:
    rows = []
    for key, label, _field in summary_metrics(summary):
        r = summary["rates"][key]
        shown = label
        if key == "equivalence":
            shown += f" (not checked: {r['not_checked']})"
        rows.append([shown, fmt_rate(r["over_selected"]), fmt_rate(r["over_answered"])])
    for key, value in (summary.get("gaps_pp") or {}).items():
        rows.append(
            [
                key.replace("_", " ") + " (pp)",
                fmt_pp(value["over_selected"]),
                fmt_pp(value["over_answered"]),
            ]
        )
    return rows


def fmt_pp(value: float | None) -> str:
    """A difference in percentage points: `+38.56 pp`, or `-`."""
    return "-" if value is None else f"{value:+.2f} pp"


def _category_rows(summary: Mapping[str, Any]) -> list[list[str]]:
    n = summary["selected"]
    rows = []
    for c in CATEGORIES:
        count = summary["categories"].get(c, 0)
        if c in INFRA_CATEGORIES and not count:
            continue
        kind = "infrastructure" if c in INFRA_CATEGORIES else ""
        rows.append([c, str(count), f"{100 * count / n:.1f}%" if n else "-", kind])
    return rows


def _header_facts(summary: Mapping[str, Any]) -> list[tuple[str, str]]:
    facts = []
    release = summary.get("release")
    if release:
        facts.append(
            (
                "release",
                f"{release['name']} {release['version']} (sha256 "
                f"{release['digest'][:16]}, modified: "
                f"{'yes' if release.get('modified') else 'no'})",
            )
        )
    if summary.get("responses"):
        facts.append(("responses", str(summary["responses"])))
    facts.append(("environment", _env_line(summary)))
    infra = summary["infrastructure_failures"]
    by_cat = ", ".join(f"{v} {k}" for k, v in infra["by_category"].items())
    facts.append(
        (
            "prompts",
            f"{summary['selected']} selected, {summary['answered']} answered, "
            f"{infra['count']} infrastructure failures" + (f" ({by_cat})" if by_cat else ""),
        )
    )
    return facts


def render_summary_text(summary: Mapping[str, Any]) -> str:
    lines = ["pqid-tui candidate summary", "", *fact_lines(_header_facts(summary))]
    lines += ["", *table(["metric", "over selected", "over answered"], _metric_rows(summary))]
    lines += [
        "",
        "failure taxonomy (in order of precedence)",
        *table(["category", "count", "share", ""], _category_rows(summary), right=(1, 2)),
    ]
    if summary.get("finish_reasons"):
        rows = [
            [k, str(v["count"]), str(v["execution"]), str(v["structural_match"])]
            for k, v in summary["finish_reasons"].items()
        ]
        lines += [
            "",
            "finish reasons",
            *table(
                ["finish reason", "prompts", "executed", "structural match"], rows, right=(1, 2, 3)
            ),
        ]
    return "\n".join(lines) + "\n"


def render_summary_markdown(summary: Mapping[str, Any]) -> str:
    lines = ["# Candidate summary", ""]
    lines += [f"- **{k}**: {v}" for k, v in _header_facts(summary)]
    lines += [
        "",
        "## Rates",
        "",
        *md_table(
            ["metric", "over selected", "over answered"], _metric_rows(summary), right=(1, 2)
        ),
    ]
    lines += [
        "",
        "## Failure taxonomy",
        "",
        *md_table(["category", "count", "share", ""], _category_rows(summary), right=(1, 2)),
    ]
    if summary.get("finish_reasons"):
        rows = [
            [k, str(v["count"]), str(v["execution"]), str(v["structural_match"])]
            for k, v in summary["finish_reasons"].items()
        ]
        lines += [
            "",
            "## Finish reasons",
            "",
            *md_table(
                ["finish reason", "prompts", "executed", "structural match"], rows, right=(1, 2, 3)
            ),
        ]
    return "\n".join(lines) + "\n"


CSV_COLUMNS = ("section", "name", "scope", "count", "denominator", "rate")


def summary_csv_rows(summary: Mapping[str, Any]) -> list[tuple[Any, ...]]:
    """Tidy rows: one observation per row, numbers only (the JSON holds the context)."""
    rows: list[tuple[Any, ...]] = []
    for key, _label, _field in summary_metrics(summary):
        for scope in ("over_selected", "over_answered"):
            r = summary["rates"][key][scope]
            rows.append(
                (
                    "rate",
                    key,
                    scope.removeprefix("over_"),
                    r["count"],
                    r["denominator"],
                    "" if r["rate"] is None else r["rate"],
                )
            )
    for key, value in (summary.get("gaps_pp") or {}).items():
        for scope in ("over_selected", "over_answered"):
            rows.append(
                (
                    "gap_pp",
                    key,
                    scope.removeprefix("over_"),
                    "",
                    "",
                    "" if value[scope] is None else value[scope],
                )
            )
    n = summary["selected"]
    for c in CATEGORIES:
        count = summary["categories"].get(c, 0)
        rows.append(("category", c, "selected", count, n, round(count / n, 6) if n else ""))
    infra = summary["infrastructure_failures"]
    rows.append(
        (
            "infrastructure",
            "all",
            "selected",
            infra["count"],
            n,
            "" if infra["rate"] is None else infra["rate"],
        )
    )
    for reason, v in (summary.get("finish_reasons") or {}).items():
        rows.append(
            (
                "finish_reason",
                reason,
                "selected",
                v["count"],
                n,
                round(v["count"] / n, 6) if n else "",
            )
        )
    return rows


def to_csv(columns: Sequence[str], rows: Iterable[Sequence[Any]]) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(columns)
    writer.writerows(rows)
    return buffer.getvalue()


def render_summary_csv(summary: Mapping[str, Any]) -> str:
    return to_csv(CSV_COLUMNS, summary_csv_rows(summary))


def render_summary_json(summary: Mapping[str, Any]) -> str:
    return json.dumps(summary, indent=2, sort_keys=True) + "\n"


def render_summary(summary: Mapping[str, Any], fmt: str) -> str:
    """The candidate summary as `json`, `text`, `markdown` or `csv`."""
    renderers = {
        "json": render_summary_json,
        "text": render_summary_text,
        "txt": render_summary_text,
        "markdown": render_summary_markdown,
        "md": render_summary_markdown,
        "csv": render_summary_csv,
    }
    try:
        return renderers[fmt](summary)
    except KeyError:
        raise ValueError(f"unknown format {fmt!r}") from None


def render_as(
    data: Mapping[str, Any], fmt: str, renderers: Mapping[str, Callable[[Mapping[str, Any]], str]]
) -> str:
    """One result in one of the batch formats: JSON, or the named text renderer."""
    if fmt == "json":
        return json.dumps(data, indent=2, sort_keys=True) + "\n"
    renderer = renderers.get(fmt)
    if renderer is None:
        raise ValueError(f"unknown format {fmt!r}; expected one of json, {', '.join(renderers)}")
    return renderer(data)
