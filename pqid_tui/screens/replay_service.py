"""What the Replay screen asks of the engine, as one small interface with a Docker-backed default.

Every method blocks (the docker SDK does), so the screen calls them from thread workers.
`ReplayService` is the seam the tests fill with a fake; `EngineReplayService` calls the
engine's replay, compare and Docker functions and does no evaluation work of its own.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from engine.errors import PqidError, UsageError
from engine.events import ProgressCallback

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
    """One row of the comparison: hit counts over `denominator` selected prompts."""

    label: str
    kind: str
    denominator: int
    counts: dict[str, int] = field(default_factory=dict)
    partial: bool = False
    answered: int | None = None

    def rate(self, metric: str) -> float:
        return self.counts.get(metric, 0) / self.denominator if self.denominator else 0.0


@dataclass(frozen=True, slots=True)
class Comparison:
    """The candidate against the frozen rows, on the same prompt IDs."""

    prompt_count: int
    partial: bool
    rows: tuple[CompareRow, ...]
    metrics: tuple[str, ...] = METRICS
    note: str = ""


class ReplayService(Protocol):
    """Docker status, image build, replay, comparison and export for the Replay screen."""

    def docker_status(self, options: ImageOptions) -> DockerStatus: ...

    def build_image(self, options: ImageOptions, progress: ProgressCallback) -> str: ...

    def replay(self, run_dir: Path, release_dir: Path, options: ImageOptions,
               progress: ProgressCallback, *, acknowledge_code_execution: bool,
               overwrite: bool) -> dict[str, int]: ...

    def compare(self, run_dir: Path, release_dir: Path, *, allow_partial: bool) -> Comparison: ...

    def taxonomy(self, run_dir: Path) -> dict[str, int]: ...

    def export(self, run_dir: Path, release_dir: Path, *, allow_partial: bool) -> list[Path]: ...


class EngineReplayService:
    """The product's replay service: the engine's Docker runner, replay and compare."""

    def __init__(self, client: Any = None) -> None:
        self._client = client

    def _runner(self, options: ImageOptions) -> Any:
        from engine.docker_runner import DockerEvaluatorRunner

        runner = DockerEvaluatorRunner(base_image=options.base_image,
                                       wheelhouse=options.wheelhouse,
                                       requirements=options.requirements, client=self._client)
        self._client = runner.client
        return runner

    def docker_status(self, options: ImageOptions) -> DockerStatus:
        from engine.docker_runner import connect

        try:
            client = connect(self._client)
            version = str(client.version().get("Version", "?"))
        except PqidError as exc:
            return DockerStatus(False, detail=str(exc))
        self._client = client
        try:
            tag = self._runner(options).image_tag()
        except PqidError as exc:
            return DockerStatus(True, version, None, False, str(exc))
        from docker.errors import ImageNotFound

        try:
            client.images.get(tag)
            present = True
        except ImageNotFound:
            present = False
        return DockerStatus(True, version, tag, present,
                            "" if present else "the evaluator image needs a build")

    def build_image(self, options: ImageOptions, progress: ProgressCallback) -> str:
        return str(self._runner(options).ensure_image(build=True, progress=progress))

    def replay(self, run_dir: Path, release_dir: Path, options: ImageOptions,
               progress: ProgressCallback, *, acknowledge_code_execution: bool,
               overwrite: bool) -> dict[str, int]:
        from engine.replay import replay

        result = replay(release_dir, run_dir / "responses.jsonl", run_dir / "evaluation",
                        acknowledge_code_execution=acknowledge_code_execution,
                        base_image=options.base_image, wheelhouse=options.wheelhouse,
                        progress=progress, runner=self._runner(options), overwrite=overwrite)
        return {k: int(v) for k, v in result.summary.get("categories", {}).items() if v}

    def _compare(self, run_dir: Path, release_dir: Path, allow_partial: bool) -> Any:
        from engine.compare import compare, publishable_split
        from engine.release import load_release
        from engine.runs import EVALUATIONS_FILE

        path = run_dir / EVALUATIONS_FILE
        if not path.is_file():
            raise UsageError(f"{run_dir.name} has not been replayed yet: start a replay first")
        release = load_release(release_dir)
        manifest = run_dir / "run-manifest.json"
        try:
            selected = json.loads(manifest.read_text()).get("selected_prompt_ids") or []
        except (OSError, ValueError, AttributeError):
            selected = []
        # Like `--batch demo`: on a run over several splits, the publishable test split.
        return compare(release, path, candidate_manifest=manifest, allow_partial=allow_partial,
                       split=publishable_split(release, selected))

    def compare(self, run_dir: Path, release_dir: Path, *, allow_partial: bool) -> Comparison:
        return comparison_from_engine(self._compare(run_dir, release_dir, allow_partial).data)

    def taxonomy(self, run_dir: Path) -> dict[str, int]:
        from engine.runs import evaluation_counts

        return evaluation_counts(run_dir)

    def export(self, run_dir: Path, release_dir: Path, *, allow_partial: bool) -> list[Path]:
        """The comparison in the batch mode's four formats, beside the run's evaluations."""
        from engine.storage import atomic_write_bytes

        comparison = self._compare(run_dir, release_dir, allow_partial)
        out = run_dir / "evaluation"
        paths = []
        for fmt, ext in COMPARISON_FILES.items():
            path = out / f"{COMPARISON_STEM}.{ext}"
            atomic_write_bytes(path, comparison.render(fmt).encode())
            paths.append(path)
        return paths


def comparison_from_engine(data: dict[str, Any]) -> Comparison:
    """The screen's view of `engine.compare.Comparison.data`: rates over the selected prompts."""
    partial = not data["selection"]["complete"]

    def row(label: str, kind: str, summary: dict[str, Any]) -> CompareRow:
        rates = summary["rates"]
        counts = {key: int(rates[key]["over_selected"]["count"]) for key in METRICS
                  if key in rates}
        return CompareRow(label, kind, int(summary["selected"]), counts, partial,
                          int(summary["answered"]))

    cand = data["candidate"]
    rows = [row(cand["label"], "candidate", cand["summary"])]
    rows += [row(r["label"], r["kind"], r["summary"]) for r in data["rows"]]
    notes = list(data.get("notes") or [])
    if data.get("publishable"):
        notes.append("publishable")
    else:
        notes.append("not publishable: " + "; ".join(data.get("not_publishable_reasons") or []))
    return Comparison(int(data["selection"]["selected"]), partial, tuple(rows), METRICS,
                      " | ".join(notes))


def default_replay_service() -> ReplayService:
    return EngineReplayService()
