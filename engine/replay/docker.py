"""Running the evaluator: its image, its hardened container, and the line protocol between them.

An `EvaluatorRunner` turns evaluation items into canonical evaluations. The product uses
`DockerEvaluatorRunner` only: the untrusted code runs in a network-disabled, read-only,
capability-less container, fed through the Docker API (no bind mounts, so `DOCKER_HOST` at a
remote engine works the same). `LocalEvaluatorRunner` speaks the same protocol to
`python -m evaluator serve` on the host and exists for tests; the product never uses it.

The protocol (JSON lines): the runner writes a config line, one item line per prompt, then
closes stdin; the evaluator answers `hello`, then `started` and `evaluation` per item (both in
item order; an item may start before the previous one's evaluation, which is still being
graded), then `done` (or `fatal`). When the evaluator dies before `done`, the items it finished
are kept, the item it was running is scored as an execution error ("the evaluator was
killed"; several in progress are first run again one by one to find it), and the rest go to a
fresh evaluator, so that one response cannot take the others down.

Ctrl-C (KeyboardInterrupt, which the command line also makes of SIGTERM) removes every
container of the runner, the image probes' included, and then surfaces as `Interrupted`, which
names any container Docker would not remove. The calls that create a container and the calls
that remove one hold Ctrl-C until they return, so that an interrupt can neither leave a
container whose ID never came back nor cut a removal short.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import io
import json
import os
import re
import secrets
import select
import signal
import socket
import subprocess
import sys
import tarfile
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from engine.errors import (
    DockerUnavailable,
    EnvironmentMismatch,
    EvaluatorFailed,
    ImageBuildError,
    Interrupted,
    UsageError,
)
from engine.events import ImageBuildLog, ImageReady, ProgressCallback
from engine.replay.environment import python_series
from engine.rundir.storage import sha256_file

DEFAULT_BASE_IMAGE = "python:3.11-slim"
IMAGE_REPOSITORY = "pqid-evaluator"
REPLAY_LABEL = "pqid-tui.replay"
RUN_LABEL = "pqid-tui.run"
ROLE_LABEL = "pqid-tui.role"  # "evaluator", or "probe" for an image's environment listing
OWNER_LABEL = "pqid-tui.owner"
INPUTS_LABEL = "pqid-tui.evaluator-inputs"
CONTAINER_USER = "10001:10001"  # the image's default user
# Each container runs as a uid of its own: RLIMIT_NPROC counts a uid's tasks across the whole
# machine, so two replays sharing one uid could starve each other's snippets of processes.
CONTAINER_UID_BASE, CONTAINER_UID_SPAN = 300_000, 600_000


def container_user() -> str:
    """A fresh non-root uid:gid for one evaluator container (no host user has one this high)."""
    uid = CONTAINER_UID_BASE + secrets.randbelow(CONTAINER_UID_SPAN)
    return f"{uid}:{uid}"


IMAGE_INPUTS_FORMAT = "pqid-evaluator-image/1"

_STDERR_TAIL = 16 * 1024
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_STEP_FAILED = re.compile(r"returned a non-zero code: (\d+)")
_NOISE = re.compile(r"\s*(--->|Step \d+/\d+|Removing intermediate|The command )")
_MAX_LINE = 64 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class EvaluatorConfig:
    """The evaluator's per-prompt limits: the protocol's first line."""

    timeout_seconds: float = 20.0
    memory_mb: int = 2048
    equivalence_max_qubits: int = 8
    # The scoring contract (`engine.release.CONTRACT_*`): the release's, for every item.
    contract: str = "pqid-tui-1"

    def message(self) -> dict[str, Any]:
        return {
            "type": "config",
            "timeout_seconds": self.timeout_seconds,
            "memory_mb": self.memory_mb,
            "equivalence_max_qubits": self.equivalence_max_qubits,
            "contract": self.contract,
        }


@dataclass(frozen=True, slots=True)
class EvaluationItem:
    """One response to score, with the target metadata only the evaluator may see."""

    prompt_id: str
    content: str | None
    generated_code: str | None
    target_metadata: dict[str, Any] = field(repr=False)

    def message(self) -> dict[str, Any]:
        return {
            "type": "item",
            "prompt_id": self.prompt_id,
            "content": self.content,
            "generated_code": self.generated_code,
            "target_metadata": self.target_metadata,
        }


@dataclass(slots=True)
class RunOutcome:
    """What a runner got back: evaluations by prompt, and the prompts it could not evaluate."""

    evaluations: dict[str, dict[str, Any]] = field(default_factory=dict)
    not_evaluated: dict[str, str] = field(default_factory=dict)  # prompt_id -> reason
    killed: list[str] = field(default_factory=list)  # scored "evaluator was killed"
    evaluator_version: str | None = None
    environment: dict[str, Any] = field(default_factory=dict)
    sessions: int = 0  # evaluator processes or containers started
    stderr_tail: str = ""
    # What the evaluator reported about its own time, apart from the evaluations: each
    # session's start-up (its `hello` timing) and each prompt's work (its `evaluation` timing).
    startup_timing: list[dict[str, Any]] = field(default_factory=list)
    item_timing: dict[str, dict[str, Any]] = field(default_factory=dict)


LineCallback = Callable[[dict[str, Any]], None]


class EvaluatorRunner(Protocol):
    """Scores evaluation items with the evaluator, somewhere."""

    def ensure_image(self, *, build: bool, progress: ProgressCallback | None = None) -> str:
        """Make the evaluator runnable (build or reuse its image); return what will run."""
        ...

    def run(
        self,
        items: Sequence[EvaluationItem],
        config: EvaluatorConfig,
        on_line: LineCallback | None = None,
    ) -> RunOutcome:
        """Evaluate every item; `on_line` sees each `started` and `evaluation` message."""
        ...


def wall_clock_budget(count: int, config: EvaluatorConfig) -> float:
    """A generous limit for a whole evaluator run: start-up plus each prompt's worst case."""
    return 120.0 + count * (config.timeout_seconds + 20.0)


def killed_evaluation(prompt_id: str, reason: str) -> dict[str, Any]:
    """The canonical evaluation of a response that was running when the evaluator died."""
    return {
        "prompt_id": prompt_id,
        "category": "execution_error",
        "execution_ok": False,
        "circuit_found": False,
        "structural_match": False,
        "width_match": False,
        "gate_types_match": False,
        "gate_counts_match": False,
        "qasm3_ok": False,
        "equivalent": None,
        "equivalence_reason": "not checked: the evaluator was killed",
        "error": f"EvaluatorKilled: the evaluator was killed while running this response "
        f"({reason}); the remaining responses were evaluated by a fresh evaluator",
        "duration_ms": None,
        "evaluator_killed": True,
    }


# -- interrupts ------------------------------------------------------------------------------------

_HELD_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextlib.contextmanager
def _interrupts_held(*, redeliver: bool = True) -> Iterator[list[int]]:
    """Hold SIGINT and SIGTERM while the block runs; yield the list of those that arrived.

    On the way out the held signals are raised again (unless `redeliver` is false), so the
    interrupt still happens, only after the block. A no-op outside the main thread, which is
    the only one Python delivers signals to, and for a signal the process ignores.
    """
    arrived: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield arrived
        return
    previous: dict[int, Any] = {}

    def hold(signum: int, frame: object) -> None:
        arrived.append(signum)

    try:
        for held in _HELD_SIGNALS:
            handler = signal.getsignal(held)
            if handler is not None and handler != signal.SIG_IGN:
                previous[held] = signal.signal(held, hold)
        yield arrived
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
        if redeliver:
            for signum in dict.fromkeys(arrived):
                signal.raise_signal(signum)


# -- the session: one evaluator process or container ---------------------------------------------


class _Session(Protocol):
    def send(self, data: bytes) -> None: ...
    def close_stdin(self) -> None: ...
    def stdout_lines(self) -> Iterator[bytes]: ...
    def kill(self) -> None: ...
    def ending(self) -> str: ...
    def stderr_tail(self) -> str: ...
    def close(self) -> None: ...


@dataclass(slots=True)
class _SessionResult:
    done: bool = False
    fatal: str | None = None
    timed_out: bool = False
    started: list[str] = field(default_factory=list)
    ending: str = ""


def _encode(message: dict[str, Any]) -> bytes:
    # ensure_ascii: control bytes are escaped, so Docker's detach keys (Ctrl-P Ctrl-Q) can never
    # appear on the attached stdin, whatever a response contains.
    return json.dumps(message, ensure_ascii=True, separators=(",", ":")).encode() + b"\n"


def _drive(
    open_session: Callable[[], _Session],
    items: Sequence[EvaluationItem],
    config: EvaluatorConfig,
    on_line: LineCallback | None,
    wall_clock_seconds: float | None,
) -> RunOutcome:
    """Run items through as many evaluator sessions as it takes (see the module docstring)."""
    outcome = RunOutcome()
    position = {item.prompt_id: i for i, item in enumerate(items)}
    if len(position) != len(items):
        raise ValueError("evaluation items must have distinct prompt IDs")
    budget = (
        wall_clock_seconds
        if wall_clock_seconds is not None
        else wall_clock_budget(len(items), config)
    )
    deadline = time.monotonic() + budget
    pending: list[EvaluationItem] = list(items)
    alone: list[EvaluationItem] = []  # in progress together when an evaluator died: one by one
    while pending or alone:
        solo = bool(alone)
        batch = [alone.pop(0)] if solo else pending
        if not solo:
            pending = []
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            for item in [*batch, *alone, *pending]:
                outcome.not_evaluated[item.prompt_id] = (
                    f"not evaluated: the evaluator run exceeded its wall-clock limit of "
                    f"{budget:.0f} s"
                )
            break
        before = len(outcome.evaluations)
        result = _run_session(
            open_session(), batch, config, on_line, outcome, position, len(items), remaining
        )
        progressed = len(outcome.evaluations) > before
        unfinished = [it for it in batch if it.prompt_id not in outcome.evaluations]
        if result.fatal is not None:
            raise EvaluatorFailed(f"the evaluator refused its input: {result.fatal}")
        if result.timed_out:
            for item in [*unfinished, *alone, *pending]:
                outcome.not_evaluated[item.prompt_id] = (
                    f"not evaluated: the evaluator run exceeded its wall-clock limit of "
                    f"{budget:.0f} s and was killed"
                )
            break
        if result.done:
            for item in unfinished:
                outcome.not_evaluated[item.prompt_id] = (
                    "not evaluated: the evaluator finished without returning an evaluation"
                )
            continue
        # The evaluator died before `done`.
        if not unfinished:
            continue
        running = [it for it in unfinished if it.prompt_id in result.started]
        if not running:
            if progressed:  # it died between two responses: carry on with a fresh one
                pending = unfinished + pending
                continue
            if not outcome.evaluations:
                raise EvaluatorFailed(
                    f"the evaluator stopped before evaluating anything ({result.ending})"
                    + _tail_for_message(outcome.stderr_tail)
                )
            for item in [*unfinished, *alone, *pending]:
                outcome.not_evaluated[item.prompt_id] = (
                    f"not evaluated: the evaluator stopped before starting it ({result.ending})"
                )
            break
        if len(running) == 1 or solo:
            for item in running:
                evaluation = killed_evaluation(item.prompt_id, result.ending)
                _accept(evaluation, outcome, on_line, position, len(items), synthesized=True)
                outcome.killed.append(item.prompt_id)
        else:
            # Several were in progress together: run each alone to find the one that kills.
            alone.extend(running)
        pending = [it for it in unfinished if it not in running] + pending
    return outcome


def _tail_for_message(tail: str) -> str:
    tail = tail.strip()
    return f"; its last output: {tail[-800:]}" if tail else ""


def _accept(
    evaluation: dict[str, Any],
    outcome: RunOutcome,
    on_line: LineCallback | None,
    position: dict[str, int],
    total: int,
    *,
    synthesized: bool = False,
) -> None:
    pid = evaluation["prompt_id"]
    evaluation.setdefault("evaluator_version", outcome.evaluator_version)
    evaluation.setdefault("environment", outcome.environment)
    outcome.evaluations[pid] = evaluation
    if on_line is not None:
        on_line(
            {
                "type": "evaluation",
                "evaluation": evaluation,
                "index": position[pid],
                "total": total,
                "synthesized": synthesized,
            }
        )


def _run_session(
    session: _Session,
    batch: Sequence[EvaluationItem],
    config: EvaluatorConfig,
    on_line: LineCallback | None,
    outcome: RunOutcome,
    position: dict[str, int],
    total: int,
    seconds: float,
) -> _SessionResult:
    result = _SessionResult()
    expected = {item.prompt_id for item in batch}
    outcome.sessions += 1
    timer_fired = threading.Event()

    def on_timeout() -> None:
        timer_fired.set()
        with contextlib.suppress(Exception):
            session.kill()

    timer = threading.Timer(seconds, on_timeout)
    timer.daemon = True

    def feed() -> None:
        # A thread, so that a large input never deadlocks against unread output.
        try:
            session.send(_encode(config.message()))
            for item in batch:
                session.send(_encode(item.message()))
        except OSError:
            pass  # the evaluator is gone; reading its output says why
        finally:
            with contextlib.suppress(OSError):
                session.close_stdin()

    writer = threading.Thread(target=feed, name="evaluator-stdin", daemon=True)
    try:
        timer.start()
        writer.start()
        for raw in session.stdout_lines():
            message = _decode(raw)
            if message is None:
                continue
            kind = message.get("type")
            if kind == "hello":
                version = message.get("evaluator_version")
                outcome.evaluator_version = version if isinstance(version, str) else None
                env = message.get("environment")
                outcome.environment = env if isinstance(env, dict) else {}
                timing = message.get("timing")
                if isinstance(timing, dict):
                    outcome.startup_timing.append(timing)
            elif kind == "started":
                pid = message.get("prompt_id")
                if isinstance(pid, str) and pid in expected and pid not in result.started:
                    result.started.append(pid)
                    if on_line is not None:
                        on_line(
                            {
                                "type": "started",
                                "prompt_id": pid,
                                "index": position[pid],
                                "total": total,
                            }
                        )
            elif kind == "evaluation":
                evaluation = message.get("evaluation")
                if (
                    isinstance(evaluation, dict)
                    and evaluation.get("prompt_id") in expected
                    and evaluation["prompt_id"] not in outcome.evaluations
                ):
                    timing = message.get("timing")
                    if isinstance(timing, dict):
                        outcome.item_timing[evaluation["prompt_id"]] = timing
                    _accept(evaluation, outcome, on_line, position, total)
            elif kind == "done":
                # Nothing follows: the session is closed (a container removed) without
                # waiting for the evaluator's orderly exit, which only tidies up inside it.
                result.done = True
                break
            elif kind == "fatal":
                result.fatal = str(message.get("message"))
        writer.join(timeout=5)
        timer.cancel()
        result.timed_out = timer_fired.is_set() and not result.done
        if not result.done:
            with contextlib.suppress(Exception):
                session.kill()
            result.ending = "wall-clock limit exceeded" if result.timed_out else session.ending()
        outcome.stderr_tail = session.stderr_tail()
        return result
    finally:
        timer.cancel()
        session.close()


def _decode(raw: bytes) -> dict[str, Any] | None:
    try:
        message = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    return message if isinstance(message, dict) else None


def _split_lines(chunks: Iterable[bytes]) -> Iterator[bytes]:
    buffer = b""
    for chunk in chunks:
        buffer += chunk
        while True:
            cut = buffer.find(b"\n")
            if cut < 0:
                break
            line, buffer = buffer[:cut], buffer[cut + 1 :]
            if line.strip():
                yield line
        if len(buffer) > _MAX_LINE:
            buffer = b""  # a runaway line is no protocol message; drop it
    if buffer.strip():
        yield buffer


# -- the host subprocess (tests only) ------------------------------------------------------------


class _ProcessSession:
    def __init__(
        self, command: Sequence[str], env: dict[str, str] | None, cwd: Path | None
    ) -> None:
        self.proc = subprocess.Popen(
            list(command),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd=cwd,
            start_new_session=True,
        )
        self._tail = b""
        self._drain = threading.Thread(target=self._read_stderr, daemon=True)
        self._drain.start()

    def _read_stderr(self) -> None:
        stream = self.proc.stderr
        assert stream is not None
        for chunk in iter(lambda: os.read(stream.fileno(), 4096), b""):
            self._tail = (self._tail + chunk)[-_STDERR_TAIL:]

    def send(self, data: bytes) -> None:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(data)
        except (BrokenPipeError, ValueError) as exc:
            raise OSError(str(exc)) from None

    def close_stdin(self) -> None:
        assert self.proc.stdin is not None
        with contextlib.suppress(OSError, ValueError):
            self.proc.stdin.close()

    def stdout_lines(self) -> Iterator[bytes]:
        stream = self.proc.stdout
        assert stream is not None
        return _split_lines(iter(lambda: os.read(stream.fileno(), 65536), b""))

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, 9)

    def ending(self) -> str:
        try:
            code = self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.kill()
            code = self.proc.wait()
        return f"exit status {code}" if code >= 0 else f"killed by signal {-code}"

    def stderr_tail(self) -> str:
        self._drain.join(timeout=2)
        return self._tail.decode("utf-8", "replace")

    def close(self) -> None:
        self.kill()
        with contextlib.suppress(Exception):
            self.proc.wait(timeout=10)
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            with contextlib.suppress(Exception):
                stream.close()  # type: ignore[union-attr]


class LocalEvaluatorRunner:
    """FOR TESTS ONLY: runs `python -m evaluator serve` on the host, with no container.

    The product never uses this runner: the generated code would run with the host's
    network, files and privileges. It lets the protocol, the summaries and the restart logic be
    tested without Docker, and `command` lets tests substitute a scripted stand-in evaluator.
    """

    def __init__(
        self,
        command: Sequence[str] | None = None,
        *,
        env: dict[str, str] | None = None,
        cwd: Path | None = None,
        wall_clock_seconds: float | None = None,
    ) -> None:
        self.command = list(command) if command else [sys.executable, "-m", "evaluator", "serve"]
        self.env = env
        self.cwd = cwd
        self.wall_clock_seconds = wall_clock_seconds

    def ensure_image(self, *, build: bool, progress: ProgressCallback | None = None) -> str:
        return "local:" + " ".join(self.command)

    def run(
        self,
        items: Sequence[EvaluationItem],
        config: EvaluatorConfig,
        on_line: LineCallback | None = None,
    ) -> RunOutcome:
        return _drive(
            lambda: _ProcessSession(self.command, self.env, self.cwd),
            items,
            config,
            on_line,
            self.wall_clock_seconds,
        )


# -- Docker ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ContainerLimits:
    """The container's hardening: every limit the evaluator container runs under."""

    mem_limit: str = "3g"
    pids_limit: int = 256
    cpus: float = 2.0
    tmpfs_size: str = "256m"
    # Without it a tmpfs allows about one inode per two pages of host RAM (millions): a snippet
    # creating empty files would spend its whole time limit and the next item's clean-up time.
    # 16,384 is far more than a circuit needs (65,536 empty files took 10 s to create in the
    # container on a 2-core VM: the whole of a 10 s limit, so the snippet timed out instead).
    tmpfs_inodes: int = 16384
    nofile: int = 1024


def connect(client: Any = None) -> Any:
    """A docker SDK client for the configured engine, or DockerUnavailable saying what to start."""
    import docker
    from docker.errors import DockerException

    if client is not None:
        return client
    where = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    hint = "start it (`systemctl start docker`) or set DOCKER_HOST to a reachable engine"
    tail = "Replay runs generated code only inside a container"
    if where.startswith("unix://") and not Path(where.removeprefix("unix://")).exists():
        raise DockerUnavailable(
            f"no Docker Engine reachable at {where} (the socket does not exist): {hint}. {tail}"
        )
    try:
        found = docker.from_env()
        found.ping()
    except DockerException as exc:
        # docker-py leaves the failed connection's socket to the garbage collector.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ResourceWarning)
            gc.collect()
        if "Permission denied" in str(exc):
            hint = "your user may not use it: join the `docker` group or use a rootless engine"
        raise DockerUnavailable(
            f"no Docker Engine reachable at {where} ({_short(exc)}): {hint}. {tail}"
        ) from None
    return found


def _short(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text[:300]


def evaluator_source_dir() -> Path:
    import evaluator

    return Path(evaluator.__file__).resolve().parent


@dataclass(frozen=True, slots=True)
class BuildContext:
    """The evaluator image's build inputs, assembled in memory."""

    files: tuple[tuple[str, bytes], ...]  # (path in the context, bytes), sorted
    wheelhouse: tuple[Path, ...]

    @classmethod
    def assemble(
        cls,
        *,
        requirements: Sequence[str] | None = None,
        wheelhouse: Path | None = None,
        source_dir: Path | None = None,
    ) -> BuildContext:
        src = source_dir or evaluator_source_dir()
        try:
            dockerfile = (src / "Dockerfile").read_bytes()
            pinned = (
                "".join(f"{r}\n" for r in requirements).encode()
                if requirements
                else (src / "requirements.txt").read_bytes()
            )
        except OSError as exc:
            raise EvaluatorFailed(f"the evaluator's build files are missing: {exc}") from None
        files = [("Dockerfile", dockerfile), ("requirements.txt", pinned)]
        for path in sorted(src.rglob("*.py")):
            rel = path.relative_to(src)
            if "__pycache__" in rel.parts or any(p.startswith(".") for p in rel.parts):
                continue
            files.append((f"evaluator/{rel.as_posix()}", path.read_bytes()))
        wheels: tuple[Path, ...] = ()
        if wheelhouse is not None:
            if not wheelhouse.is_dir():
                raise UsageError(f"--wheelhouse {wheelhouse}: not a directory")
            wheels = tuple(sorted(wheelhouse.glob("*.whl")))
            if not wheels:
                raise UsageError(
                    f"--wheelhouse {wheelhouse}: holds no .whl files "
                    "(fill it with .ci/wheelhouse-fill DIR)"
                )
        return cls(tuple(files), wheels)

    def digest(self, base_image_id: str) -> str:
        """SHA-256 over every input of the image, the base image's ID included."""
        h = hashlib.sha256()
        h.update(f"{IMAGE_INPUTS_FORMAT}\nbase {base_image_id}\n".encode())
        for name, data in self.files:
            h.update(f"file {name} {hashlib.sha256(data).hexdigest()}\n".encode())
        for wheel in self.wheelhouse:
            h.update(f"wheel {wheel.name} {sha256_file(wheel)}\n".encode())
        return h.hexdigest()

    def tar(self) -> io.BytesIO:
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            for name, data in self.files:
                info = tarfile.TarInfo(name)
                info.size, info.mode, info.mtime = len(data), 0o644, 0
                tar.addfile(info, io.BytesIO(data))
            directory = tarfile.TarInfo("wheelhouse")
            directory.type, directory.mode, directory.mtime = tarfile.DIRTYPE, 0o755, 0
            tar.addfile(directory)
            for wheel in self.wheelhouse:
                info = tarfile.TarInfo(f"wheelhouse/{wheel.name}")
                info.size, info.mode, info.mtime = wheel.stat().st_size, 0o644, 0
                with wheel.open("rb") as fh:
                    tar.addfile(info, fh)
        buffer.seek(0)
        return buffer


_WAKE_SECONDS = 0.5


class _FrameReader:
    """Reads Docker's multiplexed attach stream: 8-byte headers, then stdout/stderr payloads."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = b""
        self.stderr = b""

    def _fill(self, n: int) -> bool:
        while len(self.buffer) < n:
            try:
                # Woken twice a second: a Ctrl-C that the kernel hands to another thread of the
                # process interrupts no system call of this one, and Python runs its handler
                # only once this thread runs Python code again.
                while not self._readable():
                    pass
                chunk = self.sock.recv(max(65536, n - len(self.buffer)))
            except (OSError, ValueError):  # ValueError: a socket closed under the wait
                return False
            if not chunk:
                return False
            self.buffer += chunk
        return True

    def _readable(self) -> bool:
        pending = getattr(self.sock, "pending", None)  # a TLS socket's decrypted bytes
        if pending is not None and pending():
            return True
        return bool(select.select([self.sock], [], [], _WAKE_SECONDS)[0])

    def stdout_chunks(self) -> Iterator[bytes]:
        while self._fill(8):
            stream, size = self.buffer[0], int.from_bytes(self.buffer[4:8], "big")
            self.buffer = self.buffer[8:]
            while size > 0:
                if not self._fill(1):
                    return
                piece, self.buffer = self.buffer[:size], self.buffer[size:]
                size -= len(piece)
                if stream == 1:
                    yield piece
                elif stream == 2:
                    self.stderr = (self.stderr + piece)[-_STDERR_TAIL:]


def _raw_socket(sock: Any) -> socket.socket:
    # docker-py hands back a SocketIO for unix sockets and the socket itself otherwise.
    raw = getattr(sock, "_sock", sock)
    return raw  # type: ignore[no-any-return]


def hardened_host_config(api: Any, limits: ContainerLimits, cpus: float) -> Any:
    """The host configuration of every container that runs generated code: no network, a
    read-only root, a small /tmp, no capabilities, the limits, and no log on the host."""
    from docker.types import LogConfig, Ulimit

    return api.create_host_config(
        network_mode="none",
        read_only=True,
        # exec stays allowed: the untrusted code is Python, which noexec would not stop,
        # and native libraries may need to map temporary files executable.
        tmpfs={
            "/tmp": f"rw,exec,nosuid,nodev,size={limits.tmpfs_size},"
            f"nr_inodes={limits.tmpfs_inodes},mode=1777"
        },
        mem_limit=limits.mem_limit,
        memswap_limit=limits.mem_limit,
        pids_limit=limits.pids_limit,
        nano_cpus=int(cpus * 1e9),
        cap_drop=["ALL"],
        security_opt=["no-new-privileges"],
        ulimits=[
            Ulimit(name="nofile", soft=limits.nofile, hard=limits.nofile),
            Ulimit(name="core", soft=0, hard=0),
        ],
        # Nothing is logged on the host: a snippet's flood of output fills no host disk.
        log_config=LogConfig(type=LogConfig.types.NONE),
    )


class _ContainerSession:
    def __init__(
        self, client: Any, image: str, run_id: str, limits: ContainerLimits, cpus: float
    ) -> None:
        self.client = client
        api = client.api
        host_config = hardened_host_config(api, limits, cpus)
        # No init process: the evaluator is the container's PID 1 (`serve --container`), which
        # a snippet running as the same uid cannot kill (the kernel drops signals to a
        # namespace's init that it has no handler for); it reaps and sweeps orphans itself.
        # The low-level call with detach=False sets StdinOnce: the container's stdin closes
        # when ours does, which is how the evaluator learns that the items are all there.
        self.container_id: str | None = None
        self.container: Any = None
        try:
            # Ctrl-C waits for the ID: an interrupted call may still create the container.
            with _interrupts_held():
                created = api.create_container(
                    image,
                    stdin_open=True,
                    detach=False,
                    tty=False,
                    user=container_user(),
                    hostname="evaluator",
                    environment={},
                    host_config=host_config,
                    labels={
                        REPLAY_LABEL: "1",
                        RUN_LABEL: run_id,
                        ROLE_LABEL: "evaluator",
                        OWNER_LABEL: _owner(),
                    },
                )
                self.container_id = str(created["Id"])
            self.container = client.containers.get(self.container_id)
            self.response_sock = self.container.attach_socket(
                params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1}
            )
            self.sock = _raw_socket(self.response_sock)
            self.sock.settimeout(None)
            self.reader = _FrameReader(self.sock)
            self.container.start()
        except BaseException:
            self.close()
            raise

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def close_stdin(self) -> None:
        self.sock.shutdown(socket.SHUT_WR)

    def stdout_lines(self) -> Iterator[bytes]:
        return _split_lines(self.reader.stdout_chunks())

    def kill(self) -> None:
        with contextlib.suppress(Exception):
            self.container.kill()

    def ending(self) -> str:
        try:
            status = self.container.wait(timeout=30)
            code = status.get("StatusCode")
            self.container.reload()
            oom = bool(self.container.attrs.get("State", {}).get("OOMKilled"))
        except Exception as exc:
            return f"its state is unknown: {_short(exc)}"
        text = f"container exit status {code}"
        if oom:
            text += ", out of memory"
        elif code == 137:
            text += ", killed"
        return text

    def stderr_tail(self) -> str:
        return self.reader.stderr.decode("utf-8", "replace")

    def close(self) -> None:
        for closable in (getattr(self, "sock", None), getattr(self, "response_sock", None)):
            with contextlib.suppress(Exception):
                closable.close()  # type: ignore[union-attr]
        if self.container_id is not None:
            _remove_container(self.client, self.container_id)
            self.container_id = None


def _remove_container(client: Any, container_id: str) -> str | None:
    """Force-remove a container, holding Ctrl-C until Docker answers; return why it failed."""
    from docker.errors import NotFound

    with _interrupts_held():
        try:
            client.api.remove_container(container_id, force=True)
        except NotFound:
            return None
        except Exception as exc:  # the engine's answer, or none (a timeout, a lost socket)
            return _short(exc)
    return None


# Lists the interpreter and every installed distribution; run in the image itself.
_PROBE = (
    "import importlib.metadata as m, json, platform\n"
    "print(json.dumps({'python': platform.python_version(),\n"
    " 'implementation': platform.python_implementation(),\n"
    " 'machine': platform.machine(),\n"
    " 'packages': {d.metadata['Name']: d.version for d in m.distributions()}}))\n"
)
_probed: dict[tuple[str, str], dict[str, Any]] = {}


_PROBE_SECONDS = 120


def _probe_image(client: Any, image: str, python: str, run_id: str) -> dict[str, Any]:
    """The interpreter and the distributions of an image (cached by image ID for the process).

    Runs `python -c` in a throwaway container as locked down as the evaluator's (no network,
    read-only, no capabilities): the image's own word, not what its inputs were meant to make.
    The container carries the runner's `run_id`, and is removed here on every path.
    """
    from docker.errors import DockerException

    container: Any = None
    try:
        image_id = str(client.images.get(image).id)
        key = (image_id, python)
        if key in _probed:
            return dict(_probed[key])
        # Not `containers.run(remove=True)`: its removal is skipped by an interrupt, and its
        # wait has no time limit.
        with _interrupts_held():
            container = client.containers.create(
                image_id,
                entrypoint=[python],
                command=["-c", _PROBE],
                network_mode="none",
                read_only=True,
                cap_drop=["ALL"],
                security_opt=["no-new-privileges"],
                user=container_user(),
                mem_limit="512m",
                pids_limit=64,
                environment={},
                tmpfs={"/tmp": "rw,nosuid,nodev,size=16m"},
                labels={
                    REPLAY_LABEL: "1",
                    RUN_LABEL: run_id,
                    ROLE_LABEL: "probe",
                    OWNER_LABEL: _owner(),
                },
            )
        container.start()
        status = container.wait(timeout=_PROBE_SECONDS).get("StatusCode")
        output = container.logs(stdout=True, stderr=status != 0)
        if status != 0:
            said = " ".join(bytes(output).decode("utf-8", "replace").split())
            raise EvaluatorFailed(
                f"could not list the Python environment of {image} "
                f"(`{python}` in it exited with status {status}): "
                f"{said[-300:]}"
            )
    except (DockerException, OSError) as exc:  # OSError: requests' errors, a wait's timeout
        raise EvaluatorFailed(
            f"could not list the Python environment of {image} (`{python}` in it): {_short(exc)}"
        ) from None
    finally:
        if container is not None:
            _remove_container(client, container.id)
    lines = [ln for ln in bytes(output).decode("utf-8", "replace").splitlines() if ln.strip()]
    try:
        found = json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        raise EvaluatorFailed(
            f"could not list the Python environment of {image}: "
            f"unexpected output {bytes(output)[:200]!r}"
        ) from None
    packages = found.get("packages") if isinstance(found, dict) else None
    facts = {
        "python": found.get("python"),
        "implementation": found.get("implementation"),
        "machine": found.get("machine"),
        "packages": dict(sorted((str(k), str(v)) for k, v in (packages or {}).items())),
        "complete": True,
    }
    _probed[key] = facts
    return dict(facts)


def _owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def _owner_alive(owner: str) -> bool:
    host, _, pid = owner.rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return True  # another machine's replay: not ours to judge
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class DockerEvaluatorRunner:
    """The product's runner: the evaluator image, built or reused, run in a hardened container."""

    def __init__(
        self,
        *,
        base_image: str | None = None,
        wheelhouse: Path | None = None,
        requirements: Sequence[str] | None = None,
        client: Any = None,
        limits: ContainerLimits | None = None,
        wall_clock_seconds: float | None = None,
        source_dir: Path | None = None,
        python_version: str | None = None,
        allow_environment_mismatch: bool = False,
    ) -> None:
        # A release that pins its interpreter ("3.13") gets that Python's official slim image
        # by default; without a registry, --base-image names a local one (.ci/base-image).
        self.base_image = base_image or (
            f"python:{python_version}-slim" if python_version else DEFAULT_BASE_IMAGE
        )
        self.python_version = python_version
        self.allow_environment_mismatch = allow_environment_mismatch
        self.environment_notes: list[str] = []  # a mismatch the user chose to accept
        self.image_facts: dict[str, Any] | None = None
        self.wheelhouse = wheelhouse
        self.requirements = tuple(requirements) if requirements else None
        self.limits = limits or ContainerLimits()
        self.wall_clock_seconds = wall_clock_seconds
        self.source_dir = source_dir
        self.client = connect(client)
        self.image: str | None = None
        self.run_id = uuid.uuid4().hex[:12]
        self.removed_leftovers = 0

    # -- image ---------------------------------------------------------------------------------
    def image_tag(self, context: BuildContext | None = None) -> str:
        """The tag of the image these inputs make (needs the base image on the engine)."""
        context = context or self._context()
        return f"{IMAGE_REPOSITORY}:{context.digest(self._base_image_id(build=False))[:16]}"

    def _context(self) -> BuildContext:
        return BuildContext.assemble(
            requirements=self.requirements, wheelhouse=self.wheelhouse, source_dir=self.source_dir
        )

    def _base_image_id(self, *, build: bool, progress: ProgressCallback | None = None) -> str:
        from docker.errors import APIError, ImageNotFound

        try:
            return str(self.client.images.get(self.base_image).id)
        except ImageNotFound:
            pass
        if not build:
            raise UsageError(
                f"the base image {self.base_image} is not on the Docker Engine, so the evaluator "
                "image is missing too: pass --build-image (and --base-image IMAGE for a local "
                "base, e.g. one made by .ci/base-image, where no registry is reachable)"
            )
        if progress is not None:
            progress(ImageBuildLog(f"pulling the base image {self.base_image}"))
        try:
            return str(self.client.images.pull(self.base_image).id)
        except APIError as exc:
            raise UsageError(
                f"the base image {self.base_image} is not on the Docker Engine and cannot be "
                f"pulled ({_short(exc)}): pass --base-image IMAGE naming a local image with "
                "python3 3.10+ and venv (without a registry: .ci/base-image builds one from a "
                "Debian root filesystem)"
            ) from None

    def ensure_image(self, *, build: bool, progress: ProgressCallback | None = None) -> str:
        """Build or reuse the image, after checking that its Python is the release's."""
        with self._removing_on_interrupt():
            return self._ensure_image(build=build, progress=progress)

    def _ensure_image(self, *, build: bool, progress: ProgressCallback | None) -> str:
        from docker.errors import ImageNotFound

        context = self._context()
        base_id = self._base_image_id(build=build, progress=progress)
        digest = context.digest(base_id)
        tag = f"{IMAGE_REPOSITORY}:{digest[:16]}"
        try:
            self.client.images.get(tag)
        except ImageNotFound:
            if not build:
                raise UsageError(
                    f"the evaluator image {tag} (base {self.base_image}) does not exist yet: "
                    "pass --build-image to build it"
                ) from None
            # Checked before a build of minutes, which would fail or make the wrong thing.
            self._check_python(_probe_image(self.client, self.base_image, "python3", self.run_id))
            self._build(context, tag, digest, progress)
            built = True
        else:
            built = False
        facts = _probe_image(self.client, tag, "/opt/pqid-venv/bin/python", self.run_id)
        self._check_python(facts)
        self.image = tag
        self.image_facts = {
            **facts,
            "image": tag,
            "image_id": str(self.client.images.get(tag).id),
            "base_image": self.base_image,
            "base_image_id": base_id,
        }
        if progress is not None:
            progress(ImageReady(tag, built=built))
        return tag

    def _check_python(self, facts: dict[str, Any]) -> None:
        want = self.python_version
        have = facts.get("python")
        if want is None or (isinstance(have, str) and python_series(have) == want):
            return
        note = (
            f"the release's frozen rows were scored with Python {want}, but the base image "
            f"{self.base_image} has Python {have}"
        )
        if self.allow_environment_mismatch:
            if note not in self.environment_notes:
                self.environment_notes.append(note)
            return
        raise EnvironmentMismatch(
            f"{note}: pass --base-image IMAGE with Python {want} (without a registry, "
            f"`.ci/base-image pqid-base:trixie trixie` builds one with 3.13, and "
            f"`.ci/wheelhouse-fill --python-version {want} DIR PINS` fills its --wheelhouse), "
            "or --allow-environment-mismatch to score anyway (the summary then says "
            "environment_matches_release: false)"
        )

    def environment_facts(self) -> dict[str, Any] | None:
        """What the evaluator image holds: interpreter, every distribution, image IDs."""
        return dict(self.image_facts) if self.image_facts is not None else None

    def build(
        self,
        *,
        tag: str | None = None,
        nocache: bool = False,
        progress: ProgressCallback | None = None,
    ) -> str:
        """Build the image from its inputs even if it exists; return the tag it was given.

        With the layer cache, unless `nocache`. `tag` names the result instead of the usual
        digest tag (benchmarks build throwaway copies this way).
        """
        context = self._context()
        digest = context.digest(self._base_image_id(build=True, progress=progress))
        tag = tag or f"{IMAGE_REPOSITORY}:{digest[:16]}"
        self._build(context, tag, digest, progress, nocache=nocache)
        return tag

    def _build(
        self,
        context: BuildContext,
        tag: str,
        digest: str,
        progress: ProgressCallback | None,
        *,
        nocache: bool = False,
    ) -> None:
        from docker.errors import APIError

        def log(line: str) -> None:
            tail.append(line)
            del tail[:-60]
            if progress is not None:
                progress(ImageBuildLog(line))

        tail: list[str] = []
        log(
            f"building {tag} from {self.base_image}"
            + (
                f" with {len(context.wheelhouse)} wheels from {self.wheelhouse}"
                if context.wheelhouse
                else " (requirements from the package index)"
            )
        )
        error: str | None = None
        try:
            stream = self.client.api.build(
                fileobj=context.tar(),
                custom_context=True,
                tag=tag,
                rm=True,
                forcerm=True,
                pull=False,
                nocache=nocache,
                decode=True,
                buildargs={"BASE_IMAGE": self.base_image},
                labels={INPUTS_LABEL: digest},
            )
            for chunk in stream:
                for line in _ANSI.sub("", str(chunk.get("stream") or "")).splitlines():
                    if line.strip():
                        log(line.rstrip())
                if "error" in chunk:
                    error = _ANSI.sub("", str(chunk.get("error") or "")).strip()
        except APIError as exc:
            error = _short(exc)
        if error is None:
            return
        # The classic builder repeats the whole failed command; the step's own output says why.
        failed = _STEP_FAILED.search(error)
        summary = f"a build step exited with status {failed.group(1)}" if failed else error[:300]
        reasons = [line for line in tail if re.match(r"\s*(ERROR|E:|error:)", line)]
        detail = " | ".join((reasons or [line for line in tail if not _NOISE.match(line)])[-6:])
        hint = (
            ""
            if context.wheelhouse
            else "; where no package index is reachable, pass --wheelhouse DIR "
            "(filled by .ci/wheelhouse-fill DIR)"
        )
        raise ImageBuildError(
            f"building the evaluator image from {self.base_image} failed "
            f"({summary}): {detail}{hint}"
        )

    # -- containers ----------------------------------------------------------------------------
    def remove_leftovers(self) -> int:
        """Remove containers of earlier replays that died without cleaning up."""
        removed = 0
        # The low-level listing: `containers.list` fetches each container again by ID and
        # raises NotFound when another replay removes its own container in between.
        for container in self.client.api.containers(all=True, filters={"label": REPLAY_LABEL}):
            labels = container.get("Labels") or {}
            if labels.get(RUN_LABEL) == self.run_id:
                continue
            running = container.get("State") in ("running", "restarting", "paused")
            owner = labels.get(OWNER_LABEL, "")
            # Another live process's container is its own to remove, even stopped (a probe
            # whose output it is about to read); a stopped one of an earlier runner of this
            # process is a leftover.
            if _owner_alive(owner) and (running or owner != _owner()):
                continue
            with contextlib.suppress(Exception):
                self.client.api.remove_container(container["Id"], force=True)
                removed += 1
        self.removed_leftovers += removed
        return removed

    def run(
        self,
        items: Sequence[EvaluationItem],
        config: EvaluatorConfig,
        on_line: LineCallback | None = None,
    ) -> RunOutcome:
        with self._removing_on_interrupt():
            return self._run(items, config, on_line)

    def _run(
        self, items: Sequence[EvaluationItem], config: EvaluatorConfig, on_line: LineCallback | None
    ) -> RunOutcome:
        if self.image is None:
            self.ensure_image(build=False)
        assert self.image is not None
        image = self.image
        self.remove_leftovers()
        cpus = min(self.limits.cpus, float(self.client.info().get("NCPU") or 1))

        def start() -> _ContainerSession:
            from docker.errors import DockerException

            try:
                return _ContainerSession(self.client, image, self.run_id, self.limits, cpus)
            except DockerException as exc:
                raise EvaluatorFailed(
                    f"the Docker Engine could not start the evaluator "
                    f"container from {image}: {_short(exc)}"
                ) from None

        return _drive(start, items, config, on_line, self.wall_clock_seconds)

    @contextlib.contextmanager
    def _removing_on_interrupt(self) -> Iterator[None]:
        """Turn Ctrl-C into `Interrupted`, once every container of this runner is removed."""
        try:
            yield
        except Interrupted:
            raise
        except KeyboardInterrupt:
            raise Interrupted(self.run_id, self.remove_own_containers(), label=RUN_LABEL) from None

    def remove_own_containers(self) -> list[str]:
        """Remove every container this runner made; return those it could not, with why."""
        # Further Ctrl-Cs are absorbed: the first one is already on its way out.
        with _interrupts_held(redeliver=False):
            try:
                found = self.client.api.containers(
                    all=True, filters={"label": f"{RUN_LABEL}={self.run_id}"}
                )
            except Exception as exc:  # the engine's answer, or none
                return [
                    f"any container labelled {RUN_LABEL}={self.run_id} (could not list "
                    f"them: {_short(exc)})"
                ]
            left = []
            for container in found:
                why = _remove_container(self.client, container["Id"])
                if why is not None:
                    left.append(f"container {container['Id'][:12]} ({why})")
        return left
