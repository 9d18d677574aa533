"""Releases: every format the tool reads, detected from its files, behind one `Release`.

pqid-release/1        the project's own format (`release.json`), the bundled demo release
PQID-Bench core       `benchmark.json` with `distribution_profile: core` (or its .zip)
PQID-Bench evidence   the evidence repository (`ARTIFACT_MANIFEST.tsv` at its root)

May import `engine.rundir` and `engine.errors`; never the providers, transport, the run loop,
replay, the configuration or the events.
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
    FileVerifier,
    FrozenRow,
    Prompt,
    Release,
    Verification,
)
from engine.release.pqid_release import (
    PROMPT_ID_RE,
    RELEASE_FORMAT,
    ROW_KINDS,
    load_pqid_release,
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
    "FileVerifier",
    "FrozenRow",
    "Prompt",
    "Release",
    "Verification",
    "load_release",
]


def load_release(
    root: Path | str, *, allow_modified: bool = False, cache_dir: Path | None = None
) -> Release:
    """Load and verify a release of any format the tool reads, detected from its files.

    `root` is a pqid-release/1 folder, a PQID-Bench core distribution (or the folder that
    holds it as its only subfolder), the PQID-Bench evidence repository, or a core
    distribution .zip (extracted into `<cache_dir or the user cache dir>/releases/<SHA-256>/`,
    or reused from there). A verification failure raises ReleaseError naming the file,
    unless `allow_modified` (then `modified=True`, the mismatches in `problems`).
    """
    root = Path(root)
    if not root.exists():
        raise ReleaseError(f"{root}: release directory does not exist")
    if root.is_file():
        from engine.release.archive import is_zip

        if is_zip(root):
            return _load_zip(root, allow_modified=allow_modified, cache_dir=cache_dir)
        raise ReleaseError(_not_a_release(root))
    if (root / "release.json").exists():
        return load_pqid_release(root, allow_modified=allow_modified)
    from engine.release import pqid_bench

    if pqid_bench.is_core(root):
        return pqid_bench.load_pqid_bench(
            root, pqid_bench.PROFILE_CORE, allow_modified=allow_modified
        )
    if pqid_bench.is_evidence(root):
        return pqid_bench.load_pqid_bench(
            root, pqid_bench.PROFILE_EVIDENCE, allow_modified=allow_modified
        )
    child = pqid_bench.single_core_child(root)
    if child is not None:
        return pqid_bench.load_pqid_bench(
            child, pqid_bench.PROFILE_CORE, allow_modified=allow_modified
        )
    raise ReleaseError(_not_a_release(root))


def _not_a_release(root: Path) -> str:
    return (
        f"{root}: not a release this version reads; looked for release.json "
        '(pqid-release/1), benchmark.json with distribution_profile "core" (a PQID-Bench '
        "core distribution, or a folder holding one as its only subfolder), "
        "ARTIFACT_MANIFEST.tsv (the PQID-Bench evidence repository) and a core "
        "distribution .zip"
    )


def _load_zip(archive: Path, *, allow_modified: bool, cache_dir: Path | None) -> Release:
    from engine.release import pqid_bench
    from engine.release.archive import extract_cached

    extraction = extract_cached(archive, cache_dir=cache_dir)
    if not pqid_bench.is_core(extraction.release_dir):
        raise ReleaseError(
            f"{archive}: its folder {extraction.release_dir.name}/ is not a "
            "PQID-Bench core distribution (no benchmark.json with "
            'distribution_profile "core")'
        )
    return pqid_bench.load_pqid_bench(
        extraction.release_dir,
        pqid_bench.PROFILE_CORE,
        allow_modified=allow_modified,
        archive=archive,
        archive_sha256=extraction.archive_sha256,
    )
