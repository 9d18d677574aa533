"""The live runner's durable writes, done off the event loop.

Two lanes, because the two kinds of write have different deadlines:

- A record that says `in_flight` must be on disk before the request is sent, so it is on the
  runner's critical path. These go to a committer thread of their own, which takes every
  record waiting, writes each to a temporary file, flushes them together, renames them into
  place and flushes the renames, then wakes the waiting workers at once.
- What follows an answer (the raw body, the response line, the attempt line, the final record)
  is not on the critical path: the worker goes on to its next prompt while a second committer
  thread writes these in groups. A group is written in submission order, flushed once (`syncfs` on
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
from pathlib import Path
from typing import Any

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


Callback = Callable[[BaseException | None], None]


class _Lane:
    """One committer thread: takes every group queued since its last commit, commits them
    together, and wakes the event loop once for the whole batch."""

    def __init__(self, name: str, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._cond = threading.Condition()
        self._queue: list[tuple[Group, Callback]] = []
        self._closing = False
        self.commits = 0
        self.groups = 0
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, group: Group, callback: Callback) -> None:
        with self._cond:
            self._queue.append((group, callback))
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closing:
                    self._cond.wait()
                if not self._queue:
                    return
                batch, self._queue = self._queue, []
            failure: BaseException | None = None
            try:
                commit_groups([group for group, _ in batch])
            except BaseException as exc:  # handed to every waiter of the batch
                failure = exc
            self.commits += 1
            self.groups += len(batch)
            try:
                self._loop.call_soon_threadsafe(_finish, batch, failure)
            except RuntimeError:  # the loop is closed: nobody is waiting any more
                return

    def close(self) -> None:
        with self._cond:
            self._closing = True
            self._cond.notify()
        self._thread.join()


def _finish(batch: list[tuple[Group, Callback]], failure: BaseException | None) -> None:
    for _, callback in batch:
        callback(failure)


class Journal:
    """Durable writes for one run directory; use it from one event loop."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self._urgent: _Lane | None = None
        self._later: _Lane | None = None
        self._outstanding = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self.failure: BaseException | None = None

    def _lanes(self) -> tuple[_Lane, _Lane]:
        if self._urgent is None or self._later is None:
            loop = asyncio.get_running_loop()
            self._urgent = _Lane("pqid-record", loop)
            self._later = _Lane("pqid-commit", loop)
        return self._urgent, self._later

    # -- the critical lane --------------------------------------------------------------------
    async def replace_now(self, path: Path, data: bytes) -> None:
        """Atomically replace `path` with `data`; return once it is durable."""
        urgent, _ = self._lanes()
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def settle(failure: BaseException | None) -> None:
            if done.done():
                return
            if failure is None:
                done.set_result(None)
            else:
                done.set_exception(failure)

        urgent.submit(Group().replace(path, data), settle)
        await done

    # -- the committer lane -------------------------------------------------------------------
    def commit_later(self, group: Group, on_durable: Callable[[], None] | None = None,
                     ) -> asyncio.Future[None]:
        """Queue `group`; `on_durable` runs on the event loop once all of it is on disk. The
        returned future may be awaited (to order a later write after this one) or ignored."""
        _, later = self._lanes()
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._outstanding += 1
        self._idle.clear()

        def settle(failure: BaseException | None) -> None:
            self._outstanding -= 1
            if not self._outstanding:
                self._idle.set()
            if failure is not None:
                self.failure = self.failure or failure
                if not done.done():
                    done.set_exception(failure)
                    done.exception()  # retrieved: the failure is reported by drain()
                return
            if on_durable is not None:
                on_durable()
            if not done.done():
                done.set_result(None)

        later.submit(group, settle)
        return done

    # -- the end ------------------------------------------------------------------------------
    async def drain(self) -> None:
        """Wait for every queued group; raise the first write failure, if any."""
        await self._idle.wait()
        if self.failure is not None:
            raise self.failure

    def close(self) -> None:
        for lane in (self._urgent, self._later):
            if lane is not None:
                lane.close()

    def stats(self) -> dict[str, Any]:
        lanes = {"record": self._urgent, "commit": self._later}
        return {name: {"commits": lane.commits, "groups": lane.groups} if lane else None
                for name, lane in lanes.items()} | {"syncfs": _SYNCFS is not None}


__all__ = ["Group", "Journal", "commit_groups"]
