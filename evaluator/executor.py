"""The executor ("zygote"): imports Qiskit once, then runs each snippet in a limited fork.

The supervisor starts it as a fresh interpreter and speaks length-prefixed frames on its
stdin and stdout. A request holds only the code, the entrypoint name and the limits; the
target metadata and reference code never reach this process. Each snippet runs in a forked
child that leaves its session, drops to tight rlimits, works in an empty directory, and hands
back nothing but a small JSON status and its circuit as QPY on a dedicated pipe.

Snippets run with ``__name__ == "__pqid_snippet__"``: an ``if __name__ == "__main__":`` block
(usually a demo that simulates or plots) is not part of the circuit contract and is skipped.

Under the PQID-Bench contract (a request with ``"contract"`` naming it) the child builds that
contract's namespace instead, with registers of the widths the request gives (``"registers"``:
4 and 4 for the strict run, the target's for the recovery run), and hands back every circuit
of the namespace with its name (status ``"circuits"``, one QPY payload holding them in that
order); which one counts is decided by the grader. Before any of the code runs, such a child
also says on a pipe of its own, closed before the code starts, whether a run in another
context would fail or build the same (the code did not compile, or it is context-free:
`pqid_bench.context_free`); the reply carries it as ``"same_in_any_context"``.
"""

from __future__ import annotations

import builtins
import gc
import importlib
import io
import math
import os
import resource
import selectors
import shutil
import signal
import stat
import sys
import tempfile
import time
import traceback
import types
from dataclasses import dataclass
from typing import Any

from evaluator import discover, processes, wire
from evaluator.contracts import CONTRACT_PQID_BENCH, pqid_bench
from evaluator.worker_env import SNIPPET_ENV, THREAD_ENV

__all__ = ["WORK_PREFIX", "Limits", "main"]

SNIPPET_MODULE_NAME = "__pqid_snippet__"
SNIPPET_FILE = "snippet.py"
# Name prefix of the executor's working root in the temporary directory.
WORK_PREFIX = "pqid-executor-"
_RESULT_FD = 3
# Where the child says, before the code runs, whether another context could change the run.
_CONTEXT_FD = 4
_STATUS_LIMIT = 1 << 16
_CHUNK = 1 << 16
_TAIL = 4096
# The widest register a request may ask the child to preload (targets are far smaller).
_MAX_REGISTER_WIDTH = 4096

# Modules Qiskit would otherwise import on first use; a child that can no longer open files
# (or that hits its limits) must find them already loaded.
_PRELOAD = (
    "qiskit",
    "qiskit.qpy",
    "qiskit.circuit.library",
    "qiskit.quantum_info",
    "qiskit.circuit._add_control",
    "qiskit.synthesis.linear.linear_circuits_utils",
    "qiskit.transpiler.passes.synthesis.hls_plugins",
    "qiskit.transpiler.preset_passmanagers",
    "qiskit.primitives",
)
# Loaded when installed, because many answers import them and a child would pay for it each time.
_OPTIONAL_PRELOAD = ("qiskit_aer",)


def _new_working_root() -> str:
    """A new private directory for the snippets' work directories.

    By its real path, which is how the supervisor recognises it when it must delete it.
    """
    return os.path.realpath(tempfile.mkdtemp(prefix=WORK_PREFIX))


class CircuitSerializationError(Exception):
    """A candidate circuit of the PQID-Bench contract that QPY could not serialize."""


@dataclass(frozen=True)
class Rules:
    """Which contract's namespace a snippet runs in (registers: the PQID-Bench widths)."""

    under_pqid_bench: bool = False
    registers: tuple[int, int] = (pqid_bench.DEFAULT_REGISTER_WIDTH,) * 2

    @classmethod
    def from_request(cls, request: dict[str, Any]) -> Rules:
        """The rules a request asks for (the project's unless it names PQID-Bench's).

        Raises ValueError for register widths that are not two integers from 1 to 4096.
        """
        if request.get("contract") != CONTRACT_PQID_BENCH:
            return cls()
        widths = request.get("registers", list(cls().registers))
        if not (
            isinstance(widths, list)
            and len(widths) == 2
            and all(
                isinstance(w, int) and not isinstance(w, bool) and 1 <= w <= _MAX_REGISTER_WIDTH
                for w in widths
            )
        ):
            raise ValueError(f"register widths must be two integers from 1 to 4096: {widths!r}")
        return cls(under_pqid_bench=True, registers=(widths[0], widths[1]))


@dataclass(frozen=True)
class Limits:
    """Resource limits applied to one snippet."""

    timeout_seconds: float = 20.0
    memory_mb: int = 2048
    processes: int = 8
    file_size_mb: int = 16
    open_files: int = 128
    output_cap: int = 16384
    result_cap: int = 64 << 20

    @classmethod
    def from_json(cls, raw: object) -> Limits:
        """Read limits from a request, keeping defaults for anything absent or malformed."""
        if not isinstance(raw, dict):
            return cls()
        base = cls()
        values: dict[str, Any] = {}
        for name, default in base.__dict__.items():
            value = raw.get(name, default)
            kind = type(default)
            if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
                values[name] = kind(value)
        return cls(**values)


class _Capture:
    """Keeps the head and the tail of a stream whose total size is unbounded."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def feed(self, chunk: bytes) -> None:
        """Account for one chunk read from the stream."""
        self.total += len(chunk)
        room = self.cap - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self.tail += chunk
            if len(self.tail) > _TAIL:
                del self.tail[: len(self.tail) - _TAIL]

    def text(self) -> str:
        """The head of the stream, decoded."""
        return self.head.decode("utf-8", "replace")

    def tail_text(self) -> str:
        """The last few KiB of the stream, decoded (where tracebacks end up)."""
        joined = bytes(self.head[-_TAIL:] if not self.tail else self.tail)
        return joined.decode("utf-8", "replace")

    @property
    def truncated(self) -> bool:
        """Whether the head lost anything."""
        return self.total > len(self.head)


def _preload() -> dict[str, str | None]:
    """Import Qiskit and what it loads lazily; return the versions found."""
    for name in _PRELOAD:
        importlib.import_module(name)
    versions: dict[str, str | None] = {}
    for name in _OPTIONAL_PRELOAD:
        try:
            module = importlib.import_module(name)
        except Exception:  # absent or broken: the snippets that need it fail on their own
            versions[name] = None
        else:
            versions[name] = str(getattr(module, "__version__", "unknown"))
    return versions


def _set_limit(kind: int, value: int) -> None:
    """Lower a resource limit (soft and hard) to value, never above the current hard limit."""
    _, hard = resource.getrlimit(kind)
    if hard != resource.RLIM_INFINITY:
        value = min(value, hard)
    try:
        resource.setrlimit(kind, (value, value))
    except (ValueError, OSError):
        pass


def _uid_tasks(uid: int) -> int:
    """Count the threads owned by uid, which RLIMIT_NPROC counts machine-wide."""
    total = 0
    for pid in processes.scan_processes():
        try:
            with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as handle:
                status = handle.read()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        try:
            if int(fields.get("Uid", "-1").split()[0]) == uid:
                total += int(fields.get("Threads", "1").split()[0])
        except (ValueError, IndexError):
            continue
    return total


def _write_all(fd: int, data: bytes) -> None:
    """Write every byte to a blocking descriptor."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _describe(exc: BaseException) -> tuple[str, str]:
    """Exception class name and message, without trusting the exception's own methods."""
    try:
        kind = type(exc).__name__
        kind = kind if isinstance(kind, str) else "Exception"
    except Exception:
        kind = "Exception"
    try:
        message = str(exc)
    except Exception:
        message = "<unprintable exception>"
    return kind[:100], message[:1000]


def _child(
    code: str,
    entrypoint: str | None,
    limits: Limits,
    workdir: str,
    out_w: int,
    err_w: int,
    res_w: int,
    nproc: int,
    rules: Rules,
    context_w: int,
) -> None:
    """Run one snippet inside the forked child; never returns."""
    # Bound now: the snippet may replace module attributes before these are needed.
    exit_ = os._exit
    getpid = os.getpid
    write_all = _write_all
    frame = wire.frame
    encode = wire.encode_json
    own_pid = getpid()
    status: dict[str, Any] = {"phase": "setup", "error": None, "error_type": None}
    namespace: dict[str, Any] = {}
    try:
        os.setsid()
        # Stdout and stderr are copied first: the result pipe may be taking their slot.
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(out_w, 1)
        os.dup2(err_w, 2)
        os.dup2(res_w, _RESULT_FD)
        # Last: the pipes were made in order, so this one's end has the highest number.
        os.dup2(context_w, _CONTEXT_FD)
        # Nothing but stdio and the result pipes stays open: no protocol pipes, no stray files.
        os.closerange(_CONTEXT_FD + 1, max(resource.getrlimit(resource.RLIMIT_NOFILE)[0], 1024))
        for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGCHLD, signal.SIGHUP):
            signal.signal(signum, signal.SIG_DFL)
        # Writing past RLIMIT_FSIZE should fail with an error, not kill the snippet silently.
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        os.chdir(workdir)
        sys.stdin = open(0, encoding="utf-8", closefd=False)
        sys.stdout = open(1, "w", encoding="utf-8", errors="backslashreplace", closefd=False)
        sys.stderr = open(2, "w", encoding="utf-8", errors="backslashreplace", closefd=False)
        os.environ.clear()
        os.environ.update(SNIPPET_ENV)
        os.environ["HOME"] = workdir
        os.environ["TMPDIR"] = workdir
        tempfile.tempdir = None
        sys.argv = [SNIPPET_FILE]
        seconds = math.ceil(limits.timeout_seconds)
        _set_limit(resource.RLIMIT_CORE, 0)
        _set_limit(resource.RLIMIT_CPU, seconds + 1)
        _set_limit(resource.RLIMIT_AS, limits.memory_mb << 20)
        _set_limit(resource.RLIMIT_FSIZE, limits.file_size_mb << 20)
        _set_limit(resource.RLIMIT_NOFILE, limits.open_files)
        _set_limit(resource.RLIMIT_NPROC, nproc)
        # Same uid as the evaluator: without this, prlimit(2) could lower the supervisor's and
        # the executor's limits and break every later snippet.
        status["confined"] = processes.confine_to_self()

        from qiskit import QuantumCircuit, qpy

        dump = qpy.dump

        def is_circuit(value: object) -> bool:
            return isinstance(value, QuantumCircuit)

        if rules.under_pqid_bench:
            circuits = _run_pqid_bench(code, rules, namespace, status, is_circuit, write_all)
            if getpid() != own_pid:
                exit_(0)
            qpy_bytes = b""
            if circuits:
                status["phase"] = "serialize"
                buffer = io.BytesIO()
                try:
                    dump(circuits, buffer, metadata_serializer=pqid_bench.MetadataAsText)
                except Exception as exc:
                    # Nothing the grader cannot load is graded: named apart from the code's own.
                    kind, message = _describe(exc)
                    raise CircuitSerializationError(f"{kind}: {message}") from None
                qpy_bytes = buffer.getvalue()
            status["phase"] = "done"
            write_all(_RESULT_FD, frame(encode(status)) + frame(qpy_bytes))
            return
        os.close(_CONTEXT_FD)
        path = os.path.join(workdir, SNIPPET_FILE)
        with open(path, "w", encoding="utf-8", errors="surrogatepass") as handle:
            handle.write(code)
        status["phase"] = "compile"
        # A relative name keeps tracebacks short and free of temporary paths; the file is
        # in the working directory, so traceback lines still show the source.
        compiled = compile(code, SNIPPET_FILE, "exec", dont_inherit=True)
        order = discover.assignment_order(code)
        namespace.update(
            {"__name__": SNIPPET_MODULE_NAME, "__file__": path, "__builtins__": builtins}
        )
        status["phase"] = "exec"
        started = time.perf_counter()
        try:
            exec(compiled, namespace)
        except SystemExit as stop:
            # A script that ends with exit(0) finished normally; any other code is a failure.
            if stop.code not in (None, 0):
                raise
        if getpid() != own_pid:
            # A process the snippet forked fell through to here; only the child itself reports.
            exit_(0)
        status["phase"] = "entrypoint"
        found = discover.find_circuit(namespace, entrypoint, is_circuit, order)
        if getpid() != own_pid:
            exit_(0)
        status["exec_ms"] = round((time.perf_counter() - started) * 1000, 3)
        status["circuit_source"] = found.source
        status["note"] = found.note
        payload = b""
        if found.circuit is not None:
            status["phase"] = "serialize"
            buffer = io.BytesIO()
            dump(found.circuit, buffer)
            payload = buffer.getvalue()
        status["phase"] = "done"
        write_all(_RESULT_FD, frame(encode(status)) + frame(payload))
    except BaseException as exc:
        if getpid() != own_pid:
            exit_(1)
        try:
            # Dropping the snippet's objects gives back memory it may have exhausted.
            namespace.clear()
        except BaseException:
            pass
        try:
            kind, message = _describe(exc)
            status["error_type"] = kind
            status["error"] = message
            try:
                traceback.print_exception(type(exc), exc, _snippet_frames(exc.__traceback__))
                sys.stderr.flush()
            except BaseException:
                pass
            write_all(_RESULT_FD, frame(encode(status)) + frame(b""))
        except BaseException:
            pass
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except BaseException:
            pass
        exit_(0)


def _run_pqid_bench(
    code: str,
    rules: Rules,
    namespace: dict[str, Any],
    status: dict[str, Any],
    is_circuit: Any,
    write_all: Any,
) -> list[Any]:
    """Run a snippet under the PQID-Bench contract; return its circuits (names in status).

    Before the code runs, the context pipe gets whether a run in any other context would end
    the same: true when the code does not compile (that depends on the code alone) or is
    context-free; nothing (the pipe just closes) when compiling failed otherwise.
    """
    status["phase"] = "compile"
    try:
        compiled = compile(
            code,
            pqid_bench.SOURCE_NAME,
            "exec",
            flags=pqid_bench.COMPILE_FLAGS,
            dont_inherit=True,
        )
    except (SyntaxError, ValueError):
        _tell_context(write_all, True)
        raise
    except BaseException:
        os.close(_CONTEXT_FD)
        raise
    _tell_context(write_all, pqid_bench.context_free(code))
    namespace.update(pqid_bench.build_namespace(*rules.registers))
    status["phase"] = "exec"
    started = time.perf_counter()
    exec(compiled, namespace, namespace)
    status["phase"] = "collect"
    found = pqid_bench.candidates(namespace, is_circuit)
    status["exec_ms"] = round((time.perf_counter() - started) * 1000, 3)
    status["circuits"] = [name for name, _ in found]
    status["circuit_source"] = "module_level" if found else None
    return [circuit for _, circuit in found]


def _tell_context(write_all: Any, same: bool) -> None:
    """Say on the context pipe whether another context would change the run, then close it."""
    try:
        write_all(_CONTEXT_FD, b"1" if same else b"0")
    finally:
        os.close(_CONTEXT_FD)


def _snippet_frames(tb: types.TracebackType | None) -> types.TracebackType | None:
    """Skip the evaluator's own frames at the top of a snippet's traceback."""
    current = tb
    while current is not None:
        if current.tb_frame.f_code.co_filename in (SNIPPET_FILE, pqid_bench.SOURCE_NAME):
            return current
        current = current.tb_next
    return tb


def _parse_result(data: bytes, cap: int) -> tuple[dict[str, Any] | None, bytes, str | None]:
    """Split the child's result stream into its status and its QPY bytes."""
    if not data:
        return None, b"", None
    frames = wire.split_frames(data, cap)
    if len(frames) != 2:
        return None, b"", "the snippet's result stream is malformed"
    try:
        status = wire.decode_json(frames[0])
    except ValueError:
        return None, b"", "the snippet's status could not be parsed"
    if not isinstance(status, dict):
        return None, b"", "the snippet's status is not a JSON object"
    return status, frames[1], None


def _set_nonblocking(fd: int) -> None:
    """Make reads return what is there instead of waiting."""
    os.set_blocking(fd, False)


def _drain(fd: int, sink: _Capture | bytearray, budget: int) -> None:
    """Read what is already in a pipe, up to a budget (a stray writer must not hold us)."""
    while budget > 0:
        try:
            chunk = os.read(fd, _CHUNK)
        except (BlockingIOError, OSError):
            return
        if not chunk:
            return
        budget -= len(chunk)
        if isinstance(sink, _Capture):
            sink.feed(chunk)
        else:
            sink += chunk


def _remove_tree(path: str) -> None:
    """Delete a snippet's directory even if it made parts of it unreadable."""

    def unlock(_function: Any, target: str, _info: Any) -> None:
        try:
            parent = os.path.dirname(target)
            os.chmod(parent, stat.S_IRWXU)
            if os.path.isdir(target) and not os.path.islink(target):
                os.chmod(target, stat.S_IRWXU)
                shutil.rmtree(target, ignore_errors=True)
            else:
                os.unlink(target)
        except OSError:
            pass

    shutil.rmtree(path, onerror=unlock)


class Executor:
    """Forks and supervises one child per snippet."""

    def __init__(self, temp_root: str) -> None:
        self.temp_root = temp_root
        self.uid = os.getuid()

    def _working_root(self) -> str:
        """The working root, made anew if a snippet replaced, removed or locked it.

        A snippet runs as our uid, so it can rename the root and leave a symlink (to a
        read-only directory, say) in its place, which would fail every later snippet. Nothing
        of a snippet is still running here (its session was killed and swept), so checking
        and repairing now cannot race with it.
        """
        try:
            info = os.lstat(self.temp_root)
            if stat.S_ISDIR(info.st_mode) and info.st_uid == self.uid:
                os.chmod(self.temp_root, stat.S_IRWXU)
                return self.temp_root
        except OSError:
            pass
        self.temp_root = _new_working_root()
        return self.temp_root

    def run(self, request: dict[str, Any]) -> tuple[dict[str, Any], bytes]:
        """Run one snippet; return the reply header and the circuit's QPY bytes."""
        code = request.get("code")
        entrypoint = request.get("entrypoint")
        if not isinstance(code, str):
            return {"executor_error": "request has no code"}, b""
        if not isinstance(entrypoint, str) or not entrypoint.isidentifier():
            entrypoint = None
        limits = Limits.from_json(request.get("limits"))
        rules = Rules.from_request(request)
        # Root ignores RLIMIT_NPROC; for anyone else it counts every task of the uid.
        nproc = limits.processes + (self.uid and _uid_tasks(self.uid))
        workdir = tempfile.mkdtemp(prefix="snippet-", dir=self._working_root())
        pipes = [os.pipe() for _ in range(4)]
        started = time.monotonic()
        try:
            pid = os.fork()
        except OSError as exc:
            for read_end, write_end in pipes:
                os.close(read_end)
                os.close(write_end)
            _remove_tree(workdir)
            return {"executor_error": f"fork failed: {exc}"}, b""
        if pid == 0:
            _child(
                code,
                entrypoint,
                limits,
                workdir,
                pipes[0][1],
                pipes[1][1],
                pipes[2][1],
                nproc,
                rules,
                pipes[3][1],
            )
        for _, write_end in pipes:
            os.close(write_end)
        try:
            reply, payload = self._watch(pid, [r for r, _ in pipes[:3]], limits, started)
            told = bytearray()
            # Written before the code ran (one byte, far below a pipe's capacity) and closed.
            _set_nonblocking(pipes[3][0])
            _drain(pipes[3][0], told, 16)
            reply["same_in_any_context"] = rules.under_pqid_bench and bytes(told) == b"1"
            return reply, payload
        finally:
            for read_end, _ in pipes:
                os.close(read_end)
            _remove_tree(workdir)

    def _watch(
        self, pid: int, fds: list[int], limits: Limits, started: float
    ) -> tuple[dict[str, Any], bytes]:
        """Collect the child's output until it exits or its time is up."""
        out = _Capture(limits.output_cap)
        err = _Capture(limits.output_cap)
        result = bytearray()
        overflow = False
        sinks: dict[int, _Capture | bytearray] = {fds[0]: out, fds[1]: err, fds[2]: result}
        selector = selectors.DefaultSelector()
        for fd in fds:
            _set_nonblocking(fd)
            selector.register(fd, selectors.EVENT_READ)
        try:
            pidfd = os.pidfd_open(pid)
        except (AttributeError, OSError):  # kernels before 5.3
            pidfd = -1
        if pidfd >= 0:
            selector.register(pidfd, selectors.EVENT_READ)
        deadline = started + limits.timeout_seconds
        timed_out = False
        exited = False
        try:
            while not exited:
                left = deadline - time.monotonic()
                if left <= 0:
                    timed_out = True
                    break
                # Without a pidfd the child's exit is polled; 20 ms keeps that cheap.
                events = selector.select(left if pidfd >= 0 else min(left, 0.02))
                for key, _ in events:
                    fd = int(key.fd)
                    if fd == pidfd:
                        exited = True
                        continue
                    try:
                        chunk = os.read(fd, _CHUNK)
                    except BlockingIOError:
                        continue
                    if not chunk:
                        selector.unregister(fd)
                        continue
                    sink = sinks[fd]
                    if sink is result:
                        if len(result) + len(chunk) > limits.result_cap + _STATUS_LIMIT:
                            overflow = True
                            continue
                        result += chunk
                    elif isinstance(sink, _Capture):
                        sink.feed(chunk)
                if pidfd < 0 and os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT):
                    exited = True
        finally:
            selector.close()
            if pidfd >= 0:
                os.close(pidfd)
            # The whole session goes, including anything the snippet started and left behind.
            for kill in (os.killpg, os.kill):
                try:
                    kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            _, wait_status = os.waitpid(pid, 0)
        wall_ms = round((time.monotonic() - started) * 1000, 3)
        for fd in fds:
            sink = sinks[fd]
            if sink is not result or not overflow:
                _drain(fd, sink, 1 << 20 if sink is not result else limits.result_cap)
        status, payload, result_error = (None, b"", None)
        if overflow:
            result_error = f"the circuit is larger than {limits.result_cap >> 20} MiB as QPY"
        else:
            status, payload, result_error = _parse_result(bytes(result), limits.result_cap)
        reply: dict[str, Any] = {
            "child_pid": pid,
            "timed_out": timed_out,
            "wall_ms": wall_ms,
            "exit_code": os.WEXITSTATUS(wait_status) if os.WIFEXITED(wait_status) else None,
            "signal": os.WTERMSIG(wait_status) if os.WIFSIGNALED(wait_status) else None,
            "status": status,
            "result_error": result_error,
            "stdout": out.text(),
            "stdout_total": out.total,
            "stderr_tail": err.tail_text(),
            "stderr_total": err.total,
        }
        return reply, payload


def _take_protocol_fds() -> tuple[int, int]:
    """Move the protocol pipes off stdin/stdout so that stray prints cannot corrupt them."""
    proto_in = os.dup(0)
    proto_out = os.dup(1)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)
    return proto_in, proto_out


def main() -> int:
    """Serve snippet requests until the supervisor closes the pipe."""
    # Before the first Qiskit import (see THREAD_ENV); the supervisor has set them already.
    for name, value in THREAD_ENV.items():
        os.environ.setdefault(name, value)
    processes.make_undumpable()
    # Done once here rather than in every child.
    processes.prepare_confinement()
    proto_in, proto_out = _take_protocol_fds()
    # The launch directory is on sys.path under -m; a snippet could plant modules there.
    sys.path[:] = [p for p in sys.path if p not in ("", os.getcwd())]
    began = time.perf_counter()
    importlib.import_module("qiskit")
    imported = time.perf_counter()
    versions = _preload()
    timing = {
        "qiskit_import_seconds": imported - began,
        "preload_seconds": time.perf_counter() - began,
        "import_began_at": time.time() - (time.perf_counter() - began),
    }
    # Objects that exist now are never collected: forked children then leave their pages
    # shared instead of copying them when the collector walks the heap.
    gc.freeze()
    temp_root = _new_working_root()
    executor = Executor(temp_root)
    reader = wire.FrameReader(proto_in)
    wire.send_frames(
        proto_out,
        [
            wire.encode_json(
                {
                    "type": "ready",
                    "pid": os.getpid(),
                    "optional": versions,
                    "temp_root": temp_root,
                    "timing": {**timing, "ready_at": time.time()},
                }
            )
        ],
    )
    try:
        while True:
            try:
                raw = reader.read()
            except wire.PeerClosed:
                return 0
            try:
                request = wire.decode_json(raw)
                if not isinstance(request, dict):
                    raise ValueError("request is not an object")
                reply, payload = executor.run(request)
            except Exception as exc:
                reply, payload = {"executor_error": f"{type(exc).__name__}: {exc}"}, b""
            del raw
            wire.send_frames(proto_out, [wire.encode_json(reply), payload])
    finally:
        for root in {temp_root, executor.temp_root}:
            if not os.path.islink(root):
                shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
