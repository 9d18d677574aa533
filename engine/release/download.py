"""Getting the PQID-Bench core distribution: downloaded over HTTPS or imported from a file,
checked against the archive SHA-256 pinned here, extracted safely into the user cache dir.

A verified extraction is never replaced: a second call finds it (by the pinned SHA-256) and
reuses it without touching the network. The official URL and digest are those `pqid-bench
download` uses.
"""

from __future__ import annotations

import contextlib
import urllib.parse
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.errors import ReleaseError
from engine.release.archive import cache_root, extract_cached, verified_extraction

MAX_DOWNLOAD_BYTES = 512 * 1024 * 1024  # the 1.0.0 archive is 7.5 MB
MAX_REDIRECTS = 5
DEFAULT_TIMEOUT_SECONDS = 120.0


@dataclass(frozen=True, slots=True)
class OfficialCore:
    """One published core distribution: where it is, and the SHA-256 it must have."""

    version: str
    url: str
    sha256: str
    archive_name: str
    root_name: str


OFFICIAL_CORE_RELEASES: dict[str, OfficialCore] = {
    "1.0.0": OfficialCore(
        version="1.0.0",
        url="https://huggingface.co/datasets/Elias-Abebe-Gasparini/PQID-Bench/resolve/main/"
        "downloads/PQID-Bench-v1.0.0-core.zip",
        sha256="d6df084c7acf7a06bc4800f25b952e26f9903ee4a69ce851ab83b7723970c647",
        archive_name="PQID-Bench-v1.0.0-core.zip",
        root_name="PQID-Bench-v1.0.0-core",
    ),
}


@dataclass(frozen=True, slots=True)
class CoreDistribution:
    """Where a verified core distribution is, and how it got there."""

    version: str
    release_dir: Path
    sha256: str
    source: str  # "download", "file" or "cache"
    url: str | None
    from_file: Path | None
    reused: bool
    files_verified: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "release_dir": str(self.release_dir),
            "archive_sha256": self.sha256,
            "source": self.source,
            "url": self.url,
            "from_file": str(self.from_file) if self.from_file else None,
            "reused": self.reused,
            "files_verified": self.files_verified,
        }


def official_core(version: str) -> OfficialCore:
    found = OFFICIAL_CORE_RELEASES.get(version)
    if found is None:
        raise ReleaseError(
            f"--version {version}: no PQID-Bench core distribution of that "
            f"version is known (known: {', '.join(sorted(OFFICIAL_CORE_RELEASES))})"
        )
    return found


def check_https(url: str) -> None:
    """Refuse anything but an absolute HTTPS URL without embedded credentials."""
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme.lower() != "https" or not parsed.hostname:
        raise ReleaseError(
            f"{url}: the benchmark is only fetched over HTTPS (an absolute https:// URL)"
        )
    if parsed.username or parsed.password:
        raise ReleaseError("the download URL must not carry a user name or password")


def _verify_distribution(release_dir: Path, core: OfficialCore) -> int:
    """Every file of the extraction against its ARTIFACT_MANIFEST.tsv; the count verified."""
    from engine.release import pqid_bench
    from engine.release.manifest import modified_error

    if release_dir.name != core.root_name:
        raise ReleaseError(
            f"{release_dir}: the archive's folder is {release_dir.name}, expected {core.root_name}"
        )
    release = pqid_bench.load_pqid_bench(release_dir, pqid_bench.PROFILE_CORE)
    if release.version != core.version:
        raise ReleaseError(
            f"{release_dir}: benchmark.json says version {release.version}, expected {core.version}"
        )
    check = release.verify_all()
    if check.problems:
        raise modified_error(check.problems)
    if check.absent:
        raise ReleaseError(
            f"{release_dir / check.absent[0]}: file is missing from the core distribution"
        )
    return check.verified


def _download(
    url: str, dest: Path, expected: str, *, timeout: float, transport: Any = None
) -> None:
    """Stream `url` into `dest` (HTTPS at every hop, bounded size); check the SHA-256."""
    import hashlib

    import httpx

    from engine import __version__

    current = url
    digest = hashlib.sha256()
    try:
        with httpx.Client(
            timeout=timeout,
            follow_redirects=False,
            transport=transport,
            headers={"User-Agent": f"pqid-tui/{__version__}"},
        ) as client:
            for _ in range(MAX_REDIRECTS + 1):
                check_https(current)
                with client.stream("GET", current) as response:
                    if response.is_redirect:
                        location = response.headers.get("location")
                        if not location:
                            raise ReleaseError(f"{current}: a redirect without a location")
                        current = str(response.url.join(location))
                        continue
                    if response.status_code != 200:
                        raise ReleaseError(
                            f"{current}: HTTP {response.status_code}, the core "
                            "distribution was not downloaded"
                        )
                    length = response.headers.get("content-length")
                    if (
                        length is not None
                        and length.isdigit()
                        and (int(length) > MAX_DOWNLOAD_BYTES)
                    ):
                        raise ReleaseError(
                            f"{current}: {length} bytes, more than the "
                            f"{MAX_DOWNLOAD_BYTES} a core distribution may have"
                        )
                    size = 0
                    with dest.open("xb") as out:
                        for block in response.iter_bytes(1 << 20):
                            size += len(block)
                            if size > MAX_DOWNLOAD_BYTES:
                                raise ReleaseError(
                                    f"{current}: more than the {MAX_DOWNLOAD_BYTES} bytes a "
                                    "core distribution may have"
                                )
                            digest.update(block)
                            out.write(block)
                    break
            else:
                raise ReleaseError(f"{url}: more than {MAX_REDIRECTS} redirects")
    except httpx.HTTPError as exc:
        raise ReleaseError(f"{current}: download failed ({type(exc).__name__}: {exc})") from None
    except OSError as exc:
        raise ReleaseError(f"{dest}: cannot write the download ({exc.strerror})") from None
    if digest.hexdigest() != expected:
        raise ReleaseError(
            f"{url}: the downloaded archive's SHA-256 is {digest.hexdigest()}, "
            f"the pinned digest is {expected}; nothing was extracted"
        )


def get_core_distribution(
    version: str,
    *,
    from_file: Path | None = None,
    url: str | None = None,
    cache_dir: Path | None = None,
    timeout: float = DEFAULT_TIMEOUT_SECONDS,
    transport: Any = None,
) -> CoreDistribution:
    """The verified core distribution of `version` in the cache: reused when it is there,
    else imported from `from_file` or downloaded (from `url`, a mirror, or the official URL);
    the archive must have the pinned SHA-256 either way. `transport` is for tests (httpx)."""
    from engine.rundir.storage import sha256_file

    core = official_core(version)
    source_url = url or core.url
    check_https(source_url)
    folder = cache_root(cache_dir) / core.sha256
    if from_file is not None:
        from_file = Path(from_file)
        if not from_file.is_file():
            raise ReleaseError(f"--from {from_file}: file does not exist")
        actual = sha256_file(from_file)
        if actual != core.sha256:
            raise ReleaseError(
                f"{from_file}: SHA-256 is {actual}, but PQID-Bench {version}'s "
                f"core distribution is pinned to {core.sha256}; not imported"
            )
    existing = verified_extraction(folder, core.sha256)
    if existing is not None:
        return CoreDistribution(
            version,
            existing,
            core.sha256,
            "cache",
            None,
            from_file,
            reused=True,
            files_verified=_verify_distribution(existing, core),
        )
    if from_file is not None:
        extraction = extract_cached(from_file, sha256=core.sha256, cache_dir=cache_dir)
        return CoreDistribution(
            version,
            extraction.release_dir,
            core.sha256,
            "file",
            None,
            from_file,
            reused=extraction.reused,
            files_verified=_verify_distribution(extraction.release_dir, core),
        )
    parent = cache_root(cache_dir)
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ReleaseError(f"{parent}: cannot create the cache folder ({exc.strerror})") from None
    partial = parent / f".download-{uuid.uuid4().hex}.zip"
    try:
        _download(source_url, partial, core.sha256, timeout=timeout, transport=transport)
        extraction = extract_cached(
            partial, sha256=core.sha256, cache_dir=cache_dir, origin=source_url
        )
    finally:
        with contextlib.suppress(OSError):
            partial.unlink()
    return CoreDistribution(
        version,
        extraction.release_dir,
        core.sha256,
        "download",
        source_url,
        None,
        reused=extraction.reused,
        files_verified=_verify_distribution(extraction.release_dir, core),
    )
