"""The live runner's durable writes, done off the event loop.

Two lanes, because the two kinds of write have different deadlines:

- A record that says `in_flight` (or `retry_wait`) must be on disk before the request is sent,
  so it is on the runner's critical path. These go to a small pool of threads, each doing the
  full atomic replacement (write a temporary file, fsync it, rename, fsync the directory);
  flushes issued at the same moment share the file system's journal commit.
- What follows an answer (the raw body, the response line, the attempt line, the final record)
  is not on the critical path: the worker goes on to its next prompt while one committer thread
  writes these in groups. A group is written in submission order, flushed once (`syncfs` on
  Linux: one flush of the file system for the whole group; elsewhere an fsync per file), and
  only then are its records renamed into place and the renames flushed. So a record can never
  say `success` before its response and attempt lines are durable. A crash before the group
  is flushed leaves the prompt's record `in_flight`: after a restart it is "uncertain", which
  resume refuses to resend silently; nothing is lost or repeated without the user's say.

A failure to write (a full disk, a permission change) is kept and raised by `drain()`; the
runner stops sending as soon as it sees one.
"""

from __future__ import annotations

import asyncio
import ctypes
import itertools
import os
import sys
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from engine.storage import atomic_write_bytes

_COUNTER = itertools.count()


def _syncfs_function() -> Callable[[int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.syncfs
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int]
    fn.restype = ctypes.c_int
    return fn


_SYNCFS = _syncfs_function()


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


class Group:
    """The writes that follow one answer, in the order they must become durable."""

    __slots__ = ("appends", "files")

    def __init__(self) -> None:
        self.appends: list[tuple[Path, bytes]] = []
        self.files: list[tuple[Path, bytes]] = []  # replaced atomically, after the appends

    def append(self, path: Path, data: bytes) -> Group:
        self.appends.append((path, data))
        return self

    def replace(self, path: Path, data: bytes) -> Group:
        self.files.append((path, data))
        return self


def commit_groups(groups: list[Group]) -> None:
    """Write `groups` durably: appends and new files, one flush, renames, one more flush."""
    fds: dict[Path, int] = {}
    renames: list[tuple[str, Path]] = []
    to_sync: list[int] = []
    try:
        appends: dict[Path, list[bytes]] = {}
        for group in groups:
            for path, data in group.appends:
                appends.setdefault(path, []).append(data)
        for path, chunks in appends.items():
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            fds[path] = fd
            _write_all(fd, b"".join(chunks))
            to_sync.append(fd)
        for group in groups:
            for path, data in group.files:
                tmp = str(path.with_name(f".{path.name}.{os.getpid()}."
                                         f"{next(_COUNTER)}.tmp"))
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                fds[Path(tmp)] = fd
                _write_all(fd, data)
                to_sync.append(fd)
                renames.append((tmp, path))
        _flush(to_sync)
    finally:
        for fd in fds.values():
            os.close(fd)
    if renames:
        for tmp, path in renames:
            os.replace(tmp, path)
        _flush_dirs({path.parent for _, path in renames})


def _flush(fds: list[int]) -> None:
    if not fds:
        return
    if _SYNCFS is not None and _SYNCFS(fds[0]) == 0:
        return
    for fd in fds:
        os.fsync(fd)


def _flush_dirs(dirs: set[Path]) -> None:
    for directory in dirs:
        fd = os.open(directory, os.O_RDONLY)
        try:
            if _SYNCFS is not None and _SYNCFS(fd) == 0:
                return  # one flush covers every directory on the file system
            os.fsync(fd)
        finally:
            os.close(fd)


class Journal:
    """Durable writes for one run directory."""

    def __init__(self, root: Path, *, urgent_threads: int = 8) -> None:
        self.root = Path(root)
        self._urgent = ThreadPoolExecutor(urgent_threads, thread_name_prefix="pqid-record")
        self._lock = threading.Condition()
        self._queue: list[tuple[Group, Future[None]]] = []
        self._closing = False
        self._committer: threading.Thread | None = None
        self._outstanding: set[asyncio.Future[None]] = set()
        self.failure: BaseException | None = None
        self.groups_committed = 0
        self.commits = 0

    # -- the critical lane --------------------------------------------------------------------
    async def replace_now(self, path: Path, data: bytes) -> None:
        """Atomically replace `path` with `data`; return once it is durable."""
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._urgent, atomic_write_bytes, path, data)

    # -- the committer lane -------------------------------------------------------------------
    def commit_later(self, group: Group,
                     on_durable: Callable[[], None] | None = None) -> asyncio.Future[None]:
        """Queue `group`; `on_durable` runs on the event loop once all of it is on disk."""
        loop = asyncio.get_running_loop()
        done: Future[None] = Future()
        with self._lock:
            if self._committer is None:
                self._committer = threading.Thread(target=self._commit_loop,
                                                   name="pqid-commit", daemon=True)
                self._committer.start()
            self._queue.append((group, done))
            self._lock.notify()
        waiter = asyncio.wrap_future(done, loop=loop)
        self._outstanding.add(waiter)

        def finished(fut: asyncio.Future[None]) -> None:
            self._outstanding.discard(fut)
            if fut.cancelled():
                return
            exc = fut.exception()
            if exc is not None:
                self.failure = self.failure or exc
            elif on_durable is not None:
                on_durable()

        waiter.add_done_callback(finished)
        return waiter

    def _commit_loop(self) -> None:
        while True:
            with self._lock:
                while not self._queue and not self._closing:
                    self._lock.wait()
                if not self._queue:
                    return
                batch, self._queue = self._queue, []
            try:
                commit_groups([group for group, _ in batch])
            except BaseException as exc:
                for _, done in batch:
                    done.set_exception(exc)
                continue
            self.commits += 1
            self.groups_committed += len(batch)
            for _, done in batch:
                done.set_result(None)

    # -- the end ------------------------------------------------------------------------------
    async def drain(self) -> None:
        """Wait for every queued group; raise the first write failure, if any."""
        while self._outstanding:
            await asyncio.gather(*list(self._outstanding), return_exceptions=True)
        if self.failure is not None:
            raise self.failure

    def close(self) -> None:
        with self._lock:
            self._closing = True
            self._lock.notify()
        if self._committer is not None:
            self._committer.join()
        self._urgent.shutdown(wait=True)

    def stats(self) -> dict[str, Any]:
        return {"groups": self.groups_committed, "commits": self.commits,
                "syncfs": _SYNCFS is not None}


__all__ = ["Group", "Journal", "commit_groups"]
