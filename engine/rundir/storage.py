"""Durable files: atomic replacement, fsynced JSON-lines appends, canonical JSON and digests."""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any


def canonical_json(obj: Any) -> bytes:
    """The one byte form of a JSON value that is hashed and sent."""
    return json.dumps(obj, sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode()


def sha256_hex(data: bytes | str) -> str:
    return hashlib.sha256(data.encode() if isinstance(data, str) else data).hexdigest()


def _fsync_dir(path: Path) -> None:
    # Making a rename durable needs the directory entry flushed too.
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


_TMP_SEQUENCE = itertools.count()
# What every temporary file the engine writes is called, so that one pattern finds the ones a
# crash left behind.
TEMPORARY_GLOB = ".*.tmp"


def temporary_path(path: Path) -> Path:
    """A name beside `path` for a temporary file, unused by any other thread or process."""
    return path.with_name(f".{path.name}.{os.getpid()}.{next(_TMP_SEQUENCE)}.tmp")


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Replace `path` with `data`: a reader sees the old file or the new one, never a mix.
    Safe to call from several threads at once (each temporary file has a name of its own)."""
    tmp = temporary_path(path)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def json_file_bytes(obj: Any) -> bytes:
    """The byte form of a JSON file (a record, a manifest): sorted, indented, one newline."""
    return (json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode()


def atomic_write_json(path: Path, obj: Any) -> None:
    atomic_write_bytes(path, json_file_bytes(obj))


def append_jsonl(path: Path, obj: Any) -> None:
    """Append one line with a single write and fsync it before returning."""
    line = canonical_json(obj) + b"\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, line)
        os.fsync(fd)
    finally:
        os.close(fd)


def repair_torn_tail(path: Path) -> int:
    """Cut an unterminated last line (an append a crash interrupted); return bytes removed."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        return 0
    if size == 0:
        return 0
    with path.open("rb+") as fh:
        fh.seek(size - 1)
        if fh.read(1) == b"\n":
            return 0
        # Walk back to the last newline; everything after it never finished being written.
        pos = size - 1
        block = 4096
        while pos > 0:
            start = max(0, pos - block)
            fh.seek(start)
            chunk = fh.read(pos - start)
            idx = chunk.rfind(b"\n")
            if idx >= 0:
                keep = start + idx + 1
                break
            pos = start
        else:
            keep = 0
        fh.truncate(keep)
        fh.flush()
        os.fsync(fh.fileno())
    return size - keep


def read_jsonl(path: Path) -> Iterator[tuple[int, Any]]:
    """(line number, value) for every complete line; a torn last line is skipped."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    elif lines:
        lines.pop()  # unterminated: an interrupted append
    for number, line in enumerate(lines, start=1):
        if line.strip():
            yield number, json.loads(line)


def sha256_file(path: Path) -> str:
    """The SHA-256 of a file, read in chunks."""
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def read_file_bytes(
    path: Path,
    error: type[Exception],
    *,
    missing: str = "file is missing",
    what: str = "",
    directory: str | None = None,
) -> bytes:
    """The bytes of a file that must exist, or `error` naming it: `missing` when it does not
    exist, `directory` (when given) when it is a directory, else why it cannot be read (`what`
    names the file in that message)."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise error(f"{path}: {missing}") from None
    except OSError as exc:
        if directory is not None and isinstance(exc, IsADirectoryError):
            raise error(f"{path}: {directory}") from None
        raise error(f"{path}: cannot read{' ' + what if what else ''} ({exc.strerror})") from None


def iter_jsonl_objects(
    path: Path,
    error: type[Exception],
    *,
    missing: str = "file is missing",
    what: str = "",
    directory: str | None = None,
    brief: bool = False,
    suffix: str = "",
) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) for every line of a file that must be whole, line by line: a
    missing file, a line that is not JSON or not an object is `error`, naming the file and the
    line. `missing`, `what` and `directory` are as in `read_file_bytes`; `brief` gives only the
    parser's reason for a line that is not JSON, and `suffix` ends each line's message."""
    raw = read_file_bytes(path, error, missing=missing, what=what, directory=directory)
    for number, line in enumerate(raw.split(b"\n"), start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            reason: object = exc
            if brief:
                reason = exc.msg if isinstance(exc, json.JSONDecodeError) else "not UTF-8"
            raise error(f"{path}:{number}: not a JSON line ({reason}){suffix}") from None
        if not isinstance(obj, dict):
            raise error(f"{path}:{number}: expected a JSON object{suffix}")
        yield number, obj


def read_jsonl_objects(
    path: Path, error: type[Exception], *, missing: str = "file is missing", what: str = ""
) -> list[tuple[int, dict[str, Any]]]:
    """`iter_jsonl_objects` read to the end first: every line is checked before any is used."""
    return list(iter_jsonl_objects(path, error, missing=missing, what=what))


def parse_json_bytes(raw: bytes, path: Path, error: type[Exception], *, what: str = "") -> Any:
    """The JSON value of a file's bytes, or `error` naming the file (and `what` it is)."""
    try:
        return json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise error(f"{path}: {what + ' is ' if what else ''}not valid JSON ({exc})") from None


def read_json_file(
    path: Path, error: type[Exception], *, what: str = "", missing: str = "file is missing"
) -> Any:
    """A whole JSON file, or `error` naming the file: `missing` when it does not exist, else
    why it cannot be read or parsed (`what` names the file in those messages)."""
    raw = read_file_bytes(path, error, missing=missing, what=what)
    return parse_json_bytes(raw, path, error, what=what)


def jsonl_bytes(objects: Iterable[Any]) -> bytes:
    """JSON lines as the evaluations files hold them: sorted keys, UTF-8, one per line."""
    return b"".join(
        json.dumps(obj, sort_keys=True, ensure_ascii=False).encode() + b"\n" for obj in objects
    )
