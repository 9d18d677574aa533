"""Process hygiene: privacy flags, /proc scans, and sweeping processes a snippet left behind."""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import signal
import struct
import time
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = [
    "ProcInfo",
    "SweepResult",
    "become_subreaper",
    "confine_to_self",
    "is_dumpable",
    "make_undumpable",
    "prepare_confinement",
    "reap_children",
    "scan_processes",
    "sweep",
]

_PR_GET_DUMPABLE = 3
_PR_SET_DUMPABLE = 4
_PR_SET_CHILD_SUBREAPER = 36
_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2

# Syscalls that act on another process named by a pid argument, and that a process may use
# on any process of its own uid: lowering its rlimits (prlimit64), renicing it (setpriority),
# or changing its scheduling (sched_setparam, sched_setscheduler, sched_setaffinity,
# sched_setattr, ioprio_set). Per architecture: (AUDIT_ARCH, {syscall number: pid argument}).
_FOREIGN_PROCESS_SYSCALLS: dict[str, tuple[int, dict[int, int]]] = {
    "x86_64": (0xC000003E, {302: 0, 141: 1, 142: 0, 144: 0, 203: 0, 314: 0, 251: 1}),
    "aarch64": (0xC00000B7, {261: 0, 140: 1, 118: 0, 119: 0, 122: 0, 274: 0, 30: 1}),
}
_X32_SYSCALL_BIT = 0x40000000


# The C library and the seccomp program's fixed parts, made once per process: a forking parent
# prepares them (`prepare_confinement`), so that each child only fills in its own pid.
_LIBC: list[ctypes.CDLL | None] = []
_FILTER: list[tuple[bytes, list[tuple[bytes, bytes]], bytes] | None] = []


class _SockFprog(ctypes.Structure):
    """struct sock_fprog: a classic BPF program for PR_SET_SECCOMP."""

    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def _libc() -> ctypes.CDLL | None:
    """The C library, loaded once (None where it cannot be)."""
    if not _LIBC:
        try:
            _LIBC.append(ctypes.CDLL(None, use_errno=True))
        except OSError:
            _LIBC.append(None)
    return _LIBC[0]


def _prctl(option: int, arg: int = 0) -> int:
    """Call prctl(2); returns -1 where it is unavailable."""
    try:
        libc = _libc()
        if libc is None:
            return -1
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


def _bpf(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    """One classic BPF instruction (struct sock_filter)."""
    return struct.pack("=HBBI", code, jt, jf, k)


_LD_W_ABS, _JEQ_K, _JGE_K, _RET_K = 0x20, 0x15, 0x35, 0x06
_ALLOW, _DENY = 0x7FFF0000, 0x00050000 | errno.EPERM


def prepare_confinement() -> None:
    """Load the C library and build the filter's fixed parts now, before forking children."""
    libc = _libc()
    if libc is not None:
        getattr(libc, "prctl", None)  # the function pointer is cached on the handle
    if _FILTER:
        return
    known = _FOREIGN_PROCESS_SYSCALLS.get(platform.machine())
    if known is None:
        _FILTER.append(None)
        return
    arch, syscalls = known
    head = b"".join(
        [
            _bpf(_LD_W_ABS, 4),  # seccomp_data.arch
            _bpf(_JEQ_K, arch, jt=1),
            _bpf(_RET_K, _DENY),
            _bpf(_LD_W_ABS, 0),  # seccomp_data.nr
            _bpf(_JGE_K, _X32_SYSCALL_BIT, jf=1),
            _bpf(_RET_K, _DENY),
        ]
    )
    # Per syscall: is it this one; its pid argument 0 or our own pid (filled in per process)?
    blocks = [
        (
            _bpf(_JEQ_K, number, jf=5)
            + _bpf(_LD_W_ABS, 16 + 8 * argument)  # low 32 bits of seccomp_data.args[argument]
            + _bpf(_JEQ_K, 0, jt=1),
            _bpf(_RET_K, _ALLOW) + _bpf(_RET_K, _DENY),
        )
        for number, argument in syscalls.items()
    ]
    _FILTER.append((head, blocks, _bpf(_RET_K, _ALLOW)))


def confine_to_self() -> bool:
    """Forbid, by a seccomp filter, changing the limits or scheduling of another process.

    A snippet runs as the same uid as the evaluator's own processes, so without this it could
    lower their rlimits with prlimit(2) (for example RLIMIT_NOFILE of PID 1 and the executor,
    after which no later snippet can even be started) or renice them. The filter lets these
    calls through only when the pid argument is 0 or this process's pid, fails them with
    EPERM otherwise, and fails every syscall of a foreign ABI (i386, x32) that could bypass
    it. It is inherited by every child and survives exec. Returns whether it is in place.
    """
    prepare_confinement()
    parts = _FILTER[0]
    libc = _libc()
    if parts is None or libc is None:
        return False
    head, blocks, tail = parts
    own = _bpf(_JEQ_K, os.getpid(), jf=1)
    code = b"".join([head, *(before + own + after for before, after in blocks), tail])
    buffer = ctypes.create_string_buffer(code, len(code))
    fprog = _SockFprog(len(code) // 8, ctypes.cast(buffer, ctypes.c_void_p))
    if _prctl(_PR_SET_NO_NEW_PRIVS, 1) != 0:  # required to install a filter unprivileged
        return False
    try:
        result: int = libc.prctl(
            _PR_SET_SECCOMP,
            ctypes.c_ulong(_SECCOMP_MODE_FILTER),
            ctypes.cast(ctypes.pointer(fprog), ctypes.c_void_p),
            ctypes.c_ulong(0),
            ctypes.c_ulong(0),
        )
    except (OSError, AttributeError):
        return False
    return result == 0


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
        state = fields[0].decode("ascii", "replace")
        if state == "Z":
            state = _live_thread_state(name) or state
        table[int(name)] = ProcInfo(
            pid=int(name),
            ppid=int(fields[1]),
            sid=int(fields[3]),
            state=state,
        )
    return table


def _live_thread_state(pid: str) -> str | None:
    """The state of a thread still running in a process whose main thread has exited.

    Such a process shows as a zombie in /proc/<pid>/stat while its other threads run on (and
    a signal to it still reaches them), so a sweep that trusted that state would spare it.
    """
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    for thread in threads:
        try:
            with open(f"/proc/{pid}/task/{thread}/stat", "rb") as handle:
                raw = handle.read()
        except OSError:
            continue
        fields = raw[raw.rfind(b")") + 2 :].split()
        state = fields[0].decode("ascii", "replace") if fields else "Z"
        if state not in ("Z", "X", "x"):
            return state
    return None


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
