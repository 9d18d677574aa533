"""Reproduce: the published tables of a release, recomputed from its frozen evaluations.

Nothing is executed: every number comes from the frozen rows' cells (for PQID-Bench, the
21 harness reports). The totals pool every model cell; each row is one model over the
release's prompts; rank is competition ranking by the contract's structural metric. Where the
release publishes figures of its own (PQID-Bench: the status report, the identifiability
analysis, the results summary and each harness report's summary), each one is checked against
the recomputed number and the result says which agree.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from engine.errors import ReleaseError
from engine.release import FORMAT_PQID_BENCH_CORE, Release
from engine.replay.compare import competition_ranks, table_entry
from engine.replay.evaluations import (
    fact_lines,
    fmt_pp,
    gap_pp,
    gaps_for,
    md_table,
    metrics_for,
    rate,
    render_as,
    summarize,
    table,
    to_csv,
)

REPRODUCTION_FORMAT = "pqid-reproduction/1"
FORMATS = ("text", "markdown", "json", "csv")

STATUS_REPORT = "artifacts/analysis_154/PQID_BENCH_EXPANDED_STATUS_REPORT.json"
RESULTS_SUMMARY = (
    "artifacts/external_model_batches_154/pqid_bench_external_model_results_summary.json"
)
# How the study's published files name each recomputed metric.
_REPORT_SUMMARY_FIELDS = {
    "execution": "execution_success",
    "assembly": "qasm3_export_success",
    "signature": "structural_all_match",
    "num_qubits": "num_qubits_match",
    "num_clbits": "num_clbits_match",
    "gate_count": "gate_count_match",
    "gate_types": "gate_types_match",
}
_STATUS_COUNTS = {
    "execution": "execution",
    "assembly": "qasm3_export",
    "signature": "reference_signature_match",
}
_STATUS_RATES = {
    "num_qubits": "num_qubits_match",
    "num_clbits": "num_clbits_match",
    "gate_count": "gate_count_match",
    "gate_types": "gate_types_match",
}
_RATE_TOLERANCE = 1e-9
_PP_TOLERANCE = 1e-6


@dataclass(slots=True)
class Reproduction:
    """The recomputed tables, the checks against published figures, and their renderings."""

    data: dict[str, Any] = field(default_factory=dict)

    @property
    def agrees(self) -> bool:
        """True when no published figure differs from its recomputed value."""
        return not any(not c["agree"] for c in self.data["checks"])

    def render(self, fmt: str = "text") -> str:
        return render_as(
            self.data, fmt, {"text": _render_text, "markdown": _render_markdown, "csv": _render_csv}
        )


def _totals(
    cells: Sequence[Mapping[str, Any]],
    metrics: Sequence[tuple[str, str, str]],
    gaps: Sequence[tuple[str, str, str, str]],
) -> dict[str, Any]:
    n = len(cells)
    rates = {
        key: {"over_selected": rate(sum(1 for c in cells if c.get(fld) is True), n)}
        for key, _label, fld in metrics
    }
    return {
        "cells": n,
        "metrics": {k: v["over_selected"] for k, v in rates.items()},
        "gaps_pp": {key: gap_pp(rates, a, b) for key, _l, a, b in gaps},
    }


def _rank_key(metrics: Sequence[tuple[str, str, str]]) -> str:
    return "signature" if any(k == "signature" for k, _l, _f in metrics) else "structural_match"


def _tables(
    release: Release, ids: list[str], cells_by_row: Mapping[str, list[dict[str, Any]]]
) -> dict[str, Any]:
    metrics, gaps = metrics_for(release.contract), gaps_for(release.contract)
    rank_key = _rank_key(metrics)
    entries: list[dict[str, Any]] = []
    pooled: list[dict[str, Any]] = []
    wanted = set(ids)
    for row in release.matrix_rows:
        cells = cells_by_row[row.label]
        summary = summarize(cells, ids, metrics=metrics, gaps=gaps)
        entry = table_entry(
            row.label,
            summary,
            kind=row.kind,
            candidate=False,
            display_name=row.display_name,
            provider=row.provider,
            model=row.model,
            role=row.role,
        )
        entry["contract"] = row.contract
        entries.append(entry)
        if row.kind == "model":
            present = {str(c["prompt_id"]) for c in cells}
            pooled += [c for c in cells if c["prompt_id"] in wanted]
            # A missing cell is a failed cell in the pooled totals, as in each row.
            pooled += [{"prompt_id": pid} for pid in ids if pid not in present]
    models = [e for e in entries if e["kind"] == "model"]
    for entry, rank in zip(
        models, competition_ranks([e["metrics"][rank_key]["count"] for e in models]), strict=True
    ):
        entry["rank"] = rank
    entries.sort(key=lambda e: (e["rank"] is None, e["rank"] or 0))
    totals = _totals(pooled, metrics, gaps)
    totals["models"] = len(models)
    totals["reference_rows"] = len(entries) - len(models)
    totals["prompts"] = len(ids)
    return {"totals": totals, "rows": entries}


def reproduce(release: Release) -> Reproduction:
    """Recompute the release's published tables from its frozen evaluations (no execution)."""
    if not release.matrix_rows:
        hint = (
            " (a PQID-Bench core distribution has none: reproduce needs the evidence "
            "repository, which holds the 21 frozen models)"
            if release.format == FORMAT_PQID_BENCH_CORE
            else ""
        )
        raise ReleaseError(f"{release.root}: the release has no frozen matrix to reproduce" + hint)
    from engine.release.pqid_bench_matrix import (
        CELL_AUDIT,
        COPY_BASELINE_REPORTS,
        IDENTIFIABILITY,
        identifiability_exclusions,
    )

    ids = [p.prompt_id for p in release.prompts]
    cells_by_row = {row.label: release.frozen_evaluations(row.label) for row in release.matrix_rows}
    metrics, gaps = metrics_for(release.contract), gaps_for(release.contract)
    main = _tables(release, ids, cells_by_row)
    notes: list[str] = []
    excluded = identifiability_exclusions(release)
    ident = None
    if excluded is not None:
        subset = [pid for pid in ids if pid not in excluded]
        ident = {
            "source": IDENTIFIABILITY,
            "excluded_prompt_ids": list(excluded),
            **_tables(release, subset, cells_by_row),
        }
    if CELL_AUDIT in release.absent:
        notes.append(
            f"built from the {main['totals']['models']} harness reports: the cell audit "
            f"({CELL_AUDIT}) is absent from this copy"
        )
    elif (release.root / CELL_AUDIT).is_file():
        notes.append(
            f"roster from the cell audit ({CELL_AUDIT}), its verdicts checked against "
            "the harness reports"
        )
    for rel in COPY_BASELINE_REPORTS:
        if (release.root / rel).is_file() and not any(
            r.kind == "reference" for r in release.matrix_rows
        ):
            notes.append(
                f"the retrieval-copy baselines ({rel}) publish aggregate figures "
                "only, no per-prompt cells: they are not rows of the matrix"
            )
    data: dict[str, Any] = {
        "format": REPRODUCTION_FORMAT,
        "release": {
            "name": release.name,
            "version": release.version,
            "digest": release.digest,
            "format": release.format,
            "modified": release.modified,
            "contract": release.contract,
            "predicate": release.predicate,
        },
        "metrics": [{"key": k, "label": lab, "field": f} for k, lab, f in metrics],
        "gaps": [{"key": k, "label": lab, "minuend": a, "subtrahend": b} for k, lab, a, b in gaps],
        "rank_metric": _rank_key(metrics),
        "totals": main["totals"],
        "rows": main["rows"],
        "identifiability": ident,
        "notes": notes,
    }
    data["checks"] = _published_checks(release, data, cells_by_row)
    data["checked_sources"] = sorted({c["source"] for c in data["checks"]})
    return Reproduction(data)


# -- published figures -------------------------------------------------------------------------


Check = dict[str, Any]


def _check(
    source: str, item: str, published: Any, recomputed: Any, tolerance: float | None = None
) -> Check:
    if (
        tolerance is not None
        and isinstance(published, int | float)
        and isinstance(recomputed, int | float)
    ):
        agree = abs(float(published) - float(recomputed)) <= tolerance
    else:
        agree = published == recomputed
    return {
        "source": source,
        "item": item,
        "published": published,
        "recomputed": recomputed,
        "agree": agree,
    }


def _load_published(release: Release, rel: str) -> Any:
    if rel in release.absent or not (release.root / rel).is_file():
        return None
    path = release.require(rel, "reproduce's check against the published figures")
    try:
        return json.loads(path.read_bytes())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ReleaseError(f"{path}: cannot read the published figures ({exc})") from None


def _dig(data: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(data, Mapping) or key not in data:
            return None
        data = data[key]
    return data


def _model_key(model: str | None) -> str | None:
    """A model's API ID as the study's analyses name it: lower case, without `:provider`."""
    return model.split(":", 1)[0].lower() if model else None


def _published_checks(
    release: Release, data: Mapping[str, Any], cells_by_row: Mapping[str, list[dict[str, Any]]]
) -> list[Check]:
    checks: list[Check] = []
    totals = data["totals"]
    ident = data["identifiability"]
    rows = {r["label"]: r for r in data["rows"]}
    sources: list[Callable[[], list[Check]]] = [
        lambda: _status_checks(release, totals, ident),
        lambda: _identifiability_checks(release, data),
        lambda: _summary_checks(release, rows),
        lambda: _report_checks(release, rows),
    ]
    for source in sources:
        checks += source()
    return checks


def _status_checks(
    release: Release, totals: Mapping[str, Any], ident: Mapping[str, Any] | None
) -> list[Check]:
    status = _load_published(release, STATUS_REPORT)
    if not isinstance(status, Mapping):
        return []
    out = []
    design = status.get("reporting_design") or {}
    for item, key, value in (
        ("models", "primary_model_count", totals["models"]),
        ("prompts", "prompt_count", totals["prompts"]),
        ("cells", "prompt_model_cells", totals["cells"]),
    ):
        if key in design:
            out.append(_check(STATUS_REPORT, item, design[key], value))
    primary = status.get("primary_results") or {}
    for metric, key in _STATUS_COUNTS.items():
        published = _dig(primary, key, "count")
        if published is not None and metric in totals["metrics"]:
            out.append(
                _check(
                    STATUS_REPORT,
                    f"{metric} (all cells)",
                    published,
                    totals["metrics"][metric]["count"],
                )
            )
    for metric, key in _STATUS_RATES.items():
        if key in primary and metric in totals["metrics"]:
            out.append(
                _check(
                    STATUS_REPORT,
                    f"{metric} rate (all cells)",
                    primary[key],
                    totals["metrics"][metric]["rate"],
                    1e-6,
                )
            )
    if "execution_structure_gap_pp" in primary:
        out.append(
            _check(
                STATUS_REPORT,
                "execution-structure gap (pp, all cells)",
                primary["execution_structure_gap_pp"],
                totals["gaps_pp"].get("execution_structure_gap"),
                1e-3,
            )
        )
    sens = status.get("prompt_identifiability_sensitivity")
    if isinstance(sens, Mapping) and ident is not None:
        t = ident["totals"]
        for item, key, value in (
            ("identifiable prompts", "prompt_count", t["prompts"]),
            ("identifiable cells", "prompt_model_cells", t["cells"]),
            (
                "execution (identifiable cells)",
                "execution_count",
                t["metrics"]["execution"]["count"],
            ),
            (
                "signature (identifiable cells)",
                "reference_signature_match_count",
                t["metrics"]["signature"]["count"],
            ),
        ):
            if key in sens:
                out.append(_check(STATUS_REPORT, item, sens[key], value))
        if isinstance(sens.get("excluded_prompt_ids"), list):
            out.append(
                _check(
                    STATUS_REPORT,
                    "prompts left out of the identifiability subset",
                    sorted(sens["excluded_prompt_ids"]),
                    sorted(ident["excluded_prompt_ids"]),
                )
            )
    return out


def _side(block: Any, n: int, metrics: Mapping[str, Any]) -> list[tuple[str, Any, Any]]:
    if not isinstance(block, Mapping):
        return []
    return [
        ("n", block.get("n"), n),
        ("execution", block.get("execution_count"), metrics["execution"]["count"]),
        ("signature", block.get("structural_count"), metrics["signature"]["count"]),
    ]


def _identifiability_checks(release: Release, data: Mapping[str, Any]) -> list[Check]:
    from engine.release.pqid_bench_matrix import IDENTIFIABILITY

    ident = data["identifiability"]
    published = _load_published(release, IDENTIFIABILITY)
    if not isinstance(published, Mapping) or ident is None:
        return []
    out = []
    totals, sub = data["totals"], ident["totals"]
    for scope, block, t in (
        ("all cells", published.get("primary"), totals),
        ("identifiable cells", published.get("identifiable_sensitivity"), sub),
    ):
        for item, pub, value in _side(block, t["cells"], t["metrics"]):
            if pub is not None:
                out.append(_check(IDENTIFIABILITY, f"{item} ({scope})", pub, value))
    if "model_count" in published:
        out.append(_check(IDENTIFIABILITY, "models", published["model_count"], totals["models"]))
    rows = {_model_key(r["model"]): r for r in data["rows"] if r["kind"] == "model"}
    sub_rows = {r["label"]: r for r in ident["rows"]}
    for entry in published.get("by_model") or []:
        if not isinstance(entry, Mapping):
            continue
        key = _model_key(str(entry.get("model")))
        row = rows.get(key)
        name = str(entry.get("model_label") or entry.get("model"))
        if row is None:
            out.append(
                _check(IDENTIFIABILITY, f"{name}: a row of the matrix", entry.get("model"), None)
            )
            continue
        for scope, block, r in (
            ("154", entry.get("full"), row),
            ("150", entry.get("identifiable"), sub_rows[row["label"]]),
        ):
            for item, pub, value in _side(block, r["selected"], r["metrics"]):
                if pub is not None:
                    out.append(
                        _check(IDENTIFIABILITY, f"{row['label']}: {item} ({scope})", pub, value)
                    )
    return out


def _summary_checks(release: Release, rows: Mapping[str, Mapping[str, Any]]) -> list[Check]:
    published = _load_published(release, RESULTS_SUMMARY)
    if not isinstance(published, Mapping):
        return []
    out = []
    for entry in published.get("rows") or []:
        if not isinstance(entry, Mapping):
            continue
        slug = str(entry.get("slug"))
        row = rows.get(slug)
        if row is None:
            out.append(_check(RESULTS_SUMMARY, f"{slug}: a row of the matrix", slug, None))
            continue
        if "rows" in entry:
            out.append(_check(RESULTS_SUMMARY, f"{slug}: prompts", entry["rows"], row["selected"]))
        for metric, key in _REPORT_SUMMARY_FIELDS.items():
            if key in entry and metric in row["metrics"]:
                out.append(
                    _check(
                        RESULTS_SUMMARY,
                        f"{slug}: {metric}",
                        entry[key],
                        row["metrics"][metric]["count"],
                    )
                )
    return out


def _report_checks(release: Release, rows: Mapping[str, Mapping[str, Any]]) -> list[Check]:
    """Each harness report's own summary block against the cells read from its records."""
    out = []
    for row in release.matrix_rows:
        if row.kind != "model" or not row.evaluations.endswith(".json"):
            continue
        published = _load_published(release, row.evaluations)
        summary = published.get("summary") if isinstance(published, Mapping) else None
        if not isinstance(summary, Mapping):
            continue
        entry = rows[row.label]
        if "rows" in summary:
            out.append(
                _check(row.evaluations, f"{row.label}: prompts", summary["rows"], entry["selected"])
            )
        for metric, key in _REPORT_SUMMARY_FIELDS.items():
            if key in summary and metric in entry["metrics"]:
                out.append(
                    _check(
                        row.evaluations,
                        f"{row.label}: {metric}",
                        summary[key],
                        entry["metrics"][metric]["count"],
                    )
                )
    return out


# -- renderings --------------------------------------------------------------------------------


def _pct(r: Mapping[str, Any]) -> str:
    """`2,950/3,234 91.22%` (two decimals, as the study publishes its rates)."""
    shown = "-" if r["rate"] is None else f"{100 * r['rate']:.2f}%"
    return f"{r['count']:,}/{r['denominator']:,} {shown}"


def _head(data: Mapping[str, Any]) -> list[str]:
    return [
        "rank",
        "model",
        *[m["label"] for m in data["metrics"][:3]],
        *[g["label"] for g in data["gaps"]],
        *[m["label"] for m in data["metrics"][3:]],
    ]


def _rows(data: Mapping[str, Any], entries: Sequence[Mapping[str, Any]]) -> list[list[str]]:
    keys = [m["key"] for m in data["metrics"]]
    return [
        [
            str(e["rank"]) if e["rank"] is not None else "-",
            e["display_name"],
            *[_pct(e["metrics"][k]) for k in keys[:3]],
            *[fmt_pp(e["gaps_pp"].get(g["key"])) for g in data["gaps"]],
            *[_pct(e["metrics"][k]) for k in keys[3:]],
        ]
        for e in entries
    ]


def _total_lines(data: Mapping[str, Any], totals: Mapping[str, Any]) -> list[tuple[str, str]]:
    refs = totals.get("reference_rows") or 0
    shown = f", {refs} reference row{'s' if refs != 1 else ''}" if refs else ""
    lines = [
        (
            "matrix",
            f"{totals['models']} models{shown}, {totals['prompts']} prompts, "
            f"{totals['cells']:,} cells",
        )
    ]
    if not totals["models"]:
        return [(lines[0][0], lines[0][1] + " (no model row: the totals pool model cells only)")]
    lines += [(m["label"], _pct(totals["metrics"][m["key"]])) for m in data["metrics"]]
    lines += [(g["label"], fmt_pp(totals["gaps_pp"].get(g["key"]))) for g in data["gaps"]]
    return lines


def _check_line(data: Mapping[str, Any]) -> str:
    checks = data["checks"]
    if not checks:
        return "no published figures found to check against"
    differ = [c for c in checks if not c["agree"]]
    where = f"{len(checks)} published figures from {len(data['checked_sources'])} files"
    if not differ:
        return f"{where}: all agree"
    return f"{where}: {len(differ)} DIFFER"


def _differences(data: Mapping[str, Any]) -> list[list[str]]:
    return [
        [c["source"], c["item"], json.dumps(c["published"]), json.dumps(c["recomputed"])]
        for c in data["checks"]
        if not c["agree"]
    ]


def _facts(data: Mapping[str, Any]) -> list[tuple[str, str]]:
    rel = data["release"]
    return [
        (
            "release",
            f"{rel['name']} {rel['version']} ({rel['format']}, sha256 "
            f"{rel['digest']}, modified: {'yes' if rel['modified'] else 'no'})",
        ),
        ("contract", f"{rel['contract']}, predicate {rel['predicate'] or 'none'}"),
        *_total_lines(data, data["totals"]),
        ("published", _check_line(data)),
    ]


def _title(text: str) -> str:
    return re.sub(r"^\w", lambda m: m.group(0).upper(), text)


def _sections(
    data: Mapping[str, Any],
) -> list[tuple[str, list[tuple[str, str]] | None, list[str], list[list[str]]]]:
    out: list[tuple[str, list[tuple[str, str]] | None, list[str], list[list[str]]]] = [
        (
            f"per model, ranked by {data['rank_metric']} (ties share a rank)",
            None,
            _head(data),
            _rows(data, data["rows"]),
        )
    ]
    ident = data["identifiability"]
    if ident is not None:
        out.append(
            (
                f"identifiability subset: {ident['totals']['prompts']} prompts (without "
                f"{', '.join(ident['excluded_prompt_ids'])})",
                _total_lines(data, ident["totals"]),
                _head(data),
                _rows(data, ident["rows"]),
            )
        )
    differ = _differences(data)
    if differ:
        out.append(
            (
                "published figures that differ",
                None,
                ["source", "figure", "published", "recomputed"],
                differ,
            )
        )
    return out


def _render_text(data: Mapping[str, Any]) -> str:
    lines = [
        "pqid-tui reproduction of the frozen matrix (nothing executed)",
        "",
        *fact_lines(_facts(data), data["notes"]),
    ]
    for title, totals, head, rows in _sections(data):
        lines += ["", title]
        if totals:
            lines += [*fact_lines(totals), ""]
        lines += table(head, rows)
    return "\n".join(lines) + "\n"


def _render_markdown(data: Mapping[str, Any]) -> str:
    lines = ["# Reproduction of the frozen matrix", ""]
    lines += [f"- **{k}**: {v}" for k, v in _facts(data)]
    lines += [f"- **note**: {n}" for n in data["notes"]]
    for title, totals, head, rows in _sections(data):
        lines += ["", f"## {_title(title)}", ""]
        if totals:
            lines += [f"- **{k}**: {v}" for k, v in totals] + [""]
        lines += md_table(head, rows)
    return "\n".join(lines) + "\n"


CSV_COLUMNS = (
    "subset",
    "row",
    "display_name",
    "kind",
    "rank",
    "metric",
    "count",
    "denominator",
    "rate",
    "release",
    "release_digest",
)


def _csv_rows(
    data: Mapping[str, Any], subset: str, block: Mapping[str, Any], tail: Sequence[Any]
) -> list[Sequence[Any]]:
    out: list[Sequence[Any]] = []
    entries = [
        (
            "(all models)",
            "all models",
            "total",
            None,
            block["totals"]["metrics"],
            block["totals"]["gaps_pp"],
        )
    ]
    entries += [
        (e["label"], e["display_name"], e["kind"], e["rank"], e["metrics"], e["gaps_pp"])
        for e in block["rows"]
    ]
    for label, shown, kind, rank, metrics, gaps in entries:
        head = (subset, label, shown, kind, "" if rank is None else rank)
        for m in data["metrics"]:
            r = metrics[m["key"]]
            out.append(
                (
                    *head,
                    m["key"],
                    r["count"],
                    r["denominator"],
                    "" if r["rate"] is None else r["rate"],
                    *tail,
                )
            )
        for g in data["gaps"]:
            value = gaps.get(g["key"])
            out.append((*head, f"{g['key']}_pp", "", "", "" if value is None else value, *tail))
    return out


def _render_csv(data: Mapping[str, Any]) -> str:
    rel = data["release"]
    tail = (f"{rel['name']} {rel['version']}", rel["digest"])
    rows = _csv_rows(data, "all", data, tail)
    if data["identifiability"] is not None:
        rows += _csv_rows(data, "identifiable", data["identifiability"], tail)
    return to_csv(CSV_COLUMNS, rows)


__all__ = ["FORMATS", "REPRODUCTION_FORMAT", "Reproduction", "reproduce"]
