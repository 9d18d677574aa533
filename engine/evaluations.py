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
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from engine.errors import InputError

MODEL_CATEGORIES: tuple[str, ...] = (
    "no_code", "syntax_error", "timeout", "execution_error", "no_circuit",
    "width_mismatch", "gate_type_mismatch", "gate_count_mismatch", "ok",
)
INFRA_CATEGORIES: tuple[str, ...] = ("no_response", "not_evaluated", "missing")
CATEGORIES: tuple[str, ...] = MODEL_CATEGORIES + INFRA_CATEGORIES

# (key in the summary, label, field of the canonical evaluation that must be true)
METRICS: tuple[tuple[str, str, str], ...] = (
    ("execution", "execution", "execution_ok"),
    ("structural_match", "structural match", "structural_match"),
    ("qasm3_export", "QASM 3 export", "qasm3_ok"),
    ("equivalence", "equivalence", "equivalent"),
)
SUMMARY_FORMAT = "pqid-candidate-summary/1"

_BOOL_FIELDS = ("execution_ok", "circuit_found", "structural_match", "width_match",
                "gate_types_match", "gate_counts_match", "qasm3_ok")


def is_infrastructure(evaluation: Mapping[str, Any]) -> bool:
    return evaluation.get("category") in INFRA_CATEGORIES


def infrastructure_evaluation(prompt_id: str, category: str, error: str,
                              **extra: Any) -> dict[str, Any]:
    """The canonical evaluation of a prompt that was never scored (not the model's failure)."""
    if category not in INFRA_CATEGORIES:
        raise ValueError(f"{category!r} is not an infrastructure category")
    evaluation: dict[str, Any] = {"prompt_id": prompt_id, "category": category}
    evaluation.update({name: False for name in _BOOL_FIELDS})
    evaluation.update({"equivalent": None, "equivalence_reason": "not checked: not evaluated",
                       "error": error, "duration_ms": None, "infrastructure_failure": True})
    evaluation.update(extra)
    return evaluation


def load_evaluations(path: Path, *, known_ids: Iterable[str] | None = None
                     ) -> list[dict[str, Any]]:
    """Read a canonical evaluations file; any unusable line refuses the whole file."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise InputError(f"{path}: file does not exist") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror})") from None
    known = set(known_ids) if known_ids is not None else None
    seen: dict[str, int] = {}
    out: list[dict[str, Any]] = []
    for number, line in enumerate(raw.split(b"\n"), start=1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(f"{where}: not a JSON line ({exc.msg})") from None
        except UnicodeDecodeError:
            raise InputError(f"{where}: not a JSON line (not UTF-8)") from None
        if not isinstance(obj, dict):
            raise InputError(f"{where}: expected a JSON object")
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
    return {"count": count, "denominator": denominator,
            "rate": round(count / denominator, 6) if denominator else None}


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


def summarize(evaluations: Sequence[Mapping[str, Any]],
              selected: Sequence[str] | None = None) -> dict[str, Any]:
    """Counts and rates over the selected prompts (default: every evaluation given).

    A selected prompt without an evaluation counts as the infrastructure category `missing`.
    """
    by_id = {str(ev["prompt_id"]): ev for ev in evaluations}
    ids = list(selected) if selected is not None else list(by_id)
    chosen = [by_id.get(pid) for pid in ids]
    categories = Counter(
        str(ev.get("category")) if ev is not None else "missing" for ev in chosen)
    infra = sum(categories[c] for c in INFRA_CATEGORIES)
    n = len(ids)
    answered = [ev for ev in chosen if ev is not None and not is_infrastructure(ev)]
    rates: dict[str, Any] = {}
    for key, _label, field in METRICS:
        hits = sum(1 for ev in answered if succeeded(ev, field))
        rates[key] = {"over_selected": rate(hits, n), "over_answered": rate(hits, len(answered))}
    checked = sum(1 for ev in answered if ev.get("equivalent") is not None)
    rates["equivalence"]["checked"] = checked
    rates["equivalence"]["not_checked"] = len(answered) - checked
    envs = environments(answered)
    summary: dict[str, Any] = {
        "selected": n,
        "answered": len(answered),
        "infrastructure_failures": {
            **rate(infra, n),
            "by_category": {c: categories[c] for c in INFRA_CATEGORIES if categories[c]}},
        "rates": rates,
        "categories": {c: categories.get(c, 0) for c in CATEGORIES},
        "evaluator_version": envs[0]["evaluator_version"] if len(envs) == 1 else None,
        "environment": envs[0]["environment"] if len(envs) == 1 else None,
        "environments": envs if len(envs) > 1 else None,
    }
    unknown = sorted(set(categories) - set(CATEGORIES))
    if unknown:
        summary["unknown_categories"] = {c: categories[c] for c in unknown}
    if any(ev is not None and "finish_reason" in ev for ev in chosen):
        summary["finish_reasons"] = _finish_reasons(chosen)
    return summary


def _finish_reasons(chosen: Sequence[Mapping[str, Any] | None]) -> dict[str, Any]:
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for ev in chosen:
        if ev is None:
            continue
        reason = ev.get("finish_reason")
        groups.setdefault(str(reason) if reason is not None else "(none)", []).append(ev)
    return {reason: {"count": len(evs),
                     "execution": sum(1 for ev in evs if succeeded(ev, "execution_ok")),
                     "structural_match": sum(
                         1 for ev in evs if succeeded(ev, "structural_match"))}
            for reason, evs in sorted(groups.items())}


# -- paired comparison -----------------------------------------------------------------------------


def mcnemar_exact_p(b: int, c: int) -> float:
    """Two-sided exact McNemar test on the discordant pairs (binomial, p = 1/2)."""
    n = b + c
    if n == 0:
        return 1.0
    k = min(b, c)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n
    return min(1.0, 2.0 * float(tail))


def paired(candidate: Mapping[str, Mapping[str, Any]], row: Mapping[str, Mapping[str, Any]],
           ids: Sequence[str], field: str) -> dict[str, Any]:
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
        "n": n, "both": both, "neither": neither,
        "candidate_only": len(only_candidate), "row_only": len(only_row),
        "difference": round((len(only_candidate) - len(only_row)) / n, 6) if n else None,
        "mcnemar_exact_p": round(mcnemar_exact_p(len(only_candidate), len(only_row)), 6),
        "candidate_only_ids": only_candidate, "row_only_ids": only_row,
    }


# -- renderings ------------------------------------------------------------------------------------


def fmt_rate(r: Mapping[str, Any]) -> str:
    """`140/154 90.9%`, or `0/0 -`."""
    value = r.get("rate")
    shown = "-" if value is None else f"{100 * value:.1f}%"
    return f"{r['count']}/{r['denominator']} {shown}"


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], *,
          right: Sequence[int] = ()) -> list[str]:
    """A plain text table with aligned columns."""
    widths = [max(len(str(x)) for x in col) for col in zip(headers, *rows, strict=False)]
    out = []
    for i, line in enumerate([list(headers), *[list(r) for r in rows]]):
        cells = [str(c).rjust(w) if j in right else str(c).ljust(w)
                 for j, (c, w) in enumerate(zip(line, widths, strict=False))]
        out.append("  ".join(cells).rstrip())
        if i == 0:
            out.append("  ".join("-" * w for w in widths))
    return out


def md_table(headers: Sequence[str], rows: Sequence[Sequence[str]], *,
             right: Sequence[int] = ()) -> list[str]:
    def esc(text: str) -> str:
        return str(text).replace("|", "\\|").replace("\n", " ")

    align = ["---:" if i in right else "---" for i in range(len(headers))]
    return ["| " + " | ".join(esc(h) for h in headers) + " |",
            "| " + " | ".join(align) + " |",
            *["| " + " | ".join(esc(c) for c in row) + " |" for row in rows]]


def _env_line(summary: Mapping[str, Any]) -> str:
    if summary.get("environments"):
        return "several environments (see the JSON summary)"
    env = summary.get("environment") or {}
    parts = [f"evaluator {summary.get('evaluator_version') or 'unknown'}",
             f"qiskit {qiskit_version(env) or 'unknown'}"]
    for key in ("python", "qiskit_aer", "numpy"):
        value = env.get(key) if isinstance(env, dict) else None
        if isinstance(value, str):
            parts.append(f"{key} {value}")
    return ", ".join(parts)


def _metric_rows(summary: Mapping[str, Any]) -> list[list[str]]:
    rows = []
    for key, label, _field in METRICS:
        r = summary["rates"][key]
        rows.append([label, fmt_rate(r["over_selected"]), fmt_rate(r["over_answered"])])
    eq = summary["rates"]["equivalence"]
    rows[-1][0] += f" (not checked: {eq['not_checked']})"
    return rows


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
        facts.append(("release", f"{release['name']} {release['version']} (sha256 "
                      f"{release['digest'][:16]}, modified: "
                      f"{'yes' if release.get('modified') else 'no'})"))
    if summary.get("responses"):
        facts.append(("responses", str(summary["responses"])))
    facts.append(("environment", _env_line(summary)))
    infra = summary["infrastructure_failures"]
    by_cat = ", ".join(f"{v} {k}" for k, v in infra["by_category"].items())
    facts.append(("prompts", f"{summary['selected']} selected, {summary['answered']} answered, "
                  f"{infra['count']} infrastructure failures" + (f" ({by_cat})" if by_cat else "")))
    return facts


def render_summary_text(summary: Mapping[str, Any]) -> str:
    facts = _header_facts(summary)
    width = max(len(k) for k, _ in facts)
    lines = ["pqid-tui candidate summary", ""]
    lines += [f"{k.ljust(width)}  {v}" for k, v in facts]
    lines += ["", *table(["metric", "over selected", "over answered"], _metric_rows(summary))]
    lines += ["", "failure taxonomy (in order of precedence)",
              *table(["category", "count", "share", ""], _category_rows(summary), right=(1, 2))]
    if summary.get("finish_reasons"):
        rows = [[k, str(v["count"]), str(v["execution"]), str(v["structural_match"])]
                for k, v in summary["finish_reasons"].items()]
        lines += ["", "finish reasons",
                  *table(["finish reason", "prompts", "executed", "structural match"], rows,
                         right=(1, 2, 3))]
    return "\n".join(lines) + "\n"


def render_summary_markdown(summary: Mapping[str, Any]) -> str:
    lines = ["# Candidate summary", ""]
    lines += [f"- **{k}**: {v}" for k, v in _header_facts(summary)]
    lines += ["", "## Rates", "",
              *md_table(["metric", "over selected", "over answered"], _metric_rows(summary),
                        right=(1, 2))]
    lines += ["", "## Failure taxonomy", "",
              *md_table(["category", "count", "share", ""], _category_rows(summary),
                        right=(1, 2))]
    if summary.get("finish_reasons"):
        rows = [[k, str(v["count"]), str(v["execution"]), str(v["structural_match"])]
                for k, v in summary["finish_reasons"].items()]
        lines += ["", "## Finish reasons", "",
                  *md_table(["finish reason", "prompts", "executed", "structural match"], rows,
                            right=(1, 2, 3))]
    return "\n".join(lines) + "\n"


CSV_COLUMNS = ("section", "name", "scope", "count", "denominator", "rate")


def summary_csv_rows(summary: Mapping[str, Any]) -> list[tuple[Any, ...]]:
    """Tidy rows: one observation per row, numbers only (the JSON holds the context)."""
    rows: list[tuple[Any, ...]] = []
    for key, _label, _field in METRICS:
        for scope in ("over_selected", "over_answered"):
            r = summary["rates"][key][scope]
            rows.append(("rate", key, scope.removeprefix("over_"), r["count"], r["denominator"],
                         "" if r["rate"] is None else r["rate"]))
    n = summary["selected"]
    for c in CATEGORIES:
        count = summary["categories"].get(c, 0)
        rows.append(("category", c, "selected", count, n, round(count / n, 6) if n else ""))
    infra = summary["infrastructure_failures"]
    rows.append(("infrastructure", "all", "selected", infra["count"], n,
                 "" if infra["rate"] is None else infra["rate"]))
    for reason, v in (summary.get("finish_reasons") or {}).items():
        rows.append(("finish_reason", reason, "selected", v["count"], n,
                     round(v["count"] / n, 6) if n else ""))
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
    renderers = {"json": render_summary_json, "text": render_summary_text,
                 "txt": render_summary_text, "markdown": render_summary_markdown,
                 "md": render_summary_markdown, "csv": render_summary_csv}
    try:
        return renderers[fmt](summary)
    except KeyError:
        raise ValueError(f"unknown format {fmt!r}") from None
