"""The PQID-Bench scoring contract, rule by rule (issue 12, evaluator half).

Each test names the rule it pins (`evaluator/contracts/pqid_bench.py` lists them in order).
The pure rules are tested on their functions; the namespace, built-ins, choice and grading
rules through one real `python -m evaluator serve` job under the contract, on hand-made
snippets, so that what is pinned is what the executor's child and the grader really do.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from evaluator.contracts import (
    CONTRACT_PQID_BENCH,
    CONTRACT_PROJECT,
    PREDICATE_PQID_BENCH,
    UnknownContract,
    get_contract,
    pqid_bench,
)
from evaluator.contracts.pqid_bench import (
    Facts,
    choose,
    observed_counts,
    register_widths,
    select_code,
    signature,
)
from evaluator.schema import CATEGORIES, categorize
from evaluator.supervisor import Config, ProtocolError, read_job

ROOT = Path(__file__).resolve().parents[2]

# -- the registry and the config line ---------------------------------------------------------


def test_contract_names_are_the_engines() -> None:
    """Rule: the evaluator and the engine name the two contracts identically."""
    from engine.release import CONTRACT_PQID_BENCH as ENGINE_PQID
    from engine.release import CONTRACT_PROJECT as ENGINE_PROJECT
    from engine.release import PREDICATE_PQID_BENCH as ENGINE_PREDICATE

    assert (CONTRACT_PROJECT, CONTRACT_PQID_BENCH) == (ENGINE_PROJECT, ENGINE_PQID)
    assert PREDICATE_PQID_BENCH == ENGINE_PREDICATE
    assert get_contract(CONTRACT_PQID_BENCH).predicate == PREDICATE_PQID_BENCH
    assert get_contract(CONTRACT_PROJECT).predicate is None


def test_the_config_line_names_the_contract() -> None:
    """Rule: the config's `contract` selects the contract; absent means the project's."""
    assert Config.from_json({"type": "config"}).contract == CONTRACT_PROJECT
    config = Config.from_json({"type": "config", "contract": CONTRACT_PQID_BENCH})
    assert config.contract == CONTRACT_PQID_BENCH


@pytest.mark.parametrize("name", ["pqid-bench-evaluator-1.0.0-restricted-builtins", "", 7, None])
def test_an_unknown_contract_is_a_protocol_error(name: object) -> None:
    """Rule: a contract name the evaluator does not implement stops the job."""
    with pytest.raises(UnknownContract):
        get_contract(name)
    with pytest.raises(ProtocolError, match="contract"):
        read_job([json.dumps({"type": "config", "contract": name})])


# -- 1. the code channel and the fences -------------------------------------------------------


def test_code_channel_prefers_generated_code() -> None:
    """Rule 1: `generated_code` when it is a non-empty string, whatever `content` says."""
    choice = select_code("qc = 1", "```python\nqc = 2\n```")
    assert (choice.code, choice.source) == ("qc = 1", "generated_code")


def test_code_channel_falls_back_to_content() -> None:
    """Rule 1: an empty or absent `generated_code` leaves the code to `content`."""
    for missing in ("", None):
        choice = select_code(missing, "qc = 2")
        assert (choice.code, choice.source) == ("qc = 2", "content")
    assert select_code(None, None).empty and select_code(None, None).source is None


def test_blank_generated_code_is_an_empty_generation() -> None:
    """Rule 1: a non-empty `generated_code` wins even when it is only whitespace."""
    choice = select_code("  \n ", "qc = QuantumCircuit(1)")
    assert choice.empty and choice.source == "generated_code" and choice.code == ""


@pytest.mark.parametrize(
    ("text", "code"),
    [
        ("```python\nqc = 1\n```", "qc = 1"),
        ("```py\nqc = 1\n```", "qc = 1"),
        ("```PYTHON\nqc = 1\n```", "qc = 1"),
        ("```\nqc = 1\n```", "qc = 1"),
        ("Here you are:\n```python\nqc = 1\n```\nIt makes a circuit.", "qc = 1"),
        ("```python\nqc = 1\n```\n\n```python\nqc = 2\n```", "qc = 1"),  # the first block only
        ("```python3\nqc = 1\n```", "3\nqc = 1"),  # the tag is `python`; the rest is code
        ("```bash\nls\n```", "bash\nls"),  # an untagged block that starts with a word
        ("```python\nqc = 1\n", "```python\nqc = 1"),  # no closing fence: nothing is removed
        ("   \n qc = 1 \n\n", "qc = 1"),  # no fence: the whole text, stripped
        ("Sure! qc = 1", "Sure! qc = 1"),  # prose is never removed outside a fence
    ],
)
def test_fence_rule(text: str, code: str) -> None:
    """Rule 1: the first closed ``` block (tag python/py, any case) is the code, trimmed."""
    assert select_code(text, None).code == code


# -- 2. and 3. the namespace, the registers and the built-ins --------------------------------


@pytest.mark.parametrize(
    ("context", "widths"),
    [
        ({}, (4, 4)),  # strict standalone
        ({"num_qubits": 2, "num_clbits": 0}, (2, 2)),  # no clbits: as many as the qubits
        ({"num_qubits": 3, "num_clbits": 1}, (3, 1)),
        ({"num_qubits": 0, "num_clbits": 0}, (4, 4)),
        ({"num_qubits": None, "num_clbits": 5}, (4, 5)),
    ],
)
def test_register_widths(context: dict[str, Any], widths: tuple[int, int]) -> None:
    """Rule 2: registers are 4 wide without context, else the target's (clbits default qubits)."""
    assert register_widths(context) == widths


def test_namespace_holds_exactly_the_preloaded_names() -> None:
    """Rule 2: the namespace's names, its registers and parameters (no `__name__`)."""
    namespace = pqid_bench.build_namespace(3, 2)
    assert set(namespace) == {
        "__builtins__",
        "np",
        "numpy",
        "math",
        "pi",
        "QuantumCircuit",
        "QuantumRegister",
        "ClassicalRegister",
        "Parameter",
        "ParameterVector",
        "qr",
        "q",
        "cr",
        "c",
        "theta",
        "phi",
        "lam",
        "gamma",
        "beta",
    }
    assert namespace["qr"] is namespace["q"] and namespace["cr"] is namespace["c"]
    assert (namespace["qr"].name, namespace["qr"].size) == ("q", 3)
    assert (namespace["cr"].name, namespace["cr"].size) == ("c", 2)
    assert namespace["lam"].name == "lambda" and namespace["theta"].name == "theta"
    assert namespace["np"] is namespace["numpy"] and namespace["pi"] == namespace["math"].pi


def test_safe_builtins_are_exactly_the_whitelist() -> None:
    """Rule 3: the built-ins are the safe set, a silent print and a guarded import."""
    table = pqid_bench.safe_builtins()
    assert set(table) == {*pqid_bench.SAFE_BUILTINS, "print", "__import__"}
    assert "reversed" in table and "print" in table
    for absent in (
        "__build_class__",
        "open",
        "eval",
        "exec",
        "getattr",
        "isinstance",
        "str",
        "type",
        "sorted",
        "globals",
        "Exception",
    ):
        assert absent not in table
    assert table["print"]("anything", end="", file=None) is None


def test_import_whitelist() -> None:
    """Rule 3: absolute imports of math, numpy and qiskit (and below) only."""
    guarded = pqid_bench.safe_builtins()["__import__"]
    assert callable(guarded)
    assert guarded("numpy.linalg", None, None, ("norm",), 0) is not None
    assert guarded("math") is not None
    for name in ("os", "qiskit_aer", "numpyx", "sys"):
        with pytest.raises(ImportError):
            guarded(name)
    with pytest.raises(ImportError):
        guarded("qiskit", None, None, (), 1)


# -- 5. the choice ----------------------------------------------------------------------------


def facts(name: str, qubits: int, clbits: int, **counts: int) -> Facts:
    return Facts(name=name, num_qubits=qubits, num_clbits=clbits, counts=dict(counts))


def test_strict_choice_is_the_first_name() -> None:
    """Rule 5: with no context (the strict run) the candidate whose name sorts first wins."""
    found = [facts("qc", 2, 2, h=1), facts("circuit", 9, 0), facts("Z", 1, 1)]
    assert choose(found, {}) == 2  # "Z" < "circuit" < "qc"
    assert choose([], {}) is None


def test_target_context_choice_weighs_qubits_clbits_and_gates() -> None:
    """Rule 5: 100 per qubit, 50 per clbit and 1 per gate (barriers left out) of distance."""
    target = {"num_qubits": 3, "num_clbits": 3, "gate_count": 5}
    near_width = facts("b", 3, 1, h=20)  # 0 + 100 + 15
    near_gates = facts("a", 4, 3, h=5, barrier=9)  # 100 + 0 + 0
    assert choose([near_width, near_gates], target) == 1
    tie = [facts("b", 3, 3, h=4), facts("a", 3, 3, h=6)]  # both 1 gate away: by name
    assert choose(tie, target) == 1


# -- 6. the signature -------------------------------------------------------------------------

TARGET = {
    "num_qubits": 2,
    "num_clbits": 2,
    "gate_count": 4,
    "gate_types": {"h": 1, "cx": 1, "measure": 2},
}


def test_signature_is_four_checks() -> None:
    """Rule 6: qubits, clbits, the complete count map and the scalar gate count."""
    result = signature(facts("qc", 2, 2, h=1, cx=1, measure=2), TARGET)
    assert result["checks"] == {
        "num_qubits_match": True,
        "num_clbits_match": True,
        "gate_count_match": True,
        "gate_types_match": True,
        "all_match": True,
    }
    result = signature(facts("qc", 2, 3, h=1, cx=1, measure=2), TARGET)
    assert not result["checks"]["num_clbits_match"] and not result["checks"]["all_match"]


def test_barriers_are_in_the_map_but_not_the_gate_count() -> None:
    """Rule 6: a barrier counts in the count map, never in the scalar gate count."""
    target = {**TARGET, "gate_types": {"h": 1, "cx": 1, "measure": 2, "barrier": 1}}
    with_barrier = signature(facts("qc", 2, 2, h=1, cx=1, measure=2, barrier=1), target)
    assert with_barrier["checks"]["all_match"]
    assert with_barrier["observed"]["gate_count"] == 4
    assert with_barrier["observed"]["raw_operation_count"] == 5
    without = signature(facts("qc", 2, 2, h=1, cx=1, measure=2), target)
    assert without["checks"]["gate_count_match"] and not without["checks"]["gate_types_match"]


def test_count_map_is_lower_cased_and_zero_is_absent() -> None:
    """Rule 6: names compare lower-cased; a target count of 0 (or None) equals no operation."""
    target = {**TARGET, "gate_types": {"H": 1, "CX": 1, "Measure": 2, "swap": 0, "x": None}}
    assert signature(facts("qc", 2, 2, h=1, cx=1, measure=2), target)["checks"]["all_match"]
    # A circuit's own names are lower-cased too; the later of two that collide replaces.
    assert observed_counts({"H": 2, "h": 1, "CX": 3}) == {"h": 1, "cx": 3}


def test_only_this_contract_produces_clbit_mismatch() -> None:
    """Category taxonomy: `clbit_mismatch` comes after `width_mismatch`, before gate types."""
    assert CATEGORIES.index("clbit_mismatch") == CATEGORIES.index("width_mismatch") + 1
    flags = dict(
        has_code=True,
        compiled=True,
        timed_out=False,
        execution_ok=True,
        circuit_found=True,
        width_match=True,
        gate_types_match=False,
        gate_counts_match=False,
    )
    assert categorize(**flags) == "gate_type_mismatch"  # the project's rules never ask
    assert categorize(**flags, clbits_match=False) == "clbit_mismatch"
    assert categorize(**{**flags, "width_match": False}, clbits_match=False) == "width_mismatch"


# -- the contract through the real evaluator --------------------------------------------------

BELL = "qc = QuantumCircuit(2, 2)\nqc.h(0)\nqc.cx(0, 1)\nqc.measure([0, 1], [0, 1])\n"
UNITARY_TARGET = {
    "num_qubits": 2,
    "num_clbits": 0,
    "gate_count": 2,
    "gate_types": {"h": 1, "cx": 1},
}
FIVE_TARGET = {"num_qubits": 5, "num_clbits": 0, "gate_count": 1, "gate_types": {"h": 1}}
BARRIER_TARGET = {**TARGET, "gate_types": {"h": 1, "cx": 1, "barrier": 1, "measure": 2}}
ESCAPE = 'real = QuantumCircuit.__init__.__globals__["__builtins__"]\n'

# prompt id -> (generated_code, content, target)
CASES: dict[str, tuple[str | None, str | None, dict[str, Any]]] = {
    "preloaded": (BELL, None, TARGET),
    "preloaded_registers": (
        "qc = QuantumCircuit(qr, cr)\nqc.h(0)\nqc.cx(0, 1)\nqc.measure(qr[0], cr[0])\n"
        "qc.measure(qr[1], cr[1])\n",
        None,
        TARGET,
    ),
    "silent_print": (BELL + "print('hello', qc)\nprint(end='', file=None)\n", None, TARGET),
    "reversed": (
        "qc = QuantumCircuit(2, 2)\nqc.h(0)\nqc.cx(0, 1)\n"
        "for i in reversed(range(2)):\n    qc.measure(i, i)\n",
        None,
        TARGET,
    ),
    "sorted_absent": ("order = sorted([1, 0])\n" + BELL, None, TARGET),
    "class_statement": ("class Helper:\n    pass\n" + BELL, None, TARGET),
    "import_os": ("import os\n" + BELL, None, TARGET),
    "import_aer": ("from qiskit_aer import AerSimulator\n" + BELL, None, TARGET),
    "import_allowed": (
        "import math\nimport numpy.linalg\nfrom qiskit import QuantumCircuit\n"
        "from qiskit.circuit.library import HGate\n" + BELL,
        None,
        TARGET,
    ),
    "relative_import": ("from . import helpers\n" + BELL, None, TARGET),
    "no_dunder_name": (BELL + 'if __name__ == "__main__":\n    pass\n', None, TARGET),
    "postponed_annotations": (
        "def build(n: Undefined) -> str:\n    return n\n" + BELL,
        None,
        TARGET,
    ),
    "syntax": ("qc = QuantumCircuit(2,\n", None, TARGET),
    "indentation": ("if True:\nqc = QuantumCircuit(2)\n", None, TARGET),
    "empty_fence": ("```python\n```", None, TARGET),
    "content_fallback": ("", f"Here:\n```python\n{BELL}```\n", TARGET),
    "blank_generated_code": ("   ", BELL, TARGET),
    "two_circuits": (
        "zz = QuantumCircuit(2, 2)\nzz.h(0)\nzz.cx(0, 1)\nzz.measure([0, 1], [0, 1])"
        "\naa = QuantumCircuit(3)\n",
        None,
        TARGET,
    ),
    "function_not_called": (
        "def build():\n" + textwrap.indent(BELL + "return qc\n", "    "),
        None,
        TARGET,
    ),
    "clbits": (BELL.replace("(2, 2)", "(2, 3)"), None, TARGET),
    "barrier_kept": (BELL.replace("qc.measure", "qc.barrier()\nqc.measure"), None, BARRIER_TARGET),
    "barrier_missing": (BELL, None, BARRIER_TARGET),
    "upper_case_target": (BELL, None, {**TARGET, "gate_types": {"H": 1, "CX": 1, "MEASURE": 2}}),
    "qasm3_refused": (
        "sub = QuantumCircuit(2, 2, name='hm')\nsub.h(0)\nsub.measure(0, 0)\n"
        "qc = QuantumCircuit(2, 2)\nqc.append(sub.to_instruction(), [0, 1], [0, 1])"
        "\n",
        None,
        TARGET,
    ),
    "statevector_ok": ("qc = QuantumCircuit(2)\nqc.h(0)\nqc.cx(0, 1)\n", None, UNITARY_TARGET),
    "statevector_measure": (BELL, None, TARGET),
    "statevector_wide": ("qc = QuantumCircuit(5)\nqc.h(0)\n", None, FIVE_TARGET),
    "statevector_unbound": (
        "qc = QuantumCircuit(2)\nqc.rx(theta, 0)\nqc.cx(0, 1)\n",
        None,
        UNITARY_TARGET,
    ),
    "odd_metadata": (BELL + "qc.metadata = {'seen': {1, 2}, 'why': ...}\n", None, TARGET),
    "lying_subclass": (
        ESCAPE + "make = real['type']\n"
        "Always = make('Always', (), {'__eq__': lambda self, other: True,"
        " '__hash__': lambda self: 0})\n"
        "Liar = make('Liar', (QuantumCircuit,), {"
        "'num_qubits': real['property'](lambda self: Always()),"
        " 'num_clbits': real['property'](lambda self: Always()),"
        " 'count_ops': lambda self: {'h': 1, 'cx': 1, 'measure': 2}})\n"
        "qc = Liar(1)\nqc.x(0)\n",
        None,
        TARGET,
    ),
}


def _job() -> dict[str, dict[str, Any]]:
    lines = [{"type": "config", "contract": CONTRACT_PQID_BENCH}]
    for prompt_id, (code, content, target) in CASES.items():
        lines.append(
            {
                "type": "item",
                "prompt_id": prompt_id,
                "content": content,
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
    return {
        m["evaluation"]["prompt_id"]: m["evaluation"] for m in messages if m["type"] == "evaluation"
    }


@pytest.fixture(scope="module")
def scored() -> dict[str, dict[str, Any]]:
    return _job()


def test_every_evaluation_names_its_contract_and_canonical_fields(
    scored: dict[str, dict[str, Any]],
) -> None:
    """Canonical fields: the contract, its predicate and every field PQID-Bench users read."""
    assert set(scored) == set(CASES)
    wanted = {
        "report_executable",
        "report_assembly_admissible",
        "report_signature_match",
        "num_qubits_match",
        "num_clbits_match",
        "gate_count_match",
        "gate_types_match",
        "selected_circuit_name",
        "execution_error_type",
        "empty_generation",
        "circuit_count",
        "execution_mode",
        "simulation",
        "target_context_recovery",
    }
    for ev in scored.values():
        assert ev["contract"] == CONTRACT_PQID_BENCH and ev["predicate"] == PREDICATE_PQID_BENCH
        assert wanted <= set(ev), wanted - set(ev)
        assert ev["execution_mode"] == "strict_standalone"
        assert ev["equivalent"] is None
        assert ev["equivalence_reason"] == "not part of the pqid-bench contract"
        assert ev["structural_match"] == ev["report_signature_match"]
        assert ev["qasm3_ok"] == ev["report_assembly_admissible"]
        assert ev["width_match"] == ev["num_qubits_match"]
        assert ev["gate_counts_match"] == ev["gate_count_match"]
        assert ev["report_executable"] == (ev["execution_ok"] and ev["circuit_found"])
        assert (ev["category"] == "ok") == ev["report_signature_match"]


def test_preloaded_names_need_no_import(scored: dict[str, dict[str, Any]]) -> None:
    """Rule 2: `QuantumCircuit` and friends are there without an import."""
    ev = scored["preloaded"]
    assert ev["category"] == "ok" and ev["report_signature_match"]
    assert (ev["selected_circuit_name"], ev["circuit_count"]) == ("qc", 1)


def test_strict_registers_are_four_wide_and_recovery_uses_the_target(
    scored: dict[str, dict[str, Any]],
) -> None:
    """Rules 2 and 9: `qr`/`cr` have 4 bits in the strict run, the target's in the recovery."""
    ev = scored["preloaded_registers"]
    assert ev["category"] == "width_mismatch"
    assert ev["structure"]["found"]["num_qubits"] == 4
    assert ev["target_context_recovery"]["report_signature_match"] is True


def test_print_is_silent_and_reversed_exists(scored: dict[str, dict[str, Any]]) -> None:
    """Rule 3: `print` writes nothing and returns None; `reversed` is admitted."""
    assert scored["silent_print"]["category"] == "ok"
    assert scored["silent_print"]["stdout_excerpt"] == ""
    assert scored["reversed"]["category"] == "ok"


@pytest.mark.parametrize(
    ("prompt_id", "error_type"),
    [
        ("sorted_absent", "NameError"),
        ("class_statement", "NameError"),  # no __build_class__
        ("no_dunder_name", "NameError"),
        ("import_os", "ImportError"),
        ("import_aer", "ImportError"),
        ("relative_import", "ImportError"),
    ],
)
def test_what_the_namespace_refuses(
    scored: dict[str, dict[str, Any]], prompt_id: str, error_type: str
) -> None:
    """Rules 2 and 3: outside the whitelist a name or an import fails the execution."""
    ev = scored[prompt_id]
    assert ev["category"] == "execution_error", ev["error"]
    assert ev["execution_error_type"] == error_type
    assert not ev["report_executable"] and ev["circuit_count"] is None
    assert ev["target_context_recovery"]["execution_error_type"] == error_type


def test_whitelisted_imports_and_postponed_annotations(scored: dict[str, dict[str, Any]]) -> None:
    """Rules 3 and 4: math/numpy/qiskit import; an annotation naming nothing is no error."""
    assert scored["import_allowed"]["category"] == "ok", scored["import_allowed"]["error"]
    assert scored["postponed_annotations"]["category"] == "ok"


def test_syntax_errors_are_named_by_their_class(scored: dict[str, dict[str, Any]]) -> None:
    """Rule 4: a SyntaxError (or its IndentationError subclass) is a failed execution."""
    assert scored["syntax"]["execution_error_type"] == "SyntaxError"
    assert scored["indentation"]["execution_error_type"] == "IndentationError"
    for prompt_id in ("syntax", "indentation"):
        assert scored[prompt_id]["category"] == "syntax_error"
        assert not scored[prompt_id]["report_executable"]


def test_empty_generation(scored: dict[str, dict[str, Any]]) -> None:
    """Rule 1: nothing to run is an empty generation in both runs, every check failed."""
    for prompt_id in ("empty_fence", "blank_generated_code"):
        ev = scored[prompt_id]
        assert ev["empty_generation"] is True and ev["category"] == "no_code"
        assert ev["execution_error_type"] == "EmptyGeneration"
        assert ev["simulation"] == {
            "eligible": False,
            "success": False,
            "skip_reason": "empty_generation",
            "error_type": None,
        }
        assert ev["target_context_recovery"]["execution_error_type"] == "EmptyGeneration"
        assert not ev["report_assembly_admissible"]


def test_content_is_the_code_when_generated_code_is_empty(
    scored: dict[str, dict[str, Any]],
) -> None:
    """Rule 1: `content` is read (and unfenced) only when `generated_code` is empty."""
    ev = scored["content_fallback"]
    assert ev["category"] == "ok" and ev["code_source"] == "content"
    assert ev["generated_code_length"] == len(BELL.strip())


def test_several_circuits(scored: dict[str, dict[str, Any]]) -> None:
    """Rule 5: strict picks the first name; the recovery run picks the closest to the target."""
    ev = scored["two_circuits"]
    assert (ev["selected_circuit_name"], ev["circuit_count"]) == ("aa", 2)
    assert ev["category"] == "width_mismatch"
    recovery = ev["target_context_recovery"]
    assert recovery["selected_circuit_name"] == "zz" and recovery["report_signature_match"]


def test_functions_are_not_called(scored: dict[str, dict[str, Any]]) -> None:
    """Rule 5: only circuits bound in the namespace count; no function is called."""
    ev = scored["function_not_called"]
    assert ev["category"] == "no_circuit" and ev["execution_ok"]
    assert ev["circuit_count"] == 0 and ev["execution_error_type"] is None


def test_classical_width_is_part_of_the_signature(scored: dict[str, dict[str, Any]]) -> None:
    """Rule 6: a circuit with the wrong number of clbits is a `clbit_mismatch`."""
    ev = scored["clbits"]
    assert ev["category"] == "clbit_mismatch" and not ev["num_clbits_match"]
    assert ev["num_qubits_match"] and ev["gate_types_match"] and ev["gate_count_match"]


def test_barriers_through_the_grader(scored: dict[str, dict[str, Any]]) -> None:
    """Rule 6: the barrier is required by the count map and ignored by the gate count."""
    assert scored["barrier_kept"]["category"] == "ok"
    ev = scored["barrier_missing"]
    assert ev["category"] == "gate_type_mismatch" and ev["gate_count_match"]
    assert "barrier: expected 1, found 0" in ev["structure"]["differences"]


def test_target_names_are_lower_cased(scored: dict[str, dict[str, Any]]) -> None:
    """Rule 6: target operation names compare lower-cased."""
    assert scored["upper_case_target"]["category"] == "ok"


def test_assembly_is_qasm3_export(scored: dict[str, dict[str, Any]]) -> None:
    """Rule 7: a circuit QASM 3 cannot express is executable but not assembly-admissible."""
    ev = scored["qasm3_refused"]
    assert ev["report_executable"] and not ev["report_assembly_admissible"]
    assert ev["qasm3_error"] == "QASM3ExporterError"


@pytest.mark.parametrize(
    ("prompt_id", "simulation"),
    [
        ("statevector_ok", {"eligible": True, "success": True, "skip_reason": None}),
        (
            "statevector_measure",
            {
                "eligible": False,
                "success": False,
                "skip_reason": "non_unitary_or_classical:measure",
            },
        ),
        (
            "statevector_wide",
            {"eligible": False, "success": False, "skip_reason": "too_many_qubits"},
        ),
        (
            "statevector_unbound",
            {"eligible": False, "success": False, "skip_reason": "unbound_parameters"},
        ),
    ],
)
def test_small_circuit_statevector_check(
    scored: dict[str, dict[str, Any]], prompt_id: str, simulation: dict[str, Any]
) -> None:
    """Rule 8: at most 4 qubits, no parameters, nothing classical; then a norm of 1."""
    assert scored[prompt_id]["simulation"] == {**simulation, "error_type": None}


def test_counts_come_from_the_grader_not_the_child(scored: dict[str, dict[str, Any]]) -> None:
    """Process model: a subclass lying about its width and counts is graded on its QPY."""
    ev = scored["lying_subclass"]
    assert not ev["report_signature_match"]
    assert not ev["num_qubits_match"] and not ev["num_clbits_match"]
    assert ev["structure"]["found"]["num_qubits"] == 1
    assert ev["structure"]["found"]["gate_types"] == {"x": 1}


def test_metadata_qpy_cannot_store_does_not_change_the_verdict(
    scored: dict[str, dict[str, Any]],
) -> None:
    """Process model: the hand-over to the grader must not fail a circuit the rules accept."""
    assert scored["odd_metadata"]["category"] == "ok", scored["odd_metadata"]["error"]


# -- the archived study: whole models scored as frozen ----------------------------------------

STUDY = "artifacts/external_model_batches_154"
ENDPOINTS = (
    "report_executable",
    "report_assembly_admissible",
    "report_signature_match",
    "num_qubits_match",
    "num_clbits_match",
    "gate_count_match",
    "gate_types_match",
    "selected_circuit_name",
    "execution_error_type",
    "circuit_count",
    "empty_generation",
)


def _frozen_verdict(record: dict[str, Any]) -> dict[str, Any]:
    """A harness-report record's verdict in the canonical fields."""
    execution, checks = record["execution"], record.get("structural_checks") or {}
    return {
        "report_executable": bool(
            execution.get("execution_success") and execution.get("circuit_found")
        ),
        "report_assembly_admissible": bool((execution.get("qasm3_export") or {}).get("success")),
        "report_signature_match": bool(checks.get("all_match")),
        **{key: bool(checks.get(key)) for key in ENDPOINTS[3:7]},
        "selected_circuit_name": execution.get("selected_circuit_name"),
        "execution_error_type": execution.get("execution_error_type"),
        "circuit_count": execution.get("circuit_count"),
        "empty_generation": record["empty_generation"],
    }


# Two models that score the same on this venv's Qiskit as on the frozen 2.1.1 (not every model
# does: a transpiled circuit or `draw("mpl")` depends on the environment; the pinned image is
# where all 21 agree). Llama 3.1 8B is the model the built-in correction moved most (61 cells).
@pytest.mark.parametrize("slug", ["groq_llama-3_1-8b-instant", "groq_llama-3_3-70b-versatile"])
def test_archived_responses_score_as_frozen(pqid_bench: Any, slug: str) -> None:
    """Every rule together: a frozen model's 154 archived responses get its frozen verdicts."""
    evidence = Path(pqid_bench.evidence)
    prompts = [
        json.loads(line)
        for line in (
            evidence / "artifacts/test_split_154/pqid_bench_external_generation_prompts_154.jsonl"
        )
        .read_text(encoding="utf-8")
        .splitlines()
        if line.strip()
    ]
    responses = {}
    for line in (
        (evidence / STUDY / "responses" / f"{slug}_responses.jsonl")
        .read_text(encoding="utf-8")
        .splitlines()
    ):
        if line.strip():
            response = json.loads(line)
            responses[response["prompt_id"]] = response
    report = json.loads(
        (
            evidence
            / STUDY
            / "evaluations"
            / slug
            / "pqid_bench_external_model_generation_harness_report.json"
        ).read_text()
    )
    frozen = {record["prompt_id"]: _frozen_verdict(record) for record in report["records"]}
    lines = [{"type": "config", "contract": CONTRACT_PQID_BENCH}] + [
        {
            "type": "item",
            "prompt_id": p["prompt_id"],
            "content": None,
            "generated_code": responses[p["prompt_id"]]["generated_code"],
            "target_metadata": p["target_metadata"],
        }
        for p in prompts
    ]
    proc = subprocess.run(
        [sys.executable, "-m", "evaluator", "serve"],
        input="".join(json.dumps(line) + "\n" for line in lines),
        capture_output=True,
        text=True,
        timeout=600,
        cwd="/tmp",
        start_new_session=True,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    scored = {
        m["evaluation"]["prompt_id"]: m["evaluation"]
        for m in map(json.loads, proc.stdout.splitlines())
        if m["type"] == "evaluation"
    }
    assert len(scored) == len(frozen) == 154
    disagreements = {
        pid: {
            key: (want[key], scored[pid].get(key))
            for key in ENDPOINTS
            if scored[pid].get(key) != want[key]
        }
        for pid, want in frozen.items()
    }
    assert {pid: d for pid, d in disagreements.items() if d} == {}
