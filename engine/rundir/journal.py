"""The live runner's durable writes, kept off the event loop's back as far as they can be.

Flushing to the disk is slow, so a thread of its own does only that, as a group commit:
every write waiting for a flush at the same moment shares the next one. Measured here,
flushing 64 new files together cost about what 5 one-by-one flushes cost. (A first version
did all the file operations on writer threads; their system calls then queued for the
interpreter lock behind the busy event loop, and a batch of writes took half a second.)

While those flushes keep the file system's journal busy, the file operations that change
metadata are slow too, and they did run on the event loop: on this project's test machines
(ext4 on a virtual disk, mounted with `discard`) a create or an open waited 0.1 to 0.4 ms,
and a rename over an existing file 0.5 to 4 ms (it frees the file it replaces). So:

- files are created and reopened ahead by a second thread (`Temporaries`), whose waits hold
  no request up; the event loop fills one and renames it;
- a replacement exchanges the two names (`renameat2(RENAME_EXCHANGE)`, 0.02 ms) instead of
  freeing the old file, which is filled again by a later replacement;
- what is off every request's path (turning an answer into its writes, writing records
  ahead) waits until no in_flight record waits for its flush (`later()`).

The order of what becomes durable is the runner's safety:

- A record that says `in_flight` is on disk before its request is sent: written to a
  temporary file, flushed, renamed into place, and the rename flushed.
- After an answer, each step is flushed before the next starts: the raw body (a new file
  per attempt); the response and attempt lines; the record saying `success` or `error`,
  renamed into place. That last rename is left to the next flush: the logs already hold the
  outcome, and resume settles a record from them. A crash before the logs are flushed leaves
  the prompt's record `in_flight` with nothing logged: "uncertain" after a restart, which
  resume refuses to resend without the user's say.

A flush is one `syncfs` of the run's file system on Linux; elsewhere (or if `syncfs` fails)
an fsync of every file and directory the waiting writes touched. Temporary files are named
`.*.tmp`, which a resume removes. A write that fails (a full disk, a directory that went
away) is kept in `failure` and raised by `drain()`; the runner stops sending as soon as it
sees one.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import ctypes
import errno
import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, cast

from engine.rundir.storage import temporary_path

Span = tuple[float, float]  # when one flush began and ended, time.perf_counter()
# How long the writes that follow an answer may wait for a flush some in_flight record needs
# anyway (they are not on anyone's critical path); every flush then serves both.
LAZY_SECONDS = 0.02
BACKLOG_SLICE = 0.002  # seconds of later() work per turn of the event loop, when none is due


def _libc_function(name: str, *argtypes: Any) -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        fn = getattr(ctypes.CDLL(None, use_errno=True), name)
    except (OSError, AttributeError):
        return None
    fn.argtypes = list(argtypes)
    fn.restype = ctypes.c_int
    return cast(Callable[..., int], fn)


_SYNCFS = _libc_function("syncfs", ctypes.c_int)
# renameat2: RENAME_EXCHANGE swaps two names atomically (the displaced file is kept, not
# freed); RENAME_NOREPLACE installs a new name in one call when nothing is there yet.
_RENAMEAT2 = _libc_function(
    "renameat2", ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint
)
_AT_FDCWD = -100
_RENAME_NOREPLACE = 1
_RENAME_EXCHANGE = 2


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
        """A new file, written once (a raw body: each attempt has its own)."""
        self.created.append((path, data))
        return self

    def append(self, path: Path, data: bytes) -> Group:
        self.appends.append((path, data))
        return self

    def replace(self, path: Path, data: bytes) -> Group:
        self.files.append((path, data))
        return self


class Flusher:
    """One thread flushing for everyone: a caller waits for the next flush that starts after
    its call, and every caller waiting then shares it."""

    def __init__(self, anchor: Path, loop: asyncio.AbstractEventLoop) -> None:
        self._anchor = os.open(anchor, os.O_RDONLY)  # a descriptor on the run's file system
        self._loop = loop
        self._cond = threading.Condition()
        self._waiting: list[tuple[asyncio.Future[Span], Sequence[int]]] = []
        self._closing = False
        self._urgent = False
        self._lazy_since: float | None = None
        self.flushes = 0
        self.waits = 0
        self.durations: list[float] = []  # seconds each flush took, in order
        self.started = 0  # flushes begun; a write finished when this read s is durable once
        self.completed = 0  # ... `completed` (flushes ended without error) reaches s + 1
        self._thread = threading.Thread(target=self._run, name="pqid-flush", daemon=True)
        self._thread.start()

    def flush(self, fds: Sequence[int], *, urgent: bool = True) -> asyncio.Future[Span]:
        """Durable once the future is done: every write so far, at least those to `fds` (the
        descriptors are used when `syncfs` is not available; keep them open until then).
        A flush that is not `urgent` may wait up to LAZY_SECONDS for an urgent one to share.
        The future's result is when the flush that served it began and ended
        (`time.perf_counter()`)."""
        done: asyncio.Future[Span] = self._loop.create_future()
        with self._cond:
            self._waiting.append((done, fds))
            if urgent:
                self._urgent = True
            elif self._lazy_since is None:
                self._lazy_since = time.monotonic()
            self._cond.notify()
        return done

    def _due(self) -> float | None:
        """0 when a flush is due now, else seconds until one is (None: nothing waits)."""
        if self._urgent or (self._closing and self._waiting):
            return 0.0
        if self._lazy_since is None:
            return None
        return max(0.0, self._lazy_since + LAZY_SECONDS - time.monotonic())

    def _run(self) -> None:
        while True:
            with self._cond:
                while True:
                    due = self._due()
                    if due == 0.0:
                        break
                    if due is None and self._closing:
                        return
                    self._cond.wait(due)
                batch, self._waiting = self._waiting, []
                self._urgent, self._lazy_since = False, None
                self.started += 1
                number = self.started
            failure: OSError | None = None
            began = time.perf_counter()
            try:
                if _SYNCFS is None or _SYNCFS(self._anchor) != 0:
                    for fd in {fd for _, fds in batch for fd in fds}:
                        os.fsync(fd)
            except OSError as exc:
                failure = exc
            ended = time.perf_counter()
            self.durations.append(ended - began)
            self.flushes += 1
            self.waits += len(batch)
            if failure is None:
                with self._cond:
                    self.completed = max(self.completed, number)
            try:
                self._loop.call_soon_threadsafe(_settle, batch, failure, (began, ended))
            except RuntimeError:  # the loop is closed: nobody is waiting any more
                return

    def close(self) -> None:
        with self._cond:
            self._closing = True
            self._cond.notify()
        self._thread.join()
        os.close(self._anchor)


def _settle(
    batch: list[tuple[asyncio.Future[Span], Sequence[int]]], failure: OSError | None, span: Span
) -> None:
    for done, _ in batch:
        if done.done():
            continue
        if failure is None:
            done.set_result(span)
        else:
            done.set_exception(failure)


def _open_new(path: Path | str, data: bytes) -> int:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        _write_all(fd, data)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _temporary(path: Path) -> str:
    return str(temporary_path(path))


def _fill(fd: int, data: bytes, used: bool) -> None:
    """Make `data` the whole content of the open temporary file `fd`."""
    view, offset = memoryview(data), 0
    while offset < len(data):
        offset += os.pwrite(fd, view[offset:], offset)
    if used:
        os.ftruncate(fd, len(data))


class Temporaries:
    """Temporary files ready to be filled, per directory, opened by a thread of their own:
    new empty files, and the files replacements displaced (reopened, to be filled again).
    Creating or opening a file waits for the busy journal (see the module docstring); here
    that wait holds no request up."""

    def __init__(self, keep: int) -> None:
        self._keep = max(1, keep)
        # directory -> (name, open descriptor, whether it held something before)
        self._ready: dict[Path, collections.deque[tuple[str, int, bool]]] = {}
        self._returned: collections.deque[tuple[Path, str]] = collections.deque()
        self._wanted = threading.Event()
        self._closing = False
        self._winding_down = False
        self._thread = threading.Thread(target=self._run, name="pqid-temporaries", daemon=True)
        self._thread.start()

    def take(self, directory: Path) -> tuple[str, int, bool] | None:
        """A temporary file in `directory` and its descriptor, if one is ready."""
        ready = self._ready.get(directory)
        if ready is None:
            ready = self._ready[directory] = collections.deque()
        item = ready.popleft() if ready else None
        if len(ready) <= self._keep // 2 and not self._wanted.is_set():
            self._wanted.set()
        return item

    def put(self, directory: Path, name: str, fd: int) -> None:
        """A temporary file taken and not used after all."""
        self._ready.setdefault(directory, collections.deque()).append((name, fd, True))

    def give_back(self, directory: Path, name: str) -> None:
        """`name` holds an outdated file now: reopen it to be filled again later."""
        self._returned.append((directory, name))
        if not self._wanted.is_set():
            self._wanted.set()

    def wind_down(self) -> None:
        """Few temporary files will be wanted from now on: make no more, and remove (here,
        not at close(), where that would be on the event loop) the files displaced."""
        self._winding_down = True
        self._wanted.set()

    def _run(self) -> None:
        while True:
            self._wanted.wait()
            self._wanted.clear()
            while self._returned and not self._closing:
                directory, name = self._returned.popleft()
                ready = self._ready.setdefault(directory, collections.deque())
                try:
                    if self._winding_down or len(ready) >= self._keep:  # open files: few
                        os.unlink(name)
                        continue
                    ready.append((name, os.open(name, os.O_WRONLY), True))
                except OSError:
                    with contextlib.suppress(OSError):
                        os.unlink(name)
            for directory, ready in list(self._ready.items()):
                while len(ready) < self._keep and not (self._closing or self._winding_down):
                    name = str(temporary_path(directory / "spare"))
                    try:
                        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                    except OSError:
                        break  # the writer's own attempt will meet the problem and report it
                    ready.append((name, fd, False))
            if self._closing:
                return

    def close(self) -> list[str]:
        """Stop; close what is open; return the names of the temporary files left."""
        self._closing = True
        self._wanted.set()
        self._thread.join()
        left = [name for _, name in self._returned]
        for ready in self._ready.values():
            for name, fd, _ in ready:
                with contextlib.suppress(OSError):
                    os.close(fd)
                left.append(name)
        self._ready.clear()
        self._returned.clear()
        return left


class Prepared:
    """A record written ahead to its temporary file, waiting to be renamed into place."""

    __slots__ = ("data", "fd", "path", "started", "tmp")

    def __init__(self, path: Path, data: bytes, tmp: str, fd: int, started: int) -> None:
        self.path, self.data, self.tmp, self.fd, self.started = path, data, tmp, fd, started


class Journal:
    """Durable writes for one run directory, used from one event loop."""

    def __init__(self, root: Path, *, temporaries: int = 32) -> None:
        self.root = Path(root)
        self._flusher: Flusher | None = None
        self._keep_temporaries = temporaries
        self._temporaries: Temporaries | None = None
        self._append_fds: dict[Path, int] = {}
        self._dir_fds: dict[Path, int] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._prepared: dict[Path, Prepared] = {}
        self._renameat2 = _RENAMEAT2
        self._installed: set[str] = set()  # paths that exist: a replacement exchanges at once
        self.exchanged = 0
        self.created_on_loop = 0  # temporary files the thread had not made in time
        self.left_at_close = 0
        self.failure: BaseException | None = None
        self.prepared_used = 0
        self.record_waits = 0
        self.record_wait_seconds = 0.0
        # The in_flight records' waits, split: for a flush to begin (one already under way
        # began before the record was written), the flushes themselves, and from a flush's
        # end until the event loop resumed the request.
        self.record_wait_parts = {"to_begin": 0.0, "flush": 0.0, "to_resume": 0.0}
        self.flushes = 0
        self._durations: list[float] = []
        # Work off every request's path (see later()), oldest first, and what it waits for.
        self._backlog: collections.deque[tuple[float, Callable[[], None]]] = collections.deque()
        self._backlog_handle: asyncio.Handle | None = None
        self._records_waiting = 0  # replace_now calls under way

    def _flush(self, fds: Sequence[int], *, urgent: bool = True) -> asyncio.Future[Span]:
        if self._flusher is None:
            self._flusher = Flusher(self.root, asyncio.get_running_loop())
        return self._flusher.flush(fds, urgent=urgent)

    def _dir_fd(self, directory: Path) -> int:
        fd = self._dir_fds.get(directory)
        if fd is None:
            fd = self._dir_fds[directory] = os.open(directory, os.O_RDONLY)
        return fd

    def _append_fd(self, path: Path) -> int:
        fd = self._append_fds.get(path)
        if fd is None:
            fd = self._append_fds[path] = os.open(
                path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600
            )
        return fd

    def _write_temporary(self, path: Path, data: bytes) -> tuple[str, int]:
        """A temporary file beside `path` holding `data`, and its open descriptor."""
        if self._temporaries is None and self._keep_temporaries > 0:
            self._temporaries = Temporaries(self._keep_temporaries)
        ready = self._temporaries.take(path.parent) if self._temporaries is not None else None
        if ready is None:
            self.created_on_loop += 1
        else:
            tmp, fd, used = ready
            try:
                _fill(fd, data, used)
            except BaseException:
                os.close(fd)
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise
            return tmp, fd
        tmp = _temporary(path)
        return tmp, _open_new(tmp, data)

    def _install(self, tmp: str, path: Path) -> None:
        """Rename `tmp` onto `path` atomically. A file `path` held before is not freed (that
        is slow, see _RENAMEAT2) but exchanged with `tmp`, to be filled again later."""
        rename2, target = self._renameat2, os.fspath(path)
        if rename2 is not None:
            exchange = target in self._installed
            for _ in range(3):  # the target may come and go between tries
                flags = _RENAME_EXCHANGE if exchange else _RENAME_NOREPLACE
                if rename2(_AT_FDCWD, os.fsencode(tmp), _AT_FDCWD, os.fsencode(target), flags) == 0:
                    self._installed.add(target)
                    if exchange:
                        self.exchanged += 1
                        if self._temporaries is not None:
                            self._temporaries.give_back(path.parent, tmp)
                        else:
                            os.unlink(tmp)
                    return
                error = ctypes.get_errno()
                if error == errno.EEXIST and not exchange:
                    exchange = True
                elif error == errno.ENOENT and exchange and os.path.exists(tmp):
                    exchange = False
                elif error in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
                    self._renameat2 = None  # not on this file system: plain renames from now
                    break
                else:
                    raise OSError(error, os.strerror(error), tmp, None, target)
            else:
                raise OSError(errno.EAGAIN, "the target kept changing", tmp, None, target)
        os.replace(tmp, path)
        self._installed.add(target)

    def wind_down(self) -> None:
        """Say that the writes still to come are few (the last prompts are on their way):
        temporary files are no longer made ahead, and those displaced are removed at once."""
        if self._temporaries is not None:
            self._temporaries.wind_down()

    # -- the critical path --------------------------------------------------------------------
    async def replace_now(self, path: Path, data: bytes) -> None:
        """Atomically replace `path` with `data`; return once the new file is durable.

        If the same bytes were prepared earlier (`prepare`) and a flush has begun since, the
        temporary file is durable already and only its rename waits for a flush."""
        prepared = self._prepared.pop(path, None)
        if prepared is not None and prepared.data != data:
            self._discard(prepared)
            prepared = None
        if prepared is None:
            tmp, fd = self._write_temporary(path, data)
            started = -1
        else:
            tmp, fd, started = prepared.tmp, prepared.fd, prepared.started
        waited = time.perf_counter()
        self._records_waiting += 1
        try:
            try:
                flusher = self._flusher
                if (
                    started < 0
                    or flusher is None
                    or _SYNCFS is None
                    or flusher.completed < started + 1
                ):
                    await self._wait_for_flush([fd])
                else:
                    self.prepared_used += 1
            finally:
                os.close(fd)
            self._install(tmp, path)
            await self._wait_for_flush([self._dir_fd(path.parent)])
        finally:
            self._records_waiting -= 1
            if not self._records_waiting:
                self._schedule_backlog(now=True)
        self.record_waits += 1
        self.record_wait_seconds += time.perf_counter() - waited

    async def _wait_for_flush(self, fds: Sequence[int]) -> None:
        asked = time.perf_counter()
        began, ended = await self._flush(fds)
        parts = self.record_wait_parts
        parts["to_begin"] += began - asked
        parts["flush"] += ended - began
        parts["to_resume"] += time.perf_counter() - ended

    def prepare(self, path: Path, data: bytes) -> None:
        """Write what `replace_now(path, data)` will write to its temporary file now, so that
        the flushes of other writes make it durable before it is needed."""
        if path in self._prepared or self.failure is not None:
            return
        try:
            tmp, fd = self._write_temporary(path, data)
        except OSError:
            return  # replace_now will meet (and report) the same problem
        if self._flusher is None:
            self._flusher = Flusher(self.root, asyncio.get_running_loop())
        with self._flusher._cond:
            started = self._flusher.started
        self._prepared[path] = Prepared(path, data, tmp, fd, started)

    def _discard(self, prepared: Prepared) -> None:
        if self._temporaries is not None:
            self._temporaries.put(prepared.path.parent, prepared.tmp, prepared.fd)
            return
        with contextlib.suppress(OSError):
            os.close(prepared.fd)
        with contextlib.suppress(OSError):
            os.unlink(prepared.tmp)

    # -- off the requests' path -------------------------------------------------------------
    def later(self, work: Callable[[], None]) -> None:
        """Run `work` (turning an answer into its writes, writing records ahead) once no
        in_flight record waits for its flush, or after LAZY_SECONDS at the latest.

        When many answers arrive at once, their requests' successors then reach the wire
        before any of them is written up: each piece of work delays every request queued
        behind it on the event loop. A piece that raises stops the run (see `failure`)."""
        self._backlog.append((time.perf_counter(), work))
        self._schedule_backlog()

    def _schedule_backlog(self, *, now: bool = False) -> None:
        if not self._backlog:
            return
        handle = self._backlog_handle
        if handle is not None:
            if not (now and isinstance(handle, asyncio.TimerHandle)):
                return
            handle.cancel()
        loop = asyncio.get_running_loop()
        if self._records_waiting == 0:
            self._backlog_handle = loop.call_soon(self._run_backlog)
        else:
            due = self._backlog[0][0] + LAZY_SECONDS - time.perf_counter()
            self._backlog_handle = loop.call_later(max(0.0, due), self._run_backlog)

    def _run_backlog(self) -> None:
        # Everything that has waited LAZY_SECONDS runs now, however busy the loop is (so the
        # backlog never falls further behind); the rest only while no record waits, and for
        # BACKLOG_SLICE at a time, so that what arrives in between is not held up.
        self._backlog_handle = None
        now = time.perf_counter()
        until = now + BACKLOG_SLICE
        while self._backlog:
            if self._backlog[0][0] + LAZY_SECONDS > now and (self._records_waiting or now >= until):
                break
            self._run_one()
            now = time.perf_counter()
        self._schedule_backlog()

    def _run_one(self) -> None:
        _, work = self._backlog.popleft()
        try:
            work()
        except Exception as exc:  # kept, raised by drain()
            self.failure = self.failure or exc

    def run_backlog(self) -> None:
        """Run every piece of work still waiting, now."""
        if self._backlog_handle is not None:
            self._backlog_handle.cancel()
            self._backlog_handle = None
        while self._backlog:
            self._run_one()

    # -- after an answer ----------------------------------------------------------------------
    def commit_later(
        self, group: Group, on_durable: Callable[[], None] | None = None
    ) -> asyncio.Task[None]:
        """Write `group` in its order in the background; `on_durable` runs once its logs are
        on disk. Await the returned task to order a later write after this one."""
        task = asyncio.get_running_loop().create_task(self._commit(group, on_durable))
        self._tasks.add(task)
        task.add_done_callback(self._finished)
        return task

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            self.failure = self.failure or task.exception()

    async def _commit(self, group: Group, on_durable: Callable[[], None] | None) -> None:
        if group.created:
            # Written under a temporary name and renamed: the final name never holds less.
            fds: list[int] = []
            try:
                for path, data in group.created:
                    tmp, fd = self._write_temporary(path, data)
                    fds.append(fd)
                    self._install(tmp, path)
                dirs = [self._dir_fd(d) for d in {path.parent for path, _ in group.created}]
                await self._flush(fds + dirs, urgent=False)
            finally:
                for fd in fds:
                    os.close(fd)
        touched = []
        for path, data in group.appends:
            fd = self._append_fd(path)
            _write_all(fd, data)
            touched.append(fd)
        temporaries: list[tuple[str, int, Path]] = []
        try:
            for path, data in group.files:
                temporaries.append((*self._write_temporary(path, data), path))
            await self._flush(touched + [fd for _, fd, _ in temporaries], urgent=False)
        finally:
            for _, fd, _ in temporaries:
                os.close(fd)
        for tmp, _, path in temporaries:
            self._install(tmp, path)
        if on_durable is not None:
            on_durable()

    # -- the end ------------------------------------------------------------------------------
    async def drain(self) -> None:
        """Wait for every background write; raise the first failure, if any."""
        self.run_backlog()
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
        if self._flusher is not None and self._tasks == set():
            # The settled records' renames reach the disk with this last flush.
            with contextlib.suppress(OSError):
                await self._flush(list(self._dir_fds.values()))
        if self.failure is not None:
            raise self.failure

    def close(self) -> None:
        if self._backlog_handle is not None:  # drain() ran what mattered; the rest is moot
            self._backlog_handle.cancel()
            self._backlog_handle = None
        for prepared in self._prepared.values():  # prompts that were not sent after all
            self._discard(prepared)
        self._prepared.clear()
        if self._temporaries is not None:
            left = self._temporaries.close()
            self.left_at_close = len(left)
            for tmp in left:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
            self._temporaries = None
        if self._flusher is not None:
            self._flusher.close()
            self.flushes = self._flusher.flushes
            self._durations = self._flusher.durations
            self._flusher = None
        for fd in (*self._append_fds.values(), *self._dir_fds.values()):
            with contextlib.suppress(OSError):
                os.close(fd)
        self._append_fds.clear()
        self._dir_fds.clear()

    def stats(self) -> dict[str, Any]:
        """How the durable writes went: the flushes (how many, how long each took on this
        disk), and how long requests waited for their in_flight records, split into waiting
        for a flush to begin, the flushes, and waiting for the event loop afterwards."""
        flushes = self._flusher.flushes if self._flusher else self.flushes
        durations = sorted(self._flusher.durations if self._flusher else self._durations)
        waits = self.record_waits

        def ms(seconds: float) -> float:
            return round(seconds * 1000, 3)

        return {
            "flushes": flushes,
            "flush": "syncfs" if _SYNCFS is not None else "fsync per file",
            "flush_ms": _percentiles(durations, ms),
            "flush_busy_s": round(sum(durations), 3),
            "in_flight_records": waits,
            "in_flight_records_written_ahead": self.prepared_used,
            "files_made_on_the_loop": self.created_on_loop,
            "temporaries_removed_at_close": self.left_at_close,
            "mean_wait_ms": ms(self.record_wait_seconds / waits) if waits else None,
            "mean_wait_split_ms": {k: ms(v / waits) for k, v in self.record_wait_parts.items()}
            if waits
            else None,
        }


def _percentiles(
    values: Sequence[float], unit: Callable[[float], float]
) -> dict[str, float] | None:
    """Mean and percentiles of sorted `values`, each passed through `unit`."""
    if not values:
        return None
    n = len(values)
    return {
        "mean": unit(sum(values) / n),
        "p50": unit(values[n // 2]),
        "p90": unit(values[min(n - 1, n * 9 // 10)]),
        "p99": unit(values[min(n - 1, n * 99 // 100)]),
        "max": unit(values[-1]),
    }


__all__ = ["Flusher", "Group", "Journal", "Prepared"]
