"""Scoring contracts: the named, versioned rule sets that turn one response into one verdict.

A job names its contract on the config line (``"contract": "<name>"``) and every item of the
job is scored under it; an unknown name is a protocol error. The project's own rules (the
default) are the evaluator's modules themselves (`extract`, `discover`, `grading`); every other
contract has a module here: `pqid_bench` holds PQID-Bench's frozen evaluator and structural
predicate. Only the standard library is imported at module level, so the supervisor, which
never imports Qiskit, can read a contract's rules too.

A contract's rules decide admissibility (what a response may use, which circuit counts, what
matches); they are not the security boundary. Whatever the contract, generated code runs only
in the executor's forked, limited child and is graded in the grader process.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "CONTRACTS",
    "CONTRACT_PQID_BENCH",
    "CONTRACT_PROJECT",
    "DEFAULT_CONTRACT",
    "PREDICATE_PQID_BENCH",
    "Contract",
    "UnknownContract",
    "get_contract",
]

CONTRACT_PROJECT = "pqid-tui-1"
CONTRACT_PQID_BENCH = "pqid-bench-evaluator-1.1.0-safe-builtins"
PREDICATE_PQID_BENCH = "pqid-bench-reference-signature-1.0.0-count-map"
DEFAULT_CONTRACT = CONTRACT_PROJECT


@dataclass(frozen=True)
class Contract:
    """A scoring contract's identity: its name, its structural predicate, what it is."""

    name: str
    predicate: str | None
    summary: str


CONTRACTS: dict[str, Contract] = {
    CONTRACT_PROJECT: Contract(
        name=CONTRACT_PROJECT,
        predicate=None,
        summary="pqid-tui's own rules: entrypoint or last module-level circuit, width and "
        "barrier-free operation counts, QASM 3 export, equivalence with the reference",
    ),
    CONTRACT_PQID_BENCH: Contract(
        name=CONTRACT_PQID_BENCH,
        predicate=PREDICATE_PQID_BENCH,
        summary="PQID-Bench v1.0.0: strict standalone execution under safe built-ins, the "
        "reference signature (qubits, clbits, lower-cased count map, scalar gate count)",
    ),
}


class UnknownContract(ValueError):
    """A contract name this evaluator does not implement."""


def get_contract(name: object) -> Contract:
    """The contract of that name, or UnknownContract naming the ones that exist."""
    if isinstance(name, str) and name in CONTRACTS:
        return CONTRACTS[name]
    known = ", ".join(sorted(CONTRACTS))
    raise UnknownContract(f"unknown scoring contract {name!r} (this evaluator knows: {known})")
