"""Summarises a circuit into the structural facts that scoring compares."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from qiskit import QuantumCircuit

__all__ = ["IGNORED_OPS", "circuit_metadata", "op_counts"]

# Barriers change no state; they are left out of structural comparison.
IGNORED_OPS = frozenset({"barrier"})


def op_counts(circuit: QuantumCircuit) -> dict[str, int]:
    """Count each operation by name, without barriers, sorted by name."""
    counts = circuit.count_ops()
    return {str(name): int(counts[name]) for name in sorted(counts) if name not in IGNORED_OPS}


def circuit_metadata(circuit: QuantumCircuit) -> dict[str, Any]:
    """The width, classical width, operation counts and depth of a circuit."""
    return {
        "num_qubits": int(circuit.num_qubits),
        "num_clbits": int(circuit.num_clbits),
        "ops": op_counts(circuit),
        "depth": int(circuit.depth()),
    }
