"""What the Replay screen asks of the engine, as one small interface with a Docker-backed default.

Every method blocks (the docker SDK does), so the screen calls them from thread workers.
`ReplayService` is the seam the tests fill with a fake; `EngineReplayService` calls the
engine's replay, compare and Docker functions and does no evaluation work of its own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from engine.errors import PqidError, UsageError
from engine.events import ProgressCallback
from engine.rundir.layout import EVALUATION_DIR, EVALUATIONS_FILE, MANIFEST, RESPONSES
from pqid_tui.widgets.sort_table import Cell, Column, Row

if TYPE_CHECKING:
    from engine.replay.compare import Comparison as EngineComparison
    from engine.replay.docker import DockerEvaluatorRunner

METRICS = ("execution", "structural_match", "qasm3_export", "equivalence")
COMPARISON_STEM = "pqid_bench_comparison"
COMPARISON_FILES = {"text": "txt", "markdown": "md", "json": "json", "csv": "csv"}


@dataclass(frozen=True, slots=True)
class ImageOptions:
    """Inputs of the evaluator image: base image, offline wheelhouse, the release's pins."""

    base_image: str | None = None
    wheelhouse: Path | None = None
    requirements: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class DockerStatus:
    """Whether replay can run here, and what it would use."""

    reachable: bool
    version: str | None = None
    image: str | None = None
    image_present: bool = False
    detail: str = ""


@dataclass(frozen=True, slots=True)
class CompareRow:
    """One row of the comparison: hit counts over `denominator` selected prompts.

    `denominators` overrides the denominator of single metrics; `extra` holds the cells of
    the comparison's further columns (gaps, paired differences, rank), by column key.
    """

    label: str
    kind: str
    denominator: int
    counts: dict[str, int] = field(default_factory=dict)
    partial: bool = False
    answered: int | None = None
    display_name: str | None = None
    candidate: bool | None = None  # None: the row whose kind is "candidate"
    extra: dict[str, Cell] = field(default_factory=dict)
    denominators: dict[str, int] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.display_name or self.label

    @property
    def is_candidate(self) -> bool:
        return self.kind == "candidate" if self.candidate is None else self.candidate

    def denominator_of(self, metric: str) -> int:
        return self.denominators.get(metric, self.denominator)

    def rate(self, metric: str) -> float:
        n = self.denominator_of(metric)
        return self.counts.get(metric, 0) / n if n else 0.0

    def rate_cell(self, metric: str, decimals: int = 1) -> Cell:
        if metric not in self.counts:
            return Cell("", None)
        n = self.denominator_of(metric)
        if not n:
            return Cell(f"- (0/{n})", None)
        return Cell(
            f"{self.rate(metric) * 100:.{decimals}f}% ({self.counts[metric]}/{n})",
            self.rate(metric),
        )


@dataclass(frozen=True, slots=True)
class SubTable:
    """A further table of the comparison (the identifiability subset), shown as given."""

    title: str
    columns: tuple[Column, ...]
    rows: tuple[Row, ...]
    note: str = ""
    sort_key: str | None = None


@dataclass(frozen=True, slots=True)
class Comparison:
    """The candidate against the frozen rows, on the same prompt IDs.

    Its columns come from the data: the rate columns are `metrics` (headers in
    `metric_labels`), `lead_columns` go before the row's name (a rank), `placed` columns right
    after the metric they are keyed by (a gap after the rates it subtracts), `extra_columns`
    after the rates (paired differences), each row holding their cells in `extra`. Rates show
    `decimals` decimals (PQID-Bench publishes two).
    """

    prompt_count: int
    partial: bool
    rows: tuple[CompareRow, ...]
    metrics: tuple[str, ...] = METRICS
    note: str = ""
    metric_labels: dict[str, str] = field(default_factory=dict)
    lead_columns: tuple[Column, ...] = ()
    extra_columns: tuple[Column, ...] = ()
    tables: tuple[SubTable, ...] = ()
    primary: str | None = None  # the metric shown first in the chart
    placed: dict[str, tuple[Column, ...]] = field(default_factory=dict)
    decimals: int = 1

    def label_of(self, metric: str) -> str:
        return self.metric_labels.get(metric) or metric.replace("_", " ")

    def columns(self) -> tuple[Column, ...]:
        """Every column of the comparison table, left to right."""
        named = any(r.display_name and r.display_name != r.label for r in self.rows)
        cols = [
            *self.lead_columns,
            Column("row", "row"),
            Column("kind", "kind"),
            Column("n", "n", numeric=True),
        ]
        if any(r.answered is not None for r in self.rows):
            cols.append(Column("answered", "answered", numeric=True))
        for m in self.metrics:
            cols += [Column(m, self.label_of(m), numeric=True), *self.placed.get(m, ())]
        cols += list(self.extra_columns)
        if named:  # the release's own identifiers, as the batch mode prints them
            cols.append(Column("label", "label"))
        if any(r.partial for r in self.rows):
            cols.append(Column("partial", "partial"))
        return tuple(cols)

    def table_rows(self) -> tuple[Row, ...]:
        """The rows as table cells, the candidate highlighted (file order)."""
        out = []
        for i, r in enumerate(self.rows):
            cells: dict[str, Cell] = {
                "row": Cell(r.name, r.name),
                "label": Cell(r.label, r.label),
                "kind": Cell(r.kind, r.kind),
                "n": Cell(str(r.denominator), r.denominator),
                "partial": Cell("partial" if r.partial else "", "partial" if r.partial else ""),
            }
            if r.answered is not None:
                cells["answered"] = Cell(str(r.answered), r.answered)
            cells.update({m: r.rate_cell(m, self.decimals) for m in self.metrics})
            cells.update(r.extra)
            out.append(Row(f"{i}:{r.label}", cells, highlight=r.is_candidate))
        return tuple(out)


class ReplayService(Protocol):
    """Docker status, image build, replay, comparison and export for the Replay screen."""

    def docker_status(self, options: ImageOptions) -> DockerStatus: ...

    def build_image(self, options: ImageOptions, progress: ProgressCallback) -> str: ...

    def replay(
        self,
        run_dir: Path,
        release_dir: Path,
        options: ImageOptions,
        progress: ProgressCallback,
        *,
        acknowledge_code_execution: bool,
        overwrite: bool,
    ) -> dict[str, int]: ...

    def compare(self, run_dir: Path, release_dir: Path, *, allow_partial: bool) -> Comparison: ...

    def taxonomy(self, run_dir: Path) -> dict[str, int]: ...

    def export(self, run_dir: Path, release_dir: Path, *, allow_partial: bool) -> list[Path]: ...


class EngineReplayService:
    """The product's replay service: the engine's Docker runner, replay and compare."""

    def __init__(self, client: Any = None) -> None:
        self._client = client

    def _runner(self, options: ImageOptions) -> DockerEvaluatorRunner:
        from engine.replay.docker import DockerEvaluatorRunner

        runner = DockerEvaluatorRunner(
            base_image=options.base_image,
            wheelhouse=options.wheelhouse,
            requirements=options.requirements,
            client=self._client,
        )
        self._client = runner.client
        return runner

    def docker_status(self, options: ImageOptions) -> DockerStatus:
        from engine.replay.docker import connect

        try:
            client = connect(self._client)
            version = str(client.version().get("Version", "?"))
        except PqidError as exc:
            return DockerStatus(False, detail=str(exc))
        self._client = client
        from docker.errors import ImageNotFound

        try:
            runner = self._runner(options)
        except PqidError as exc:
            return DockerStatus(True, version, None, False, str(exc))
        try:
            tag = runner.image_tag()
        except PqidError as exc:
            try:
                client.images.get(runner.base_image)
            except ImageNotFound:
                # The engine's words are for the batch mode's flags; these are the screen's.
                return DockerStatus(
                    True,
                    version,
                    None,
                    False,
                    (
                        f"the base image {runner.base_image} is not on this Docker Engine: Build "
                        "image pulls it (a registry must be reachable), or enter a local base "
                        "image above (one made by .ci/base-image, for instance)"
                    ),
                )
            return DockerStatus(True, version, None, False, str(exc))
        try:
            client.images.get(tag)
            present = True
        except ImageNotFound:
            present = False
        return DockerStatus(
            True, version, tag, present, "" if present else "the evaluator image needs a build"
        )

    def build_image(self, options: ImageOptions, progress: ProgressCallback) -> str:
        return str(self._runner(options).ensure_image(build=True, progress=progress))

    def replay(
        self,
        run_dir: Path,
        release_dir: Path,
        options: ImageOptions,
        progress: ProgressCallback,
        *,
        acknowledge_code_execution: bool,
        overwrite: bool,
    ) -> dict[str, int]:
        from engine.replay.replay import replay

        result = replay(
            release_dir,
            run_dir / RESPONSES,
            run_dir / EVALUATION_DIR,
            acknowledge_code_execution=acknowledge_code_execution,
            base_image=options.base_image,
            wheelhouse=options.wheelhouse,
            progress=progress,
            runner=self._runner(options),
            overwrite=overwrite,
        )
        return {k: int(v) for k, v in result.summary.get("categories", {}).items() if v}

    def _compare(self, run_dir: Path, release_dir: Path, allow_partial: bool) -> EngineComparison:
        from engine.release import load_release
        from engine.replay.compare import compare, publishable_split, read_manifest

        path = run_dir / EVALUATION_DIR / EVALUATIONS_FILE
        if not path.is_file():
            raise UsageError(f"{run_dir.name} has not been replayed yet: start a replay first")
        release = load_release(release_dir)
        manifest = run_dir / MANIFEST
        selected = read_manifest(manifest, release)["selected_prompt_ids"]
        # Like `--batch demo`: on a run over several splits, the publishable test split.
        return compare(
            release,
            path,
            candidate_manifest=manifest,
            allow_partial=allow_partial,
            split=publishable_split(release, selected),
        )

    def compare(self, run_dir: Path, release_dir: Path, *, allow_partial: bool) -> Comparison:
        return comparison_from_engine(self._compare(run_dir, release_dir, allow_partial).data)

    def taxonomy(self, run_dir: Path) -> dict[str, int]:
        from engine.run.runs import evaluation_counts

        return evaluation_counts(run_dir)

    def export(self, run_dir: Path, release_dir: Path, *, allow_partial: bool) -> list[Path]:
        """The comparison in the batch mode's four formats, beside the run's evaluations."""
        from engine.rundir.storage import atomic_write_bytes

        comparison = self._compare(run_dir, release_dir, allow_partial)
        out = run_dir / EVALUATION_DIR
        paths = []
        for fmt, ext in COMPARISON_FILES.items():
            path = out / f"{COMPARISON_STEM}.{ext}"
            atomic_write_bytes(path, comparison.render(fmt).encode())
            paths.append(path)
        return paths


def _p_text(p: float | None) -> str:
    if p is None:
        return ""
    return "p<0.001" if p < 0.001 else f"p={p:.3g}"


def paired_cell(pair: Mapping[str, Any] | None) -> Cell:
    """`+b −c p=…`: prompts only the candidate gets right, only the row, exact McNemar p;
    sorted by b − c."""
    if not pair:
        return Cell("", None)
    b, c = int(pair["candidate_only"]), int(pair["row_only"])
    return Cell(f"+{b} −{c} {_p_text(pair.get('mcnemar_exact_p'))}".rstrip(), b - c)


def gap_cell(value: float | None, decimals: int = 1) -> Cell:
    """A difference of two rates in percentage points."""
    return Cell("-", None) if value is None else Cell(f"{value:+.{decimals}f} pp", float(value))


def _legacy_table(data: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Flat entries from a comparison without `table` (the earlier pqid-comparison/1 shape)."""

    def entry(row: Mapping[str, Any], candidate: bool) -> dict[str, Any]:
        summary = row["summary"]
        return {
            "label": row["label"],
            "display_name": row.get("display_name"),
            "kind": "candidate" if candidate else row["kind"],
            "candidate": candidate,
            "rank": None,
            "selected": summary["selected"],
            "answered": summary["answered"],
            "infrastructure_failures": summary["infrastructure_failures"]["count"],
            "metrics": {k: v["over_selected"] for k, v in summary["rates"].items()},
            "gaps_pp": {},
            "paired": None if candidate else row.get("paired"),
        }

    return [entry(data["candidate"], True)] + [entry(r, False) for r in data["rows"]]


Gap = tuple[str, str, str | None, str | None]  # key, label, minuend and subtrahend metrics


def _view(
    entries: Sequence[Mapping[str, Any]],
    metrics: tuple[str, ...],
    labels: dict[str, str],
    gaps: list[Gap],
    partial: bool,
    prompt_count: int,
    *,
    note: str = "",
    primary: str | None = None,
    decimals: int = 1,
) -> Comparison:
    """The comparison's table from flat entries: every metric, gap and paired difference the
    entries hold, a rank when the engine gives one."""
    placed: dict[str, tuple[Column, ...]] = {}
    extra: list[Column] = []
    for key, label, minuend, subtrahend in gaps:
        column = Column(f"gap:{key}", label, numeric=True)
        anchors = [metrics.index(m) for m in (minuend, subtrahend) if m in metrics]
        if anchors:  # right after the later of the two rates it subtracts
            anchor = metrics[max(anchors)]
            placed[anchor] = (*placed.get(anchor, ()), column)
        else:
            extra.append(column)
    if any(e.get("infrastructure_failures") for e in entries):
        extra.append(Column("infra", "infra", numeric=True))
    paired_keys = [k for k in metrics if any(k in (e.get("paired") or {}) for e in entries)]
    extra += [Column(f"paired:{k}", f"vs {labels.get(k, k)}", numeric=True) for k in paired_keys]
    ranked = any(e.get("rank") is not None for e in entries)
    lead = (Column("rank", "rank", numeric=True, descending=False),) if ranked else ()

    rows = []
    for e in entries:
        cells: dict[str, Cell] = {}
        if ranked:
            rank = e.get("rank")
            cells["rank"] = Cell("" if rank is None else str(rank), rank)
        for key, _label, _a, _b in gaps:
            cells[f"gap:{key}"] = gap_cell((e.get("gaps_pp") or {}).get(key), decimals)
        infra = e.get("infrastructure_failures")
        cells["infra"] = Cell("" if infra is None else str(infra), infra)
        for k in paired_keys:
            cells[f"paired:{k}"] = paired_cell((e.get("paired") or {}).get(k))
        found = {k: v for k, v in (e.get("metrics") or {}).items() if k in metrics}
        rows.append(
            CompareRow(
                str(e["label"]),
                str(e["kind"]),
                int(e["selected"]),
                {k: int(v["count"]) for k, v in found.items()},
                partial,
                None if e.get("answered") is None else int(e["answered"]),
                display_name=e.get("display_name"),
                candidate=bool(e.get("candidate")),
                extra=cells,
                denominators={k: int(v["denominator"]) for k, v in found.items()},
            )
        )
    return Comparison(
        prompt_count,
        partial,
        tuple(rows),
        metrics,
        note,
        metric_labels=labels,
        lead_columns=lead,
        extra_columns=tuple(extra),
        primary=primary,
        placed=placed,
        decimals=decimals,
    )


def comparison_from_engine(data: dict[str, Any]) -> Comparison:
    """The screen's view of `engine.replay.compare.Comparison.data`: its rows with every metric, gap
    and paired difference it holds, over the selected prompts; a subset table if it has one."""
    from engine.release import CONTRACT_PQID_BENCH
    from engine.replay.evaluations import METRICS as ENGINE_METRICS

    partial = not data["selection"]["complete"]
    named = [(str(m["key"]), str(m.get("label") or m["key"])) for m in data.get("metrics") or ()]
    if not named:
        rates = data["candidate"]["summary"]["rates"]
        named = [(k, lab) for k, lab, _f in ENGINE_METRICS if k in rates]
    metrics = tuple(k for k, _l in named)
    labels = dict(named)
    gaps: list[Gap] = [
        (str(g["key"]), str(g.get("label") or g["key"]), g.get("minuend"), g.get("subtrahend"))
        for g in data.get("gaps") or ()
    ]
    primary = data.get("rank_metric") if data.get("rank_metric") in metrics else None
    # PQID-Bench publishes its rates with two decimals (91.22%); the batch mode prints them so.
    decimals = 2 if data.get("contract") == CONTRACT_PQID_BENCH else 1
    notes = list(data.get("notes") or [])
    if data.get("publishable"):
        notes.append("publishable")
    else:
        notes.append("not publishable: " + "; ".join(data.get("not_publishable_reasons") or []))
    entries = data.get("table") or _legacy_table(data)
    main = _view(
        entries,
        metrics,
        labels,
        gaps,
        partial,
        int(data["selection"]["selected"]),
        note=" | ".join(notes),
        primary=primary,
        decimals=decimals,
    )
    subset = data.get("identifiability")
    if not (isinstance(subset, Mapping) and subset.get("table")):
        return main
    view = _view(
        subset["table"], metrics, labels, gaps, partial, int(subset["selected"]), decimals=decimals
    )
    left_out = list(subset.get("left_out_of_selection") or [])
    note = (
        f"the selection without the {len(left_out)} prompts that the study's "
        f"identifiability analysis leaves out ({', '.join(left_out)})"
        if left_out
        else "no selected prompt is left out by the study's identifiability analysis"
    )
    if subset.get("source"):
        note += f"; source {subset['source']}"
    table = SubTable(
        f"Identifiability subset: {subset['selected']} prompts",
        view.columns(),
        view.table_rows(),
        note,
        "rank" if view.lead_columns else primary,
    )
    return replace(main, tables=(table,))


def default_replay_service() -> ReplayService:
    return EngineReplayService()
