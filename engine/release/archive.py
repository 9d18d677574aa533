"""Safe extraction of a release archive (.zip) into the user cache dir.

An archive is extracted once, into `<cache>/releases/<SHA-256 of the archive>/`, and reused
while that extraction still verifies. Nothing in an archive can write outside its folder or
exhaust the disk: every member is checked before any byte is written (no absolute path, no
`..`, no drive letter or backslash, no symbolic link or special file, no two names that differ
only in case, one top-level folder), the member count and the total expanded size are
bounded, and the expanded size is counted again while writing (a header that understates a
member's size cannot get past the limit).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import stat
import uuid
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from engine.errors import ReleaseError

MAX_MEMBERS = 10_000
MAX_TOTAL_BYTES = 1 << 30  # 1 GiB expanded; the PQID-Bench 1.0.0 core is 7.5 MB
MARKER = ".pqid-extraction.json"
MARKER_FORMAT = "pqid-tui-extraction/1"


@dataclass(frozen=True, slots=True)
class Extraction:
    """An archive extracted into the cache: `release_dir` is its one top-level folder."""

    archive: Path
    archive_sha256: str
    folder: Path
    release_dir: Path
    reused: bool


def cache_root(cache_dir: Path | None = None) -> Path:
    """Where extracted releases live: `<cache_dir or the user cache dir>/releases`."""
    if cache_dir is None:
        import platformdirs

        cache_dir = Path(platformdirs.user_cache_dir("pqid-tui"))
    return Path(cache_dir) / "releases"


def _member_path(archive: Path, info: zipfile.ZipInfo) -> PurePosixPath:
    name = info.filename
    where = f"{archive}: member {name!r}"
    if not name or "\x00" in name or "\\" in name:
        raise ReleaseError(f"{where}: unsafe name")
    pure = PurePosixPath(name)
    if name.startswith("/") or pure.is_absolute():
        raise ReleaseError(f"{where}: absolute path (an archive may only write inside its folder)")
    if ".." in pure.parts or (pure.parts and ":" in pure.parts[0]):
        raise ReleaseError(f"{where}: path escapes the extraction folder")
    if not pure.parts:
        raise ReleaseError(f"{where}: empty path")
    mode = (info.external_attr >> 16) & 0xFFFF
    if stat.S_ISLNK(mode):
        raise ReleaseError(f"{where}: symbolic links are not allowed in a release archive")
    kind = stat.S_IFMT(mode)
    if kind and kind not in (stat.S_IFREG, stat.S_IFDIR):
        raise ReleaseError(f"{where}: only regular files and folders are allowed")
    return pure


def inspect_archive(
    archive: Path,
    bundle: zipfile.ZipFile,
    *,
    max_members: int = MAX_MEMBERS,
    max_total_bytes: int = MAX_TOTAL_BYTES,
) -> tuple[str, list[tuple[zipfile.ZipInfo, PurePosixPath]]]:
    """Check every member before anything is written; the top-level folder and the members."""
    infos = bundle.infolist()
    if len(infos) > max_members:
        raise ReleaseError(
            f"{archive}: {len(infos)} members, more than the {max_members} a "
            "release archive may have"
        )
    members: list[tuple[zipfile.ZipInfo, PurePosixPath]] = []
    seen: set[str] = set()
    roots: set[str] = set()
    total = 0
    for info in infos:
        pure = _member_path(archive, info)
        folded = pure.as_posix().rstrip("/").casefold()
        if folded in seen:
            raise ReleaseError(
                f"{archive}: member {info.filename!r} is there twice (names "
                "that differ only in case count as the same)"
            )
        seen.add(folded)
        roots.add(pure.parts[0])
        if len(pure.parts) == 1 and not info.is_dir():
            raise ReleaseError(
                f"{archive}: member {info.filename!r} is outside the archive's top-level folder"
            )
        total += info.file_size
        if total > max_total_bytes:
            raise ReleaseError(
                f"{archive}: expands to more than {max_total_bytes} bytes, the "
                "most a release archive may hold"
            )
        members.append((info, pure))
    if len(roots) != 1:
        raise ReleaseError(
            f"{archive}: a release archive holds exactly one top-level folder, "
            f"this one has {len(roots)}" + (f" ({', '.join(sorted(roots)[:5])})" if roots else "")
        )
    return roots.pop(), members


def extract_archive(
    archive: Path,
    dest: Path,
    *,
    max_members: int = MAX_MEMBERS,
    max_total_bytes: int = MAX_TOTAL_BYTES,
) -> tuple[str, dict[str, list[object]]]:
    """Extract into the empty folder `dest`; the top-level folder and {path: [bytes, sha256]}."""
    files: dict[str, list[object]] = {}
    try:
        with zipfile.ZipFile(archive) as bundle:
            root, members = inspect_archive(
                archive, bundle, max_members=max_members, max_total_bytes=max_total_bytes
            )
            written = 0
            base = dest.resolve()
            for info, pure in members:
                target = base.joinpath(*pure.parts)
                if base not in target.parents:
                    raise ReleaseError(
                        f"{archive}: member {info.filename!r} escapes the extraction folder"
                    )
                if info.is_dir():
                    target.mkdir(parents=True, exist_ok=True)
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                digest = hashlib.sha256()
                size = 0
                with bundle.open(info) as source, target.open("xb") as out:
                    while block := source.read(1 << 20):
                        size += len(block)
                        written += len(block)
                        if written > max_total_bytes:
                            raise ReleaseError(
                                f"{archive}: expands to more than "
                                f"{max_total_bytes} bytes, the most a release "
                                "archive may hold"
                            )
                        digest.update(block)
                        out.write(block)
                files[pure.as_posix()] = [size, digest.hexdigest()]
    except zipfile.BadZipFile as exc:
        raise ReleaseError(f"{archive}: not a readable zip archive ({exc})") from None
    except (OSError, EOFError, NotImplementedError, RuntimeError) as exc:
        message = getattr(exc, "strerror", None) or str(exc)
        raise ReleaseError(f"{archive}: cannot extract ({message})") from None
    return root, files


def _read_marker(folder: Path, sha: str) -> tuple[str, dict[str, list[object]]] | None:
    try:
        marker = json.loads((folder / MARKER).read_bytes())
    except (OSError, ValueError):
        return None
    if (
        not isinstance(marker, dict)
        or marker.get("format") != MARKER_FORMAT
        or marker.get("archive_sha256") != sha
        or not isinstance(marker.get("root"), str)
        or not isinstance(marker.get("files"), dict)
    ):
        return None
    return marker["root"], marker["files"]


def verified_extraction(folder: Path, sha: str) -> Path | None:
    """The release folder of an earlier extraction of this archive, if every file it wrote
    still has the same size and SHA-256; None otherwise."""
    from engine.rundir.storage import sha256_file

    if folder.is_symlink() or not folder.is_dir():
        return None
    found = _read_marker(folder, sha)
    if found is None:
        return None
    root, files = found
    for rel, listed in files.items():
        path = folder / rel
        if (
            not isinstance(listed, list)
            or len(listed) != 2
            or path.is_symlink()
            or not path.is_file()
            or path.stat().st_size != listed[0]
            or sha256_file(path) != listed[1]
        ):
            return None
    release_dir = folder / root
    return release_dir if release_dir.is_dir() else None


def _remove_tree(path: Path, parent: Path) -> None:
    # Only ever a folder this module made inside the cache, never through a link.
    if path.is_symlink():
        path.unlink()
    elif path.parent.resolve() == parent.resolve() and path.is_dir():
        shutil.rmtree(path, ignore_errors=True)


def extract_cached(
    archive: Path,
    *,
    sha256: str | None = None,
    cache_dir: Path | None = None,
    origin: str | None = None,
    max_members: int = MAX_MEMBERS,
    max_total_bytes: int = MAX_TOTAL_BYTES,
) -> Extraction:
    """Extract `archive` into the cache folder named by its SHA-256, or reuse a verified one.

    `sha256`, when given, is the archive's digest already computed by the caller; `origin`
    (recorded in the folder's marker) says where the archive came from (default its path).
    """
    from engine.rundir.storage import sha256_file

    archive = Path(archive)
    if not archive.is_file():
        raise ReleaseError(f"{archive}: archive does not exist")
    sha = sha256 or sha256_file(archive)
    parent = cache_root(cache_dir)
    folder = parent / sha
    reused = verified_extraction(folder, sha)
    if reused is not None:
        return Extraction(archive, sha, folder, reused, reused=True)
    try:
        parent.mkdir(parents=True, exist_ok=True)
        staging = parent / f".extracting-{sha[:16]}-{uuid.uuid4().hex}"
        staging.mkdir()
    except OSError as exc:
        raise ReleaseError(
            f"{parent}: cannot create the extraction folder ({exc.strerror})"
        ) from None
    try:
        root, files = extract_archive(
            archive, staging, max_members=max_members, max_total_bytes=max_total_bytes
        )
        marker = {
            "format": MARKER_FORMAT,
            "archive_sha256": sha,
            "archive": origin or str(archive),
            "root": root,
            "files": files,
        }
        (staging / MARKER).write_text(json.dumps(marker, indent=2, sort_keys=True) + "\n")
        if os.path.lexists(folder):
            # A stale or damaged earlier extraction (or one another process just finished).
            again = verified_extraction(folder, sha)
            if again is not None:
                return Extraction(archive, sha, folder, again, reused=True)
            stale = parent / f".stale-{sha[:16]}-{uuid.uuid4().hex}"
            os.replace(folder, stale)
            _remove_tree(stale, parent)
        try:
            os.replace(staging, folder)
        except OSError:
            again = verified_extraction(folder, sha)  # another process won the race
            if again is None:
                raise
            return Extraction(archive, sha, folder, again, reused=True)
    except OSError as exc:
        raise ReleaseError(f"{folder}: cannot store the extraction ({exc.strerror})") from None
    finally:
        if staging.exists():
            _remove_tree(staging, parent)
    return Extraction(archive, sha, folder, folder / root, reused=False)


def is_zip(path: Path) -> bool:
    """Whether `path` is a file that looks like a zip archive."""
    with contextlib.suppress(OSError):
        return path.is_file() and zipfile.is_zipfile(path)
    return False
