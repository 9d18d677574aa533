"""The PQID-Bench recovery run is skipped only when it provably repeats the strict run.

Rule pinned: `pqid_bench.context_free` (which code can never see the recovery context) and the
supervisor's reuse of the strict run's circuits under the recovery selection rule, with the
executor's word given before the code ran.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from evaluator.contracts import CONTRACT_PQID_BENCH
from evaluator.contracts.pqid_bench import context_free

ROOT = Path(__file__).resolve().parents[2]

# code -> whether it is context-free
CASES = [
    ("qc = QuantumCircuit(qr, cr)\nqc.h(0)", False),
    ("qr = QuantumRegister(3)\nqc = QuantumCircuit(qr)", True),
    ("for q in range(3):\n  pass\nqc = QuantumCircuit(q)", False),
    ("qc = QuantumCircuit(3)\nfor q in range(3):\n  qc.h(q)\n", True),
    ("def f():\n  return QuantumCircuit(qr)\nqr = 1\nqc = f()", False),
    ("[q for q in range(3)]\nqc = QuantumCircuit(q)", False),
    ("def f(q):\n  return q\n", True),
    ("qc = QuantumCircuit(4)\nqc.h(q[0])", False),
    ("q += 1", False),
    ("(lambda: 0).__globals__", False),
    ("'{0.__globals__}'.format(f)", False),
    ("'{0.x}'.format(f)", False),
    ("'{}{a}'.format(1, a=2)", True),
    ("s.format(1)", False),
    ("if x:\n  qr = QuantumRegister(2)\nqc = QuantumCircuit(qr)", False),
    ("def f():\n  for q in range(3):\n    pass\n  return q\n", True),
    ("def f():\n  x = [q for q in range(3)]\n  return q\n", False),
    ("qr = QuantumRegister(qr.size)", False),
    ("x = lambda: theta\ntheta = 1\nx()", False),
    ("theta = Parameter('t')\nx = lambda: theta", True),
    ("def f(a=qr): pass\nqr = 1", False),
    ("del q\nq", False),
    ("import numpy as q\nq.pi", True),
    ("class A: pass", False),
    ("def f():\n  global q\n  q = 1", False),
    ("[(q := 1) for _ in range(2)]", False),
    ("g = globals()", False),
    ("e = np.__dict__", False),
    ("from qiskit.circuit import quantumcircuit as m\nm.inspect", False),
    ("from qiskit.circuit.quantumcircuit import inspect", False),
    ("@dec(qr)\ndef f(): pass", False),
    ("def f():\n  def g():\n    return q\n  q = 2\n  return g", True),
    ("def f():\n  def g():\n    return q\n  return g", False),
    ("try:\n  qr = 1\nexcept E:\n  pass\nqr", False),
    ("x = [q for q in qr]", False),
    ("x = [c for q in range(3) for c in range(q)]", True),
    ("x = [c for q in range(3) for c in q2 if qr]", False),
    ("qc = QuantumCircuit(2,\n", False),
]


@pytest.mark.parametrize(("code", "free"), CASES)
def test_context_free_rule(code: str, free: bool) -> None:
    assert context_free(code) is free


TWO = "zz = QuantumCircuit(3)\nzz.h(0)\naa = QuantumCircuit(2)\naa.h(0)\n"
THREE = {"num_qubits": 3, "num_clbits": 0, "gate_count": 1, "gate_types": {"h": 1}}
ITEMS: dict[str, tuple[str, dict[str, Any]]] = {
    # The strict run picks `aa` (first by name), the recovery rule `zz` (3 qubits).
    "free_two_circuits": (TWO, THREE),
    # The same circuits, made not context-free by reading a preloaded parameter.
    "read_two_circuits": (TWO + "unused = theta\n", THREE),
    "registers": ("qc = QuantumCircuit(qr)\nqc.h(0)\n", THREE),
    "syntax": ("qc = QuantumCircuit(2,\n", THREE),
    "escape": ('b = QuantumCircuit.__init__.__globals__["__builtins__"]\n' + TWO, THREE),
}


@pytest.fixture(scope="module")
def served() -> dict[str, dict[str, Any]]:
    lines: list[dict[str, Any]] = [{"type": "config", "contract": CONTRACT_PQID_BENCH}]
    for prompt_id, (code, target) in ITEMS.items():
        lines.append(
            {
                "type": "item",
                "prompt_id": prompt_id,
                "content": None,
                "generated_code": code,
                "target_metadata": target,
            }
        )
    proc = subprocess.run(
        [sys.executable, "-m", "evaluator", "serve"],
        input="".join(json.dumps(line) + "\n" for line in lines),
        capture_output=True,
        text=True,
        timeout=300,
        cwd="/tmp",
        start_new_session=True,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    messages = [json.loads(line) for line in proc.stdout.splitlines()]
    return {m["evaluation"]["prompt_id"]: m for m in messages if m["type"] == "evaluation"}


def _reused(message: dict[str, Any]) -> bool:
    return bool(message["timing"].get("recovery_reused"))


def test_context_free_code_runs_once_and_recovery_chooses_again(
    served: dict[str, dict[str, Any]],
) -> None:
    free = served["free_two_circuits"]
    assert _reused(free) and free["timing"]["recovery_child_ms"] is None
    evaluation = free["evaluation"]
    assert evaluation["selected_circuit_name"] == "aa"
    recovery = evaluation["target_context_recovery"]
    assert recovery["selected_circuit_name"] == "zz"
    assert recovery["report_signature_match"] is True


def test_reused_recovery_equals_a_real_second_run(served: dict[str, dict[str, Any]]) -> None:
    read = served["read_two_circuits"]
    assert not _reused(read) and read["timing"]["recovery_child_ms"] is not None
    assert (
        served["free_two_circuits"]["evaluation"]["target_context_recovery"]
        == read["evaluation"]["target_context_recovery"]
    )


def test_code_reading_the_context_runs_twice(served: dict[str, dict[str, Any]]) -> None:
    registers = served["registers"]
    assert not _reused(registers)
    assert registers["evaluation"]["num_qubits_match"] is False  # four wide
    assert registers["evaluation"]["target_context_recovery"]["num_qubits_match"] is True
    assert not _reused(served["escape"])


def test_code_that_does_not_compile_runs_once(served: dict[str, dict[str, Any]]) -> None:
    syntax = served["syntax"]
    assert _reused(syntax)
    recovery = syntax["evaluation"]["target_context_recovery"]
    assert recovery["execution_error_type"] == "SyntaxError"
    assert recovery["report_executable"] is False
