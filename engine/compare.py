"""Compare: the candidate against every row of the frozen matrix, on the same prompt IDs only.

Definitions (also printed with every comparison):

- The candidate's selection is the run manifest's `selected_prompt_ids` when a manifest is
  given, else the prompts present in the evaluations file (optionally narrowed to one split).
  Selected prompts with no evaluation line count as the infrastructure category `missing`.
- The selection is *complete* when it covers every prompt of each split it touches (all of
  the test split for a test-only run). Anything less is *partial*: refused unless
  `allow_partial`, and then every frozen row is restricted to the candidate's prompt IDs.
  Never a partial candidate over a full denominator.
- Each metric is reported over all selected prompts and over answered prompts (selected minus
  infrastructure failures: `no_response`, `not_evaluated`, `missing`).
- Publishable needs all of: an unmodified release, a test-split-only selection, a complete
  selection, the candidate's environment (evaluator version and Qiskit version) equal to every
  frozen row's, every frozen row holding every selected prompt, and candidate infrastructure
  failures at most `infra_threshold` of the selected prompts.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.errors import CompareRefused, InputError
from engine.evaluations import (
    INFRA_CATEGORIES,
    METRICS,
    environments,
    fmt_rate,
    load_evaluations,
    md_table,
    paired,
    qiskit_version,
    summarize,
    table,
    to_csv,
)
from engine.release import Release

COMPARISON_FORMAT = "pqid-comparison/1"
DEFAULT_INFRA_THRESHOLD = 0.02
FORMATS = ("text", "markdown", "json", "csv")
CANDIDATE = "candidate"


@dataclass(slots=True)
class Comparison:
    """A comparison table and everything needed to judge it; `render` gives the four formats."""

    data: dict[str, Any] = field(default_factory=dict)

    @property
    def publishable(self) -> bool:
        return bool(self.data["publishable"])

    def render(self, fmt: str = "text") -> str:
        if fmt == "json":
            return json.dumps(self.data, indent=2, sort_keys=True) + "\n"
        if fmt == "text":
            return _render_text(self.data)
        if fmt == "markdown":
            return _render_markdown(self.data)
        if fmt == "csv":
            return _render_csv(self.data)
        raise ValueError(f"unknown format {fmt!r}; expected one of {', '.join(FORMATS)}")


def _environment_key(item: Mapping[str, Any]) -> tuple[str | None, str | None]:
    return item.get("evaluator_version"), qiskit_version(item.get("environment"))


def _describe_env(key: tuple[str | None, str | None]) -> str:
    return f"evaluator {key[0] or 'unknown'}, qiskit {key[1] or 'unknown'}"


def read_manifest(path: Path, release: Release) -> dict[str, Any]:
    """A candidate run manifest: its selected prompt IDs must belong to this release."""
    try:
        manifest = json.loads(path.read_bytes())
    except FileNotFoundError:
        raise InputError(f"{path}: run manifest does not exist") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"{path}: not valid JSON ({exc})") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror})") from None
    if not isinstance(manifest, dict):
        raise InputError(f"{path}: expected a JSON object")
    ids = manifest.get("selected_prompt_ids")
    if not isinstance(ids, list) or not ids or not all(isinstance(i, str) for i in ids):
        raise InputError(f"{path}: no selected_prompt_ids list")
    if len(set(ids)) != len(ids):
        raise InputError(f"{path}: selected_prompt_ids repeats a prompt")
    unknown = [i for i in ids if i not in release.by_id]
    if unknown:
        raise InputError(f"{path}: selects prompts the release does not have "
                         f"({', '.join(unknown[:5])})")
    digest = (manifest.get("release") or {}).get("digest")
    if digest is not None and digest != release.digest:
        raise CompareRefused(
            f"{path}: the candidate ran on another release (digest {str(digest)[:16]}), "
            f"not {release.name} {release.version} ({release.digest[:16]})")
    return manifest


def publishable_split(release: Release, prompt_ids: list[str] | tuple[str, ...]) -> str | None:
    """`test` when the candidate covers test prompts and others too (only the test split can
    be publishable); None (every prompt) otherwise."""
    splits = {release.by_id[p].split for p in prompt_ids if p in release.by_id}
    return "test" if "test" in splits and len(splits) > 1 else None


def compare(release: Release, evaluations_path: Path, *,
            candidate_manifest: Path | None = None,
            allow_partial: bool = False,
            allow_environment_mismatch: bool = False,
            infra_threshold: float = DEFAULT_INFRA_THRESHOLD,
            split: str | None = None) -> Comparison:
    """Set the candidate's evaluations beside every frozen row, on the same prompt IDs."""
    if not 0 <= infra_threshold <= 1:
        raise CompareRefused("the infrastructure-failure threshold must be between 0 and 1")
    if not release.matrix_rows:
        raise CompareRefused(f"{release.root}: the release has no frozen matrix to compare with")
    evaluations_path = Path(evaluations_path)
    candidate = load_evaluations(evaluations_path, known_ids=release.by_id)
    by_id = {str(ev["prompt_id"]): ev for ev in candidate}
    reasons: list[str] = []
    notes: list[str] = []

    manifest = None
    if candidate_manifest is not None:
        manifest = read_manifest(Path(candidate_manifest), release)
        chosen = set(manifest["selected_prompt_ids"])
        outside = [pid for pid in by_id if pid not in chosen]
        if outside:
            raise InputError(f"{evaluations_path}: evaluates prompts the run did not select "
                             f"({', '.join(outside[:5])}); is it the evaluation of this run?")
        source = "run manifest"
        if manifest.get("publishable") is False:
            reasons.append("the candidate run manifest says it is not publishable")
    else:
        chosen = set(by_id)
        source = "evaluations file"
    if split is not None:
        if split not in release.split_counts():
            raise CompareRefused(f"the release has no split {split!r} "
                                 f"(it has {', '.join(release.split_counts())})")
        chosen = {pid for pid in chosen if release.by_id[pid].split == split}
        notes.append(f"only the {split} split of the candidate is compared")
    selected = [p.prompt_id for p in release.prompts if p.prompt_id in chosen]
    if not selected:
        raise CompareRefused("the candidate has no prompts to compare"
                             + (f" in the {split} split" if split else ""))

    splits: dict[str, dict[str, int]] = {}
    for p in release.prompts:
        entry = splits.setdefault(p.split, {"release": 0, "selected": 0})
        entry["release"] += 1
        entry["selected"] += p.prompt_id in chosen
    touched = {s: v for s, v in splits.items() if v["selected"]}
    complete = all(v["selected"] == v["release"] for v in touched.values())
    covered = ", ".join(f"{s} {v['selected']}/{v['release']}" for s, v in touched.items())
    if not complete:
        if not allow_partial:
            raise CompareRefused(
                f"the candidate is partial ({covered} prompts): a comparison needs every prompt "
                "of each split it covers. Pass --allow-partial to compare on exactly the "
                "candidate's prompts (every frozen row is then restricted to them)")
        notes.append(f"partial candidate ({covered} prompts): every frozen row is restricted "
                     f"to the candidate's {len(selected)} prompt IDs")
        reasons.append("partial candidate")
    if set(touched) != {"test"}:
        reasons.append(f"the selection is not the test split alone ({', '.join(touched)})")
    if release.modified:
        reasons.append("the release was modified (its SHA-256 checks fail)")

    cand_summary = summarize(candidate, selected)
    infra = cand_summary["infrastructure_failures"]
    if infra["count"] > infra_threshold * len(selected):
        reasons.append(f"candidate infrastructure failures {infra['count']}/{len(selected)} "
                       f"exceed the threshold of {100 * infra_threshold:g}%")

    rows: list[dict[str, Any]] = []
    cand_envs = [_environment_key(e) for e in environments(
        by_id[pid] for pid in selected if pid in by_id)]
    mismatches: list[str] = []
    if len(cand_envs) > 1:
        mismatches.append("the candidate was scored in several environments: "
                          + "; ".join(_describe_env(k) for k in cand_envs))
    cand_env = cand_envs[0] if len(cand_envs) == 1 else None
    if release.evaluator_version and cand_env and cand_env[0] != release.evaluator_version:
        mismatches.append(f"the candidate was scored with evaluator {cand_env[0]}, the release "
                          f"pins {release.evaluator_version}")
    for frozen in release.matrix_rows:
        evs = release.frozen_evaluations(frozen.label)
        row_by_id = {str(ev["prompt_id"]): ev for ev in evs}
        summary = summarize(evs, selected)
        lacking = [pid for pid in selected if pid not in row_by_id]
        if lacking:
            reasons.append(f"frozen row {frozen.label} has no evaluation for {len(lacking)} "
                           "selected prompts")
        row_envs = [_environment_key(e) for e in environments(
            row_by_id[pid] for pid in selected if pid in row_by_id)]
        for key in row_envs:
            if cand_env is not None and key != cand_env:
                mismatches.append(f"frozen row {frozen.label} was scored with "
                                  f"{_describe_env(key)}, the candidate with "
                                  f"{_describe_env(cand_env)}")
        rows.append({
            "label": frozen.label, "kind": frozen.kind, "provider": frozen.provider,
            "model": frozen.model, "summary": summary,
            "environments": [{"evaluator_version": k[0], "qiskit": k[1]} for k in row_envs],
            "paired": {key: paired(by_id, row_by_id, selected, fld)
                       for key, _label, fld in METRICS},
        })
    if mismatches:
        if not allow_environment_mismatch:
            raise CompareRefused(
                "the candidate and the frozen rows were not scored in the same environment: "
                + "; ".join(mismatches) + ". Replay with the release's pinned environment, or "
                "pass --allow-environment-mismatch (the table is then not publishable)")
        reasons.append("environment mismatch: " + "; ".join(mismatches))

    label = CANDIDATE
    if manifest is not None:
        route = manifest.get("route") or {}
        provider = route.get("provider") if isinstance(route, dict) else None
        label = "/".join(str(x) for x in (provider, manifest.get("model")) if x) or CANDIDATE
    data: dict[str, Any] = {
        "format": COMPARISON_FORMAT,
        "release": {"name": release.name, "version": release.version,
                    "digest": release.digest, "modified": release.modified},
        "candidate": {
            "label": label,
            "evaluations": str(evaluations_path),
            "manifest": str(candidate_manifest) if candidate_manifest is not None else None,
            "environment": ({"evaluator_version": cand_env[0], "qiskit": cand_env[1]}
                            if cand_env else None),
            "summary": cand_summary,
        },
        "selection": {"source": source, "split_filter": split, "selected": len(selected),
                      "splits": touched, "complete": complete,
                      "restricted_to_candidate": not complete},
        "infrastructure_threshold": infra_threshold,
        "rows": rows,
        "publishable": not reasons,
        "not_publishable_reasons": reasons,
        "notes": notes,
        "prompt_ids": selected,
    }
    return Comparison(data)


# -- renderings ------------------------------------------------------------------------------------


def _metric_cells(summary: Mapping[str, Any], scope: str) -> list[str]:
    return [fmt_rate(summary["rates"][key][scope]) for key, _label, _field in METRICS]


def _table_rows(data: Mapping[str, Any], scope: str) -> list[list[str]]:
    cand = data["candidate"]
    out = [[cand["label"], "candidate", *_metric_cells(cand["summary"], scope),
            str(cand["summary"]["infrastructure_failures"]["count"])]]
    for row in data["rows"]:
        out.append([row["label"], row["kind"], *_metric_cells(row["summary"], scope),
                    str(row["summary"]["infrastructure_failures"]["count"])])
    return out


def _p_value(p: float) -> str:
    return "p<0.001" if p < 0.001 else f"p={p:.3g}"


def _paired_rows(data: Mapping[str, Any]) -> list[list[str]]:
    out = []
    for row in data["rows"]:
        cells = [row["label"]]
        for key, _label, _field in METRICS:
            p = row["paired"][key]
            cells.append(f"+{p['candidate_only']} / -{p['row_only']} "
                         f"({_p_value(p['mcnemar_exact_p'])})")
        out.append(cells)
    return out


_HEAD = ["row", "kind", *[label for _k, label, _f in METRICS], "infra"]
_PAIRED_HEAD = ["candidate vs", *[label for _k, label, _f in METRICS]]


def _facts(data: Mapping[str, Any]) -> list[tuple[str, str]]:
    rel, sel, cand = data["release"], data["selection"], data["candidate"]
    env = cand["environment"]
    splits = ", ".join(f"{s} {v['selected']}/{v['release']}" for s, v in sel["splits"].items())
    return [
        ("release", f"{rel['name']} {rel['version']} (sha256 {rel['digest']}, modified: "
                    f"{'yes' if rel['modified'] else 'no'})"),
        ("candidate", f"{cand['label']} ({cand['evaluations']})"),
        ("environment", _describe_env((env["evaluator_version"], env["qiskit"])) if env
         else "unknown"),
        ("prompts", f"{sel['selected']} selected from the {sel['source']} ({splits}); "
                    + ("complete" if sel["complete"]
                       else "PARTIAL: every row restricted to these prompt IDs")),
        ("publishable", "yes" if data["publishable"] else
         "NO: " + "; ".join(data["not_publishable_reasons"])),
    ]


_LEGEND = ("Counts are successes/denominator. Paired: +N prompts where the candidate succeeds "
           "and the row fails, -N the reverse (exact McNemar p). Infrastructure failures "
           "(no_response, not_evaluated, missing) count as failures over selected prompts and "
           "are left out over answered prompts.")


def _render_text(data: Mapping[str, Any]) -> str:
    facts = _facts(data)
    width = max(len(k) for k, _ in facts)
    lines = ["pqid-tui comparison with the frozen matrix", ""]
    lines += [f"{k.ljust(width)}  {v}" for k, v in facts]
    lines += [f"{'note'.ljust(width)}  {n}" for n in data["notes"]]
    lines += ["", "over all selected prompts", *table(_HEAD, _table_rows(data, "over_selected"))]
    lines += ["", "over answered prompts", *table(_HEAD, _table_rows(data, "over_answered"))]
    lines += ["", "paired differences, candidate vs each row", *table(_PAIRED_HEAD,
                                                                      _paired_rows(data))]
    lines += ["", _LEGEND]
    return "\n".join(lines) + "\n"


def _render_markdown(data: Mapping[str, Any]) -> str:
    lines = ["# Comparison with the frozen matrix", ""]
    lines += [f"- **{k}**: {v}" for k, v in _facts(data)]
    lines += [f"- **note**: {n}" for n in data["notes"]]
    lines += ["", "## Over all selected prompts", "",
              *md_table(_HEAD, _table_rows(data, "over_selected"))]
    lines += ["", "## Over answered prompts", "",
              *md_table(_HEAD, _table_rows(data, "over_answered"))]
    lines += ["", "## Paired differences, candidate vs each row", "",
              *md_table(_PAIRED_HEAD, _paired_rows(data)), "", _LEGEND]
    return "\n".join(lines) + "\n"


CSV_COLUMNS = ("row", "kind", "metric", "scope", "count", "denominator", "rate",
               "candidate_only", "row_only", "mcnemar_exact_p",
               "release", "release_digest", "release_modified", "publishable")


def _render_csv(data: Mapping[str, Any]) -> str:
    rel = data["release"]
    tail = (f"{rel['name']} {rel['version']}", rel["digest"], rel["modified"],
            data["publishable"])
    rows: list[Sequence[Any]] = []
    entries = [(data["candidate"]["label"], "candidate", data["candidate"]["summary"], None)]
    entries += [(r["label"], r["kind"], r["summary"], r["paired"]) for r in data["rows"]]
    for label, kind, summary, pairs in entries:
        for key, _l, _f in METRICS:
            for scope in ("over_selected", "over_answered"):
                r = summary["rates"][key][scope]
                p = pairs[key] if pairs and scope == "over_selected" else None
                rows.append((label, kind, key, scope.removeprefix("over_"), r["count"],
                             r["denominator"], "" if r["rate"] is None else r["rate"],
                             p["candidate_only"] if p else "", p["row_only"] if p else "",
                             p["mcnemar_exact_p"] if p else "", *tail))
        infra = summary["infrastructure_failures"]
        rows.append((label, kind, "infrastructure_failures", "selected", infra["count"],
                     infra["denominator"], "" if infra["rate"] is None else infra["rate"],
                     "", "", "", *tail))
    return to_csv(CSV_COLUMNS, rows)


__all__ = ["COMPARISON_FORMAT", "DEFAULT_INFRA_THRESHOLD", "FORMATS", "INFRA_CATEGORIES",
           "Comparison", "compare", "read_manifest"]
