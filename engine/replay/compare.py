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
  selection, the candidate's environment equal to every frozen row's, every frozen row holding
  every selected prompt, and candidate infrastructure failures at most `infra_threshold` of the
  selected prompts.
- The metrics and the environment are the release's scoring contract's. The project's own
  contract: execution, structural match, QASM 3 export, equivalence; environment = evaluator
  version and Qiskit version. The PQID-Bench contract: execution (ran and defined a circuit),
  assembly (QASM 3 export), signature (the reference-signature predicate), its four components,
  and the Execution-Structure and Assembly-Structure gaps in percentage points; environment =
  contract, predicate, Python (major.minor), Qiskit and Qiskit Aer, against the release's pins.
- Rank: competition ranking ("1, 1, 3") of the candidate and the model rows by the contract's
  structural metric (signature, or structural match) over the selected prompts.
- On a PQID-Bench evidence release a second table restricts everything to the identifiability
  subset: the selected prompts minus the four the study's identifiability analysis leaves out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.errors import CompareRefused, InputError
from engine.release import CONTRACT_PQID_BENCH, CONTRACT_PROJECT, Release
from engine.replay.evaluations import (
    INFRA_CATEGORIES,
    METRICS,
    Gap,
    Metric,
    fact_lines,
    fmt_pp,
    fmt_rate,
    gaps_for,
    is_infrastructure,
    load_evaluations,
    md_table,
    metrics_for,
    paired,
    qiskit_version,
    render_as,
    summarize,
    table,
    to_csv,
)
from engine.rundir.storage import read_json_file

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
        return render_as(
            self.data, fmt, {"text": _render_text, "markdown": _render_markdown, "csv": _render_csv}
        )


EnvKey = tuple[tuple[str, str | None], ...]


def _major_minor(version: Any) -> str | None:
    if not isinstance(version, str) or not version:
        return None
    return ".".join(version.split(".")[:2])


def _environment_key(item: Mapping[str, Any], contract: str) -> EnvKey:
    """What must agree between the candidate and a frozen row, under the release's contract."""
    raw = item.get("environment")
    env: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
    named = item.get("contract")
    scored_under = str(named) if isinstance(named, str) and named else CONTRACT_PROJECT
    if contract == CONTRACT_PQID_BENCH:
        aer, predicate = env.get("qiskit_aer"), item.get("predicate")
        return (
            ("contract", scored_under),
            ("predicate", str(predicate) if isinstance(predicate, str) else None),
            ("python", _major_minor(env.get("python"))),
            ("qiskit", qiskit_version(env)),
            ("qiskit-aer", aer if isinstance(aer, str) else None),
        )
    return (
        ("evaluator", item.get("evaluator_version")),
        ("qiskit", qiskit_version(env)),
        ("contract", scored_under),
    )


def _package_differences(
    release: Release, by_id: Mapping[str, Mapping[str, Any]], selected: Sequence[str]
) -> list[str]:
    """Every package of the candidate's image against the release's complete pin set.

    A replay records the image's full package list (`environment.packages`) when it probed the
    image; a package outside the pins (matplotlib decides whether `draw('mpl')` executes) can
    change a verdict as surely as the Qiskit version.
    """
    from engine.replay.environment import environment_differences, release_environment

    pin = release_environment(release.evaluator_requirements, release.python_version)
    seen: list[str] = []
    for pid in selected:
        env = (by_id.get(pid) or {}).get("environment")
        if not isinstance(env, Mapping) or not isinstance(env.get("packages"), Mapping):
            continue
        for line in environment_differences(
            pin, {"python": env.get("python"), "packages": env["packages"], "complete": True}
        ):
            if line not in seen:
                seen.append(line)
    return seen


def _describe_env(key: EnvKey) -> str:
    return ", ".join(f"{name} {value or 'unknown'}" for name, value in key)


_ENV_FIELDS = {"evaluator": "evaluator_version", "qiskit-aer": "qiskit_aer"}


def _env_dict(key: EnvKey) -> dict[str, str | None]:
    """An environment key as JSON: evaluator_version, qiskit (and contract, predicate, python,
    qiskit_aer under the PQID-Bench contract)."""
    return {_ENV_FIELDS.get(name, name): value for name, value in key}


def _env_key_of(env: Mapping[str, Any]) -> EnvKey:
    names = {v: k for k, v in _ENV_FIELDS.items()}
    return tuple((names.get(k, k), v) for k, v in env.items())


def _keys(evaluations: Iterable[Mapping[str, Any] | None], contract: str) -> list[EnvKey]:
    found: list[EnvKey] = []
    for ev in evaluations:
        if ev is None or is_infrastructure(ev):
            continue
        key = _environment_key(ev, contract)
        if key not in found:
            found.append(key)
    return found


def _release_pins(release: Release) -> EnvKey | None:
    """The environment the release pins for its frozen rows (PQID-Bench contract)."""
    from engine.release.pqid_bench_matrix import frozen_environment

    env = frozen_environment(release)
    if not env:
        return None
    return _environment_key(
        {"contract": release.contract, "predicate": release.predicate, "environment": env},
        release.contract,
    )


def competition_ranks(counts: Sequence[int | None]) -> list[int | None]:
    """Rank 1 for the highest count; ties share a rank and the next rank skips (1, 1, 3)."""
    ranked = sorted((c for c in counts if c is not None), reverse=True)
    first: dict[int, int] = {}
    for position, c in enumerate(ranked, start=1):
        first.setdefault(c, position)
    return [first[c] if c is not None else None for c in counts]


def read_manifest(path: Path, release: Release) -> dict[str, Any]:
    """A candidate run manifest: its selected prompt IDs must belong to this release."""
    manifest = read_json_file(path, InputError, missing="run manifest does not exist")
    if not isinstance(manifest, dict):
        raise InputError(f"{path}: expected a JSON object")
    ids = manifest.get("selected_prompt_ids")
    if not isinstance(ids, list) or not ids or not all(isinstance(i, str) for i in ids):
        raise InputError(f"{path}: no selected_prompt_ids list")
    if len(set(ids)) != len(ids):
        raise InputError(f"{path}: selected_prompt_ids repeats a prompt")
    unknown = [i for i in ids if i not in release.by_id]
    if unknown:
        raise InputError(
            f"{path}: selects prompts the release does not have ({', '.join(unknown[:5])})"
        )
    digest = (manifest.get("release") or {}).get("digest")
    if digest is not None and digest != release.digest:
        raise CompareRefused(
            f"{path}: the candidate ran on another release (digest {str(digest)[:16]}), "
            f"not {release.name} {release.version} ({release.digest[:16]})"
        )
    return manifest


def publishable_split(release: Release, prompt_ids: list[str] | tuple[str, ...]) -> str | None:
    """`test` when the candidate covers test prompts and others too (only the test split can
    be publishable); None (every prompt) otherwise."""
    splits = {release.by_id[p].split for p in prompt_ids if p in release.by_id}
    return "test" if "test" in splits and len(splits) > 1 else None


def compare(
    release: Release,
    evaluations_path: Path,
    *,
    candidate_manifest: Path | None = None,
    allow_partial: bool = False,
    allow_environment_mismatch: bool = False,
    infra_threshold: float = DEFAULT_INFRA_THRESHOLD,
    split: str | None = None,
) -> Comparison:
    """Set the candidate's evaluations beside every frozen row, on the same prompt IDs."""
    if not 0 <= infra_threshold <= 1:
        raise CompareRefused("the infrastructure-failure threshold must be between 0 and 1")
    if not release.matrix_rows:
        raise CompareRefused(
            f"{release.root}: the release has no frozen matrix to compare with"
            + _no_matrix_hint(release)
        )
    evaluations_path = Path(evaluations_path)
    candidate = load_evaluations(evaluations_path, known_ids=release.by_id)
    by_id = {str(ev["prompt_id"]): ev for ev in candidate}
    reasons: list[str] = []
    notes: list[str] = []
    contract = release.contract
    metrics, gaps = metrics_for(contract), gaps_for(contract)

    manifest = None
    if candidate_manifest is not None:
        manifest = read_manifest(Path(candidate_manifest), release)
        chosen = set(manifest["selected_prompt_ids"])
        outside = [pid for pid in by_id if pid not in chosen]
        if outside:
            raise InputError(
                f"{evaluations_path}: evaluates prompts the run did not select "
                f"({', '.join(outside[:5])}); is it the evaluation of this run?"
            )
        source = "run manifest"
        if manifest.get("publishable") is False:
            reasons.append("the candidate run manifest says it is not publishable")
    else:
        chosen = set(by_id)
        source = "evaluations file"
    if split is not None:
        if split not in release.split_counts():
            raise CompareRefused(
                f"the release has no split {split!r} (it has {', '.join(release.split_counts())})"
            )
        chosen = {pid for pid in chosen if release.by_id[pid].split == split}
        notes.append(f"only the {split} split of the candidate is compared")
    selected = [p.prompt_id for p in release.prompts if p.prompt_id in chosen]
    if not selected:
        raise CompareRefused(
            "the candidate has no prompts to compare" + (f" in the {split} split" if split else "")
        )

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
                "candidate's prompts (every frozen row is then restricted to them)"
            )
        notes.append(
            f"partial candidate ({covered} prompts): every frozen row is restricted "
            f"to the candidate's {len(selected)} prompt IDs"
        )
        reasons.append("partial candidate")
    if set(touched) != {"test"}:
        reasons.append(f"the selection is not the test split alone ({', '.join(touched)})")
    if release.modified:
        reasons.append("the release was modified (its SHA-256 checks fail)")

    cand_summary = summarize(candidate, selected, metrics=metrics, gaps=gaps)
    infra = cand_summary["infrastructure_failures"]
    if infra["count"] > infra_threshold * len(selected):
        reasons.append(
            f"candidate infrastructure failures {infra['count']}/{len(selected)} "
            f"exceed the threshold of {100 * infra_threshold:g}%"
        )

    # The environment: the candidate's against the release's pins and every frozen row's.
    cand_envs = _keys((by_id.get(pid) for pid in selected), contract)
    mismatches: list[str] = []
    if len(cand_envs) > 1:
        mismatches.append(
            "the candidate was scored in several environments: "
            + "; ".join(_describe_env(k) for k in cand_envs)
        )
    cand_env = cand_envs[0] if len(cand_envs) == 1 else None
    if contract == CONTRACT_PQID_BENCH:
        pins = _release_pins(release)
        if cand_env is not None and pins is not None:
            pinned = {n: v for n, v in pins if v is not None}
            differ = [
                f"{n} {v or 'unknown'} (the release pins {pinned[n]})"
                for n, v in cand_env
                if n in pinned and v != pinned[n]
            ]
            if differ:
                mismatches.append("the candidate was scored with " + ", ".join(differ))
        extra = _package_differences(release, by_id, selected)
        if extra:
            mismatches.append(
                "the candidate's image differs from the release's complete pin "
                "set: "
                + "; ".join(extra[:5])
                + (f" (and {len(extra) - 5} more)" if len(extra) > 5 else "")
            )
    elif (
        release.evaluator_version
        and cand_env
        and dict(cand_env)["evaluator"] != release.evaluator_version
    ):
        mismatches.append(
            f"the candidate was scored with evaluator {dict(cand_env)['evaluator']},"
            f" the release pins {release.evaluator_version}"
        )

    frozen_rows = []
    row_mismatch: dict[EnvKey, list[str]] = {}
    for frozen in release.matrix_rows:
        evs = release.frozen_evaluations(frozen.label)
        row_by_id = {str(ev["prompt_id"]): ev for ev in evs}
        lacking = [pid for pid in selected if pid not in row_by_id]
        if lacking:
            reasons.append(
                f"frozen row {frozen.label} has no evaluation for {len(lacking)} selected prompts"
            )
        row_envs = _keys((row_by_id.get(pid) for pid in selected), contract)
        for key in row_envs:
            if cand_env is not None and key != cand_env:
                row_mismatch.setdefault(key, []).append(frozen.label)
        frozen_rows.append((frozen, evs, row_by_id, row_envs))
    for key, labels in row_mismatch.items():
        more = f" (as were {len(labels) - 1} more rows)" if len(labels) > 1 else ""
        assert cand_env is not None
        mismatches.append(
            f"frozen row {labels[0]} was scored with {_describe_env(key)}{more}, "
            f"the candidate with {_describe_env(cand_env)}"
        )
    if mismatches:
        if not allow_environment_mismatch:
            raise CompareRefused(
                "the candidate and the frozen rows were not scored in the same environment: "
                + "; ".join(mismatches)
                + ". Replay with the release's pinned environment, or "
                "pass --allow-environment-mismatch (the table is then not publishable)"
            )
        reasons.append("environment mismatch: " + "; ".join(mismatches))

    label = CANDIDATE
    if manifest is not None:
        route = manifest.get("route") or {}
        provider = route.get("provider") if isinstance(route, dict) else None
        label = "/".join(str(x) for x in (provider, manifest.get("model")) if x) or CANDIDATE

    rows, table_ = _block(selected, by_id, cand_summary, frozen_rows, label, metrics, gaps)
    identifiability = _identifiability(
        release, selected, candidate, by_id, frozen_rows, label, metrics, gaps
    )
    if identifiability is not None and identifiability["left_out_of_selection"]:
        notes.append(
            f"identifiability subset: {identifiability['selected']} prompts (the "
            f"selection without {', '.join(identifiability['left_out_of_selection'])})"
        )
    data: dict[str, Any] = {
        "format": COMPARISON_FORMAT,
        "release": {
            "name": release.name,
            "version": release.version,
            "digest": release.digest,
            "modified": release.modified,
            "format": release.format,
            "contract": contract,
            "predicate": release.predicate,
        },
        "contract": contract,
        "metrics": [{"key": k, "label": lab, "field": f} for k, lab, f in metrics],
        "gaps": [{"key": k, "label": lab, "minuend": a, "subtrahend": b} for k, lab, a, b in gaps],
        "rank_metric": _rank_metric(metrics),
        "candidate": {
            "label": label,
            "evaluations": str(evaluations_path),
            "manifest": str(candidate_manifest) if candidate_manifest is not None else None,
            "environment": _env_dict(cand_env) if cand_env else None,
            "summary": cand_summary,
            "rank": next(t["rank"] for t in table_ if t["candidate"]),
        },
        "selection": {
            "source": source,
            "split_filter": split,
            "selected": len(selected),
            "splits": touched,
            "complete": complete,
            "restricted_to_candidate": not complete,
        },
        "infrastructure_threshold": infra_threshold,
        "rows": rows,
        "table": sorted(table_, key=_table_order),
        "identifiability": identifiability,
        "publishable": not reasons,
        "not_publishable_reasons": reasons,
        "notes": notes,
        "prompt_ids": selected,
    }
    return Comparison(data)


def _no_matrix_hint(release: Release) -> str:
    from engine.release import FORMAT_PQID_BENCH_CORE

    if release.format == FORMAT_PQID_BENCH_CORE:
        return (
            " (a PQID-Bench core distribution has none: compare needs the evidence "
            "repository, which holds the 21 frozen models)"
        )
    return ""


FrozenEntry = tuple[Any, list[dict[str, Any]], dict[str, dict[str, Any]], list[EnvKey]]


def _rank_metric(metrics: Sequence[Metric]) -> str:
    keys = [k for k, _l, _f in metrics]
    return "signature" if "signature" in keys else "structural_match"


def _table_order(entry: Mapping[str, Any]) -> tuple[int, int, int]:
    rank = entry["rank"]
    return (rank is None, rank if rank is not None else 0, 0 if entry["candidate"] else 1)


def table_entry(
    label: str,
    summary: Mapping[str, Any],
    *,
    kind: str,
    candidate: bool,
    display_name: str | None = None,
    provider: str | None = None,
    model: str | None = None,
    role: str | None = None,
    pairs: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """One line of the drawing table: what the app and the renderings show for a row."""
    return {
        "label": label,
        "display_name": display_name or label,
        "kind": kind,
        "candidate": candidate,
        "provider": provider,
        "model": model,
        "role": role,
        "rank": None,
        "selected": summary["selected"],
        "answered": summary["answered"],
        "infrastructure_failures": summary["infrastructure_failures"]["count"],
        "metrics": {k: dict(v["over_selected"]) for k, v in summary["rates"].items()},
        "metrics_over_answered": {k: dict(v["over_answered"]) for k, v in summary["rates"].items()},
        "gaps_pp": {k: v["over_selected"] for k, v in (summary.get("gaps_pp") or {}).items()},
        "paired": None
        if pairs is None
        else {
            k: {
                "candidate_only": v["candidate_only"],
                "row_only": v["row_only"],
                "difference": v["difference"],
                "mcnemar_exact_p": v["mcnemar_exact_p"],
            }
            for k, v in pairs.items()
        },
    }


def _block(
    ids: list[str],
    by_id: Mapping[str, Mapping[str, Any]],
    cand_summary: Mapping[str, Any],
    frozen_rows: Sequence[FrozenEntry],
    label: str,
    metrics: Sequence[Metric],
    gaps: Sequence[Gap],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The rows (full summaries and paired differences) and the flat table, on `ids`."""
    rows: list[dict[str, Any]] = []
    flat = [table_entry(label, cand_summary, kind=CANDIDATE, candidate=True)]
    for frozen, evs, row_by_id, row_envs in frozen_rows:
        summary = summarize(evs, ids, metrics=metrics, gaps=gaps)
        pairs = {key: paired(by_id, row_by_id, ids, fld) for key, _label, fld in metrics}
        rows.append(
            {
                "label": frozen.label,
                "kind": frozen.kind,
                "provider": frozen.provider,
                "model": frozen.model,
                "display_name": frozen.display_name or frozen.label,
                "role": frozen.role,
                "contract": frozen.contract,
                "summary": summary,
                "environments": [_env_dict(k) for k in row_envs],
                "paired": pairs,
            }
        )
        flat.append(
            table_entry(
                frozen.label,
                summary,
                kind=frozen.kind,
                candidate=False,
                display_name=frozen.display_name,
                provider=frozen.provider,
                model=frozen.model,
                role=frozen.role,
                pairs=pairs,
            )
        )
    rank_key = _rank_metric(metrics)
    ranked = [t for t in flat if t["kind"] != "reference"]
    ranks = competition_ranks([t["metrics"][rank_key]["count"] for t in ranked])
    for entry, rank in zip(ranked, ranks, strict=True):
        entry["rank"] = rank
    by_label = {t["label"]: t["rank"] for t in flat[1:]}
    for row in rows:
        row["rank"] = by_label[row["label"]] if row["kind"] != "reference" else None
        row["gaps_pp"] = {
            k: v["over_selected"] for k, v in (row["summary"].get("gaps_pp") or {}).items()
        }
    return rows, flat


def _identifiability(
    release: Release,
    selected: list[str],
    candidate: list[dict[str, Any]],
    by_id: Mapping[str, Mapping[str, Any]],
    frozen_rows: Sequence[FrozenEntry],
    label: str,
    metrics: Sequence[Metric],
    gaps: Sequence[Gap],
) -> dict[str, Any] | None:
    """The second table: the selection without the prompts the study found not identifiable."""
    from engine.release.pqid_bench_matrix import IDENTIFIABILITY, identifiability_exclusions

    excluded = identifiability_exclusions(release)
    if excluded is None:
        return None
    ids = [pid for pid in selected if pid not in excluded]
    if not ids:
        return None
    summary = summarize(candidate, ids, metrics=metrics, gaps=gaps)
    rows, flat = _block(ids, by_id, summary, frozen_rows, label, metrics, gaps)
    return {
        "source": IDENTIFIABILITY,
        "excluded_prompt_ids": list(excluded),
        "left_out_of_selection": [pid for pid in selected if pid in excluded],
        "selected": len(ids),
        "candidate": {
            "label": label,
            "summary": summary,
            "rank": next(t["rank"] for t in flat if t["candidate"]),
        },
        "rows": rows,
        "table": sorted(flat, key=_table_order),
        "prompt_ids": ids,
    }


# -- renderings ------------------------------------------------------------------------------------


def _metrics_of(data: Mapping[str, Any]) -> list[Metric]:
    return [(m["key"], m["label"], m["field"]) for m in data.get("metrics") or []] or list(METRICS)


def _is_pqid(data: Mapping[str, Any]) -> bool:
    return data.get("contract") == CONTRACT_PQID_BENCH


def _metric_cells(data: Mapping[str, Any], summary: Mapping[str, Any], scope: str) -> list[str]:
    return [fmt_rate(summary["rates"][key][scope]) for key, _label, _field in _metrics_of(data)]


def _table_rows(data: Mapping[str, Any], scope: str) -> list[list[str]]:
    cand = data["candidate"]
    out = [
        [
            cand["label"],
            "candidate",
            *_metric_cells(data, cand["summary"], scope),
            str(cand["summary"]["infrastructure_failures"]["count"]),
        ]
    ]
    for row in data["rows"]:
        out.append(
            [
                row["label"],
                row["kind"],
                *_metric_cells(data, row["summary"], scope),
                str(row["summary"]["infrastructure_failures"]["count"]),
            ]
        )
    return out


def _p_value(p: float) -> str:
    return "p<0.001" if p < 0.001 else f"p={p:.3g}"


def _pair_cell(p: Mapping[str, Any]) -> str:
    return f"+{p['candidate_only']} / -{p['row_only']} ({_p_value(p['mcnemar_exact_p'])})"


def _paired_rows(data: Mapping[str, Any]) -> list[list[str]]:
    return [
        [
            row["label"],
            *(_pair_cell(row["paired"][key]) for key, _label, _field in _metrics_of(data)),
        ]
        for row in data["rows"]
    ]


def _head(data: Mapping[str, Any]) -> list[str]:
    return ["row", "kind", *[label for _k, label, _f in _metrics_of(data)], "infra"]


def _paired_head(data: Mapping[str, Any]) -> list[str]:
    return ["candidate vs", *[label for _k, label, _f in _metrics_of(data)]]


def _facts(data: Mapping[str, Any]) -> list[tuple[str, str]]:
    rel, sel, cand = data["release"], data["selection"], data["candidate"]
    env = cand["environment"]
    splits = ", ".join(f"{s} {v['selected']}/{v['release']}" for s, v in sel["splits"].items())
    facts = [
        (
            "release",
            f"{rel['name']} {rel['version']} (sha256 {rel['digest']}, modified: "
            f"{'yes' if rel['modified'] else 'no'})",
        ),
        ("candidate", f"{cand['label']} ({cand['evaluations']})"),
        ("environment", _describe_env(_env_key_of(env)) if env else "unknown"),
        (
            "prompts",
            f"{sel['selected']} selected from the {sel['source']} ({splits}); "
            + (
                "complete"
                if sel["complete"]
                else "PARTIAL: every row restricted to these prompt IDs"
            ),
        ),
        (
            "publishable",
            "yes" if data["publishable"] else "NO: " + "; ".join(data["not_publishable_reasons"]),
        ),
    ]
    if _is_pqid(data):
        facts.insert(
            2, ("contract", f"{data['contract']}, predicate {rel.get('predicate') or 'unknown'}")
        )
        models = sum(1 for r in data["rows"] if r["kind"] == "model")
        facts.insert(
            3,
            (
                "rank",
                f"{cand['rank']} of {models + 1} by {data['rank_metric']} (ties share a rank)",
            ),
        )
    return facts


_LEGEND = (
    "Counts are successes/denominator. Paired: +N prompts where the candidate succeeds "
    "and the row fails, -N the reverse (exact McNemar p). Infrastructure failures "
    "(no_response, not_evaluated, missing) count as failures over selected prompts and "
    "are left out over answered prompts."
)
_PQID_LEGEND = (
    "Execution: the code ran and defined a circuit. Assembly: the circuit exported "
    "to QASM 3. Signature: qubits, clbits, gate count and the gate-type count map "
    "all match the reference. Gaps: execution (or assembly) rate minus signature "
    "rate, in percentage points. " + _LEGEND
)


# The PQID-Bench tables: ranked rows, headline metrics, gaps, then the components.
_PQID_HEADLINE = ("execution", "assembly", "signature")


def _pqid_head(data: Mapping[str, Any]) -> list[str]:
    labels = {k: lab for k, lab, _f in _metrics_of(data)}
    return [
        "rank",
        "row",
        "kind",
        *[labels[k] for k in _PQID_HEADLINE],
        *[g["label"] for g in data["gaps"]],
        *[labels[k] for k in labels if k not in _PQID_HEADLINE],
        "infra",
    ]


def _pct(r: Mapping[str, Any]) -> str:
    """`153/154 99.35%`: two decimals, as PQID-Bench publishes its rates."""
    shown = "-" if r.get("rate") is None else f"{100 * r['rate']:.2f}%"
    return f"{r['count']}/{r['denominator']} {shown}"


def _pqid_rows(
    data: Mapping[str, Any], table_: Sequence[Mapping[str, Any]], scope: str = "metrics"
) -> list[list[str]]:
    out = []
    for t in table_:
        m = t[scope]
        name = t["display_name"]
        if t["candidate"] and name != CANDIDATE:
            name += " (candidate)"
        out.append(
            [
                str(t["rank"]) if t["rank"] is not None else "-",
                name,
                t["kind"],
                *[_pct(m[k]) for k in _PQID_HEADLINE],
                *[
                    fmt_pp(t["gaps_pp"].get(g["key"])) if scope == "metrics" else "-"
                    for g in data["gaps"]
                ],
                *[_pct(m[k]) for k, _l, _f in _metrics_of(data) if k not in _PQID_HEADLINE],
                str(t["infrastructure_failures"]),
            ]
        )
    return out


def _pqid_paired(
    data: Mapping[str, Any], table_: Sequence[Mapping[str, Any]], keys: Sequence[str]
) -> tuple[list[str], list[list[str]]]:
    labels = {k: lab for k, lab, _f in _metrics_of(data)}
    head = ["candidate vs", *[labels[k] for k in keys]]
    rows = [
        [t["display_name"], *(_pair_cell(t["paired"][k]) for k in keys)]
        for t in table_
        if not t["candidate"]
    ]
    return head, rows


def _pqid_sections(data: Mapping[str, Any]) -> list[tuple[str, list[str], list[list[str]]]]:
    """(title, head, rows) of every PQID-Bench table, in reading order."""
    keys = [k for k, _l, _f in _metrics_of(data)]
    sections = [
        (
            "over all selected prompts, ranked by signature",
            _pqid_head(data),
            _pqid_rows(data, data["table"]),
        )
    ]
    if any(t["infrastructure_failures"] for t in data["table"]):
        sections.append(
            (
                "over answered prompts",
                _pqid_head(data),
                _pqid_rows(data, data["table"], "metrics_over_answered"),
            )
        )
    head, rows = _pqid_paired(data, data["table"], keys)
    sections.append(("paired differences, candidate vs each row", head, rows))
    ident = data.get("identifiability")
    if ident is not None:
        title = (
            f"identifiability subset: {ident['selected']} prompts (without "
            f"{', '.join(ident['excluded_prompt_ids'])})"
        )
        sections.append((title, _pqid_head(data), _pqid_rows(data, ident["table"])))
        head, rows = _pqid_paired(data, ident["table"], _PQID_HEADLINE)
        sections.append(
            (f"paired differences on the {ident['selected']} identifiable prompts", head, rows)
        )
    return sections


def _render_text(data: Mapping[str, Any]) -> str:
    lines = [
        "pqid-tui comparison with the frozen matrix",
        "",
        *fact_lines(_facts(data), data["notes"]),
    ]
    if _is_pqid(data):
        for title, head, rows in _pqid_sections(data):
            lines += ["", title, *table(head, rows)]
        lines += ["", _PQID_LEGEND]
        return "\n".join(lines) + "\n"
    lines += [
        "",
        "over all selected prompts",
        *table(_head(data), _table_rows(data, "over_selected")),
    ]
    lines += ["", "over answered prompts", *table(_head(data), _table_rows(data, "over_answered"))]
    lines += [
        "",
        "paired differences, candidate vs each row",
        *table(_paired_head(data), _paired_rows(data)),
    ]
    lines += ["", _LEGEND]
    return "\n".join(lines) + "\n"


def _render_markdown(data: Mapping[str, Any]) -> str:
    lines = ["# Comparison with the frozen matrix", ""]
    lines += [f"- **{k}**: {v}" for k, v in _facts(data)]
    lines += [f"- **note**: {n}" for n in data["notes"]]
    if _is_pqid(data):
        for title, head, rows in _pqid_sections(data):
            lines += ["", f"## {title[0].upper()}{title[1:]}", "", *md_table(head, rows)]
        lines += ["", _PQID_LEGEND]
        return "\n".join(lines) + "\n"
    lines += [
        "",
        "## Over all selected prompts",
        "",
        *md_table(_head(data), _table_rows(data, "over_selected")),
    ]
    lines += [
        "",
        "## Over answered prompts",
        "",
        *md_table(_head(data), _table_rows(data, "over_answered")),
    ]
    lines += [
        "",
        "## Paired differences, candidate vs each row",
        "",
        *md_table(_paired_head(data), _paired_rows(data)),
        "",
        _LEGEND,
    ]
    return "\n".join(lines) + "\n"


CSV_COLUMNS = (
    "subset",
    "row",
    "display_name",
    "kind",
    "rank",
    "metric",
    "scope",
    "count",
    "denominator",
    "rate",
    "candidate_only",
    "row_only",
    "mcnemar_exact_p",
    "release",
    "release_digest",
    "release_modified",
    "publishable",
)


def _csv_block(
    data: Mapping[str, Any],
    subset: str,
    candidate: Mapping[str, Any],
    rows_: Sequence[Mapping[str, Any]],
    tail: Sequence[Any],
) -> list[Sequence[Any]]:
    out: list[Sequence[Any]] = []
    cand_label = data["candidate"]["label"]
    entries = [(cand_label, cand_label, "candidate", candidate["rank"], candidate["summary"], None)]
    entries += [
        (
            r["label"],
            r.get("display_name") or r["label"],
            r["kind"],
            r.get("rank"),
            r["summary"],
            r["paired"],
        )
        for r in rows_
    ]
    for label, shown, kind, rank, summary, pairs in entries:
        head = (subset, label, shown, kind, "" if rank is None else rank)
        for key, _l, _f in _metrics_of(data):
            for scope in ("over_selected", "over_answered"):
                r = summary["rates"][key][scope]
                p = pairs[key] if pairs and scope == "over_selected" else None
                out.append(
                    (
                        *head,
                        key,
                        scope.removeprefix("over_"),
                        r["count"],
                        r["denominator"],
                        "" if r["rate"] is None else r["rate"],
                        p["candidate_only"] if p else "",
                        p["row_only"] if p else "",
                        p["mcnemar_exact_p"] if p else "",
                        *tail,
                    )
                )
        for key, value in (summary.get("gaps_pp") or {}).items():
            for scope in ("over_selected", "over_answered"):
                out.append(
                    (
                        *head,
                        f"{key}_pp",
                        scope.removeprefix("over_"),
                        "",
                        "",
                        "" if value[scope] is None else value[scope],
                        "",
                        "",
                        "",
                        *tail,
                    )
                )
        infra = summary["infrastructure_failures"]
        out.append(
            (
                *head,
                "infrastructure_failures",
                "selected",
                infra["count"],
                infra["denominator"],
                "" if infra["rate"] is None else infra["rate"],
                "",
                "",
                "",
                *tail,
            )
        )
    return out


def _render_csv(data: Mapping[str, Any]) -> str:
    rel = data["release"]
    tail = (f"{rel['name']} {rel['version']}", rel["digest"], rel["modified"], data["publishable"])
    rows = _csv_block(data, "all", data["candidate"], data["rows"], tail)
    ident = data.get("identifiability")
    if ident is not None:
        rows += _csv_block(data, "identifiable", ident["candidate"], ident["rows"], tail)
    return to_csv(CSV_COLUMNS, rows)


__all__ = [
    "COMPARISON_FORMAT",
    "DEFAULT_INFRA_THRESHOLD",
    "FORMATS",
    "INFRA_CATEGORIES",
    "Comparison",
    "compare",
    "competition_ranks",
    "read_manifest",
    "table_entry",
]
