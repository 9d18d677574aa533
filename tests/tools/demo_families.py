"""The demo panel's circuit families: task wording and reference code, without qiskit.

Each family contributes eleven variants. A variant carries the task as the model reads it
and a reference solution as Python source; the builder (`tests.tools.demo_build`) executes the
source with qiskit to derive every number in the target metadata, so nothing here states a
gate count. The task text is written so that a careful reader can reproduce the reference
gate for gate: which gates (by their Qiskit method names), on which qubits, in which order,
and what is measured into how many classical bits.

`size` is each family's natural scale: qubits for most families, input qubits for
Bernstein-Vazirani and Deutsch-Jozsa (the ancilla is extra), counting qubits for phase
estimation, operand bits for the adders, and qubits per register for the swap test.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

ENTRYPOINT = "build_circuit"

SYSTEM_PROMPT = (
    "You write Python 3 code that uses Qiskit 2.x. Reply with the code only: "
    "no Markdown fences, no explanations, no prose before or after the code."
)

CONTRACT = (
    "Define a function named `build_circuit` that takes no arguments and returns the "
    "`qiskit.QuantumCircuit`. Add no barriers and no gates beyond those described. "
    "No simulation, execution, drawing or printing is needed."
)

_PROMPT_ID = re.compile(r"^[a-z0-9_]+$")


@dataclass(frozen=True)
class Variant:
    """One prompt of the panel before its metadata is computed."""

    prompt_id: str
    family: str
    size: int
    task: str
    reference_code: str

    def user_message(self) -> str:
        return f"{self.task}\n\n{CONTRACT}"


class Angle(NamedTuple):
    """A rotation angle as Python source (reference code) and as read by a person."""

    code: str
    text: str


class Op(NamedTuple):
    """One gate of a short explicit sequence (state preparations)."""

    name: str
    qubits: tuple[int, ...]
    angle: Angle | None = None


PI_2 = Angle("math.pi / 2", "π/2")
PI_3 = Angle("math.pi / 3", "π/3")
PI_5 = Angle("math.pi / 5", "π/5")


def _num(value: float) -> Angle:
    return Angle(repr(value), repr(value))


# --- rendering helpers -----------------------------------------------------------------


def _and(items: Sequence[str]) -> str:
    if len(items) == 1:
        return items[0]
    return ", ".join(items[:-1]) + " and " + items[-1]


def _qubits(qubits: Sequence[int]) -> str:
    word = "qubit" if len(qubits) == 1 else "qubits"
    return f"{word} {_and([str(q) for q in qubits])}"


def _span(values: Sequence[int]) -> str:
    """`0, 1, …, 5` for long runs, the plain list for short ones."""
    items = [str(v) for v in values]
    if len(items) <= 3:
        return ", ".join(items)
    return f"{items[0]}, {items[1]}, …, {items[-1]}"


def _op_label(op: Op) -> str:
    if op.angle is None:
        return f"`{op.name}`"
    return f"`{op.name}({op.angle.text})`"


def _op_text(op: Op) -> str:
    label = _op_label(op)
    if len(op.qubits) == 1:
        return f"{label} on qubit {op.qubits[0]}"
    if op.name in ("cx", "cp", "cry"):
        return f"{label} with control {op.qubits[0]} and target {op.qubits[1]}"
    return f"{label} on qubits {op.qubits[0]} and {op.qubits[1]}"


def _ops_text(ops: Sequence[Op]) -> str:
    return ", then ".join(_op_text(op) for op in ops)


def _op_code(op: Op) -> str:
    args = [op.angle.code] if op.angle is not None else []
    args += [str(q) for q in op.qubits]
    return f"qc.{op.name}({', '.join(args)})"


def _source(body: Sequence[str]) -> str:
    """A complete module: imports and `build_circuit()` around the given body lines."""
    lines = [f"    {line}" if line else "" for line in body]
    uses_math = any("math." in line for line in body)
    header = "import math\n\n" if uses_math else ""
    return (
        f"{header}from qiskit import QuantumCircuit\n\n\n"
        f"def {ENTRYPOINT}():\n" + "\n".join(lines) + "\n"
    )


def _measure_all_text(n: int) -> str:
    return (
        f"Finally measure qubit i into classical bit i for i = {_span(range(n))}; "
        f"the circuit has {n} qubits and {n} classical bits."
    )


def _little_endian(bits: str) -> list[int]:
    """Qubits set in a bit string written in Qiskit's order (rightmost character = qubit 0)."""
    return [i for i, ch in enumerate(reversed(bits)) if ch == "1"]


# --- bell ------------------------------------------------------------------------------

_BELL_STATES: dict[str, tuple[str, str]] = {
    "phi_plus": ("Φ+", "(|00⟩ + |11⟩)/√2"),
    "phi_minus": ("Φ−", "(|00⟩ − |11⟩)/√2"),
    "psi_plus": ("Ψ+", "(|01⟩ + |10⟩)/√2"),
    "psi_minus": ("Ψ−", "(|01⟩ − |10⟩)/√2"),
}


def _bell_ops(state: str, control: int, target: int) -> list[Op]:
    ops: list[Op] = []
    if state in ("phi_minus", "psi_minus"):
        ops.append(Op("x", (control,)))
    ops.append(Op("h", (control,)))
    if state in ("psi_plus", "psi_minus"):
        ops.append(Op("x", (target,)))
    ops.append(Op("cx", (control, target)))
    return ops


def _bell() -> list[Variant]:
    variants: list[Variant] = []
    for state, (name, ket) in _BELL_STATES.items():
        ops = _bell_ops(state, 0, 1)
        for measured in (True, False):
            prompt_id = f"bell_{state}" + ("" if measured else "_nomeas")
            task = (
                f"Prepare the Bell state {name} = {ket} on a 2-qubit circuit starting from "
                f"|00⟩ (kets are written with qubit 0 first). Use exactly these gates in "
                f"this order: {_ops_text(ops)}."
            )
            body = ["qc = QuantumCircuit(2, 2)" if measured else "qc = QuantumCircuit(2)"]
            body += [_op_code(op) for op in ops]
            if measured:
                task += (
                    " Then measure qubit 0 into classical bit 0 and qubit 1 into classical "
                    "bit 1; the circuit has 2 classical bits."
                )
                body.append("qc.measure([0, 1], [0, 1])")
            else:
                task += " Do not measure: the circuit has no classical bits."
            body.append("return qc")
            variants.append(Variant(prompt_id, "bell", 2, task, _source(body)))

    ops = _bell_ops("phi_plus", 1, 0)
    variants.append(
        Variant(
            "bell_phi_plus_q1_control",
            "bell",
            2,
            "Prepare the Bell state Φ+ = (|00⟩ + |11⟩)/√2 on 2 qubits, this time with "
            f"qubit 1 as the control: {_ops_text(ops)}. Then measure qubit 0 into "
            "classical bit 0 and qubit 1 into classical bit 1 (2 classical bits).",
            _source(
                [
                    "qc = QuantumCircuit(2, 2)",
                    *[_op_code(op) for op in ops],
                    "qc.measure([0, 1], [0, 1])",
                    "return qc",
                ]
            ),
        )
    )

    ops = _bell_ops("phi_plus", 0, 1) + _bell_ops("psi_plus", 2, 3)
    variants.append(
        Variant(
            "bell_two_pairs",
            "bell",
            4,
            "On a 4-qubit circuit prepare two Bell pairs: Φ+ on qubits 0 and 1, and Ψ+ on "
            "qubits 2 and 3. Use exactly these gates in this order: "
            f"{_ops_text(ops)}. {_measure_all_text(4)}",
            _source(
                [
                    "qc = QuantumCircuit(4, 4)",
                    *[_op_code(op) for op in ops],
                    "qc.measure(range(4), range(4))",
                    "return qc",
                ]
            ),
        )
    )

    ops = _bell_ops("phi_plus", 0, 2)
    variants.append(
        Variant(
            "bell_phi_plus_outer",
            "bell",
            3,
            "Use a circuit with 3 qubits and 2 classical bits. Entangle the two outer qubits "
            f"in the Bell state Φ+ and leave qubit 1 untouched: {_ops_text(ops)}. Then "
            "measure qubit 0 into classical bit 0 and qubit 2 into classical bit 1.",
            _source(
                [
                    "qc = QuantumCircuit(3, 2)",
                    *[_op_code(op) for op in ops],
                    "qc.measure([0, 2], [0, 1])",
                    "return qc",
                ]
            ),
        )
    )
    return variants


# --- ghz -------------------------------------------------------------------------------


def _ghz() -> list[Variant]:
    variants: list[Variant] = []
    shapes: list[tuple[str, int, bool]] = [
        *[("chain", n, True) for n in (3, 4, 5, 6, 7, 8, 10)],
        ("star", 4, True),
        ("star", 6, True),
        ("chain", 3, False),
        ("chain", 5, False),
    ]
    for shape, n, measured in shapes:
        prompt_id = f"ghz_{n:02d}" if shape == "chain" else f"ghz_star_{n:02d}"
        if not measured:
            prompt_id += "_nomeas"
        if shape == "chain":
            how = (
                f"as a chain: apply `h` to qubit 0, then `cx` from qubit i to qubit i+1 "
                f"for i = {_span(range(n - 1))}, in that order"
            )
            loop = ["for i in range(n - 1):", "    qc.cx(i, i + 1)"]
        else:
            how = (
                f"as a star: apply `h` to qubit 0, then `cx` with control qubit 0 and target "
                f"qubit t for t = {_span(range(1, n))}, in that order"
            )
            loop = ["for t in range(1, n):", "    qc.cx(0, t)"]
        task = f"Create the {n}-qubit GHZ state (|0…0⟩ + |1…1⟩)/√2 {how}. "
        body = [f"n = {n}", "qc = QuantumCircuit(n, n)" if measured else "qc = QuantumCircuit(n)"]
        body += ["qc.h(0)", *loop]
        if measured:
            task += _measure_all_text(n)
            body.append("qc.measure(range(n), range(n))")
        else:
            task += "Do not measure; the circuit has no classical bits."
        body.append("return qc")
        variants.append(Variant(prompt_id, "ghz", n, task, _source(body)))
    return variants


# --- w_state ---------------------------------------------------------------------------


def _w_state() -> list[Variant]:
    variants: list[Variant] = []
    shapes = [*[(n, True) for n in range(2, 9)], *[(n, False) for n in (3, 4, 6, 8)]]
    for n, measured in shapes:
        prompt_id = f"w_state_{n:02d}" + ("" if measured else "_nomeas")
        task = (
            f"Prepare the {n}-qubit W state, the equal superposition of the {n} basis states "
            "that have exactly one qubit in |1⟩, with a linear cascade: apply `x` to qubit 0; "
            f"then for i = {_span(range(n - 1))} apply `cry(θ_i)` with control qubit i and "
            f"target qubit i+1, where θ_i = 2·arccos(√(1/({n}−i))), immediately followed by "
            "`cx` with control qubit i+1 and target qubit i. "
        )
        body = [f"n = {n}", "qc = QuantumCircuit(n, n)" if measured else "qc = QuantumCircuit(n)"]
        body += [
            "qc.x(0)",
            "for i in range(n - 1):",
            "    qc.cry(2 * math.acos(math.sqrt(1 / (n - i))), i, i + 1)",
            "    qc.cx(i + 1, i)",
        ]
        if measured:
            task += _measure_all_text(n)
            body.append("qc.measure(range(n), range(n))")
        else:
            task += "Do not measure; the circuit has no classical bits."
        body.append("return qc")
        variants.append(Variant(prompt_id, "w_state", n, task, _source(body)))
    return variants


# --- qft and inverse_qft ---------------------------------------------------------------


def _qft_text(n: int, swaps: bool) -> str:
    text = (
        f"For j = {_span(range(n - 1, -1, -1))} (from the highest qubit down): apply `h` to "
        "qubit j, then for k = j−1, j−2, …, 0 apply `cp(π/2^(j−k))` with control qubit k and "
        "target qubit j."
    )
    if swaps:
        text += (
            f" Then reverse the qubit order with `swap` gates: swap qubit i with qubit {n - 1}−i "
            f"for i = {_span(range(n // 2))}."
        )
    else:
        text += " Leave out the final qubit-reversal swaps."
    return text


_QFT_BODY = [
    "for j in reversed(range(n)):",
    "    qc.h(j)",
    "    for k in reversed(range(j)):",
    "        qc.cp(math.pi / 2 ** (j - k), k, j)",
]
_REVERSE_BODY = ["for i in range(n // 2):", "    qc.swap(i, n - 1 - i)"]


def _qft() -> list[Variant]:
    variants: list[Variant] = []
    # (prompt_id, n, swaps, measured, basis-state input)
    shapes: list[tuple[str, int, bool, bool, int]] = [
        *[(f"qft_{n:02d}", n, True, False, 0) for n in range(2, 9)],
        ("qft_04_noswap", 4, False, False, 0),
        ("qft_06_noswap", 6, False, False, 0),
        ("qft_05_measured", 5, True, True, 0),
        ("qft_04_input_5", 4, True, False, 5),
    ]
    for prompt_id, n, swaps, measured, value in shapes:
        task = (
            f"Build the quantum Fourier transform on {n} qubits from elementary gates; do not "
            "use Qiskit's `QFT` or `QFTGate` library objects. "
        )
        body = [f"n = {n}", "qc = QuantumCircuit(n, n)" if measured else "qc = QuantumCircuit(n)"]
        if value:
            set_qubits = _little_endian(format(value, "b"))
            task += (
                f"First prepare the basis state |{value}⟩ (qubit 0 is the least significant "
                f"bit) with `x` on {_qubits(set_qubits)}. "
            )
            body += [f"qc.x({q})" for q in set_qubits]
        task += _qft_text(n, swaps) + " "
        body += _QFT_BODY
        if swaps:
            body += _REVERSE_BODY
        if measured:
            task += _measure_all_text(n)
            body.append("qc.measure(range(n), range(n))")
        else:
            task += "No measurement; the circuit has no classical bits."
        body.append("return qc")
        variants.append(Variant(prompt_id, "qft", n, task, _source(body)))
    return variants


def _iqft_text(n: int, swaps: bool, lead: str = "First") -> str:
    text = ""
    if swaps:
        text += (
            f"{lead} reverse the qubit order: `swap` qubit i with qubit {n - 1}−i "
            f"for i = {_span(range(n // 2))}. Then, for"
        )
    else:
        text += "Without any qubit-reversal swaps, for"
    text += (
        f" j = {_span(range(n))}: for k = 0, 1, …, j−1 apply `cp(−π/2^(j−k))` with control "
        "qubit k and target qubit j, and then apply `h` to qubit j."
    )
    return text


_IQFT_BODY = [
    "for j in range(n):",
    "    for k in range(j):",
    "        qc.cp(-math.pi / 2 ** (j - k), k, j)",
    "    qc.h(j)",
]


def _inverse_qft() -> list[Variant]:
    variants: list[Variant] = []
    # (prompt_id, n, swaps, measured, Fourier-state input a)
    shapes: list[tuple[str, int, bool, bool, int | None]] = [
        *[(f"inverse_qft_{n:02d}", n, True, False, None) for n in range(2, 8)],
        ("inverse_qft_03_measured", 3, True, True, None),
        ("inverse_qft_05_measured", 5, True, True, None),
        ("inverse_qft_04_noswap", 4, False, False, None),
        ("inverse_qft_04_fourier_3", 4, True, True, 3),
        ("inverse_qft_05_fourier_11", 5, True, True, 11),
    ]
    for prompt_id, n, swaps, measured, value in shapes:
        task = (
            f"Write the inverse quantum Fourier transform on {n} qubits with explicit gates "
            "(no library QFT objects). "
        )
        body = [f"n = {n}", "qc = QuantumCircuit(n, n)" if measured else "qc = QuantumCircuit(n)"]
        if value is not None:
            task += (
                f"Its input is the Fourier-basis state of the integer a = {value}: prepare it by "
                f"applying, for every qubit j = {_span(range(n))}, `h` to qubit j followed by "
                f"`p(2π·{value}·2^j/{2**n})` on qubit j. Then apply the inverse QFT: "
            )
            body += [
                f"a = {value}",
                "for j in range(n):",
                "    qc.h(j)",
                "    qc.p(2 * math.pi * a * 2**j / 2**n, j)",
            ]
            lead = "first"
        else:
            lead = "First"
        task += _iqft_text(n, swaps, lead) + " "
        if swaps:
            body += _REVERSE_BODY
        body += _IQFT_BODY
        if measured:
            task += _measure_all_text(n)
            body.append("qc.measure(range(n), range(n))")
        else:
            task += "No measurement; the circuit has no classical bits."
        body.append("return qc")
        variants.append(Variant(prompt_id, "inverse_qft", n, task, _source(body)))
    return variants


# --- bernstein_vazirani and deutsch_jozsa ----------------------------------------------


def _bernstein_vazirani() -> list[Variant]:
    variants: list[Variant] = []
    secrets = [
        "101", "011", "110", "1001", "1101", "0111",
        "10110", "11011", "100111", "110101", "1011001",
    ]  # fmt: skip
    for secret in secrets:
        n = len(secret)
        ones = _little_endian(secret)
        task = (
            f"Implement the Bernstein–Vazirani algorithm for the hidden bit string s = {secret} "
            f"with {n} input qubits (qubits 0–{n - 1}) and one ancilla (qubit {n}). The string "
            "is written in Qiskit's order, rightmost character = qubit 0, so the oracle acts on "
            f"{_qubits(ones)}. Steps: `x` on the ancilla; `h` on every qubit, inputs and "
            f"ancilla; the oracle: a `cx` from each of {_qubits(ones)} (in increasing order) to "
            "the ancilla; `h` on each input qubit; finally measure input qubit i into classical "
            f"bit i for i = {_span(range(n))}. The circuit has {n} classical bits; the ancilla "
            "is not measured."
        )
        body = [
            f"n = {n}",
            f'secret = "{secret}"  # rightmost character is qubit 0',
            "qc = QuantumCircuit(n + 1, n)",
            "qc.x(n)",
            "qc.h(range(n + 1))",
            "for i in range(n):",
            '    if secret[n - 1 - i] == "1":',
            "        qc.cx(i, n)",
            "qc.h(range(n))",
            "qc.measure(range(n), range(n))",
            "return qc",
        ]
        variants.append(
            Variant(f"bernstein_vazirani_{secret}", "bernstein_vazirani", n, task, _source(body))
        )
    return variants


def _deutsch_jozsa() -> list[Variant]:
    variants: list[Variant] = []
    # (n, kind, bit string): const0/const1, "bal" = parity over a mask,
    # "balx" = parity over all inputs with x gates on the qubits where b has a 1.
    oracles: list[tuple[int, str, str]] = [
        (2, "const0", ""), (3, "const1", ""), (5, "const0", ""), (6, "const1", ""),
        (2, "bal", "11"), (3, "bal", "101"), (4, "bal", "1111"), (5, "bal", "10010"),
        (3, "balx", "010"), (4, "balx", "1001"), (6, "balx", "101100"),
    ]  # fmt: skip
    for n, kind, bits in oracles:
        prompt_id = f"deutsch_jozsa_{n}q_{kind}" + (f"_{bits}" if bits else "")
        oracle_body: list[str]
        if kind == "const0":
            oracle = "the constant function f(x) = 0, which applies no gate at all"
            oracle_body = ["# constant f(x) = 0: the oracle applies no gate"]
        elif kind == "const1":
            oracle = "the constant function f(x) = 1, implemented as one `x` on the ancilla"
            oracle_body = ["qc.x(n)  # constant f(x) = 1"]
        elif kind == "bal":
            ones = _little_endian(bits)
            terms = " ⊕ ".join(f"x_{q}" for q in ones)
            oracle = (
                f"the balanced function f(x) = {terms} (mask {bits}, rightmost character = "
                f"qubit 0), implemented as a `cx` from each of {_qubits(ones)} (in increasing "
                "order) to the ancilla"
            )
            oracle_body = [f"for q in {ones}:", "    qc.cx(q, n)"]
        else:
            ones = _little_endian(bits)
            oracle = (
                f"the balanced function f(x) = parity of (x XOR b) for b = {bits} (rightmost "
                f"character = qubit 0), implemented as `x` on {_qubits(ones)}, then a `cx` from "
                "every input qubit (in increasing order) to the ancilla, then the same `x` "
                "gates again"
            )
            oracle_body = [
                f"for q in {ones}:",
                "    qc.x(q)",
                "for q in range(n):",
                "    qc.cx(q, n)",
                f"for q in {ones}:",
                "    qc.x(q)",
            ]
        task = (
            f"Implement the Deutsch–Jozsa algorithm with {n} input qubits (qubits 0–{n - 1}) "
            f"and one ancilla (qubit {n}). Steps: `x` on the ancilla; `h` on all {n + 1} "
            "qubits; the oracle; `h` on each input qubit; finally measure input qubit i into "
            f"classical bit i for i = {_span(range(n))} ({n} classical bits; the ancilla is not "
            f"measured). The oracle is {oracle}."
        )
        body = [
            f"n = {n}",
            "qc = QuantumCircuit(n + 1, n)",
            "qc.x(n)",
            "qc.h(range(n + 1))",
            *oracle_body,
            "qc.h(range(n))",
            "qc.measure(range(n), range(n))",
            "return qc",
        ]
        variants.append(Variant(prompt_id, "deutsch_jozsa", n, task, _source(body)))
    return variants


# --- grover ----------------------------------------------------------------------------

_GROVER_ITERATIONS = {2: 1, 3: 2, 4: 3}


def _grover() -> list[Variant]:
    variants: list[Variant] = []
    marks = ["00", "01", "10", "11", "101", "011", "110", "000", "1010", "0111", "1111"]
    for mark in marks:
        n = len(mark)
        iterations = _GROVER_ITERATIONS[n]
        last = n - 1
        controls = list(range(last))
        zeros = [q for q in range(n) if q not in _little_endian(mark)]
        if n == 2:
            mcx_text, mcx_code = "`cx` with control 0 and target 1", "qc.cx(0, 1)"
        elif n == 3:
            mcx_text, mcx_code = "`ccx` with controls 0 and 1 and target 2", "qc.ccx(0, 1, 2)"
        else:
            mcx_text = f"`mcx` with controls {_and([str(q) for q in controls])} and target {last}"
            mcx_code = f"qc.mcx({controls}, {last})"
        oracle = (
            f"`x` on every qubit whose marked bit is 0 (here {_qubits(zeros)}), then the "
            "multi-controlled Z, then the same `x` gates again"
            if zeros
            else "just the multi-controlled Z, since every marked bit is 1"
        )
        task = (
            f"Run Grover's search on {n} qubits for the single marked basis state |{mark}⟩, "
            f"written in Qiskit's order (rightmost character = qubit 0). Start with `h` on every "
            f"qubit, apply {iterations} Grover iteration{'s' if iterations > 1 else ''}, and "
            f"finally measure qubit i into classical bit i for i = {_span(range(n))} ({n} "
            f"classical bits). The multi-controlled Z on the {n} qubits is written as `h` on "
            f"qubit {last}, {mcx_text}, `h` on qubit {last}. One iteration is the oracle "
            f"followed by the diffuser. The oracle is {oracle}. The diffuser is `h` on every "
            "qubit, `x` on every qubit, the multi-controlled Z, `x` on every qubit, `h` on every "
            "qubit."
        )
        body = [
            f"n = {n}",
            f'marked = "{mark}"  # rightmost character is qubit 0',
            'zeros = [q for q in range(n) if marked[n - 1 - q] == "0"]',
            "",
            "def mcz(qc):",
            f"    qc.h({last})",
            f"    {mcx_code}",
            f"    qc.h({last})",
            "",
            "qc = QuantumCircuit(n, n)",
            "qc.h(range(n))",
            f"for _ in range({iterations}):",
            "    for q in zeros:",
            "        qc.x(q)",
            "    mcz(qc)",
            "    for q in zeros:",
            "        qc.x(q)",
            "    qc.h(range(n))",
            "    qc.x(range(n))",
            "    mcz(qc)",
            "    qc.x(range(n))",
            "    qc.h(range(n))",
            "qc.measure(range(n), range(n))",
            "return qc",
        ]
        variants.append(Variant(f"grover_{n}q_m{mark}", "grover", n, task, _source(body)))
    return variants


# --- phase_estimation ------------------------------------------------------------------


def _phase_estimation() -> list[Variant]:
    variants: list[Variant] = []
    cases = [
        (2, 1, 4), (2, 3, 4), (3, 1, 8), (3, 3, 8), (3, 7, 8), (4, 5, 16),
        (4, 1, 3), (5, 11, 32), (5, 1, 5), (6, 13, 64), (7, 1, 7),
    ]  # fmt: skip
    for t, num, den in cases:
        task = (
            f"Estimate the phase φ = {num}/{den} of the phase gate U = `p(2π·φ)` on its "
            f"eigenstate |1⟩, using {t} counting qubits. Qubits 0–{t - 1} are the counting "
            f"register (qubit 0 is the least significant bit) and qubit {t} holds the "
            f"eigenstate. Steps: `x` on qubit {t}; `h` on each counting qubit; for "
            f"k = {_span(range(t))} apply a single `cp(2π·φ·2^k)` with control qubit k and "
            f"target qubit {t} (one gate per k, do not repeat gates to build powers); then the "
            f"inverse QFT on qubits 0–{t - 1}, written out: "
            + _iqft_text(t, True, lead="first")
            + f" Finally measure counting qubit i into classical bit i for i = {_span(range(t))} "
            f"({t} classical bits; qubit {t} is not measured)."
        )
        body = [
            f"t = {t}",
            f"phase = {num} / {den}",
            "qc = QuantumCircuit(t + 1, t)",
            "qc.x(t)",
            "qc.h(range(t))",
            "for k in range(t):",
            "    qc.cp(2 * math.pi * phase * 2**k, k, t)",
            "for i in range(t // 2):",
            "    qc.swap(i, t - 1 - i)",
            "for j in range(t):",
            "    for k in range(j):",
            "        qc.cp(-math.pi / 2 ** (j - k), k, j)",
            "    qc.h(j)",
            "qc.measure(range(t), range(t))",
            "return qc",
        ]
        variants.append(
            Variant(
                f"phase_estimation_t{t}_{num}_{den}", "phase_estimation", t, task, _source(body)
            )
        )
    return variants


# --- teleportation ---------------------------------------------------------------------


def _hop_ops(sender: int, alice: int, bob: int) -> list[Op]:
    return [
        Op("h", (alice,)),
        Op("cx", (alice, bob)),
        Op("cx", (sender, alice)),
        Op("h", (sender,)),
        Op("cx", (alice, bob)),
        Op("cz", (sender, bob)),
    ]


def _teleportation() -> list[Variant]:
    variants: list[Variant] = []
    # (suffix, message preparation on qubit 0, measurement: "bob", "all" or "none")
    single: list[tuple[str, list[Op], str]] = [
        ("x", [Op("x", (0,))], "bob"),
        ("h", [Op("h", (0,))], "bob"),
        ("ry_pi_3", [Op("ry", (0,), PI_3)], "all"),
        ("h_t", [Op("h", (0,)), Op("t", (0,))], "none"),
        ("h_s", [Op("h", (0,)), Op("s", (0,))], "bob"),
        ("rx_0_7", [Op("rx", (0,), _num(0.7))], "none"),
        ("y", [Op("y", (0,))], "all"),
        ("ry_rz", [Op("ry", (0,), _num(1.1)), Op("rz", (0,), _num(0.4))], "bob"),
        ("ry_pi_2", [Op("ry", (0,), PI_2)], "all"),
    ]
    for suffix, prep, measure in single:
        hop = _hop_ops(0, 1, 2)
        task = (
            "Write the quantum-teleportation circuit in its deferred-measurement form: no "
            "mid-circuit measurement and no classically controlled gates. Qubit 0 holds the "
            "message; qubits 1 (Alice) and 2 (Bob) share the entangled pair. "
            f"1) Prepare the message: {_ops_text(prep)}. "
            f"2) Create the pair: {_ops_text(hop[:2])}. "
            f"3) Alice's Bell-basis rotation: {_ops_text(hop[2:4])}. "
            f"4) Bob's corrections as controlled gates: {_ops_text(hop[4:])}. "
        )
        body = [
            {"bob": "qc = QuantumCircuit(3, 1)", "all": "qc = QuantumCircuit(3, 3)",
             "none": "qc = QuantumCircuit(3)"}[measure],
            *[_op_code(op) for op in prep],
            *[_op_code(op) for op in hop],
        ]  # fmt: skip
        if measure == "bob":
            task += "5) Measure qubit 2 into classical bit 0; the circuit has 1 classical bit."
            body.append("qc.measure(2, 0)")
        elif measure == "all":
            task += (
                "5) Measure qubit i into classical bit i for i = 0, 1, 2; the circuit has 3 "
                "classical bits."
            )
            body.append("qc.measure([0, 1, 2], [0, 1, 2])")
        else:
            task += "Do not measure; the circuit has no classical bits."
        body.append("return qc")
        variants.append(Variant(f"teleportation_{suffix}", "teleportation", 3, task, _source(body)))

    two_hop: list[tuple[str, list[Op], bool]] = [
        ("two_hop_h", [Op("h", (0,))], True),
        ("two_hop_ry_pi_5", [Op("ry", (0,), PI_5)], False),
    ]
    for suffix, prep, measured in two_hop:
        first, second = _hop_ops(0, 1, 2), _hop_ops(2, 3, 4)
        task = (
            "Teleport a one-qubit message twice along a chain of 5 qubits, in the "
            "deferred-measurement form (no mid-circuit measurement, no classically controlled "
            "gates). Qubit 0 holds the message. "
            f"First prepare it: {_ops_text(prep)}. "
            f"Hop 1 moves it from qubit 0 to qubit 2 with the pair (1, 2): {_ops_text(first)}. "
            f"Hop 2 then moves it from qubit 2 to qubit 4 with the pair (3, 4): "
            f"{_ops_text(second)}. "
        )
        body = [
            "qc = QuantumCircuit(5, 1)" if measured else "qc = QuantumCircuit(5)",
            *[_op_code(op) for op in prep],
            *[_op_code(op) for op in first],
            *[_op_code(op) for op in second],
        ]
        if measured:
            task += "Finally measure qubit 4 into classical bit 0; the circuit has 1 classical bit."
            body.append("qc.measure(4, 0)")
        else:
            task += "Do not measure; the circuit has no classical bits."
        body.append("return qc")
        variants.append(Variant(f"teleportation_{suffix}", "teleportation", 5, task, _source(body)))
    return variants


# --- qaoa_layer ------------------------------------------------------------------------

_GRAPHS: dict[str, tuple[str, int, list[tuple[int, int]]]] = {
    "triangle": ("the triangle", 3, [(0, 1), (1, 2), (0, 2)]),
    "path4": ("the 4-node path", 4, [(0, 1), (1, 2), (2, 3)]),
    "cycle4": ("the 4-cycle", 4, [(0, 1), (1, 2), (2, 3), (0, 3)]),
    "k4": ("the complete graph K4", 4, [(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3)]),
    "star5": ("the 5-node star centred on node 0", 5, [(0, 1), (0, 2), (0, 3), (0, 4)]),
    "cycle5": ("the 5-cycle", 5, [(0, 1), (1, 2), (2, 3), (3, 4), (0, 4)]),
    "bowtie5": (
        "the bowtie (two triangles sharing node 2)",
        5,
        [(0, 1), (1, 2), (0, 2), (2, 3), (3, 4), (2, 4)],
    ),
    "prism6": (
        "the triangular prism (3-regular, 6 nodes)",
        6,
        [(0, 1), (1, 2), (0, 2), (3, 4), (4, 5), (3, 5), (0, 3), (1, 4), (2, 5)],
    ),
    "cycle6": ("the 6-cycle", 6, [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5), (0, 5)]),
    "cycle8": (
        "the 8-cycle",
        8,
        [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5), (5, 6), (6, 7), (0, 7)],
    ),
}


def _qaoa_layer() -> list[Variant]:
    variants: list[Variant] = []
    cases: list[tuple[str, list[float], list[float]]] = [
        ("triangle", [0.8], [0.4]),
        ("path4", [0.6], [0.35]),
        ("cycle4", [0.75], [0.3]),
        ("cycle4", [0.5, 0.9], [0.45, 0.2]),
        ("k4", [0.4], [0.55]),
        ("star5", [0.65], [0.25]),
        ("cycle5", [0.7, 0.4], [0.3, 0.6]),
        ("bowtie5", [0.55], [0.5]),
        ("prism6", [0.45], [0.35]),
        ("cycle6", [0.3, 0.85], [0.6, 0.15]),
        ("cycle8", [0.7], [0.4]),
    ]
    for graph, gammas, betas in cases:
        name, n, edges = _GRAPHS[graph]
        p = len(gammas)
        edge_text = ", ".join(f"({i}, {j})" for i, j in edges)
        task = (
            f"Build a depth p = {p} QAOA circuit for MaxCut on {name}, with one qubit per node "
            f"(nodes 0–{n - 1}) and edges {edge_text}. Start with `h` on every qubit. Then for "
            f"each layer ℓ = {_span(range(1, p + 1))}, with γ = {gammas} and β = {betas}: the "
            "cost layer applies `rzz(2·γ_ℓ)` to the two qubits of each edge, in the edge order "
            "listed; the mixer applies `rx(2·β_ℓ)` to every qubit in increasing order. "
            + _measure_all_text(n)
        )
        body = [
            f"n = {n}",
            f"edges = {edges}",
            f"gammas = {gammas}",
            f"betas = {betas}",
            "qc = QuantumCircuit(n, n)",
            "qc.h(range(n))",
            "for gamma, beta in zip(gammas, betas):",
            "    for i, j in edges:",
            "        qc.rzz(2 * gamma, i, j)",
            "    for q in range(n):",
            "        qc.rx(2 * beta, q)",
            "qc.measure(range(n), range(n))",
            "return qc",
        ]
        variants.append(Variant(f"qaoa_layer_{graph}_p{p}", "qaoa_layer", n, task, _source(body)))
    return variants


# --- hardware_efficient_ansatz ---------------------------------------------------------


def _hardware_efficient_ansatz() -> list[Variant]:
    variants: list[Variant] = []
    cases: list[tuple[int, int, str, bool]] = [
        (2, 1, "linear", False), (3, 1, "linear", True), (3, 2, "circular", False),
        (4, 1, "circular", True), (4, 2, "linear", False), (4, 3, "full", True),
        (5, 2, "linear", True), (5, 1, "full", False), (6, 2, "circular", True),
        (6, 3, "linear", False), (8, 2, "linear", True),
    ]  # fmt: skip
    for n, reps, entanglement, measured in cases:
        if entanglement == "linear":
            ent_text = f"`cx` from qubit q to qubit q+1 for q = {_span(range(n - 1))}"
            ent_body = ["    for q in range(n - 1):", "        qc.cx(q, q + 1)"]
        elif entanglement == "circular":
            ent_text = (
                f"`cx` from qubit q to qubit q+1 for q = {_span(range(n - 1))}, then one `cx` "
                f"from qubit {n - 1} to qubit 0"
            )
            ent_body = [
                "    for q in range(n - 1):",
                "        qc.cx(q, q + 1)",
                "    qc.cx(n - 1, 0)",
            ]
        else:
            pairs = ", ".join(f"({i}, {j})" for i in range(n) for j in range(i + 1, n))
            ent_text = f"`cx` from qubit i to qubit j for every pair i < j, in the order {pairs}"
            ent_body = [
                "    for i in range(n):",
                "        for j in range(i + 1, n):",
                "            qc.cx(i, j)",
            ]
        task = (
            f"Build a hardware-efficient ansatz on {n} qubits with {reps} "
            f"repetition{'s' if reps > 1 else ''} and {entanglement} entanglement, with fixed "
            f"numeric angles. Repetition ℓ (ℓ = {_span(range(reps))}) applies `ry(a(ℓ, q))` to "
            "every qubit q in increasing order, then `rz(b(ℓ, q))` to every qubit q in "
            f"increasing order, then the entangler: {ent_text}. After the last repetition add "
            f"a final layer of `ry(a({reps}, q))` on every qubit. The angles, in radians, are "
            "a(ℓ, q) = 0.1 + 0.2·q + 0.25·ℓ and b(ℓ, q) = 0.05 + 0.15·q + 0.2·ℓ. "
        )
        body = [
            f"n = {n}",
            f"reps = {reps}",
            "",
            "def a(layer, q):",
            "    return 0.1 + 0.2 * q + 0.25 * layer",
            "",
            "def b(layer, q):",
            "    return 0.05 + 0.15 * q + 0.2 * layer",
            "",
            "qc = QuantumCircuit(n, n)" if measured else "qc = QuantumCircuit(n)",
            "for layer in range(reps):",
            "    for q in range(n):",
            "        qc.ry(a(layer, q), q)",
            "    for q in range(n):",
            "        qc.rz(b(layer, q), q)",
            *ent_body,
            "for q in range(n):",
            "    qc.ry(a(reps, q), q)",
        ]
        if measured:
            task += _measure_all_text(n)
            body.append("qc.measure(range(n), range(n))")
        else:
            task += "Do not measure; the circuit has no classical bits."
        body.append("return qc")
        prompt_id = f"hardware_efficient_ansatz_{n}q_r{reps}_{entanglement}"
        variants.append(Variant(prompt_id, "hardware_efficient_ansatz", n, task, _source(body)))
    return variants


# --- adder -----------------------------------------------------------------------------


def _adder() -> list[Variant]:
    variants: list[Variant] = []
    for a, b in [(1, 1), (1, 0)]:
        loads = [q for q, bit in ((0, a), (1, b)) if bit]
        task = (
            f"Build a quantum half adder for the input bits a = {a} and b = {b}. Qubit 0 is a, "
            "qubit 1 is b, qubit 2 is the carry (starts in |0⟩). Load the inputs with `x` on "
            f"{_qubits(loads)}. Then apply `ccx` with controls 0 and 1 and target 2, and `cx` "
            "with control 0 and target 1, so that qubit 1 holds the sum bit. Measure qubit 1 "
            "into classical bit 0 and qubit 2 into classical bit 1; the circuit has 3 qubits "
            "and 2 classical bits."
        )
        body = [
            "qc = QuantumCircuit(3, 2)",
            *[f"qc.x({q})" for q in loads],
            "qc.ccx(0, 1, 2)",
            "qc.cx(0, 1)",
            "qc.measure([1, 2], [0, 1])",
            "return qc",
        ]
        variants.append(Variant(f"adder_half_a{a}_b{b}", "adder", 1, task, _source(body)))

    for a, b, c in [(1, 1, 0), (1, 1, 1), (0, 1, 1)]:
        loads = [q for q, bit in ((0, a), (1, b), (2, c)) if bit]
        task = (
            f"Build a quantum full adder for a = {a}, b = {b} and carry-in c = {c}. Qubits: 0 = a, "
            "1 = b, 2 = c (carry-in, becomes the sum), 3 = carry-out (starts in |0⟩). Load the "
            f"inputs with `x` on {_qubits(loads)}. Then apply, in order: `ccx` with controls "
            "0 and 1 and target 3; `cx` with control 0 and target 1; `ccx` with controls 1 and "
            "2 and target 3; `cx` with control 1 and target 2. Measure qubit 2 (the sum) into "
            "classical bit 0 and qubit 3 (the carry-out) into classical bit 1; the circuit has "
            "4 qubits and 2 classical bits."
        )
        body = [
            "qc = QuantumCircuit(4, 2)",
            *[f"qc.x({q})" for q in loads],
            "qc.ccx(0, 1, 3)",
            "qc.cx(0, 1)",
            "qc.ccx(1, 2, 3)",
            "qc.cx(1, 2)",
            "qc.measure([2, 3], [0, 1])",
            "return qc",
        ]
        variants.append(Variant(f"adder_full_a{a}_b{b}_c{c}", "adder", 1, task, _source(body)))

    for bits, a, b in [(1, 1, 1), (2, 3, 1), (2, 2, 3), (3, 5, 3), (3, 6, 7), (4, 9, 7)]:
        width = 2 * bits + 2
        a_qubits = [1 + i for i in range(bits) if (a >> i) & 1]
        b_qubits = [1 + bits + i for i in range(bits) if (b >> i) & 1]
        last = bits - 1
        if bits > 1:
            maj_chain = (
                f"MAJ(c, b_0, a_0), then MAJ(a_(i−1), b_i, a_i) for i = {_span(range(1, bits))}"
            )
            uma_chain = (
                f"UMA(a_(i−1), b_i, a_i) for i = {_span(range(bits - 1, 0, -1))}, and finally "
                "UMA(c, b_0, a_0)"
            )
        else:
            maj_chain = "MAJ(c, b_0, a_0)"
            uma_chain = "UMA(c, b_0, a_0)"
        if bits > 1:
            layout = (
                f"qubits 1–{bits} are a_0…a_{last}; qubits {bits + 1}–{2 * bits} are "
                f"b_0…b_{last} (index 0 is the least significant bit)"
            )
            readout = f"b_i into classical bit i for i = {_span(range(bits))}"
        else:
            layout = "qubit 1 is a_0; qubit 2 is b_0"
            readout = "b_0 into classical bit 0"
        task = (
            f"Build a {bits}-bit ripple-carry adder (Cuccaro style, from MAJ and UMA blocks) "
            f"that adds a = {a} into b = {b}. Qubit layout ({width} qubits): qubit 0 is the "
            f"carry-in c (stays |0⟩); {layout}; qubit {2 * bits + 1} is the carry-out z. "
            f"1) Load the inputs with `x` gates on the qubits of the 1 bits: "
            f"a = {a} = {format(a, f'0{bits}b')}₂ gives {_qubits(a_qubits)}, "
            f"b = {b} = {format(b, f'0{bits}b')}₂ gives {_qubits(b_qubits)}; a-qubits first. "
            "2) MAJ(x, y, w) is `cx` with control w and target y, `cx` with control w and "
            "target x, then `ccx` with controls x and y and target w. UMA(x, y, w) is `ccx` "
            "with controls x and y and target w, `cx` with control w and target x, then `cx` "
            "with control x and target y. "
            f"3) Apply {maj_chain}; then `cx` with control a_{last} and target z; then "
            f"{uma_chain}. "
            f"4) Measure {readout} and z into classical bit {bits}; the circuit has "
            f"{bits + 1} classical bits, holding a + b."
        )
        body = [
            f"bits = {bits}",
            f"a_value, b_value = {a}, {b}",
            "c = 0",
            "a = list(range(1, bits + 1))",
            "b = list(range(bits + 1, 2 * bits + 1))",
            "z = 2 * bits + 1",
            "qc = QuantumCircuit(2 * bits + 2, bits + 1)",
            "for i in range(bits):",
            "    if (a_value >> i) & 1:",
            "        qc.x(a[i])",
            "for i in range(bits):",
            "    if (b_value >> i) & 1:",
            "        qc.x(b[i])",
            "",
            "def maj(x, y, w):",
            "    qc.cx(w, y)",
            "    qc.cx(w, x)",
            "    qc.ccx(x, y, w)",
            "",
            "def uma(x, y, w):",
            "    qc.ccx(x, y, w)",
            "    qc.cx(w, x)",
            "    qc.cx(x, y)",
            "",
            "maj(c, b[0], a[0])",
            "for i in range(1, bits):",
            "    maj(a[i - 1], b[i], a[i])",
            "qc.cx(a[bits - 1], z)",
            "for i in reversed(range(1, bits)):",
            "    uma(a[i - 1], b[i], a[i])",
            "uma(c, b[0], a[0])",
            "qc.measure(b + [z], range(bits + 1))",
            "return qc",
        ]
        variants.append(
            Variant(f"adder_ripple_{bits}bit_a{a}_b{b}", "adder", bits, task, _source(body))
        )
    return variants


# --- swap_test -------------------------------------------------------------------------


def _prep_text(ops: list[Op]) -> str:
    return _ops_text(ops) if ops else "no gates (it stays in the all-zero state)"


def _swap_test() -> list[Variant]:
    variants: list[Variant] = []
    # (suffix, k, preparation of register A, preparation of register B)
    cases: list[tuple[str, int, list[Op], list[Op]]] = [
        ("1q_zero_one", 1, [], [Op("x", (2,))]),
        ("1q_plus_plus", 1, [Op("h", (1,))], [Op("h", (2,))]),
        ("1q_ry", 1, [Op("ry", (1,), _num(0.6))], [Op("ry", (2,), _num(1.4))]),
        ("1q_plus_minus", 1, [Op("h", (1,))], [Op("x", (2,)), Op("h", (2,))]),
        (
            "2q_bell_bell", 2,
            [Op("h", (1,)), Op("cx", (1, 2))],
            [Op("h", (3,)), Op("cx", (3, 4))],
        ),
        (
            "2q_ry", 2,
            [Op("ry", (1,), _num(0.3)), Op("ry", (2,), _num(0.9))],
            [Op("ry", (3,), _num(1.2)), Op("ry", (4,), _num(0.5))],
        ),
        ("2q_basis", 2, [Op("x", (1,))], [Op("x", (4,))]),
        (
            "2q_h_t", 2,
            [Op("h", (1,)), Op("t", (1,))],
            [Op("h", (3,)), Op("t", (3,))],
        ),
        (
            "3q_ghz_ghz", 3,
            [Op("h", (1,)), Op("cx", (1, 2)), Op("cx", (2, 3))],
            [Op("h", (4,)), Op("cx", (4, 5)), Op("cx", (5, 6))],
        ),
        (
            "3q_ry", 3,
            [Op("ry", (1,), _num(0.2)), Op("ry", (2,), _num(0.7)), Op("ry", (3,), _num(1.5))],
            [Op("ry", (4,), _num(0.4)), Op("ry", (5,), _num(0.7)), Op("ry", (6,), _num(1.1))],
        ),
        ("4q_basis", 4, [Op("x", (1,)), Op("x", (3,))], [Op("x", (5,)), Op("x", (7,))]),
    ]  # fmt: skip
    for suffix, k, prep_a, prep_b in cases:
        a_range = "qubit 1" if k == 1 else f"qubits 1–{k}"
        b_range = f"qubit {k + 1}" if k == 1 else f"qubits {k + 1}–{2 * k}"

        if k == 1:
            swaps = "one `cswap` with control 0 on qubits 1 and 2"
        else:
            pairs = ", ".join(f"({1 + i}, {1 + k + i})" for i in range(k))
            swaps = f"one `cswap` with control 0 for each pair of qubits {pairs}, in that order"
        task = (
            f"Build a swap test that compares two {k}-qubit states. Qubit 0 is the ancilla, "
            f"register A is {a_range} and register B is {b_range}; {2 * k + 1} qubits in all. "
            f"Prepare register A with {_prep_text(prep_a)}; then prepare register B with "
            f"{_prep_text(prep_b)}. Then apply `h` to qubit 0; {swaps}; `h` to qubit 0 again. "
            "Finally measure "
            "qubit 0 into classical bit 0; the circuit has 1 classical bit."
        )
        body = [
            f"k = {k}",
            "qc = QuantumCircuit(2 * k + 1, 1)",
            *[_op_code(op) for op in prep_a],
            *[_op_code(op) for op in prep_b],
            "qc.h(0)",
            "for i in range(k):",
            "    qc.cswap(0, 1 + i, 1 + k + i)",
            "qc.h(0)",
            "qc.measure(0, 0)",
            "return qc",
        ]
        variants.append(Variant(f"swap_test_{suffix}", "swap_test", k, task, _source(body)))
    return variants


# --- the panel -------------------------------------------------------------------------

FAMILIES: dict[str, Callable[[], list[Variant]]] = {
    "bell": _bell,
    "ghz": _ghz,
    "w_state": _w_state,
    "qft": _qft,
    "inverse_qft": _inverse_qft,
    "bernstein_vazirani": _bernstein_vazirani,
    "deutsch_jozsa": _deutsch_jozsa,
    "grover": _grover,
    "phase_estimation": _phase_estimation,
    "teleportation": _teleportation,
    "qaoa_layer": _qaoa_layer,
    "hardware_efficient_ansatz": _hardware_efficient_ansatz,
    "adder": _adder,
    "swap_test": _swap_test,
}


def all_variants() -> list[Variant]:
    """Every variant of every family, in panel order (family order, then as listed)."""
    variants: list[Variant] = []
    for family, make in FAMILIES.items():
        made = make()
        for variant in made:
            if variant.family != family:
                raise ValueError(f"{variant.prompt_id}: family {variant.family!r} != {family!r}")
            if not _PROMPT_ID.match(variant.prompt_id):
                raise ValueError(f"{variant.prompt_id!r} is not a valid prompt id")
        variants.extend(made)
    return variants
