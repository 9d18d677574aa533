"""Circuits handed from the executor to the grader: QPY bytes of the version this Qiskit writes.

The grader and the scoring contracts both load candidates through here (the standard
library and qiskit only, like all of the evaluator).
"""

from __future__ import annotations

import io
import warnings
from typing import Any

from qiskit import QuantumCircuit, qpy
from qiskit.qpy import common as qpy_common

__all__ = ["CircuitLoadError", "load_circuit", "load_circuits"]


class CircuitLoadError(Exception):
    """The bytes handed over are not a single circuit this Qiskit wrote."""


def _qpy_programs(data: bytes) -> list[Any]:
    """The programs of a QPY payload, accepting only the version this Qiskit writes."""
    # Older QPY versions take other (legacy) parsing paths; the executor always writes the
    # current one, so anything else was forged and is refused before parsing.
    if len(data) < 7 or data[:6] != b"QISKIT" or data[6] != qpy_common.QPY_VERSION:
        raise CircuitLoadError("not a QPY payload of the expected version")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return list(qpy.load(io.BytesIO(data)))


def load_circuit(data: bytes) -> QuantumCircuit:
    """Load a candidate circuit from QPY, accepting only the version this Qiskit writes."""
    programs = _qpy_programs(data)
    if len(programs) != 1 or not isinstance(programs[0], QuantumCircuit):
        raise CircuitLoadError("the payload does not hold exactly one circuit")
    return programs[0]


def load_circuits(data: bytes) -> list[QuantumCircuit]:
    """Load several candidate circuits from one QPY payload (every program a circuit)."""
    programs = _qpy_programs(data)
    if not all(isinstance(program, QuantumCircuit) for program in programs):
        raise CircuitLoadError("the payload holds something other than circuits")
    return programs
