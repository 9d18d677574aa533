"""The supervisor behind ``python -m evaluator serve``: reads a job, scores it, reports.

It holds the target metadata, never imports Qiskit and never runs generated code. Two fresh
interpreters do the work: the executor runs snippets in limited forks, the grader judges
the circuits that come back. Either may die (a snippet can kill its parent); the supervisor
records the item, starts a new one and goes on.

Protocol (stdin, JSON lines, read to EOF before anything is scored)::

    {"type": "config", "timeout_seconds": 20, "memory_mb": 2048, "equivalence_max_qubits": 8,
     "contract": "pqid-tui-1"}
    {"type": "item", "prompt_id": "...", "content": "..." | null,
     "generated_code": "..." | null, "target_metadata": {...}}

Protocol (stdout, JSON lines, written only here)::

    {"type": "hello", "evaluator_version": "...", "environment": {...}, "timing": {...},
     "contract": "...", "predicate": "..." | null}
    {"type": "started", "prompt_id": "...", "index": 0, "total": n}     # per item
    {"type": "evaluation", "evaluation": {...}, "timing": {...}}         # per item
    {"type": "done", "count": n}

Items start and finish in input order, at most two in progress at once: item n's `started`
comes when its snippet is about to run, which may be before item n - 1's `evaluation` (still
with the grader). `timing` is not part of the evaluation: in `hello`, the supervisor's start
and readiness (wall-clock seconds since the epoch) and each worker's import times; per item,
the forked child's lifetime from fork to reaping (`child_ms`), the snippet's own run inside it
(`snippet_ms`) and the grader's time on the circuit (`grade_ms`), null where not reached; under
the PQID-Bench contract also the recovery run's (`recovery_child_ms`, `recovery_snippet_ms`).

Every item of a job is scored under the config's scoring contract (`evaluator.contracts`;
the project's own when the config names none); an unknown contract is a protocol error. Under
the PQID-Bench contract each response with code runs twice, each time in a fresh child: the
strict standalone run (the verdict) and the target-context recovery run (a diagnostic);
except when the executor said, before the strict run's code started, that another context
cannot change it (it did not compile, or it never reads a name the contexts differ in) and
the strict run ended cleanly and well within its time: then the recovery verdict is the
strict run's circuits chosen by the recovery rule (per item `recovery_reused` in `timing`).

A malformed input line yields ``{"type": "fatal", "message": "..."}`` and exit status 2.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, fields
from functools import partial
from typing import IO, Any

import evaluator
from evaluator import processes, wire
from evaluator.contracts import (
    CONTRACT_PQID_BENCH,
    DEFAULT_CONTRACT,
    UnknownContract,
    get_contract,
    pqid_bench,
)
from evaluator.executor import WORK_PREFIX
from evaluator.extract import Extraction, extract_code
from evaluator.schema import categorize, make_evaluation, short_error
from evaluator.worker_env import DEFAULT_PATH, WORKER_ENV

__all__ = ["Config", "Item", "ProtocolError", "Supervisor", "environment", "read_job", "serve"]

# Startup imports Qiskit: about a second warm, several cold, longer on a loaded machine.
_START_TIMEOUT = 300.0
# Forking, cleaning up and shipping the circuit back on top of the snippet's own time.
_EXECUTOR_MARGIN = 15.0
_QPY_LIMIT = 64 << 20
_EXCERPT = 400

# How a run ends that a second run might not end the same way: never repeated by reuse.
_NOT_REPEATABLE = frozenset(
    {"Timeout", "Killed", "EvaluatorError", "SnippetExit", "MemoryError", "RecursionError"}
)
# Items started and not yet reported: how far the executor may run ahead of the grader.
_MAX_IN_PROGRESS = 8
# Circuits waiting for the grader may hold at most this much QPY before snippets wait too.
_MAX_WAITING = 64 << 20
# A request sent while the grader is busy must fit in the pipe (64 KiB), or sending would stall.
_SEND_AHEAD = 32 << 10
# Directories a snippet can write to in the container (everything else is read-only); what it
# leaves there is removed after each item, so it cannot fill them for the items that follow.
_SCRATCH_DIRS = ("/dev/shm", "/dev/mqueue")

_DISTRIBUTIONS = {
    "qiskit": "qiskit",
    "qiskit_aer": "qiskit-aer",
    "numpy": "numpy",
    "scipy": "scipy",
    "rustworkx": "rustworkx",
    "symengine": "symengine",
    "sympy": "sympy",
}
# Libraries that change verdicts only under one contract, recorded beside the rest there: the
# PQID-Bench frozen rows were scored where Qiskit's matplotlib drawer worked (`draw("mpl")`).
_CONTRACT_DISTRIBUTIONS: dict[str, dict[str, str]] = {
    CONTRACT_PQID_BENCH: {
        "matplotlib": "matplotlib",
        "pylatexenc": "pylatexenc",
        "python_dateutil": "python-dateutil",
    },
}


class ProtocolError(Exception):
    """The job on stdin does not follow the protocol."""


@dataclass(frozen=True)
class Config:
    """Settings of one job; every field may be given on the config line.

    `memory_mb` caps each snippet's address space (RLIMIT_AS), which already holds the
    ~1.3 GB that importing Qiskit reserves; `max_processes` is how many more tasks
    (processes or threads) a snippet may start.
    """

    timeout_seconds: float = 20.0
    memory_mb: int = 2048
    equivalence_max_qubits: int = 8
    statevector_max_qubits: int = 14
    grading_timeout_seconds: float = 60.0
    max_processes: int = 8
    contract: str = DEFAULT_CONTRACT

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Config:
        """Validate a config line."""
        values: dict[str, Any] = {}
        known = {f.name: f for f in fields(cls)}
        for key, value in raw.items():
            if key == "type":
                continue
            if key not in known:
                print(f"evaluator: ignoring unknown config key {key!r}", file=sys.stderr)
                continue
            if key == "contract":
                try:
                    values[key] = get_contract(value).name
                except UnknownContract as exc:
                    raise ProtocolError(f"config contract: {exc}") from None
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ProtocolError(f"config {key} must be a number")
            kind = float if isinstance(getattr(cls(), key), float) else int
            if kind is int and value != int(value):
                raise ProtocolError(f"config {key} must be an integer")
            if value <= 0 or value > 1e6:
                raise ProtocolError(f"config {key} is out of range")
            values[key] = kind(value)
        return cls(**values)


@dataclass(frozen=True)
class Item:
    """One response to score."""

    prompt_id: str
    content: str | None
    generated_code: str | None
    target_metadata: dict[str, Any] = field(default_factory=dict)


def _parse_item(raw: dict[str, Any], number: int) -> Item:
    """Validate an item line."""
    prompt_id = raw.get("prompt_id")
    if not isinstance(prompt_id, str) or not prompt_id:
        raise ProtocolError(f"line {number}: prompt_id must be a non-empty string")
    content = raw.get("content")
    if content is not None and not isinstance(content, str):
        raise ProtocolError(f"line {number}: content must be a string or null")
    code = raw.get("generated_code")
    if code is not None and not isinstance(code, str):
        raise ProtocolError(f"line {number}: generated_code must be a string or null")
    target = raw.get("target_metadata")
    if not isinstance(target, dict):
        raise ProtocolError(f"line {number}: target_metadata must be an object")
    return Item(prompt_id=prompt_id, content=content, generated_code=code, target_metadata=target)


def read_job(lines: Iterable[str]) -> tuple[Config, list[Item]]:
    """Parse a whole job: an optional config line first, then items."""
    config = Config()
    items: list[Item] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            raw = json.loads(line)
        except ValueError as exc:
            raise ProtocolError(f"line {number}: not JSON ({exc})") from None
        if not isinstance(raw, dict):
            raise ProtocolError(f"line {number}: not a JSON object")
        kind = raw.get("type")
        if kind == "config":
            if items:
                raise ProtocolError(f"line {number}: config must come before the items")
            config = Config.from_json(raw)
        elif kind == "item":
            items.append(_parse_item(raw, number))
        else:
            raise ProtocolError(f"line {number}: unknown type {kind!r}")
    return config, items


def environment(contract: str = DEFAULT_CONTRACT) -> dict[str, str | None]:
    """Exact versions of the interpreter and the libraries a score depends on."""
    # Imported here: it takes longer than the rest of the supervisor's imports together, and
    # the supervisor starts its workers first.
    import importlib.metadata

    found: dict[str, str | None] = {
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "machine": platform.machine(),
    }
    distributions = {**_DISTRIBUTIONS, **_CONTRACT_DISTRIBUTIONS.get(contract, {})}
    for key, distribution in distributions.items():
        try:
            found[key] = importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            found[key] = None
    return found


class WorkerError(Exception):
    """A worker process died, hung, or could not start."""


class WorkerTimeout(WorkerError):
    """A worker did not answer before its deadline."""


class Worker:
    """A helper interpreter spoken to with frames on its stdin and stdout."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], cwd: str) -> None:
        self.name = name
        self.argv = argv
        self.env = env
        self.cwd = cwd
        self.proc: subprocess.Popen[bytes] | None = None
        self.reader: wire.FrameReader | None = None
        self.ready = False
        self.hello: dict[str, Any] = {}

    @property
    def pid(self) -> int | None:
        """The process id, while one is running."""
        return self.proc.pid if self.proc is not None else None

    def start(self) -> None:
        """Launch the interpreter; readiness is awaited on first use."""
        self.stop()
        self.proc = subprocess.Popen(
            self.argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            close_fds=True,
            env=self.env,
            cwd=self.cwd,
            # Its own session: a snippet signalling its parent's group cannot reach us.
            start_new_session=True,
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None
        os.set_blocking(self.proc.stdin.fileno(), False)
        os.set_blocking(self.proc.stdout.fileno(), False)
        self.reader = wire.FrameReader(self.proc.stdout.fileno())
        self.ready = False

    def alive(self) -> bool:
        """Whether the process is still running."""
        return self.proc is not None and self.proc.poll() is None

    def ensure(self) -> None:
        """Start the worker if needed and wait until it has imported everything."""
        if self.proc is None or not self.alive():
            try:
                self.start()
            except OSError as exc:
                raise WorkerError(f"the {self.name} could not be started: {exc}") from None
        if self.ready:
            return
        try:
            hello = wire.decode_json(self.read(time.monotonic() + _START_TIMEOUT, 1 << 16))
        except (WorkerError, ValueError) as exc:
            self.stop()
            raise WorkerError(f"the {self.name} did not start: {exc}") from None
        if not isinstance(hello, dict) or hello.get("type") != "ready":
            self.stop()
            raise WorkerError(f"the {self.name} sent no ready message")
        self.hello = hello
        self.ready = True

    def send(self, frames: list[bytes], deadline: float) -> None:
        """Send frames, turning pipe failures into WorkerError."""
        if self.proc is None or self.proc.stdin is None:
            raise WorkerError(f"the {self.name} is not running")
        try:
            wire.send_frames(self.proc.stdin.fileno(), frames, deadline)
        except wire.PeerTimeout:
            raise WorkerTimeout(f"the {self.name} did not take its input in time") from None
        except wire.WireError as exc:
            raise WorkerError(f"the {self.name} stopped taking input ({exc})") from None

    def read(self, deadline: float, limit: int) -> bytes:
        """Read one frame, turning pipe failures into WorkerError."""
        if self.reader is None:
            raise WorkerError(f"the {self.name} is not running")
        try:
            return self.reader.read(deadline, limit)
        except wire.PeerTimeout:
            raise WorkerTimeout(f"the {self.name} did not answer in time") from None
        except wire.WireError as exc:
            raise WorkerError(f"the {self.name} died ({self.describe_exit()}; {exc})") from None

    def poll(self, limit: int) -> bytes | None:
        """A frame that has fully arrived, or None; never waits."""
        if self.reader is None:
            raise WorkerError(f"the {self.name} is not running")
        try:
            return self.reader.poll(limit)
        except wire.WireError as exc:
            raise WorkerError(f"the {self.name} died ({self.describe_exit()}; {exc})") from None

    def describe_exit(self) -> str:
        """How the process ended, for error messages."""
        if self.proc is None:
            return "not started"
        try:
            code = self.proc.wait(timeout=0.5)
        except subprocess.TimeoutExpired:
            return "still running"
        if code < 0:
            try:
                return f"killed by {signal.Signals(-code).name}"
            except ValueError:
                return f"killed by signal {-code}"
        return f"exit status {code}"

    def stop(self, *, grace: float = 0.0) -> None:
        """End the process and collect it: after `grace` seconds of EOF, by SIGKILL."""
        proc, hello = self.proc, self.hello
        self.proc, self.reader, self.ready, self.hello = None, None, False, {}
        if proc is None:
            return
        # Closing its input is how a healthy worker learns to tidy up and leave.
        for stream in (proc.stdin, proc.stdout):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            pass
        for kill in (os.killpg, os.kill):
            try:
                kill(proc.pid, signal.SIGKILL)
            except OSError:
                pass
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            print(f"evaluator: the {self.name} ({proc.pid}) would not exit", file=sys.stderr)
        _remove_worker_root(hello.get("temp_root"))


def _remove_worker_root(path: object) -> None:
    """Delete the working root a killed executor could not delete itself.

    Only a path of the executor's own making is touched: a direct child of the temporary
    directory whose name carries the executor's prefix. Nothing else is ever removed.
    """
    if not isinstance(path, str):
        return
    parent = os.path.realpath(tempfile.gettempdir())
    if os.path.dirname(path) != parent or not os.path.basename(path).startswith(WORK_PREFIX):
        return
    if os.path.islink(path) or not os.path.isdir(path):
        return
    shutil.rmtree(path, ignore_errors=True)


def _clear_directory(directory: str, *, keep: str | None) -> None:
    """Delete every entry of a directory except `keep`, even ones made unreadable."""

    def unlock(_function: Any, target: str, _info: Any) -> None:
        # The snippet may have removed permissions from directories it made (same uid).
        try:
            os.chmod(os.path.dirname(target), 0o700)
            if os.path.isdir(target) and not os.path.islink(target):
                os.chmod(target, 0o700)
                shutil.rmtree(target, ignore_errors=True)
            else:
                os.unlink(target)
        except OSError:
            pass

    try:
        names = os.listdir(directory)
    except OSError:
        return
    for name in names:
        path = os.path.join(directory, name)
        if keep is not None and path == keep:
            continue
        try:
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, onerror=unlock)
            else:
                os.unlink(path)
        except OSError:
            pass


def _package_parent() -> str:
    """The directory that holds the evaluator package, for the workers' import path."""
    return os.path.dirname(os.path.dirname(os.path.abspath(evaluator.__file__)))


@dataclass
class _Run:
    """What the executor reported about one snippet, reduced to what scoring needs."""

    compiled: bool = True
    timed_out: bool = False
    execution_ok: bool = False
    error: str | None = None
    error_type: str | None = None  # the class of `error` ("Timeout", "EvaluatorError", ...)
    circuit_source: str | None = None
    circuit_names: list[str] = field(default_factory=list)  # every candidate (PQID-Bench)
    qpy: bytes = b""
    stdout: str = ""
    stdout_truncated: bool = False
    stderr: str = ""
    stderr_truncated: bool = False
    child_pid: int | None = None
    child_ms: float | None = None
    exec_ms: float | None = None
    # The executor's word, given before the code ran, that no other context changes this run.
    same_in_any_context: bool = False


@dataclass
class _Pending:
    """An item between its snippet's run and its evaluation.

    `evaluation` is set when nothing is left to grade; otherwise the circuit (`run.qpy`) waits
    for the grader, and `structure` keeps the structural verdict as soon as it arrives.
    """

    item: Item
    started: float
    common: dict[str, Any]
    run: _Run = field(default_factory=_Run)
    recovery: _Run | None = None  # the PQID-Bench target-context run (may be `run` itself)
    choice: pqid_bench.CodeChoice | None = None  # the PQID-Bench code channel's verdict
    outputs: dict[str, Any] = field(default_factory=dict)
    evaluation: dict[str, Any] | None = None
    structure: dict[str, Any] | None = None
    deadline: float = 0.0
    timing: dict[str, Any] = field(
        default_factory=lambda: {"child_ms": None, "snippet_ms": None, "grade_ms": None}
    )

    @property
    def payload(self) -> bytes:
        """What the grader is sent: the circuit's QPY (each run's, one after the other)."""
        if self.recovery is None:
            return self.run.qpy
        if self.recovery is self.run:
            return self.run.qpy  # graded once more under the recovery rule, not sent twice
        return self.run.qpy + self.recovery.qpy

    def finish(self, **values: Any) -> dict[str, Any]:
        """The canonical evaluation, timed from the start of the item."""
        values.setdefault("duration_ms", round((time.monotonic() - self.started) * 1000))
        self.evaluation = make_evaluation(**self.common, **values)
        return self.evaluation


class Supervisor:
    """Scores items in order with an executor and a grader, two stages in a pipeline.

    Snippets run one at a time, each followed by the sweep and the scratch clean-up, exactly
    as if nothing else were running. What overlaps is trusted work: while the executor runs
    item n's snippet, the grader judges item n - 1's circuit, so both cores are busy. A snippet
    runs as the same uid as the grader, so it could kill, stop or starve it; a grade that
    fails while a snippet ran beside it is therefore done again with nothing else running, and
    no response can change another's score.
    """

    def __init__(
        self, config: Config, *, container: bool, out: IO[str], started_at: float | None = None
    ) -> None:
        self.config = config
        self.container = container
        self.out = out
        self.started_at = time.time() if started_at is None else started_at
        self.workers_started_at: float | None = None
        self._environment: dict[str, str | None] | None = None
        # Not the temporary directory: `python -m` puts the working directory first on
        # sys.path, and a snippet (same uid) could plant an `evaluator` package there that a
        # restarted grader would then import. The root directory is never writable by us.
        cwd = "/"
        env = dict(WORKER_ENV)
        env["PATH"] = os.environ.get("PATH", DEFAULT_PATH)
        # The workers must import what this process imports, and nothing from the launch
        # directory; PYTHONPATH names no secret.
        inherited = os.environ.get("PYTHONPATH", "")
        env["PYTHONPATH"] = os.pathsep.join(p for p in (_package_parent(), inherited) if p)
        env["HOME"] = cwd
        env["TMPDIR"] = tempfile.gettempdir()
        # -P (3.11+) keeps even the working directory off sys.path.
        safe_path = ["-P"] if sys.version_info >= (3, 11) else []
        python = [sys.executable, "-s", *safe_path, "-m"]
        self.executor = Worker("executor", [*python, "evaluator.executor"], env, cwd)
        # Circuits waiting for the grader, and those it holds (answers come back in order).
        self._waiting: deque[_Pending] = deque()
        self._grading: deque[_Pending] = deque()
        self._head_since = 0.0  # when the grader began on the first circuit it holds
        self._holder: subprocess.Popen[bytes] | None = None  # the grader process holding them
        self.grader = Worker(
            "grader",
            [*python, "evaluator.grader", "--memory-mb", str(config.memory_mb)],
            env,
            cwd,
        )

    @property
    def environment(self) -> dict[str, str | None]:
        """Exact versions of what scores depend on (looked up once, while the workers start)."""
        if self._environment is None:
            self._environment = environment(self.config.contract)
        return self._environment

    def emit(self, message: dict[str, Any]) -> None:
        """Write one protocol line to stdout."""
        self.out.write(json.dumps(message, ensure_ascii=True) + "\n")
        self.out.flush()

    def close(self) -> None:
        """Stop both workers and anything left behind."""
        self.executor.stop(grace=2.0)
        self.grader.stop(grace=2.0)
        self._sweep(())

    def _startup_timing(self) -> dict[str, Any]:
        """When this process started and what each worker's imports took (seconds)."""
        timing: dict[str, Any] = {
            "started_at": self.started_at,
            "workers_started_at": self.workers_started_at,
            "ready_at": time.time(),
        }
        for worker in (self.executor, self.grader):
            found = worker.hello.get("timing")
            timing[worker.name] = found if isinstance(found, dict) else None
        return timing

    def run(self, items: list[Item]) -> None:
        """Score every item and report each one, in order."""
        # Both interpreters import Qiskit at the same time, while the first item is prepared.
        self.workers_started_at = time.time()
        for worker in (self.executor, self.grader):
            try:
                worker.start()
            except OSError as exc:
                print(f"evaluator: could not start the {worker.name}: {exc}", file=sys.stderr)
        if self._environment is None:  # looked up while the workers import
            self._environment = environment(self.config.contract)
        # Waiting here keeps start-up time out of the first item's duration. A failure is
        # only reported: each item tries again and records its own error.
        for worker in (self.executor, self.grader):
            try:
                worker.ensure()
            except WorkerError as exc:
                print(f"evaluator: {exc}", file=sys.stderr)
        contract = get_contract(self.config.contract)
        self.emit(
            {
                "type": "hello",
                "evaluator_version": evaluator.__version__,
                "environment": self.environment,
                "timing": self._startup_timing(),
                "contract": contract.name,
                "predicate": contract.predicate,
            }
        )
        self._waiting.clear()
        self._grading.clear()
        unreported: deque[_Pending] = deque()  # in item order
        for index, item in enumerate(items):
            # Bounded: a grader that falls behind holds the snippets back.
            while len(unreported) >= _MAX_IN_PROGRESS or self._waiting_bytes() > _MAX_WAITING:
                self._settle(unreported)
            self.emit(
                {
                    "type": "started",
                    "prompt_id": item.prompt_id,
                    "index": index,
                    "total": len(items),
                }
            )
            current = self._guarded(item, partial(self._run_snippet, item))
            unreported.append(current)
            if current.evaluation is None:
                self._waiting.append(current)
            self._pump(block=False)
            self._report_ready(unreported)
        while unreported:
            self._settle(unreported)
        self.emit({"type": "done", "count": len(items)})

    def _guarded(self, item: Item, step: Callable[[], _Pending]) -> _Pending:
        """Run one step of an item; a bug of ours costs that item, not the job."""
        try:
            return step()
        except Exception as exc:
            print(f"evaluator: internal error on {item.prompt_id!r}: {exc!r}", file=sys.stderr)
            try:
                self._sweep(())  # whatever the step was, no snippet process may outlive it
            except Exception as again:
                print(f"evaluator: the sweep failed too: {again!r}", file=sys.stderr)
            failed = _Pending(item=item, started=time.monotonic(), common={})
            self._fail_internally(failed, exc)
            return failed

    def _fail_internally(self, pending: _Pending, exc: Exception) -> None:
        """The evaluation of an item that a bug of ours stopped."""
        error = short_error("EvaluatorError", f"internal error: {exc!r}")
        extra: dict[str, Any] = {}
        if self.config.contract == CONTRACT_PQID_BENCH:
            failed = pqid_bench.run_verdict(
                execution_success=False, execution_error_type="EvaluatorError", error=error
            )
            choice = pending.choice or pqid_bench.select_code(
                pending.item.generated_code, pending.item.content
            )
            _, extra = pqid_bench.evaluation_fields(failed, None, choice)
        pending.evaluation = make_evaluation(
            prompt_id=pending.item.prompt_id,
            category="execution_error",
            execution_ok=False,
            circuit_found=False,
            error=error,
            environment=self.environment,
            **self._contract_fields(extra),
        )

    def _contract_fields(self, extra: dict[str, Any]) -> dict[str, Any]:
        """The contract's name, predicate and own fields, for `make_evaluation`."""
        contract = get_contract(self.config.contract)
        return {
            "contract": contract.name,
            "predicate": contract.predicate,
            "contract_fields": extra,
        }

    def _settle(self, unreported: deque[_Pending]) -> None:
        """Wait until the grader finishes at least one item, then report what is ready."""
        head = unreported[0]
        if head.evaluation is None and not (self._waiting or self._grading):
            # Unfinished yet with neither stage: only a bug of ours gets here.
            self._fail_internally(head, RuntimeError("the item was lost between the stages"))
        self._pump(block=True)
        self._report_ready(unreported)

    def _report_ready(self, unreported: deque[_Pending]) -> None:
        """Emit the evaluations that are finished and have no unfinished item before them."""
        while unreported and unreported[0].evaluation is not None:
            pending = unreported.popleft()
            self.emit(
                {"type": "evaluation", "evaluation": pending.evaluation, "timing": pending.timing}
            )

    def _waiting_bytes(self) -> int:
        """Bytes of circuits waiting to be handed to the grader."""
        return sum(len(pending.payload) for pending in self._waiting)

    def _sweep(self, sessions: Iterable[int]) -> int:
        """Kill processes a snippet left behind; returns how many were killed."""
        keep = [pid for pid in (self.executor.pid, self.grader.pid) if pid is not None]
        result = processes.sweep(keep=keep, container=self.container, sessions=sessions)
        if not result.converged:
            print(
                "evaluator: stray processes survived the sweep; restarting workers", file=sys.stderr
            )
            self.executor.stop()
            self.grader.stop()
            result = processes.sweep(keep=(), container=self.container, sessions=sessions)
        # A snippet (same uid) may have stopped a worker with SIGSTOP; the next item would
        # then wait for it until its deadline.
        for pid in (self.executor.pid, self.grader.pid):
            if pid is not None:
                try:
                    os.kill(pid, signal.SIGCONT)
                except OSError:
                    pass
        return result.killed

    def _clear_scratch(self) -> None:
        """Remove whatever the snippet left in the container's writable directories.

        Only in container mode, where these directories belong to the evaluator alone: the
        temporary directory (a size-limited tmpfs) and the shared-memory and message-queue
        mounts. The executor's working root stays (it is emptied, not removed), and nothing is
        running that could write there again: the sweep has just killed every stray process.
        The grader, which may be working meanwhile, writes no files.
        """
        keep = self.executor.hello.get("temp_root")
        if not isinstance(keep, str) or os.path.islink(keep) or not os.path.isdir(keep):
            keep = None  # replaced by the snippet: removed below, and the executor makes anew
        for directory in (tempfile.gettempdir(), *_SCRATCH_DIRS):
            _clear_directory(directory, keep=keep)
        if keep is not None:
            _clear_directory(keep, keep=None)

    def _execute(
        self, code: str, entrypoint: str | None, rules: dict[str, Any] | None = None
    ) -> _Run:
        """Run the code in the executor and interpret its report.

        `rules` adds a contract's fields to the request (its name and, for PQID-Bench, the
        widths of the preloaded registers).
        """
        config = self.config
        request = {
            "code": code,
            "entrypoint": entrypoint,
            "limits": {
                "timeout_seconds": config.timeout_seconds,
                "memory_mb": config.memory_mb,
                "processes": config.max_processes,
            },
            **(rules or {}),
        }
        try:
            self.executor.ensure()
            deadline = time.monotonic() + config.timeout_seconds + _EXECUTOR_MARGIN
            self.executor.send([wire.encode_json(request)], deadline)
            header = wire.decode_json(self.executor.read(deadline, 1 << 20))
            payload = self.executor.read(deadline, _QPY_LIMIT)
        except WorkerError as exc:
            self.executor.stop()
            return _Run(
                timed_out=isinstance(exc, WorkerTimeout),
                error=short_error("EvaluatorError", f"{exc}; a fresh one takes the next item"),
                error_type="EvaluatorError",
            )
        except ValueError as exc:
            self.executor.stop()
            return _Run(
                error=short_error("EvaluatorError", f"unreadable executor reply: {exc}"),
                error_type="EvaluatorError",
            )
        if not isinstance(header, dict):
            return _Run(
                error="EvaluatorError: unreadable executor reply", error_type="EvaluatorError"
            )
        return _interpret(header, payload)

    def _grade_request(self, pending: _Pending) -> None:
        """Hand an item's circuit to the grader without waiting for the verdict."""
        request: dict[str, Any]
        if pending.recovery is not None:
            runs = [
                {
                    "mode": pqid_bench.STRICT_MODE,
                    "names": pending.run.circuit_names,
                    "size": len(pending.run.qpy),
                }
            ]
            if pending.recovery is pending.run:
                # The same circuits, chosen again under the recovery rule.
                runs.append({"mode": pqid_bench.RECOVERY_MODE, "same_as": 0})
            else:
                runs.append(
                    {
                        "mode": pqid_bench.RECOVERY_MODE,
                        "names": pending.recovery.circuit_names,
                        "size": len(pending.recovery.qpy),
                    }
                )
            request = {
                "prompt_id": pending.item.prompt_id,
                "contract": CONTRACT_PQID_BENCH,
                "target": pqid_bench.grader_target(pending.item.target_metadata),
                "runs": runs,
            }
        else:
            request = {
                "prompt_id": pending.item.prompt_id,
                "target_metadata": pending.item.target_metadata,
                "equivalence_max_qubits": self.config.equivalence_max_qubits,
                "statevector_max_qubits": self.config.statevector_max_qubits,
            }
        pending.structure = None
        # A grader that something killed between items is replaced here, before use.
        self.grader.ensure()
        pending.deadline = time.monotonic() + self.config.grading_timeout_seconds
        self.grader.send([wire.encode_json(request), pending.payload], pending.deadline)

    def _grade_stage(self, pending: _Pending, raw: bytes) -> dict[str, Any] | None:
        """Take in one frame of the grader's answer; the final checks once it is complete.

        Raises WorkerError or ValueError when the grader failed.
        """
        stage = wire.decode_json(raw)
        if not isinstance(stage, dict):
            raise WorkerError("the grader sent an unreadable answer")
        seconds = stage.get("seconds")
        if isinstance(seconds, (int, float)) and not isinstance(seconds, bool):
            pending.timing["grade_ms"] = round(seconds * 1000, 3)
        if stage.get("stage") == "structure":
            pending.structure = stage
            return None if stage.get("loaded") else {}
        if stage.get("stage") == "final":
            return stage
        raise WorkerError(f"the grader failed: {stage.get('error')}")

    def _grade(self, pending: _Pending) -> tuple[dict[str, Any] | None, dict[str, Any]]:
        """Grade an item's circuit alone, and wait for the verdict."""
        try:
            self._grade_request(pending)
            while True:
                raw = self.grader.read(pending.deadline, 1 << 24)
                final = self._grade_stage(pending, raw)
                if final is not None:
                    return pending.structure, final
        except (WorkerError, ValueError) as exc:
            self.grader.stop()
            return pending.structure, {"error": str(exc)}

    def _pump(self, *, block: bool) -> None:
        """Trade circuits for verdicts with the grader; called only between snippets.

        Verdicts that have arrived are taken in; with `block`, it first waits for one item to
        be finished. Waiting circuits are handed over while the grader holds fewer than two
        (the second only when it fits in the pipe beside the first). When the grader fails,
        every item it held is graded again, alone: no snippet runs now, so nothing another
        response did (killing, stopping or starving the grader) can change a score.
        """
        wait = block
        while True:
            try:
                self._hand_over()
                if not self._grading:
                    return
                if not self._take_verdict(wait=wait):
                    return
            except (WorkerError, ValueError):
                self._grade_held_alone()
            wait = False

    def _hand_over(self) -> None:
        """Send waiting circuits to the grader, at most two outstanding."""
        while self._waiting and len(self._grading) < 2:
            pending = self._waiting[0]
            if self._grading:
                size = len(pending.payload) + len(json.dumps(pending.item.target_metadata))
                if size > _SEND_AHEAD:
                    return
                # Never to a replacement: its answers would be taken for the earlier ones'.
                if not self._holder_alive():
                    raise WorkerError("the grader holding the earlier circuits is gone")
            self._grading.append(self._waiting.popleft())
            if len(self._grading) == 1:
                self._head_since = time.monotonic()
            self._grade_request(pending)
            if len(self._grading) == 1:
                self._holder = self.grader.proc
            elif not self._holder_alive():
                raise WorkerError("the grader holding the earlier circuits is gone")

    def _holder_alive(self) -> bool:
        """Whether the grader process that holds the outstanding circuits still runs."""
        proc = self.grader.proc
        return proc is not None and proc is self._holder and proc.poll() is None

    def _take_verdict(self, *, wait: bool) -> bool:
        """Read the grader's answer on the first circuit it holds; whether it is complete."""
        pending = self._grading[0]
        if self.grader.proc is None or self.grader.proc is not self._holder:
            raise WorkerError("the grader holding the circuit is gone")
        deadline = self._head_since + self.config.grading_timeout_seconds
        while True:
            raw = self.grader.read(deadline, 1 << 24) if wait else self.grader.poll(1 << 24)
            if raw is None:
                if time.monotonic() > deadline:
                    raise WorkerTimeout("the grader did not answer in time")
                return False
            final = self._grade_stage(pending, raw)
            if final is not None:
                self._grading.popleft()
                self._head_since = time.monotonic()
                self._conclude(pending, pending.structure, final)
                return True

    def _grade_held_alone(self) -> None:
        """After a grader failure: grade each circuit it held again, one at a time."""
        held = list(self._grading)
        self._grading.clear()
        self.grader.stop()
        for pending in held:
            pending.timing.update(regraded=True, grade_ms=None)
            structure, final = self._grade(pending)
            self._conclude(pending, structure, final)

    def _conclude(
        self, pending: _Pending, structure: dict[str, Any] | None, final: dict[str, Any]
    ) -> None:
        """Finish an item from its verdict; a bug of ours costs only this item."""
        try:
            self._judge(pending, structure, final)
        except Exception as exc:
            print(
                f"evaluator: internal error on {pending.item.prompt_id!r}: {exc!r}",
                file=sys.stderr,
            )
            self._fail_internally(pending, exc)

    def evaluate(self, item: Item) -> dict[str, Any]:
        """Score one item on its own (snippet, then grade); never raises for its content."""
        pending = self._run_snippet(item)
        if pending.evaluation is None:
            structure, final = self._grade(pending)
            self._conclude(pending, structure, final)
        assert pending.evaluation is not None
        return pending.evaluation

    def _run_snippet(self, item: Item) -> _Pending:
        """Extract and run an item's code; the evaluation is final unless a circuit came back."""
        if self.config.contract == CONTRACT_PQID_BENCH:
            return self._run_pqid_bench(item)
        started = time.monotonic()
        if item.generated_code is not None and item.generated_code.strip():
            extraction = Extraction(item.generated_code, "provided", False, 0)
        else:
            extraction = extract_code(item.content)
        extraction_info = {
            "method": extraction.method,
            "prose_removed": extraction.prose_removed,
            "fences": extraction.fences,
        }
        common: dict[str, Any] = {
            "prompt_id": item.prompt_id,
            "extraction": extraction_info,
            "environment": self.environment,
            **self._contract_fields({}),
        }
        pending = _Pending(item=item, started=started, common=common)
        if not extraction.code.strip():
            pending.finish(
                category="no_code",
                execution_ok=False,
                circuit_found=False,
                equivalence_reason="not checked: no code",
            )
            return pending
        entry = item.target_metadata.get("entrypoint")
        run = self._execute(extraction.code, entry if isinstance(entry, str) else None)
        sessions = [run.child_pid] if run.child_pid else []
        killed = self._sweep(sessions)
        if self.container:
            self._clear_scratch()
        pending.run = run
        pending.timing.update(child_ms=run.child_ms, snippet_ms=run.exec_ms)
        pending.outputs = {
            "stdout_excerpt": run.stdout[:_EXCERPT],
            "stdout_truncated": run.stdout_truncated or len(run.stdout) > _EXCERPT,
            "stderr_excerpt": run.stderr[-_EXCERPT:],
            "stderr_truncated": run.stderr_truncated or len(run.stderr) > _EXCERPT,
            "stray_processes_killed": killed,
            "circuit_source": run.circuit_source,
        }
        circuit_found = bool(run.qpy)
        if not (run.compiled and not run.timed_out and run.execution_ok and circuit_found):
            category = categorize(
                has_code=True,
                compiled=run.compiled,
                timed_out=run.timed_out,
                execution_ok=run.execution_ok,
                circuit_found=circuit_found,
                width_match=False,
                gate_types_match=False,
                gate_counts_match=False,
            )
            pending.finish(
                category=category,
                execution_ok=run.execution_ok,
                circuit_found=False,
                error=run.error,
                equivalence_reason="not checked: no circuit",
                **pending.outputs,
            )
        return pending

    def _run_pqid_bench(self, item: Item) -> _Pending:
        """Run an item's code under the PQID-Bench contract: strict run, then recovery run."""
        started = time.monotonic()
        choice = pqid_bench.select_code(item.generated_code, item.content)
        common: dict[str, Any] = {"prompt_id": item.prompt_id, "environment": self.environment}
        pending = _Pending(item=item, started=started, common=common, choice=choice)
        if choice.empty:
            self._finish_pqid(pending, pqid_bench.empty_verdict(), pqid_bench.empty_verdict())
            return pending
        # Strict standalone (an empty context), then the target context.
        contexts: tuple[dict[str, Any], ...] = ({}, item.target_metadata)
        runs: list[_Run] = []
        killed = 0
        for context in contexts:
            if runs and self._recovery_is_strict(runs[0], killed):
                runs.append(runs[0])
                break
            widths = pqid_bench.register_widths(context)
            rules = {"contract": CONTRACT_PQID_BENCH, "registers": list(widths)}
            run = self._execute(choice.code, None, rules)
            killed += self._sweep([run.child_pid] if run.child_pid else [])
            if self.container:
                self._clear_scratch()
            runs.append(run)
        pending.run, pending.recovery = runs
        reused = runs[1] is runs[0]
        pending.timing.update(
            child_ms=runs[0].child_ms,
            snippet_ms=runs[0].exec_ms,
            recovery_child_ms=None if reused else runs[1].child_ms,
            recovery_snippet_ms=None if reused else runs[1].exec_ms,
            recovery_reused=reused,
        )
        strict = pending.run
        pending.outputs = {
            "stdout_excerpt": strict.stdout[:_EXCERPT],
            "stdout_truncated": strict.stdout_truncated or len(strict.stdout) > _EXCERPT,
            "stderr_excerpt": strict.stderr[-_EXCERPT:],
            "stderr_truncated": strict.stderr_truncated or len(strict.stderr) > _EXCERPT,
            "stray_processes_killed": killed,
        }
        if not any(run.execution_ok and run.circuit_names for run in runs):
            self._finish_pqid(
                pending,
                _pqid_verdict(runs[0], None, None, None),
                _pqid_verdict(runs[1], None, None, None),
            )
        return pending

    def _recovery_is_strict(self, strict: _Run, killed: int) -> bool:
        """Whether the recovery run would only repeat the strict run.

        Only on the executor's word, given before the code ran, that the code did not compile
        or is context-free; and only for a run that ended cleanly (its own success or its own
        exception), left no process behind, and took under a quarter of its time limit, so
        that neither a limit nor a stray process could have made a second run end otherwise.
        Any doubt: the recovery run goes ahead.
        """
        return (
            strict.same_in_any_context
            and not strict.timed_out
            and strict.error_type not in _NOT_REPEATABLE
            and killed == 0
            and strict.child_ms is not None
            and strict.child_ms < self.config.timeout_seconds * 250
        )

    def _finish_pqid(
        self, pending: _Pending, strict: dict[str, Any], recovery: dict[str, Any] | None
    ) -> None:
        """The evaluation of an item under the PQID-Bench contract, from its two runs."""
        assert pending.choice is not None
        project, own = pqid_bench.evaluation_fields(strict, recovery, pending.choice)
        pending.finish(**project, **pending.outputs, **self._contract_fields(own))

    def _judge_pqid(
        self, pending: _Pending, structure: dict[str, Any] | None, final: dict[str, Any]
    ) -> None:
        """Finish a PQID-Bench item from the grader's verdicts on its two runs."""
        assert pending.recovery is not None
        structures = (structure or {}).get("runs")
        finals = final.get("runs")
        error = final.get("error")
        verdicts = []
        for index, run in enumerate((pending.run, pending.recovery)):
            run_structure = structures[index] if isinstance(structures, list) else None
            run_final = finals[index] if isinstance(finals, list) else None
            if structure is None:
                run_structure = {"loaded": False, "load_error": error or "no verdict"}
                run_structure["grading_failed"] = True
            verdicts.append(_pqid_verdict(run, run_structure, run_final, error))
        self._finish_pqid(pending, verdicts[0], verdicts[1])

    def _judge(
        self, pending: _Pending, structure: dict[str, Any] | None, final: dict[str, Any]
    ) -> None:
        """Finish an item's evaluation from the grader's verdict."""
        if pending.recovery is not None:
            self._judge_pqid(pending, structure, final)
            return
        outputs = pending.outputs
        if structure is None or not structure.get("loaded"):
            why = (structure or {}).get("load_error") or final.get("error") or "unknown"
            pending.finish(
                category="execution_error",
                execution_ok=True,
                circuit_found=True,
                error=short_error("CircuitLoadError", str(why)),
                equivalence_reason="not checked: circuit not loaded",
                **outputs,
            )
            return
        width = bool(structure.get("width_match"))
        types = bool(structure.get("gate_types_match"))
        counts = bool(structure.get("gate_counts_match"))
        category = categorize(
            has_code=True,
            compiled=True,
            timed_out=False,
            execution_ok=True,
            circuit_found=True,
            width_match=width,
            gate_types_match=types,
            gate_counts_match=counts,
        )
        equivalent = final.get("equivalent")
        reason = final.get("equivalence_reason")
        if "error" in final:
            reason = f"not checked: {final['error']}"
        pending.finish(
            category=category,
            execution_ok=True,
            circuit_found=True,
            width_match=width,
            gate_types_match=types,
            gate_counts_match=counts,
            qasm3_ok=bool(final.get("qasm3_ok")),
            qasm3_error=final.get("qasm3_error"),
            equivalent=equivalent if isinstance(equivalent, bool) else None,
            equivalence_reason=str(reason or "not checked"),
            error=None,
            structure={
                "expected": structure.get("expected"),
                "found": structure.get("found"),
                "differences": structure.get("differences", []),
            },
            **outputs,
        )


def _interpret(header: dict[str, Any], payload: bytes) -> _Run:
    """Turn the executor's reply into the facts categories are decided from."""
    stdout = str(header.get("stdout", ""))
    stderr = str(header.get("stderr_tail", ""))
    child_pid = header.get("child_pid")
    run = _Run(
        stdout=stdout,
        stdout_truncated=_count(header.get("stdout_total")) > len(stdout.encode()),
        stderr=stderr,
        stderr_truncated=_count(header.get("stderr_total")) > len(stderr.encode()),
        child_pid=child_pid if isinstance(child_pid, int) else None,
        child_ms=_milliseconds(header.get("wall_ms")),
        same_in_any_context=header.get("same_in_any_context") is True,
    )
    if header.get("executor_error"):
        run.error = short_error("EvaluatorError", str(header["executor_error"]))
        run.error_type = "EvaluatorError"
        return run
    if header.get("timed_out"):
        run.timed_out = True
        run.error = "Timeout: the snippet ran past its time limit and was killed"
        run.error_type = "Timeout"
        return run
    status = header.get("status")
    signum = header.get("signal")
    if not isinstance(status, dict):
        if signum == signal.SIGXCPU:
            run.timed_out = True
            run.error = "Timeout: the snippet used up its CPU time limit"
            run.error_type = "Timeout"
        elif isinstance(signum, int):
            run.error = f"Killed: the snippet process was ended by {_signal_name(signum)}"
            run.error_type = "Killed"
        elif header.get("result_error"):
            run.error = short_error("EvaluatorError", str(header["result_error"]))
            run.error_type = "EvaluatorError"
        else:
            run.error = (
                f"SnippetExit: the snippet process exited with status {header.get('exit_code')}"
                " before reporting a result"
            )
            run.error_type = "SnippetExit"
        return run
    run.exec_ms = _milliseconds(status.get("exec_ms"))
    run.circuit_source = (
        status.get("circuit_source") if isinstance(status.get("circuit_source"), str) else None
    )
    error_type = status.get("error_type")
    if error_type:
        message = short_error(str(error_type), str(status.get("error") or ""))
        run.error_type = str(error_type)[:100]
        if status.get("phase") == "compile":
            run.compiled = False
        elif status.get("phase") == "setup":
            message = short_error("EvaluatorError", f"snippet setup failed: {message}")
            run.error_type = "EvaluatorError"
        run.error = message
        return run
    if header.get("result_error"):
        run.error = short_error("EvaluatorError", str(header["result_error"]))
        run.error_type = "EvaluatorError"
        return run
    run.execution_ok = True
    names = status.get("circuits")
    if isinstance(names, list):
        run.circuit_names = [str(name) for name in names]
    if payload:
        run.qpy = payload
    else:
        run.error = short_error("NoCircuit", str(status.get("note") or "no QuantumCircuit found"))
    return run


def _pqid_verdict(
    run: _Run,
    structure: dict[str, Any] | None,
    final: dict[str, Any] | None,
    final_error: object,
) -> dict[str, Any]:
    """One PQID-Bench run's verdict from the executor's report and the grader's stages."""
    if not run.execution_ok:
        return pqid_bench.run_verdict(
            execution_success=False,
            execution_error_type=run.error_type or "EvaluatorError",
            error=run.error,
            timed_out=run.timed_out,
        )
    return pqid_bench.run_verdict(
        execution_success=True,
        execution_error_type=None,
        error=None if run.circuit_names else run.error,
        names=run.circuit_names,
        structure=structure,
        final=final,
        final_error=str(final_error) if final_error else None,
    )


def _count(value: object) -> int:
    """A byte count from the executor's reply (0 when missing or malformed)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _milliseconds(value: object) -> float | None:
    """A duration from a worker's reply (None when missing or malformed)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0:
        return float(value)
    return None


def _signal_name(signum: int) -> str:
    """A signal's conventional name."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def serve(
    stdin: IO[str], stdout: IO[str], *, container: bool, started_at: float | None = None
) -> int:
    """Run one job from stdin to stdout; returns the exit status.

    `started_at` is when the process started (wall clock), for the start-up timing.
    """
    started_at = time.time() if started_at is None else started_at
    processes.make_undumpable()
    # Orphans of a snippet then land under this process, where the sweep can find them.
    processes.become_subreaper()

    def terminate(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    if container:
        # As the container's init, a signal without a handler is never delivered from inside
        # the container: a snippet (same uid) sending SIGTERM or SIGINT to PID 1 would
        # otherwise end the whole evaluation. The engine stops the container with SIGKILL.
        signal.signal(signal.SIGINT, signal.SIG_DFL)
    else:
        signal.signal(signal.SIGTERM, terminate)
    try:
        config, items = read_job(stdin)
    except ProtocolError as exc:
        stdout.write(json.dumps({"type": "fatal", "message": str(exc)}) + "\n")
        stdout.flush()
        return 2
    except UnicodeDecodeError as exc:
        stdout.write(json.dumps({"type": "fatal", "message": f"input is not UTF-8: {exc}"}) + "\n")
        stdout.flush()
        return 2
    supervisor = Supervisor(config, container=container, out=stdout, started_at=started_at)
    try:
        supervisor.run(items)
    except BrokenPipeError:
        return 1
    finally:
        supervisor.close()
    return 0
