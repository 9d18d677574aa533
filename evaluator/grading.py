"""Grades a candidate circuit against its target: structure, QASM 3 export and equivalence.

Runs only in the grader process, where generated code never executed, so nothing here can
have been monkeypatched by a snippet.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from typing import Any

from qiskit import QuantumCircuit, qasm3
from qiskit.circuit import ControlFlowOp
from qiskit.quantum_info import Operator, Statevector

from evaluator import discover
from evaluator.circuits import load_circuit
from evaluator.contracts import CONTRACT_PQID_BENCH, pqid_bench
from evaluator.metadata import IGNORED_OPS, circuit_metadata
from evaluator.schema import short_error

__all__ = [
    "DEFAULT_OPERATOR_MAX_QUBITS",
    "DEFAULT_STATEVECTOR_MAX_QUBITS",
    "Grader",
    "compare_structure",
    "equivalence",
]

DEFAULT_OPERATOR_MAX_QUBITS = 8
DEFAULT_STATEVECTOR_MAX_QUBITS = 14
# Simulating a huge instruction list costs more than any answer to a prompt needs.
_MAX_EQUIVALENCE_OPS = 20000
_REFERENCE_MODULE_NAME = "__pqid_reference__"


def _expected(target: dict[str, Any], reference: dict[str, Any] | None) -> dict[str, Any]:
    """The structure the target asks for: declared values, else the reference circuit's."""
    expected: dict[str, Any] = {}
    for key in ("num_qubits", "num_clbits", "depth"):
        value = target.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            expected[key] = value
        elif reference is not None:
            expected[key] = reference[key]
        else:
            expected[key] = None
    ops = target.get("ops")
    if isinstance(ops, dict) and all(isinstance(v, int) for v in ops.values()):
        expected["ops"] = {str(k): int(v) for k, v in sorted(ops.items()) if k not in IGNORED_OPS}
    elif reference is not None:
        expected["ops"] = reference["ops"]
    else:
        expected["ops"] = None
    return expected


def compare_structure(expected: dict[str, Any], found: dict[str, Any]) -> dict[str, Any]:
    """Compare width, operation names and operation counts; list every difference."""
    differences: list[str] = []
    width_match = expected["num_qubits"] == found["num_qubits"]
    if expected["num_qubits"] is None:
        differences.append("num_qubits: no expected value")
    elif not width_match:
        differences.append(
            f"num_qubits: expected {expected['num_qubits']}, found {found['num_qubits']}"
        )
    want = expected["ops"]
    have: dict[str, int] = found["ops"]
    if want is None:
        differences.append("ops: no expected value")
        types_match = counts_match = False
    else:
        types_match = set(want) == set(have)
        counts_match = types_match and all(want[name] == have[name] for name in want)
        for name in sorted(set(want) | set(have)):
            if want.get(name, 0) != have.get(name, 0):
                differences.append(
                    f"{name}: expected {want.get(name, 0)}, found {have.get(name, 0)}"
                )
    return {
        "width_match": bool(width_match),
        "gate_types_match": bool(types_match),
        "gate_counts_match": bool(counts_match),
        "differences": differences,
    }


def qasm3_export(circuit: QuantumCircuit) -> tuple[bool, str | None]:
    """Whether the circuit exports to OpenQASM 3, and why not."""
    try:
        qasm3.dumps(circuit)
    except Exception as exc:
        return False, short_error(type(exc).__name__, str(exc))
    return True, None


def _unitary_part(circuit: QuantumCircuit) -> QuantumCircuit:
    """The circuit without final measurements and barriers, which equivalence ignores."""
    stripped = circuit.remove_final_measurements(inplace=False)
    assert stripped is not None  # inplace=False always returns the copy
    result = stripped.copy_empty_like()
    for instruction in stripped.data:
        if instruction.operation.name not in IGNORED_OPS:
            result.append(instruction)
    return result


def _why_not_unitary(circuit: QuantumCircuit) -> str | None:
    """Name what stops the circuit from being one unitary, if anything does."""
    for instruction in circuit.data:
        operation = instruction.operation
        if isinstance(operation, ControlFlowOp):
            return "control flow"
        if operation.name == "measure":
            return "mid-circuit measurement"
        if operation.name == "reset":
            return "reset"
    if circuit.parameters:
        return "unbound parameters"
    return None


def equivalence(
    candidate: QuantumCircuit,
    reference: QuantumCircuit,
    *,
    mode: str = "operator",
    operator_max_qubits: int = DEFAULT_OPERATOR_MAX_QUBITS,
    statevector_max_qubits: int = DEFAULT_STATEVECTOR_MAX_QUBITS,
) -> tuple[bool | None, str]:
    """Decide equivalence up to global phase; None with the reason when it is not checked."""
    if candidate.num_qubits != reference.num_qubits:
        return None, (
            f"not checked: widths differ (found {candidate.num_qubits}, "
            f"reference {reference.num_qubits})"
        )
    try:
        left = _unitary_part(candidate)
        right = _unitary_part(reference)
    except Exception as exc:
        return None, "not checked: " + short_error(type(exc).__name__, str(exc))
    for label, circuit in (("candidate", left), ("reference", right)):
        reason = _why_not_unitary(circuit)
        if reason is not None:
            return None, f"not checked: {label} has {reason}"
        if len(circuit.data) > _MAX_EQUIVALENCE_OPS:
            return None, f"not checked: {label} has more than {_MAX_EQUIVALENCE_OPS} operations"
    width = left.num_qubits
    try:
        if mode != "state" and width <= operator_max_qubits:
            return bool(Operator(left).equiv(Operator(right))), "operator"
        if width <= statevector_max_qubits:
            same = Statevector(left).equiv(Statevector(right))
            return bool(same), "statevector from |0...0>"
    except Exception as exc:
        return None, "not checked: " + short_error(type(exc).__name__, str(exc))
    return None, f"not checked: too large ({width} qubits)"


def build_reference(code: str, entrypoint: str | None) -> QuantumCircuit:
    """Run a target's trusted reference code and return its circuit."""
    namespace: dict[str, Any] = {"__name__": _REFERENCE_MODULE_NAME}
    exec(compile(code, "<reference>", "exec"), namespace)
    found = discover.find_circuit(
        namespace,
        entrypoint,
        lambda value: isinstance(value, QuantumCircuit),
        discover.assignment_order(code),
    )
    if not isinstance(found.circuit, QuantumCircuit):
        raise ValueError(found.note or "the reference code produced no circuit")
    return found.circuit


class Grader:
    """Grades candidates, caching each prompt's reference circuit."""

    def __init__(self) -> None:
        self._references: dict[tuple[str, str, str], QuantumCircuit | str] = {}

    def reference(self, prompt_id: str, target: dict[str, Any]) -> QuantumCircuit | str:
        """The reference circuit of a target, or the reason there is none."""
        code = target.get("reference_code")
        if not isinstance(code, str) or not code.strip():
            return "no reference code"
        entrypoint = target.get("entrypoint")
        entry = entrypoint if isinstance(entrypoint, str) else None
        key = (
            prompt_id,
            hashlib.sha256(code.encode("utf-8", "surrogatepass")).hexdigest(),
            entry or "",
        )
        if key not in self._references:
            try:
                self._references[key] = build_reference(code, entry)
            except Exception as exc:
                self._references[key] = short_error(type(exc).__name__, str(exc))
        return self._references[key]

    def grade(self, request: dict[str, Any], data: bytes) -> Iterator[dict[str, Any]]:
        """Yield the structural verdict first, then QASM 3 export and equivalence.

        A request under the PQID-Bench contract is graded by that contract's rules instead.
        """
        if request.get("contract") == CONTRACT_PQID_BENCH:
            yield from pqid_bench.grade(request, data)
            return
        prompt_id = str(request.get("prompt_id", ""))
        raw_target = request.get("target_metadata")
        target: dict[str, Any] = raw_target if isinstance(raw_target, dict) else {}
        try:
            candidate = load_circuit(data)
            found = circuit_metadata(candidate)
        except Exception as exc:
            yield {
                "stage": "structure",
                "loaded": False,
                "load_error": short_error(type(exc).__name__, str(exc)),
            }
            return
        reference = self.reference(prompt_id, target)
        reference_meta = (
            circuit_metadata(reference) if isinstance(reference, QuantumCircuit) else None
        )
        expected = _expected(target, reference_meta)
        verdict = compare_structure(expected, found)
        yield {
            "stage": "structure",
            "loaded": True,
            "load_error": None,
            **verdict,
            "expected": expected,
            "found": found,
        }
        qasm3_ok, qasm3_error = qasm3_export(candidate)
        if isinstance(reference, QuantumCircuit):
            mode = "state" if target.get("equivalence") == "state" else "operator"
            equivalent, reason = equivalence(
                candidate,
                reference,
                mode=mode,
                operator_max_qubits=_int(
                    request.get("equivalence_max_qubits"), DEFAULT_OPERATOR_MAX_QUBITS
                ),
                statevector_max_qubits=_int(
                    request.get("statevector_max_qubits"), DEFAULT_STATEVECTOR_MAX_QUBITS
                ),
            )
        else:
            equivalent, reason = None, f"not checked: reference unavailable ({reference})"
        yield {
            "stage": "final",
            "qasm3_ok": qasm3_ok,
            "qasm3_error": qasm3_error,
            "equivalent": equivalent,
            "equivalence_reason": reason,
        }


def _int(value: object, default: int) -> int:
    """A non-negative integer setting, or the default."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return default
