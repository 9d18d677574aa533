"""What every release format loads into: prompts, the frozen matrix, verification, contract."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from engine.errors import ReleaseError
from engine.rundir.storage import read_jsonl_objects

# Release formats, as detected from the files.
FORMAT_PQID_RELEASE = "pqid-release/1"
FORMAT_PQID_BENCH_CORE = "pqid-bench-core"
FORMAT_PQID_BENCH_EVIDENCE = "pqid-bench-evidence"
FORMATS = (FORMAT_PQID_RELEASE, FORMAT_PQID_BENCH_CORE, FORMAT_PQID_BENCH_EVIDENCE)

# Scoring contracts (the evaluator's own names are in `evaluator.contracts`): the project's
# own rules, and PQID-Bench's frozen evaluator with its structural predicate.
CONTRACT_PROJECT = "pqid-tui-1"
CONTRACT_PQID_BENCH = "pqid-bench-evaluator-1.1.0-safe-builtins"
PREDICATE_PQID_BENCH = "pqid-bench-reference-signature-1.0.0-count-map"


@dataclass(frozen=True, slots=True)
class Prompt:
    """One frozen prompt: what the model sees (`messages`) and what only the evaluator sees.

    `source_record` is the prompt's line as the release holds it (PQID-Bench releases: the
    study's identities are hashed from it). It contains the target metadata: evaluator-only.
    """

    prompt_id: str
    split: str
    messages: tuple[dict[str, str], ...]
    target_metadata: dict[str, Any] = field(repr=False)
    line: int = 0
    row_id: str | None = None
    label: str | None = None
    source_record: Mapping[str, Any] | None = field(default=None, repr=False, compare=False)

    def request_messages(self) -> list[dict[str, str]]:
        """The model-facing messages, as fresh dicts (the only part that leaves the machine)."""
        return [{"role": m["role"], "content": m["content"]} for m in self.messages]


@dataclass(frozen=True, slots=True)
class FrozenRow:
    """One row of the frozen matrix.

    `evaluations` is a path relative to the release root: a canonical evaluations file
    (`pqid-release/1`) or the row's frozen evaluator report (PQID-Bench evidence).
    """

    label: str
    kind: str
    provider: str | None
    model: str | None
    evaluations: str
    display_name: str | None = None
    role: str | None = None
    contract: str | None = None


@dataclass(frozen=True, slots=True)
class Verification:
    """The check of every present file a release's manifest lists (`verify`)."""

    manifest: str  # the file that lists them: "release.json" or "ARTIFACT_MANIFEST.tsv"
    listed: int
    verified: int
    absent: tuple[str, ...]
    mismatched: tuple[str, ...]  # relative paths, in manifest order
    problems: tuple[str, ...]  # one message per mismatch, naming the file
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.mismatched


class FileVerifier(Protocol):
    """Verifies a release's files against its manifest, each file at most once."""

    def check(self, rel: str, purpose: str) -> None:
        """Verify one listed file before use; ReleaseError naming it if it does not match."""

    def verify_all(self) -> Verification:
        """Verify every present file the manifest lists."""


@dataclass(frozen=True, slots=True)
class Release:
    """A verified release: prompts in file order plus the frozen matrix.

    `digest` is the release's identity, recorded by runs and checked by replay and compare:
    pqid-release/1, the SHA-256 of release.json's bytes; PQID-Bench, the SHA-256 of its
    identity record (name, version, contract, predicate, prompts SHA-256), the same for the
    core distribution and the evidence repository (`engine.release.pqid_bench`).

    `absent` lists files the release's manifest names that are not present (PQID-Bench
    copies may lack some); a command that needs one of them raises ReleaseError naming it.
    `require` verifies a file before a command reads it; `verify_all` checks every file.
    """

    root: Path
    name: str
    version: str
    digest: str
    prompts_sha256: str
    modified: bool
    prompts: tuple[Prompt, ...]
    matrix_rows: tuple[FrozenRow, ...]
    evaluator_version: str | None
    evaluator_requirements: tuple[str, ...] | None
    problems: tuple[str, ...] = ()
    format: str = FORMAT_PQID_RELEASE
    profile: str | None = None
    contract: str = CONTRACT_PROJECT
    predicate: str | None = None
    python_version: str | None = None  # the pinned interpreter of the frozen rows ("3.13")
    absent: tuple[str, ...] = ()
    verified_files: int = 0
    manifest_files: int = 0
    # Loads one row's frozen cells as canonical evaluations (set by the format's loader).
    cells_loader: Callable[[Release, FrozenRow], list[dict[str, Any]]] | None = field(
        default=None, repr=False, compare=False
    )
    # PQID-Bench: the SHA-256 of ARTIFACT_MANIFEST.tsv's bytes (the copy's file list); `digest`
    # is the release's identity, the same for the core distribution and the evidence repository.
    manifest_sha256: str | None = None
    # Set when the release was read from a .zip (extracted into the user cache dir).
    archive: str | None = None
    archive_sha256: str | None = None
    # Verifies files on first use (`require`) and all at once (`verify_all`).
    verifier: FileVerifier | None = field(default=None, repr=False, compare=False)

    @property
    def by_id(self) -> dict[str, Prompt]:
        return {p.prompt_id: p for p in self.prompts}

    def split_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for p in self.prompts:
            counts[p.split] = counts.get(p.split, 0) + 1
        return dict(sorted(counts.items()))

    def row(self, label: str) -> FrozenRow:
        row = next((r for r in self.matrix_rows if r.label == label), None)
        if row is None:
            raise ReleaseError(f"{self.root}: the frozen matrix has no row labelled {label!r}")
        return row

    def frozen_evaluations(self, label: str) -> list[dict[str, Any]]:
        """The canonical evaluations of one frozen row, in file order."""
        row = self.row(label)
        if self.cells_loader is not None:
            return self.cells_loader(self, row)
        return read_evaluations_file(self.root / row.evaluations)

    def require(self, rel: str, purpose: str) -> Path:
        """The path of a file this command needs, verified against the release's manifest;
        ReleaseError naming it if it is absent or does not match."""
        if rel in self.absent:
            raise ReleaseError(
                f"{self.root / rel}: {purpose} needs this file, which the release "
                "manifest lists but this copy does not have"
            )
        if self.verifier is not None:
            self.verifier.check(rel, purpose)
        return self.root / rel

    def verify_all(self) -> Verification:
        """Check every present file the manifest lists (the `verify` command)."""
        if self.verifier is not None:
            return self.verifier.verify_all()
        return Verification(
            "release.json", self.manifest_files, self.verified_files, self.absent, (), self.problems
        )

    def absent_summary(self) -> tuple[str, ...]:
        """The absent files, a folder missing entirely named once: `dir/ (N files)`."""
        groups: dict[str, int] = {}
        for rel in self.absent:
            parts = rel.split("/")
            key = rel
            for depth in range(1, len(parts)):
                if not (self.root.joinpath(*parts[:depth])).exists():
                    key = "/".join(parts[:depth]) + "/"
                    break
            groups[key] = groups.get(key, 0) + 1
        return tuple(
            k if not k.endswith("/") else f"{k} ({n} file{'s' if n != 1 else ''})"
            for k, n in sorted(groups.items())
        )


def read_evaluations_file(path: Path) -> list[dict[str, Any]]:
    """A canonical evaluations file (JSONL), each line with a string prompt_id."""
    out: list[dict[str, Any]] = []
    for number, obj in read_jsonl_objects(path, ReleaseError):
        if not isinstance(obj.get("prompt_id"), str):
            raise ReleaseError(f"{path}:{number}: evaluation without a string prompt_id")
        out.append(obj)
    return out
