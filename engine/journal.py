"""The live runner's durable writes, done off the event loop.

Two committer threads ("lanes"), because the writes have different deadlines. Each takes
every write queued since its last commit, commits them together and wakes the event loop
once for the whole batch, so one flush of the disk is shared by every prompt in flight.

- A record that says `in_flight` must be on disk before its request is sent: the critical
  lane writes each to a temporary file, flushes, renames them into place and flushes the
  renames, then releases the waiting workers.
- What follows an answer is not on the critical path; the worker goes on to its next prompt
  while the second lane writes it, in this order, each step flushed before the next: the raw
  body (a new file per attempt); the response and attempt lines; the record saying `success`
  or `error`, renamed into place. That last rename is left to the next flush: the logs
  already hold the outcome, and resume settles a record from them (a crash before the rename
  is durable leaves `in_flight` plus a logged outcome, which is read as that outcome).
  A crash earlier than that leaves the prompt's record `in_flight` with nothing logged:
  "uncertain" after a restart, which resume refuses to resend without the user's say.

A flush is one `syncfs` of the file system on Linux (measured: flushing 64 new files together
costs about what flushing 5 one by one does), an fsync per file and directory elsewhere or
if `syncfs` fails. A failure to write (a full disk, a permission change) is kept and raised
by `drain()`; the runner stops sending as soon as it sees one.
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
    """The writes that follow one answer, in the order they must become durable: new files
    (raw bodies), then appended lines, then files replaced atomically (records)."""

    __slots__ = ("appends", "created", "files")

    def __init__(self) -> None:
        self.created: list[tuple[Path, bytes]] = []
        self.appends: list[tuple[Path, bytes]] = []
        self.files: list[tuple[Path, bytes]] = []

    def create(self, path: Path, data: bytes) -> Group:
        """A file written once under its final name (a raw body: each attempt has its own)."""
        self.created.append((path, data))
        return self

    def append(self, path: Path, data: bytes) -> Group:
        self.appends.append((path, data))
        return self

    def replace(self, path: Path, data: bytes) -> Group:
        self.files.append((path, data))
        return self


def commit_groups(groups: list[Group], *, whole_fs: bool = True,
                  flush_renames: bool = True) -> None:
    """Write `groups` durably, in three steps, each flushed before the next begins:
    new files; appended lines and the temporaries of replaced files; the renames of those
    temporaries (flushed only with `flush_renames`: a record whose outcome the logs already
    hold may reach the disk later, as resume settles it from the logs)."""
    created = [item for group in groups for item in group.created]
    if created:
        fds = []
        try:
            for path, data in created:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                fds.append(fd)
                _write_all(fd, data)
            _flush(fds, whole_fs)
        finally:
            for fd in fds:
                os.close(fd)
        if not (whole_fs and _SYNCFS is not None):
            _flush_dirs({path.parent for path, _ in created}, whole_fs)
    fds_by_path: dict[Path, int] = {}
    renames: list[tuple[str, Path]] = []
    to_sync: list[int] = []
    try:
        appends: dict[Path, list[bytes]] = {}
        for group in groups:
            for path, data in group.appends:
                appends.setdefault(path, []).append(data)
        for path, chunks in appends.items():
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            fds_by_path[path] = fd
            _write_all(fd, b"".join(chunks))
            to_sync.append(fd)
        for group in groups:
            for path, data in group.files:
                tmp = str(path.with_name(f".{path.name}.{os.getpid()}."
                                         f"{next(_COUNTER)}.tmp"))
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                fds_by_path[Path(tmp)] = fd
                _write_all(fd, data)
                to_sync.append(fd)
                renames.append((tmp, path))
        _flush(to_sync, whole_fs)
    finally:
        for fd in fds_by_path.values():
            os.close(fd)
    for tmp, path in renames:
        os.replace(tmp, path)
    if renames and flush_renames:
        _flush_dirs({path.parent for _, path in renames}, whole_fs)


def _flush(fds: list[int], whole_fs: bool) -> None:
    if not fds:
        return
    if whole_fs and _SYNCFS is not None and _SYNCFS(fds[0]) == 0:
        return
    for fd in fds:
        os.fsync(fd)


def _flush_dirs(dirs: set[Path], whole_fs: bool) -> None:
    for directory in dirs:
        fd = os.open(directory, os.O_RDONLY)
        try:
            if whole_fs and _SYNCFS is not None and _SYNCFS(fd) == 0:
                return  # one flush covers every directory on the file system
            os.fsync(fd)
        finally:
            os.close(fd)


Callback = Callable[[BaseException | None], None]


class _Lane:
    """One committer thread: takes every group queued since its last commit, commits them
    together, and wakes the event loop once for the whole batch."""

    def __init__(self, name: str, loop: asyncio.AbstractEventLoop, *, whole_fs: bool,
                 flush_renames: bool) -> None:
        self._loop = loop
        self._whole_fs = whole_fs
        self._flush_renames = flush_renames
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
                commit_groups([group for group, _ in batch], whole_fs=self._whole_fs,
                              flush_renames=self._flush_renames)
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
            self._urgent = _Lane("pqid-record", loop, whole_fs=True, flush_renames=True)
            self._later = _Lane("pqid-commit", loop, whole_fs=True, flush_renames=False)
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
