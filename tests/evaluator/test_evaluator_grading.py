"""Grading in-process: structure, equivalence with its reasons, QPY intake, discovery, schema."""

from __future__ import annotations

import io
from typing import Any

import pytest
from qiskit import QuantumCircuit, qpy
from qiskit.circuit import Parameter

from evaluator import discover
from evaluator.circuits import CircuitLoadError, load_circuit
from evaluator.grading import Grader, compare_structure, equivalence
from evaluator.metadata import circuit_metadata
from evaluator.schema import CATEGORIES, REQUIRED_FIELDS, categorize, make_evaluation

REFERENCE = """\
from qiskit import QuantumCircuit

def build_circuit():
    qc = QuantumCircuit(5, 5)
    qc.h(0)
    for i in range(4):
        qc.cx(i, i + 1)
    qc.barrier()
    qc.measure(range(5), range(5))
    return qc
"""


def ghz(n: int = 5, *, star: bool = False, measure: bool = True) -> QuantumCircuit:
    qc = QuantumCircuit(n, n if measure else 0)
    qc.h(0)
    for i in range(n - 1):
        qc.cx(0 if star else i, i + 1)
    if measure:
        qc.measure(range(n), range(n))
    return qc


def dump(circuit: QuantumCircuit) -> bytes:
    buffer = io.BytesIO()
    qpy.dump(circuit, buffer)
    return buffer.getvalue()


def target(**extra: Any) -> dict[str, Any]:
    return {
        "entrypoint": "build_circuit",
        "num_qubits": 5,
        "num_clbits": 5,
        "ops": {"h": 1, "cx": 4, "measure": 5, "barrier": 1},
        "depth": 7,
        "reference_code": REFERENCE,
        **extra,
    }


def grade(circuit: QuantumCircuit, meta: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    request = {"prompt_id": "ghz_05", "target_metadata": meta or target()}
    return list(Grader().grade(request, dump(circuit)))


def test_metadata_ignores_barriers_and_sorts_ops() -> None:
    qc = ghz(3)
    qc.barrier()
    assert circuit_metadata(qc) == {
        "num_qubits": 3,
        "num_clbits": 3,
        "ops": {"cx": 2, "h": 1, "measure": 3},
        "depth": 4,
    }


def test_matching_circuit_is_structurally_equal_and_equivalent() -> None:
    structure, final = grade(ghz())
    assert structure["loaded"] and structure["differences"] == []
    assert structure["width_match"] and structure["gate_types_match"]
    assert structure["gate_counts_match"]
    assert final == {
        "stage": "final",
        "qasm3_ok": True,
        "qasm3_error": None,
        "equivalent": True,
        "equivalence_reason": "operator",
    }


def test_differences_are_listed() -> None:
    qc = ghz()
    qc.cx(3, 4)
    qc.t(0)
    structure = compare_structure(
        {"num_qubits": 5, "ops": {"h": 1, "cx": 4, "measure": 5}},
        circuit_metadata(qc),
    )
    assert structure["width_match"] and not structure["gate_types_match"]
    assert not structure["gate_counts_match"]
    assert structure["differences"] == ["cx: expected 4, found 5", "t: expected 0, found 1"]


def test_same_structure_but_different_operator_is_not_equivalent() -> None:
    structure, final = grade(ghz(star=True))
    assert structure["gate_counts_match"]
    assert final["equivalent"] is False and final["equivalence_reason"] == "operator"


def test_state_mode_accepts_a_different_circuit_preparing_the_same_state() -> None:
    _, final = grade(ghz(star=True), target(equivalence="state"))
    assert final["equivalent"] is True
    assert final["equivalence_reason"].startswith("statevector")


def test_global_phase_and_final_measurements_are_ignored() -> None:
    qc = ghz(measure=False)
    qc.global_phase = 1.234
    assert equivalence(qc, ghz()) == (True, "operator")


@pytest.mark.parametrize(
    ("build", "reason"),
    [
        (lambda: ghz(4), "not checked: widths differ (found 4, reference 5)"),
        (lambda: _mid_measure(), "not checked: candidate has mid-circuit measurement"),
        (lambda: _with_reset(), "not checked: candidate has reset"),
        (lambda: _unbound(), "not checked: candidate has unbound parameters"),
    ],
)
def test_equivalence_not_checked_has_a_reason(build: Any, reason: str) -> None:
    assert equivalence(build(), ghz()) == (None, reason)


def _mid_measure() -> QuantumCircuit:
    qc = ghz()
    qc.h(0)
    return qc


def _with_reset() -> QuantumCircuit:
    qc = ghz(measure=False)
    qc.reset(0)
    return qc


def _unbound() -> QuantumCircuit:
    qc = ghz(measure=False)
    qc.rz(Parameter("theta"), 0)
    return qc


def test_larger_circuits_use_statevector_then_give_up() -> None:
    assert equivalence(ghz(10), ghz(10), operator_max_qubits=8) == (
        True,
        "statevector from |0...0>",
    )
    assert equivalence(ghz(10), ghz(10), operator_max_qubits=8, statevector_max_qubits=9) == (
        None,
        "not checked: too large (10 qubits)",
    )


def test_reference_is_cached_per_prompt() -> None:
    grader = Grader()
    first = grader.reference("ghz_05", target())
    assert isinstance(first, QuantumCircuit)
    assert grader.reference("ghz_05", target()) is first


def test_broken_reference_gives_a_reason_not_a_crash() -> None:
    stages = grade(ghz(), target(reference_code="raise RuntimeError('nope')"))
    assert stages[-1]["equivalent"] is None
    assert "RuntimeError: nope" in stages[-1]["equivalence_reason"]


def test_expected_structure_falls_back_to_the_reference() -> None:
    structure, _ = grade(ghz(), {"entrypoint": "build_circuit", "reference_code": REFERENCE})
    assert structure["expected"]["ops"] == {"cx": 4, "h": 1, "measure": 5}
    assert structure["gate_counts_match"]


def test_qpy_of_another_version_or_garbage_is_refused() -> None:
    data = bytearray(dump(ghz()))
    data[6] -= 1
    with pytest.raises(CircuitLoadError):
        load_circuit(bytes(data))
    with pytest.raises(CircuitLoadError):
        load_circuit(b"not qpy at all")
    stages = list(Grader().grade({"prompt_id": "x", "target_metadata": target()}, b"junk"))
    assert stages == [
        {
            "stage": "structure",
            "loaded": False,
            "load_error": "CircuitLoadError: not a QPY payload of the expected version",
        }
    ]


def test_discovery_prefers_the_entrypoint_then_the_last_assigned_circuit() -> None:
    source = "a = 1\nqc = 'x'\nother = 2\nqc = 3\n"
    assert discover.assignment_order(source) == ["a", "other", "qc"]
    namespace: dict[str, Any] = {"qc": "C1", "other": "C2", "build": lambda: "C3"}
    is_c = lambda v: isinstance(v, str) and v.startswith("C")  # noqa: E731
    found = discover.find_circuit(namespace, "build", is_c, ["other", "qc"])
    assert (found.circuit, found.source) == ("C3", "entrypoint")
    found = discover.find_circuit(namespace, "missing", is_c, ["other", "qc"])
    assert (found.circuit, found.source, found.note) == (
        "C1",
        "module_level",
        "no function named missing",
    )


def test_categories_follow_the_documented_precedence() -> None:
    assert CATEGORIES[0] == "no_code" and CATEGORIES[-1] == "ok"
    flags = dict(
        has_code=True,
        compiled=True,
        timed_out=False,
        execution_ok=True,
        circuit_found=True,
        width_match=True,
        gate_types_match=True,
        gate_counts_match=True,
        clbits_match=True,
    )
    assert categorize(**flags) == "ok"
    order = [
        "gate_counts_match",
        "gate_types_match",
        "clbits_match",  # clbit_mismatch: only the PQID-Bench contract asks
        "width_match",
        "circuit_found",
        "execution_ok",
        "timed_out",
        "compiled",
        "has_code",
    ]
    for name in order:
        flags[name] = name == "timed_out"
        expected = CATEGORIES[len(CATEGORIES) - 2 - order.index(name)]
        assert categorize(**flags) == expected


def test_evaluation_has_every_required_field() -> None:
    line = make_evaluation(
        prompt_id="p",
        category="ok",
        execution_ok=True,
        circuit_found=True,
        width_match=True,
        gate_types_match=True,
        gate_counts_match=True,
    )
    assert set(REQUIRED_FIELDS) <= set(line)
    assert line["structural_match"] is True
    with pytest.raises(ValueError):
        make_evaluation(prompt_id="p", category="great", execution_ok=True, circuit_found=True)
