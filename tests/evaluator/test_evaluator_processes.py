"""Process hygiene and isolation rules of the evaluator, checked without a full job."""

from __future__ import annotations

import ast
import io
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from evaluator import wire
from evaluator.supervisor import Config, Supervisor, _parse_item

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "evaluator"


def _imported_roots(path: Path) -> set[str]:
    roots: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return roots


def test_evaluator_imports_only_the_standard_library_and_qiskit() -> None:
    allowed = set(sys.stdlib_module_names) | {"qiskit", "evaluator", "__future__"}
    for path in sorted(PACKAGE.glob("*.py")):
        assert _imported_roots(path) <= allowed, path.name


def test_supervisor_side_never_loads_qiskit() -> None:
    code = textwrap.dedent("""\
        import sys
        import evaluator.__main__, evaluator.supervisor, evaluator.extract, evaluator.schema
        import evaluator.metadata, evaluator.processes, evaluator.wire, evaluator.discover
        import evaluator.executor, evaluator.grader
        banned = {"qiskit", "numpy", "textual", "pydantic", "httpx", "docker", "engine",
                  "pqid_tui", "keyring", "platformdirs"}
        loaded = banned & {name.split(".")[0] for name in sys.modules}
        assert not loaded, loaded
        """)
    subprocess.run(
        [sys.executable, "-c", code],
        check=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


class _FakeExecutor:
    """Stands in for the executor process and records what it is sent."""

    pid = None

    def __init__(self) -> None:
        self.sent: list[Any] = []
        self._replies = [
            wire.encode_json(
                {
                    "status": {
                        "phase": "done",
                        "error_type": None,
                        "circuit_source": None,
                        "note": "nothing",
                    },
                    "stdout": "",
                    "stdout_total": 0,
                }
            ),
            b"",
        ]

    def ensure(self) -> None:
        pass

    def send(self, frames: list[bytes], deadline: float) -> None:
        self.sent.extend(json.loads(frame) for frame in frames)

    def read(self, deadline: float, limit: int) -> bytes:
        return self._replies.pop(0)

    def stop(self) -> None:
        pass


def test_the_executor_receives_no_target_metadata() -> None:
    supervisor = Supervisor(Config(), container=False, out=io.StringIO())
    fake = _FakeExecutor()
    supervisor.executor = fake  # type: ignore[assignment]
    target = {
        "entrypoint": "build_circuit",
        "reference_code": "SECRET",
        "ops": {"h": 1},
        "num_qubits": 1,
    }
    raw = {"type": "item", "prompt_id": "p", "content": "x = 1", "target_metadata": target}
    evaluation = supervisor.evaluate(_parse_item(raw, 1))
    assert evaluation["category"] == "no_circuit"
    (request,) = fake.sent
    assert set(request) == {"code", "entrypoint", "limits"}
    assert request["code"] == "x = 1\n" and request["entrypoint"] == "build_circuit"
    assert "SECRET" not in json.dumps(request)


SWEEP_SCRIPT = textwrap.dedent("""\
    import os, sys, time
    from evaluator import processes
    assert processes.become_subreaper()
    r, w = os.pipe()
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            os.write(w, str(os.getpid()).encode())
            time.sleep(60)
        os._exit(0)
    stray = int(os.read(r, 32))
    time.sleep(0.05)
    assert os.getpid() == processes.scan_processes()[stray].ppid  # adopted by the subreaper
    result = processes.sweep(keep=(), container=False)
    time.sleep(0.05)
    gone = stray not in processes.scan_processes()
    print(result.killed, result.converged, gone)
    """)


def test_host_sweep_kills_an_adopted_escapee_and_reaps_it() -> None:
    # In its own interpreter: a sweep from the test process would hit pytest's own helpers.
    out = subprocess.run(
        [sys.executable, "-c", SWEEP_SCRIPT],
        check=True,
        timeout=60,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    ).stdout
    assert out.split() == ["1", "True", "True"]


# A stray whose main thread has exited: /proc/<pid>/stat says zombie while a thread runs on.
HIDDEN_THREAD_SCRIPT = textwrap.dedent("""\
    import ctypes, os, sys, threading, time
    from evaluator import processes
    assert processes.become_subreaper()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.setsid()
        def beat():
            while True:
                os.write(w, b".")
                time.sleep(0.01)
        threading.Thread(target=beat).start()
        ctypes.CDLL(None).pthread_exit(None)
    os.close(w)
    os.read(r, 1)
    for _ in range(500):
        with open(f"/proc/{pid}/stat") as fh:
            if fh.read().rsplit(")", 1)[1].split()[0] == "Z":
                break
        time.sleep(0.01)
    else:
        sys.exit("the main thread did not exit")
    result = processes.sweep(keep=(), container=False)
    os.set_blocking(r, False)
    time.sleep(0.1)
    try:
        while os.read(r, 4096):
            pass
        still_beating = False
    except BlockingIOError:
        still_beating = True
    print(result.killed, result.converged, still_beating)
    """)


def test_host_sweep_kills_a_process_whose_main_thread_exited() -> None:
    out = subprocess.run(
        [sys.executable, "-c", HIDDEN_THREAD_SCRIPT],
        check=True,
        timeout=60,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    ).stdout
    assert out.split() == ["1", "True", "False"]


def test_frames_round_trip_and_refuse_oversize() -> None:
    read_end, write_end = os.pipe()
    try:
        wire.send_frames(write_end, [b"abc", b"", wire.encode_json({"k": "\ud800"})])
        reader = wire.FrameReader(read_end)
        assert reader.read() == b"abc"
        assert reader.read() == b""
        assert wire.decode_json(reader.read()) == {"k": "\ud800"}
        wire.send_frames(write_end, [b"x" * 100])
        with pytest.raises(wire.FrameTooLarge):
            reader.read(limit=10)
    finally:
        os.close(write_end)
    try:
        with pytest.raises(wire.PeerClosed):
            wire.FrameReader(read_end).read()
    finally:
        os.close(read_end)
    frames = wire.frame(b"a") + wire.frame(b"bc") + b"\x00\x00"
    assert wire.split_frames(frames, 10) == [b"a", b"bc"]


def test_an_internal_error_costs_one_item_and_keeps_the_order() -> None:
    from tests.evaluator.test_evaluator_serve import GHZ_BODY, TARGET

    out = io.StringIO()
    supervisor = Supervisor(Config(timeout_seconds=10), container=False, out=out)
    real = supervisor._run_snippet

    def broken(item: Any) -> Any:
        if item.prompt_id == "b":
            raise RuntimeError("a bug of ours")
        return real(item)

    supervisor._run_snippet = broken  # type: ignore[method-assign]
    items = [
        _parse_item({"prompt_id": pid, "generated_code": GHZ_BODY, "target_metadata": TARGET}, 1)
        for pid in ("a", "b", "c")
    ]
    try:
        supervisor.run(items)
    finally:
        supervisor.close()
    messages = [json.loads(line) for line in out.getvalue().splitlines()]
    evaluations = [m["evaluation"] for m in messages if m["type"] == "evaluation"]
    assert [e["prompt_id"] for e in evaluations] == ["a", "b", "c"]
    assert [e["category"] for e in evaluations] == ["ok", "execution_error", "ok"]
    assert "internal error" in evaluations[1]["error"]
