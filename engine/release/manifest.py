"""PQID-Bench's `ARTIFACT_MANIFEST.tsv`: reading it, and verifying files against it.

The manifest is a tab-separated table with the header `path`, `bytes`, `sha256`: one row per
file of the release, paths relative to the folder that holds the manifest. A file is verified
by its size first (cheap, and it catches most changes), then by its SHA-256. Files the manifest
lists that the copy does not have are absent: named, never treated as verified.
"""

from __future__ import annotations

import csv
import io
import os
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from engine.errors import ReleaseError
from engine.release.model import Verification
from engine.rundir.storage import read_file_bytes

MANIFEST_NAME = "ARTIFACT_MANIFEST.tsv"
HEADER = ["path", "bytes", "sha256"]
_SHA256_RE = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True, slots=True)
class ManifestEntry:
    """One listed file: its relative path, size in bytes and SHA-256."""

    path: str
    bytes: int
    sha256: str


@dataclass(frozen=True, slots=True)
class ArtifactManifest:
    """The parsed manifest, entries in file order, and the digest of its bytes."""

    path: Path
    sha256: str
    entries: tuple[ManifestEntry, ...]

    def by_path(self) -> dict[str, ManifestEntry]:
        return {e.path: e for e in self.entries}


def safe_relative_path(rel: str, where: str) -> str:
    """`rel` if it is a plain relative POSIX path inside the release; ReleaseError otherwise."""
    pure = PurePosixPath(rel)
    if (
        not rel
        or "\x00" in rel
        or "\\" in rel
        or pure.is_absolute()
        or any(part in ("..", ".") for part in rel.split("/"))
        or ":" in pure.parts[0]
        or rel.endswith("/")
    ):
        raise ReleaseError(f"{where}: {rel!r} is not a relative path inside the release")
    return rel


def read_artifact_manifest(path: Path) -> ArtifactManifest:
    """Parse ARTIFACT_MANIFEST.tsv; ReleaseError naming the line of anything malformed."""
    import hashlib

    raw = read_file_bytes(path, ReleaseError)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ReleaseError(f"{path}: not UTF-8 text ({exc})") from None
    reader = csv.reader(io.StringIO(text, newline=""), delimiter="\t")
    try:
        header = next(reader, None)
        if header != HEADER:
            raise ReleaseError(
                f"{path}:1: the header must be {chr(9).join(HEADER)!r}, found {header!r}"
            )
        entries: list[ManifestEntry] = []
        seen: dict[str, int] = {}
        for row in reader:
            number = reader.line_num
            if not row:
                continue
            where = f"{path}:{number}"
            if len(row) != 3:
                raise ReleaseError(f"{where}: expected 3 tab-separated fields, found {len(row)}")
            rel, size, sha = row
            safe_relative_path(rel, where)
            if rel in seen:
                raise ReleaseError(f"{where}: {rel} is listed twice (first on line {seen[rel]})")
            if not size.isdigit():
                raise ReleaseError(f"{where}: bytes {size!r} is not a non-negative integer")
            sha = sha.lower()
            if not _SHA256_RE.match(sha):
                raise ReleaseError(f"{where}: sha256 {sha!r} is not 64 hexadecimal digits")
            seen[rel] = number
            entries.append(ManifestEntry(rel, int(size), sha))
    except csv.Error as exc:
        raise ReleaseError(f"{path}:{reader.line_num}: not a tab-separated table ({exc})") from None
    if not entries:
        raise ReleaseError(f"{path}: lists no files")
    return ArtifactManifest(path, hashlib.sha256(raw).hexdigest(), tuple(entries))


def check_file(root: Path, entry: ManifestEntry, manifest_name: str = MANIFEST_NAME) -> str | None:
    """None when the file has the listed size and SHA-256; else a message naming it."""
    from engine.rundir.storage import sha256_file

    path = root / entry.path
    try:
        size = path.stat().st_size
        if not path.is_file():
            return f"{path}: not a regular file, {manifest_name} lists a file"
        if size != entry.bytes:
            return f"{path}: size is {size} bytes, {manifest_name} says {entry.bytes}"
        actual = sha256_file(path)
    except OSError as exc:
        return f"{path}: cannot read ({exc.strerror})"
    if actual != entry.sha256:
        return f"{path}: SHA-256 is {actual}, {manifest_name} says {entry.sha256}"
    return None


def modified_error(problems: list[str] | tuple[str, ...]) -> ReleaseError:
    """The one error for a release whose files do not match: the first, and how many more."""
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    return ReleaseError(f"{problems[0]}{more}; the release was modified")


class ManifestVerifier:
    """Verifies a release's files against ARTIFACT_MANIFEST.tsv, each file at most once.

    Without `allow_modified` a file that does not match raises ReleaseError when it is
    checked; with it, the mismatch is recorded (`problems`) and the file is used anyway.
    """

    def __init__(self, root: Path, manifest: ArtifactManifest, *, allow_modified: bool) -> None:
        self.root = root
        self.manifest = manifest
        self.allow_modified = allow_modified
        self._entries = manifest.by_path()
        self._results: dict[str, str | None] = {}
        self._lock = threading.Lock()
        self.absent: tuple[str, ...] = tuple(
            e.path for e in manifest.entries if not os.path.lexists(root / e.path)
        )
        self._absent = frozenset(self.absent)

    @property
    def name(self) -> str:
        return self.manifest.path.name

    def listed(self, rel: str) -> bool:
        return rel in self._entries

    def _result(self, rel: str) -> str | None:
        with self._lock:
            if rel in self._results:
                return self._results[rel]
        problem = check_file(self.root, self._entries[rel], self.name)
        with self._lock:
            self._results[rel] = problem
        return problem

    def check(self, rel: str, purpose: str) -> None:
        self.check_many([rel], purpose)

    def check_many(self, rels: list[str] | tuple[str, ...], purpose: str) -> None:
        """Verify several files; one ReleaseError naming the first that does not match."""
        for rel in rels:
            if rel not in self._entries:
                raise ReleaseError(
                    f"{self.root / rel}: {purpose} needs this file, which "
                    f"{self.name} does not list, so it cannot be verified"
                )
            if rel in self._absent:
                raise ReleaseError(
                    f"{self.root / rel}: {purpose} needs this file, which "
                    f"{self.name} lists but this copy does not have"
                )
        problems = [p for rel in rels if (p := self._result(rel)) is not None]
        if problems and not self.allow_modified:
            raise modified_error(problems)

    def verified_count(self) -> int:
        with self._lock:
            return sum(1 for p in self._results.values() if p is None)

    def verify_all(self) -> Verification:
        start = time.perf_counter()
        absent = self._absent
        for entry in self.manifest.entries:
            if entry.path not in absent:
                self._result(entry.path)
        with self._lock:
            mismatched = tuple(
                e.path for e in self.manifest.entries if self._results.get(e.path) is not None
            )
            problems = tuple(str(self._results[rel]) for rel in mismatched)
        verified = len(self.manifest.entries) - len(absent) - len(mismatched)
        return Verification(
            self.name,
            len(self.manifest.entries),
            verified,
            self.absent,
            mismatched,
            problems,
            time.perf_counter() - start,
        )
