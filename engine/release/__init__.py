"""Releases: every format the tool reads, detected from its files, behind one `Release`.

    pqid-release/1        the project's own format (`release.json`), the bundled demo release
    PQID-Bench core       `benchmark.json` with `distribution_profile: core` (or its .zip)
    PQID-Bench evidence   the evidence repository (`ARTIFACT_MANIFEST.tsv` at its root)
"""

from __future__ import annotations

from pathlib import Path

from engine.errors import ReleaseError
from engine.release.model import (
    CONTRACT_PQID_BENCH,
    CONTRACT_PROJECT,
    FORMAT_PQID_BENCH_CORE,
    FORMAT_PQID_BENCH_EVIDENCE,
    FORMAT_PQID_RELEASE,
    FORMATS,
    PREDICATE_PQID_BENCH,
    FrozenRow,
    Prompt,
    Release,
)
from engine.release.pqid_release import (
    PROMPT_ID_RE,
    RELEASE_FORMAT,
    ROW_KINDS,
    load_pqid_release,
    sha256_file,
)

__all__ = [
    "CONTRACT_PQID_BENCH",
    "CONTRACT_PROJECT",
    "FORMATS",
    "FORMAT_PQID_BENCH_CORE",
    "FORMAT_PQID_BENCH_EVIDENCE",
    "FORMAT_PQID_RELEASE",
    "PREDICATE_PQID_BENCH",
    "PROMPT_ID_RE",
    "RELEASE_FORMAT",
    "ROW_KINDS",
    "FrozenRow",
    "Prompt",
    "Release",
    "load_release",
    "sha256_file",
]


def load_release(root: Path | str, *, allow_modified: bool = False) -> Release:
    """Load and verify a release of any format the tool reads (detected from its files)."""
    root = Path(root)
    if not root.exists():
        raise ReleaseError(f"{root}: release directory does not exist")
    return load_pqid_release(root, allow_modified=allow_modified)
