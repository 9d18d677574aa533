"""End to end through ``python -m evaluator serve``: categories, protocol, hostile snippets.

One supervisor run scores a whole batch of crafted responses (as replay would), so the
interpreters start once; the tests then look at the evaluation each response got.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from evaluator.supervisor import _MAX_IN_PROGRESS

ROOT = Path(__file__).resolve().parents[2]

# Built at run time and passed only through a pipe: no file on disk ever contains it, so a
# snippet that finds it must have read the supervisor's or the grader's memory or pipes.
MARKER = f"pqid-secret-{uuid.uuid4().hex}"
MARKER_PREFIX = "pqid-secret-"

REFERENCE = f"""\
# {MARKER}
from qiskit import QuantumCircuit

def build_circuit():
    qc = QuantumCircuit(5, 5)
    qc.h(0)
    for i in range(4):
        qc.cx(i, i + 1)
    qc.measure(range(5), range(5))
    return qc
"""

GHZ_BODY = """\
from qiskit import QuantumCircuit

def build_circuit():
    qc = QuantumCircuit(5, 5)
    qc.h(0)
    for i in range(4):
        qc.cx(i, i + 1)
    qc.measure(range(5), range(5))
    return qc
"""

TARGET = {
    "family": "ghz",
    "entrypoint": "build_circuit",
    "num_qubits": 5,
    "num_clbits": 5,
    "ops": {"h": 1, "cx": 4, "measure": 5},
    "depth": 6,
    "reference_code": REFERENCE,
}


# Slow to grade (two 8-qubit operators of 1,000 gates each), so that the snippet after it runs
# while the grader is still busy with it.
SLOW_BODY = """\
from qiskit import QuantumCircuit

def build_circuit():
    qc = QuantumCircuit(8)
    qc.h(range(8))
    for i in range(992):
        qc.cx(i % 8, (i + 1) % 8)
    return qc
"""

SLOW_TARGET = {
    "family": "slow",
    "entrypoint": "build_circuit",
    "num_qubits": 8,
    "num_clbits": 0,
    "ops": {"h": 8, "cx": 992},
    "reference_code": SLOW_BODY,
}


def signal_grader(signum: str) -> str:
    """A snippet that signals the grader (found by its command line) and then answers well."""
    return ghz_with(f"""\
        import os, signal
        for pid in filter(str.isdigit, os.listdir('/proc')):
            try:
                with open(f'/proc/{{pid}}/cmdline', 'rb') as fh:
                    if b'evaluator.grader' in fh.read():
                        os.kill(int(pid), signal.{signum})
                        print('SIGNALLED', pid)
            except OSError:
                pass
        """)


def fenced(code: str) -> str:
    return f"Here is the circuit you asked for:\n\n```python\n{textwrap.dedent(code)}```\n"


def ghz_with(prefix: str) -> str:
    """A correct GHZ answer that does something else first."""
    return textwrap.dedent(prefix) + "\n" + GHZ_BODY


SEARCH = f"""\
import gc, os, re, sys, time
hits = []
secret = re.compile({MARKER_PREFIX!r} + '[0-9a-f]{{32}}')
def look(where, value):
    if isinstance(value, bytes):
        value = value.decode('latin-1')
    if isinstance(value, str) and secret.search(value):
        hits.append(where + ':' + secret.search(value).group())
for obj in gc.get_objects():
    try:
        if isinstance(obj, dict):
            for k, v in obj.items():
                look('gc', k)
                look('gc', v)
        elif isinstance(obj, (list, tuple, set, frozenset)):
            for v in obj:
                look('gc', v)
        else:
            look('gc', obj)
    except Exception:
        pass
for k, v in os.environ.items():
    look('env', k + '=' + v)
for pid in os.listdir('/proc'):
    if not pid.isdigit():
        continue
    for name in ('environ', 'cmdline'):
        try:
            with open(f'/proc/{{pid}}/{{name}}', 'rb') as fh:
                look(f'proc:{{pid}}:{{name}}', fh.read())
        except OSError:
            pass
    if PEEK_MEMORY and pid != str(os.getpid()):
        try:
            with open(f'/proc/{{pid}}/maps') as maps:
                regions = [line.split()[0] for line in maps if ' rw' in line]
            with open(f'/proc/{{pid}}/mem', 'rb', buffering=0) as mem:
                for region in regions[:400]:
                    lo, hi = (int(x, 16) for x in region.split('-'))
                    try:
                        mem.seek(lo)
                        look(f'mem:{{pid}}', mem.read(min(hi - lo, 1 << 26)))
                    except OSError:
                        pass
                print('READ MEMORY OF', pid)
        except OSError:
            pass
stop = time.monotonic() + 1.5
for top in ('/tmp', os.getcwd(), os.path.expanduser('~')):
    for base, dirs, files in os.walk(top):
        dirs[:] = [d for d in dirs if d not in ('venv', 'site-packages', '.git')]
        for name in files:
            if time.monotonic() > stop:
                break
            try:
                path = os.path.join(base, name)
                if os.path.getsize(path) < 4_000_000:
                    with open(path, 'rb') as fh:
                        look('file:' + path, fh.read())
            except OSError:
                pass
print('HITS=%d' % len(hits))
print(hits)
"""


def item(
    prompt_id: str,
    content: str | None = None,
    *,
    code: str | None = None,
    target: dict[str, Any] | None = None,
) -> dict[str, Any]:
    return {
        "type": "item",
        "prompt_id": prompt_id,
        "content": content,
        "generated_code": code,
        "target_metadata": target or TARGET,
    }


def run_job(
    lines: list[dict[str, Any] | str], *, timeout: float = 150
) -> tuple[list[dict[str, Any]], subprocess.CompletedProcess[str]]:
    """Feed a job to a fresh supervisor and parse its stdout."""
    payload = "".join((ln if isinstance(ln, str) else json.dumps(ln)) + "\n" for ln in lines)
    command = [sys.executable, "-m", "evaluator", "serve"]
    proc = subprocess.run(
        command,
        input=payload,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(ROOT)},
        start_new_session=True,
        cwd="/tmp",
    )
    messages = [json.loads(line) for line in proc.stdout.splitlines()]
    return messages, proc


CASES: dict[str, dict[str, Any]] = {
    "ok": item("ok", fenced(GHZ_BODY)),
    "no_code": item("no_code", "I am sorry, I cannot write that circuit."),
    "syntax_error": item("syntax_error", fenced("def build_circuit(:\n    pass\n")),
    "timeout": item("timeout", fenced("while True:\n    pass\n")),
    "execution_error": item("execution_error", fenced("raise ValueError('bad input')\n")),
    "no_circuit": item("no_circuit", fenced("x = 1\nprint('hello')\n")),
    "width": item(
        "width",
        fenced(
            GHZ_BODY.replace("(5, 5)", "(4, 4)")
            .replace("range(5)", "range(4)")
            .replace("range(4):", "range(3):")
        ),
    ),
    "gate_type": item("gate_type", fenced(GHZ_BODY.replace("qc.cx(", "qc.cz("))),
    "gate_count": item("gate_count", fenced(GHZ_BODY.replace("range(4):", "range(3):"))),
    "module_level": item(
        "module_level",
        fenced(
            "from qiskit import QuantumCircuit\n"
            "scratch = QuantumCircuit(2)\n"
            "qc = QuantumCircuit(5, 5)\nqc.h(0)\n"
            "for i in range(4):\n    qc.cx(i, i + 1)\n"
            "qc.measure(range(5), range(5))\n"
        ),
    ),
    "provided": item("provided", "this prose is ignored", code=GHZ_BODY),
    "star": item("star", fenced(GHZ_BODY.replace("qc.cx(i, i + 1)", "qc.cx(0, i + 1)"))),
    "main_block": item(
        "main_block",
        fenced(GHZ_BODY + "\nif __name__ == '__main__':\n    raise SystemExit('demo ran')\n"),
    ),
    # Replaces the scoring primitives in its own process, then returns a 2-qubit circuit.
    "monkeypatch": item(
        "monkeypatch",
        fenced("""\
        from qiskit import QuantumCircuit
        from qiskit.quantum_info import Operator
        QuantumCircuit.count_ops = lambda self: {'h': 1, 'cx': 4, 'measure': 5}
        QuantumCircuit.num_qubits = property(lambda self: 5)
        QuantumCircuit.depth = lambda self, *a, **k: 6
        Operator.equiv = lambda self, other, **k: True
        class Always:
            def __eq__(self, other):
                return True
        def build_circuit():
            qc = QuantumCircuit(2)
            qc.h(0)
            return qc
        """),
    ),
    # Prints a line that looks like a perfect protocol answer, then leaves without a result.
    "fake_success": item(
        "fake_success",
        fenced("""\
        import json, os, sys
        fake = {"category": "ok", "execution_ok": True, "structural_match": True,
                "equivalent": True}
        print(json.dumps({"type": "evaluation", "evaluation": fake}))
        sys.stdout.flush()
        os._exit(0)
        """),
    ),
    "kill_parent": item(
        "kill_parent",
        fenced("""\
        import os, time
        os.kill(os.getppid(), 9)
        time.sleep(30)
        """),
    ),
    "after_kill": item("after_kill", fenced(GHZ_BODY)),
    "memory_bomb": item(
        "memory_bomb",
        fenced("""\
        blocks = []
        while True:
            blocks.append(bytearray(64 * 1024 * 1024))
        """),
    ),
    "big_alloc": item("big_alloc", fenced("x = bytearray(64 * 1024 ** 3)\n")),
    "big_print": item(
        "big_print",
        fenced(
            ghz_with("""\
        import sys
        chunk = "x" * (1 << 20)
        for _ in range(200):
            sys.stdout.write(chunk)
        sys.stdout.flush()
        """)
        ),
    ),
    # Leaves a grandchild in a new session (escaping the process group) and reports its pid.
    "escape": item(
        "escape",
        fenced(
            ghz_with("""\
        import os, time
        r, w = os.pipe()
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                os.write(w, str(os.getpid()).encode())
                time.sleep(120)
            os._exit(0)
        os.close(w)
        print('STRAY', os.read(r, 32).decode())
        """)
        ),
    ),
    "search": item("search", fenced(ghz_with(SEARCH.replace("PEEK_MEMORY", "False")))),
    "exit_zero": item("exit_zero", fenced(GHZ_BODY + "\nimport sys\nsys.exit(0)\n")),
    "exit_one": item("exit_one", fenced(GHZ_BODY + "\nimport sys\nsys.exit(1)\n")),
    "segfault": item("segfault", fenced("import ctypes\nctypes.string_at(0)\n")),
    # A fork that is never told to exit runs on into the evaluator's code; only one reports.
    "fork_fallthrough": item("fork_fallthrough", fenced(ghz_with("import os\nos.fork()\n"))),
    # Another response's snippet kills or stops the grader while it judges this one.
    # (Its snippet lingers, so that the grader has finished the items before it and takes
    # this circuit at once.)
    "slow_grade": item(
        "slow_grade", fenced("import time\ntime.sleep(1)\n" + SLOW_BODY), target=SLOW_TARGET
    ),
    "kill_grader": item("kill_grader", fenced(signal_grader("SIGKILL"))),
    "slow_grade_2": item("slow_grade_2", fenced(SLOW_BODY), target=SLOW_TARGET),
    "stop_grader": item("stop_grader", fenced(signal_grader("SIGSTOP"))),
    "last": item("last", fenced(GHZ_BODY)),
}


@pytest.fixture(scope="module")
def job() -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]], float]:
    config = {
        "type": "config",
        "timeout_seconds": 4,
        "memory_mb": 2048,
        "equivalence_max_qubits": 8,
    }
    started = time.monotonic()
    messages, proc = run_job([config, *CASES.values()])
    elapsed = time.monotonic() - started
    assert proc.returncode == 0, proc.stderr[-3000:]
    evaluations = {
        m["evaluation"]["prompt_id"]: m["evaluation"] for m in messages if m["type"] == "evaluation"
    }
    return messages, evaluations, elapsed


def test_protocol_order(job: Any) -> None:
    messages, evaluations, _ = job
    assert messages[0]["type"] == "hello"
    assert messages[0]["environment"]["qiskit"].startswith("2.")
    assert messages[-1] == {"type": "done", "count": len(CASES)}
    body = messages[1:-1]
    started = [m for m in body if m["type"] == "started"]
    finished = [m["evaluation"]["prompt_id"] for m in body if m["type"] == "evaluation"]
    assert len(started) + len(finished) == len(body)
    # Both in input order; an item starts before it finishes, and a bounded number (one with
    # the executor, the others waiting for or with the grader) are in progress at any moment.
    assert [m["prompt_id"] for m in started] == list(CASES) == finished
    assert [m["index"] for m in started] == list(range(len(CASES)))
    assert {m["total"] for m in started} == {len(CASES)}
    in_progress: set[str] = set()
    for message in body:
        if message["type"] == "started":
            in_progress.add(message["prompt_id"])
            assert len(in_progress) <= _MAX_IN_PROGRESS, in_progress
        else:
            in_progress.remove(message["evaluation"]["prompt_id"])
    assert len(evaluations) == len(CASES)


def test_each_evaluation_says_what_its_own_work_took(job: Any) -> None:
    messages = job[0]
    assert set(messages[0]["timing"]) == {
        "started_at",
        "workers_started_at",
        "ready_at",
        "executor",
        "grader",
    }
    assert messages[0]["timing"]["executor"]["qiskit_import_seconds"] > 0
    assert messages[0]["timing"]["grader"]["import_seconds"] > 0
    timing = {
        m["evaluation"]["prompt_id"]: m["timing"] for m in messages if m["type"] == "evaluation"
    }
    assert timing["ok"]["child_ms"] > 0 and timing["ok"]["snippet_ms"] > 0
    assert timing["ok"]["grade_ms"] > 0
    assert timing["no_code"] == {"child_ms": None, "snippet_ms": None, "grade_ms": None}
    assert timing["syntax_error"]["grade_ms"] is None
    for evaluation in job[1].values():
        assert "timing" not in evaluation


@pytest.mark.parametrize(
    ("prompt_id", "category"),
    [
        ("ok", "ok"),
        ("no_code", "no_code"),
        ("syntax_error", "syntax_error"),
        ("timeout", "timeout"),
        ("execution_error", "execution_error"),
        ("no_circuit", "no_circuit"),
        ("width", "width_mismatch"),
        ("gate_type", "gate_type_mismatch"),
        ("gate_count", "gate_count_mismatch"),
        ("module_level", "ok"),
        ("provided", "ok"),
        ("star", "ok"),
        ("main_block", "ok"),
        ("exit_zero", "ok"),
        ("fork_fallthrough", "ok"),
        ("exit_one", "execution_error"),
    ],
)
def test_each_category_is_produced(job: Any, prompt_id: str, category: str) -> None:
    evaluation = job[1][prompt_id]
    assert evaluation["category"] == category, evaluation


def test_ok_evaluation_in_full(job: Any) -> None:
    ev = job[1]["ok"]
    assert ev["execution_ok"] and ev["circuit_found"] and ev["structural_match"]
    assert ev["qasm3_ok"] is True and ev["equivalent"] is True
    assert ev["equivalence_reason"] == "operator" and ev["error"] is None
    assert ev["circuit_source"] == "entrypoint"
    assert ev["extraction"] == {"method": "fenced", "prose_removed": True, "fences": 1}
    assert ev["structure"]["found"] == {
        "num_qubits": 5,
        "num_clbits": 5,
        "depth": 6,
        "ops": {"cx": 4, "h": 1, "measure": 5},
    }
    assert ev["structure"]["differences"] == []
    assert ev["evaluator_version"] and ev["environment"]["python"]


def test_failure_details(job: Any) -> None:
    ev = job[1]
    assert ev["no_code"]["extraction"]["method"] == "none"
    assert ev["syntax_error"]["error"].startswith("SyntaxError")
    assert ev["execution_error"]["error"] == "ValueError: bad input"
    assert 'File "snippet.py", line 1' in ev["execution_error"]["stderr_excerpt"]
    assert ev["timeout"]["error"].startswith("Timeout")
    assert ev["no_circuit"]["error"].startswith("NoCircuit")
    assert ev["no_circuit"]["stdout_excerpt"] == "hello\n"
    assert ev["width"]["equivalent"] is None
    assert "widths differ" in ev["width"]["equivalence_reason"]
    assert "num_qubits: expected 5, found 4" in ev["width"]["structure"]["differences"]
    assert ev["gate_count"]["structure"]["differences"] == ["cx: expected 4, found 3"]
    assert ev["gate_type"]["equivalent"] is False


def test_module_level_fallback_is_recorded(job: Any) -> None:
    assert job[1]["module_level"]["circuit_source"] == "module_level"
    assert job[1]["provided"]["extraction"]["method"] == "provided"


def test_equivalence_false_beside_a_structural_ok(job: Any) -> None:
    star = job[1]["star"]
    assert star["structural_match"] and star["equivalent"] is False


def test_monkeypatching_inside_the_snippet_does_not_change_the_score(job: Any) -> None:
    ev = job[1]["monkeypatch"]
    assert ev["category"] == "width_mismatch"
    assert ev["structure"]["found"]["num_qubits"] == 2
    assert ev["structure"]["found"]["ops"] == {"h": 1}
    assert ev["equivalent"] is None


def test_printed_fake_success_is_not_scored_ok(job: Any) -> None:
    messages, evaluations, _ = job
    ev = evaluations["fake_success"]
    assert ev["category"] == "execution_error" and not ev["execution_ok"]
    assert ev["error"].startswith("SnippetExit")
    # The fake line reached only the captured output, never the protocol stream.
    assert sum(m["type"] == "evaluation" for m in messages) == len(CASES)


def test_killing_the_executor_is_contained(job: Any) -> None:
    ev = job[1]
    assert ev["kill_parent"]["category"] == "execution_error"
    assert "executor died" in ev["kill_parent"]["error"]
    assert ev["after_kill"]["category"] == "ok"
    assert ev["last"]["category"] == "ok"


def test_memory_exhaustion_is_contained(job: Any) -> None:
    for prompt_id in ("memory_bomb", "big_alloc"):
        ev = job[1][prompt_id]
        assert ev["category"] == "execution_error", ev
        assert ev["error"].startswith("MemoryError"), ev


def test_huge_output_is_capped(job: Any) -> None:
    ev = job[1]["big_print"]
    assert ev["category"] == "ok"
    assert ev["stdout_truncated"] is True
    assert len(ev["stdout_excerpt"]) <= 400


def test_escaped_grandchild_is_killed(job: Any) -> None:
    ev = job[1]["escape"]
    assert ev["category"] == "ok"
    assert ev["stray_processes_killed"] >= 1
    pid = int(ev["stdout_excerpt"].split()[1])
    time.sleep(0.1)
    assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text()


def test_searching_for_the_reference_finds_nothing(job: Any) -> None:
    ev = job[1]["search"]
    assert ev["category"] == "ok"
    assert ev["stdout_excerpt"].startswith("HITS=0"), ev["stdout_excerpt"]
    for evaluation in job[1].values():
        assert MARKER not in json.dumps(evaluation)


def test_a_snippet_disturbing_the_grader_does_not_change_another_score(job: Any) -> None:
    messages, evaluations, _ = job
    timing = {
        m["evaluation"]["prompt_id"]: m["timing"] for m in messages if m["type"] == "evaluation"
    }
    for prompt_id in ("slow_grade", "slow_grade_2", "kill_grader", "stop_grader"):
        ev = evaluations[prompt_id]
        assert ev["category"] == "ok" and ev["equivalent"] is True, ev
    assert evaluations["kill_grader"]["stdout_excerpt"].startswith("SIGNALLED")
    assert evaluations["stop_grader"]["stdout_excerpt"].startswith("SIGNALLED")
    # Killed while grading it: judged again, alone, by a fresh grader; every verdict is the
    # one on its own circuit (the replacement's answers are never taken for the earlier ones).
    assert timing["slow_grade"].get("regraded") is True
    assert evaluations["slow_grade"]["structure"]["found"]["num_qubits"] == 8
    assert evaluations["slow_grade_2"]["structure"]["found"]["num_qubits"] == 8
    for prompt_id in ("kill_grader", "stop_grader"):
        assert evaluations[prompt_id]["structure"]["found"]["num_qubits"] == 5
    # Stopped, then continued by the sweep: the first grade stands.
    assert not timing["slow_grade_2"].get("regraded")


def test_segfault_is_contained(job: Any) -> None:
    ev = job[1]["segfault"]
    assert ev["category"] == "execution_error"
    assert "SIGSEGV" in ev["error"]


def test_whole_job_time(job: Any) -> None:
    # One 4 s timeout and one executor restart dominate; everything else is quick.
    assert job[2] < 40


@pytest.mark.parametrize(
    "line",
    [
        "not json",
        '{"type": "item"}',
        '{"type": "mystery"}',
        "[1, 2]",
        '{"type": "config", "timeout_seconds": "soon"}',
        '{"type": "item", "prompt_id": "p", "content": null, "target_metadata": []}',
    ],
)
def test_malformed_input_is_fatal(line: str) -> None:
    messages, proc = run_job([line], timeout=30)
    assert proc.returncode == 2
    assert len(messages) == 1 and messages[0]["type"] == "fatal" and messages[0]["message"]


def test_config_after_items_is_fatal() -> None:
    messages, proc = run_job([item("a", "x = 1"), {"type": "config"}], timeout=30)
    assert proc.returncode == 2 and messages[0]["type"] == "fatal"


def test_empty_job() -> None:
    messages, proc = run_job([], timeout=60)
    assert proc.returncode == 0
    assert [m["type"] for m in messages] == ["hello", "done"]
