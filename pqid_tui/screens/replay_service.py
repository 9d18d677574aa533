"""What the Replay screen asks of the engine, as one small interface with a Docker-backed default.

Every method blocks (the docker SDK does), so the screen calls them from thread workers.
`ReplayService` is the seam the tests fill with a fake; `EngineReplayService` calls the
engine's replay, compare and Docker functions and does no evaluation work of its own.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from engine.errors import PqidError, UsageError
from engine.events import ProgressCallback

METRICS = ("structural_match", "execution_ok", "circuit_found", "qasm3_ok", "equivalent")


@dataclass(frozen=True, slots=True)
class ImageOptions:
    """Inputs of the evaluator image: the base image and an optional offline wheelhouse."""

    base_image: str | None = None
    wheelhouse: Path | None = None


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
    """One row of the comparison: counts over `denominator` prompts."""

    label: str
    kind: str
    denominator: int
    counts: dict[str, int] = field(default_factory=dict)
    partial: bool = False

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

    def replay(self, run_dir: Path, options: ImageOptions,
               progress: ProgressCallback) -> dict[str, int]: ...

    def compare(self, run_dir: Path, release_dir: Path, *, allow_partial: bool) -> Comparison: ...

    def taxonomy(self, run_dir: Path) -> dict[str, int]: ...

    def export(self, run_dir: Path, release_dir: Path, *, allow_partial: bool) -> list[Path]: ...


def _engine_module(name: str) -> Any:
    try:
        return importlib.import_module(f"engine.{name}")
    except ModuleNotFoundError as exc:
        if exc.name != f"engine.{name}":
            raise
        raise UsageError(f"this build has no engine.{name} yet; use the batch mode when it "
                         "lands") from None


class EngineReplayService:
    """The product's replay service: the engine's Docker runner, replay and compare."""

    def __init__(self, client: Any = None) -> None:
        self._client = client

    def _runner(self, options: ImageOptions) -> Any:
        from engine.docker_runner import DockerEvaluatorRunner

        return DockerEvaluatorRunner(base_image=options.base_image,
                                     wheelhouse=options.wheelhouse, client=self._client)

    def docker_status(self, options: ImageOptions) -> DockerStatus:
        from engine.docker_runner import connect

        try:
            client = connect(self._client)
            version = str(client.version().get("Version", "?"))
        except PqidError as exc:
            return DockerStatus(False, detail=str(exc))
        self._client = client
        try:
            runner = self._runner(options)
            tag = runner.image_tag()
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

    def replay(self, run_dir: Path, options: ImageOptions,
               progress: ProgressCallback) -> dict[str, int]:
        replay = _engine_module("replay")
        result = replay.replay_run(run_dir, runner=self._runner(options), progress=progress)
        counts = getattr(result, "counts", None)
        return dict(counts) if isinstance(counts, dict) else self.taxonomy(run_dir)

    def compare(self, run_dir: Path, release_dir: Path, *, allow_partial: bool) -> Comparison:
        compare = _engine_module("compare")
        table = compare.compare_run(run_dir, release_dir, allow_partial=allow_partial)
        return comparison_from_engine(table)

    def taxonomy(self, run_dir: Path) -> dict[str, int]:
        from engine.runs import evaluation_counts

        return evaluation_counts(run_dir)

    def export(self, run_dir: Path, release_dir: Path, *, allow_partial: bool) -> list[Path]:
        compare = _engine_module("compare")
        return [Path(p) for p in compare.export_comparison(run_dir, release_dir,
                                                           allow_partial=allow_partial)]


def comparison_from_engine(table: Any) -> Comparison:
    """Adapt the engine's comparison (an object or its dict) to the screen's view of it."""
    data = table.to_dict() if hasattr(table, "to_dict") else dict(table)
    rows: list[CompareRow] = []
    for row in data.get("rows", []):
        counts = {k: int(v) for k, v in (row.get("counts") or {}).items()
                  if isinstance(v, int | float)}
        rows.append(CompareRow(str(row.get("label")), str(row.get("kind", "")),
                               int(row.get("denominator") or row.get("n") or 0), counts,
                               bool(row.get("partial", data.get("partial", False)))))
    metrics: Sequence[str] = data.get("metrics") or METRICS
    return Comparison(int(data.get("prompt_count") or 0), bool(data.get("partial", False)),
                      tuple(rows), tuple(metrics), str(data.get("note") or ""))


def default_replay_service() -> ReplayService:
    return EngineReplayService()
