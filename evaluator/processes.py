"""Process hygiene: privacy flags, /proc scans, and sweeping processes a snippet left behind."""

from __future__ import annotations

import ctypes
import errno
import os
import signal
import time
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = [
    "ProcInfo",
    "SweepResult",
    "become_subreaper",
    "is_dumpable",
    "make_undumpable",
    "reap_children",
    "scan_processes",
    "sweep",
]

_PR_GET_DUMPABLE = 3
_PR_SET_DUMPABLE = 4
_PR_SET_CHILD_SUBREAPER = 36


def _prctl(option: int, arg: int = 0) -> int:
    """Call prctl(2); returns -1 where it is unavailable."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        result: int = libc.prctl(
            ctypes.c_int(option),
            ctypes.c_ulong(arg),
            ctypes.c_ulong(0),
            ctypes.c_ulong(0),
            ctypes.c_ulong(0),
        )
    except (OSError, AttributeError):
        return -1
    return result


def make_undumpable() -> bool:
    """Stop same-uid processes from reading this process's memory, environment and fds."""
    return _prctl(_PR_SET_DUMPABLE, 0) == 0


def is_dumpable() -> bool | None:
    """Whether this process is dumpable (None where prctl is unavailable)."""
    result = _prctl(_PR_GET_DUMPABLE)
    return None if result < 0 else result != 0


def become_subreaper() -> bool:
    """Adopt orphaned descendants, so a snippet that double-forks still lands under us."""
    return _prctl(_PR_SET_CHILD_SUBREAPER, 1) == 0


@dataclass(frozen=True)
class ProcInfo:
    """The fields of /proc/<pid>/stat the sweep needs."""

    pid: int
    ppid: int
    sid: int
    state: str

    @property
    def alive(self) -> bool:
        """Whether the process can still run (zombies cannot, and cannot be killed)."""
        return self.state not in ("Z", "X", "x")


def scan_processes() -> dict[int, ProcInfo]:
    """Read every visible process's parent, session and state."""
    table: dict[int, ProcInfo] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return table
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as handle:
                raw = handle.read()
        except OSError:
            continue
        # The command name may hold spaces and parentheses; the fields follow the last ')'.
        close = raw.rfind(b")")
        fields = raw[close + 2 :].split()
        if len(fields) < 4:
            continue
        table[int(name)] = ProcInfo(
            pid=int(name),
            ppid=int(fields[1]),
            sid=int(fields[3]),
            state=fields[0].decode("ascii", "replace"),
        )
    return table


def _descendants(root: int, table: dict[int, ProcInfo]) -> set[int]:
    """Every process below root in the parent tree."""
    children: dict[int, list[int]] = {}
    for info in table.values():
        children.setdefault(info.ppid, []).append(info.pid)
    found: set[int] = set()
    stack = [root]
    while stack:
        for child in children.get(stack.pop(), []):
            if child not in found:
                found.add(child)
                stack.append(child)
    return found


def _ancestors(pid: int, table: dict[int, ProcInfo]) -> set[int]:
    """Every process above pid in the parent tree."""
    found: set[int] = set()
    current = table.get(pid)
    while current is not None and current.ppid not in found and current.ppid > 0:
        found.add(current.ppid)
        current = table.get(current.ppid)
    return found


def reap_children(keep: Iterable[int], table: dict[int, ProcInfo] | None = None) -> int:
    """Collect exited children other than the ones in keep (init must, or zombies pile up)."""
    me = os.getpid()
    spare = set(keep)
    reaped = 0
    for info in (scan_processes() if table is None else table).values():
        if info.ppid != me or info.pid in spare or info.alive:
            continue
        try:
            pid, _ = os.waitpid(info.pid, os.WNOHANG)
        except ChildProcessError:
            continue
        reaped += pid != 0
    return reaped


@dataclass(frozen=True)
class SweepResult:
    """What a sweep did."""

    killed: int
    converged: bool


def sweep(
    *,
    keep: Iterable[int],
    container: bool,
    sessions: Iterable[int] = (),
    max_seconds: float = 5.0,
) -> SweepResult:
    """SIGKILL every process a snippet may have left running, until none is left.

    In container mode everything except this process, its ancestors and `keep` goes; on a
    host only this process's descendants and members of `sessions` do, because the host runs
    processes that are none of our business.
    """
    me = os.getpid()
    spared = set(keep) | {me, 1}
    wanted_sessions = set(sessions)
    killed: set[int] = set()
    deadline = time.monotonic() + max_seconds
    pause = 0.0005
    while True:
        table = scan_processes()
        if container:
            candidates = set(table) - _ancestors(me, table)
        else:
            candidates = _descendants(me, table)
            candidates |= {p.pid for p in table.values() if p.sid in wanted_sessions}
        victims = [pid for pid in candidates - spared if table[pid].alive]
        reap_children(spared, table)
        if not victims:
            return SweepResult(killed=len(killed), converged=True)
        if time.monotonic() > deadline:
            return SweepResult(killed=len(killed), converged=False)
        for pid in victims:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
            except ProcessLookupError:
                pass
            except PermissionError:
                # Another uid's process cannot be ours to clean up; stop counting it.
                spared.add(pid)
            except OSError as exc:  # pragma: no cover - unexpected errno
                if exc.errno != errno.ESRCH:
                    spared.add(pid)
        # Killed processes need a moment to exit (and their children to be reparented).
        time.sleep(pause)
        pause = min(pause * 2, 0.02)
