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


def _bpf(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    """One classic BPF instruction (struct sock_filter)."""
    return struct.pack("=HBBI", code, jt, jf, k)


def confine_to_self() -> bool:
    """Forbid, by a seccomp filter, changing the limits or scheduling of another process.

    A snippet runs as the same uid as the evaluator's own processes, so without this it could
    lower their rlimits with prlimit(2) (for example RLIMIT_NOFILE of PID 1 and the executor,
    after which no later snippet can even be started) or renice them. The filter lets these
    calls through only when the pid argument is 0 or this process's pid, fails them with
    EPERM otherwise, and fails every syscall of a foreign ABI (i386, x32) that could bypass
    it. It is inherited by every child and survives exec. Returns whether it is in place.
    """
    known = _FOREIGN_PROCESS_SYSCALLS.get(platform.machine())
    if known is None:
        return False
    arch, syscalls = known
    ld_w_abs, jeq_k, jge_k, ret_k = 0x20, 0x15, 0x35, 0x06
    allow, deny = 0x7FFF0000, 0x00050000 | errno.EPERM
    program = [
        _bpf(ld_w_abs, 4),  # seccomp_data.arch
        _bpf(jeq_k, arch, jt=1),
        _bpf(ret_k, deny),
        _bpf(ld_w_abs, 0),  # seccomp_data.nr
        _bpf(jge_k, _X32_SYSCALL_BIT, jf=1),
        _bpf(ret_k, deny),
    ]
    own = os.getpid()
    for number, argument in syscalls.items():
        program += [
            _bpf(jeq_k, number, jf=5),
            _bpf(ld_w_abs, 16 + 8 * argument),  # low 32 bits of seccomp_data.args[argument]
            _bpf(jeq_k, 0, jt=1),
            _bpf(jeq_k, own, jf=1),
            _bpf(ret_k, allow),
            _bpf(ret_k, deny),
        ]
    program.append(_bpf(ret_k, allow))
    code = b"".join(program)
    buffer = ctypes.create_string_buffer(code, len(code))

    class _Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    fprog = _Program(len(program), ctypes.cast(buffer, ctypes.c_void_p))
    if _prctl(_PR_SET_NO_NEW_PRIVS, 1) != 0:  # required to install a filter unprivileged
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
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
