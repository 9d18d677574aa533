"""The bundled demo release: reproducible byte for byte, well formed, and its references right.

Every number in a prompt's target metadata is recomputed here with qiskit, independently of
the builder, and each family's reference solution is checked to do what its task says
(prepares the named state, finds the marked item, adds the numbers, ...).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import shutil
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from qiskit import QuantumCircuit
from qiskit.circuit.library import QFTGate
from qiskit.quantum_info import DensityMatrix, Operator, Statevector, partial_trace

import evaluator
from engine.demo import DEMO_RELEASE_DIR
from tests.tools import demo_build
from tests.tools.demo_families import CONTRACT, SYSTEM_PROMPT

REPO = Path(__file__).resolve().parents[2]


def _load(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


PROMPTS = _load(DEMO_RELEASE_DIR / "prompts.jsonl")
BY_ID = {p["prompt_id"]: p for p in PROMPTS}


def _family(name: str) -> list[dict[str, Any]]:
    return [p for p in PROMPTS if p["target_metadata"]["family"] == name]


def _ids(name: str) -> list[str]:
    return [p["prompt_id"] for p in _family(name)]


_circuits: dict[str, QuantumCircuit] = {}


def circuit_of(prompt_id: str) -> QuantumCircuit:
    """Execute a prompt's reference code (once) and return its circuit."""
    if prompt_id not in _circuits:
        namespace: dict[str, Any] = {}
        exec(BY_ID[prompt_id]["target_metadata"]["reference_code"], namespace)
        circuit = namespace["build_circuit"]()
        assert isinstance(circuit, QuantumCircuit)
        _circuits[prompt_id] = circuit
    return _circuits[prompt_id]


def unitary_part(circuit: QuantumCircuit) -> QuantumCircuit:
    return circuit.remove_final_measurements(inplace=False)


def outcome_probabilities(circuit: QuantumCircuit) -> dict[str, float]:
    """Distribution of the classical register, keys in Qiskit order (clbit 0 rightmost)."""
    measured: dict[int, int] = {}
    for instruction in circuit.data:
        if instruction.operation.name == "measure":
            clbit = circuit.find_bit(instruction.clbits[0]).index
            measured[clbit] = circuit.find_bit(instruction.qubits[0]).index
    assert sorted(measured) == list(range(circuit.num_clbits))
    state = Statevector(unitary_part(circuit))
    qargs = [measured[c] for c in range(circuit.num_clbits)]
    return {k: v for k, v in state.probabilities_dict(qargs=qargs).items() if v > 1e-9}


def certain_outcome(circuit: QuantumCircuit) -> str:
    probabilities = outcome_probabilities(circuit)
    assert len(probabilities) == 1, probabilities
    ((outcome, probability),) = probabilities.items()
    assert probability == pytest.approx(1.0)
    return outcome


# --- the release as files --------------------------------------------------------------


def test_check_passes_on_the_committed_release() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "tests.tools.demo_build", "--check"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("OK ")
    assert len(result.stdout.splitlines()) == 1


def test_manifest_names_every_file_with_its_digest() -> None:
    manifest = json.loads((DEMO_RELEASE_DIR / "release.json").read_text(encoding="utf-8"))
    assert manifest["format"] == "pqid-release/1"
    assert manifest["name"] == "pqid-demo"
    assert manifest["version"] == "1.0.0"
    assert manifest["evaluator"] == {
        "version": evaluator.__version__,
        "requirements": demo_build.evaluator_requirements(),
    }
    prompts_bytes = (DEMO_RELEASE_DIR / "prompts.jsonl").read_bytes()
    assert manifest["prompts"] == {
        "path": "prompts.jsonl",
        "count": len(PROMPTS),
        "sha256": hashlib.sha256(prompts_bytes).hexdigest(),
    }
    frozen = sorted(f"frozen/{p.name}" for p in (DEMO_RELEASE_DIR / "frozen").iterdir())
    assert sorted(manifest["files"]) == frozen
    assert "frozen/matrix.json" in frozen
    for name, digest in manifest["files"].items():
        assert hashlib.sha256((DEMO_RELEASE_DIR / name).read_bytes()).hexdigest() == digest
    assert "rows" in json.loads((DEMO_RELEASE_DIR / "frozen/matrix.json").read_text())


def test_a_fresh_build_is_byte_identical_and_starts_an_empty_matrix(tmp_path: Path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    assert demo_build.main(["--output", str(first)]) == 0
    assert demo_build.main(["--output", str(second)]) == 0
    for name in ("prompts.jsonl", "release.json", "frozen/matrix.json"):
        assert (first / name).read_bytes() == (second / name).read_bytes()
    assert (first / "prompts.jsonl").read_bytes() == (
        DEMO_RELEASE_DIR / "prompts.jsonl"
    ).read_bytes()
    assert (first / "frozen/matrix.json").read_text() == '{\n  "rows": []\n}\n'
    manifest = json.loads((first / "release.json").read_text())
    assert list(manifest["files"]) == ["frozen/matrix.json"]
    assert (first / "release.json").read_bytes().endswith(b"}\n")


def test_an_existing_frozen_matrix_is_kept_and_listed(tmp_path: Path) -> None:
    release = tmp_path / "release"
    (release / "frozen").mkdir(parents=True)
    matrix = b'{"rows": [{"label": "oracle"}]}\n'
    (release / "frozen/matrix.json").write_bytes(matrix)
    (release / "frozen/oracle.evaluations.jsonl").write_bytes(b"{}\n")
    assert demo_build.main(["--output", str(release)]) == 0
    assert (release / "frozen/matrix.json").read_bytes() == matrix
    files = json.loads((release / "release.json").read_text())["files"]
    assert files == {
        "frozen/matrix.json": hashlib.sha256(matrix).hexdigest(),
        "frozen/oracle.evaluations.jsonl": hashlib.sha256(b"{}\n").hexdigest(),
    }
    assert demo_build.check(release) == []


def test_check_names_each_difference(tmp_path: Path) -> None:
    release = tmp_path / "release"
    shutil.copytree(DEMO_RELEASE_DIR, release)
    lines = (release / "prompts.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    tampered = json.loads(lines[3])
    tampered["target_metadata"]["depth"] += 1
    lines[3] = json.dumps(tampered, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    lines[3] += "\n"
    (release / "prompts.jsonl").write_text("".join(lines), encoding="utf-8")
    with (release / "frozen/matrix.json").open("a") as handle:
        handle.write(" ")
    (release / "frozen/unlisted.jsonl").write_text("{}\n")

    problems = demo_build.check(release)
    text = "\n".join(problems)
    assert f"prompt {tampered['prompt_id']} differs" in text
    assert "prompts.jsonl: sha256 does not match release.json" in text
    assert "frozen/matrix.json: sha256 does not match release.json" in text
    assert "release.json: differs from a fresh build" in text

    result = subprocess.run(
        [sys.executable, "-m", "tests.tools.demo_build", "--check", "--output", str(release)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 1
    assert tampered["prompt_id"] in result.stderr


def test_the_engine_side_needs_no_qiskit() -> None:
    code = (
        "import sys, engine.demo, tests.tools.demo_families, tests.tools.demo_build\n"
        "assert 'qiskit' not in sys.modules, 'qiskit imported at module level'\n"
        "assert (engine.demo.DEMO_RELEASE_DIR / 'release.json').is_file()\n"
    )
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True, timeout=120)


# --- the panel -------------------------------------------------------------------------


def test_panel_size_families_and_splits() -> None:
    assert len(PROMPTS) >= 150
    ids = [p["prompt_id"] for p in PROMPTS]
    assert len(set(ids)) == len(ids)
    assert all(re.fullmatch(r"[a-z0-9_]+", i) for i in ids)
    splits: dict[str, Counter[str]] = defaultdict(Counter)
    for p in PROMPTS:
        splits[p["target_metadata"]["family"]][p["split"]] += 1
    assert len(splits) >= 12
    for family, counts in splits.items():
        assert counts == Counter(dev=6, test=5), family


def test_test_split_is_not_just_the_largest_sizes() -> None:
    for family in {p["target_metadata"]["family"] for p in PROMPTS}:
        sizes = {
            split: sorted(
                p["target_metadata"]["size"] for p in _family(family) if p["split"] == split
            )
            for split in ("dev", "test")
        }
        assert min(sizes["test"]) <= max(sizes["dev"]), (family, sizes)


@pytest.mark.parametrize("prompt_id", sorted(BY_ID))
def test_metadata_is_what_the_reference_code_builds(prompt_id: str) -> None:
    meta = BY_ID[prompt_id]["target_metadata"]
    circuit = circuit_of(prompt_id)
    ops = {name: count for name, count in circuit.count_ops().items() if name != "barrier"}
    assert meta["ops"] == ops
    assert list(meta["ops"]) == sorted(meta["ops"])
    assert meta["num_qubits"] == circuit.num_qubits <= 12
    assert meta["num_clbits"] == circuit.num_clbits
    assert meta["depth"] == circuit.depth()
    assert meta["entrypoint"] == "build_circuit"
    assert isinstance(meta["size"], int)
    assert set(meta) == {
        "family", "size", "entrypoint", "num_qubits", "num_clbits", "ops", "depth",
        "reference_code",
    }  # fmt: skip


def test_messages_carry_the_task_and_nothing_evaluator_only() -> None:
    for p in PROMPTS:
        system, user = p["messages"]
        assert system == {"role": "system", "content": SYSTEM_PROMPT}
        assert user["role"] == "user"
        assert user["content"].endswith(CONTRACT)
        for message in p["messages"]:
            assert p["target_metadata"]["reference_code"] not in message["content"]
            assert "target_metadata" not in message["content"]
            assert "def build_circuit" not in message["content"]
        assert set(p) == {"prompt_id", "split", "messages", "target_metadata"}


def test_most_circuits_stay_small_enough_for_unitary_comparison() -> None:
    wide = [p["prompt_id"] for p in PROMPTS if p["target_metadata"]["num_qubits"] > 8]
    assert len(wide) <= 5, wide


# --- the references do what the tasks say ----------------------------------------------


def _basis(n: int, *ones: int) -> Statevector:
    return Statevector.from_int(sum(1 << q for q in ones), 2**n)


def _bell_expected(prompt_id: str, n: int) -> Statevector:
    s = 1 / math.sqrt(2)
    if prompt_id == "bell_two_pairs":
        phi = s * (_basis(2).data + _basis(2, 0, 1).data)
        psi = s * (_basis(2, 1).data + _basis(2, 0).data)
        return Statevector(np.kron(psi, phi))
    if prompt_id == "bell_phi_plus_outer":
        return Statevector(s * (_basis(3).data + _basis(3, 0, 2).data))
    kind = prompt_id.removeprefix("bell_").removesuffix("_nomeas").removesuffix("_q1_control")
    sign = -1 if kind.endswith("minus") else 1
    if kind.startswith("phi"):
        return Statevector(s * (_basis(n).data + sign * _basis(n, 0, 1).data))
    # Ψ± with qubit 0 written first: (|0⟩_0|1⟩_1 ± |1⟩_0|0⟩_1)/√2
    return Statevector(s * (_basis(n, 1).data + sign * _basis(n, 0).data))


@pytest.mark.parametrize("prompt_id", _ids("bell"))
def test_bell_prepares_the_named_state(prompt_id: str) -> None:
    circuit = unitary_part(circuit_of(prompt_id))
    expected = _bell_expected(prompt_id, circuit.num_qubits)
    assert Statevector(circuit).equiv(expected)


@pytest.mark.parametrize("prompt_id", _ids("ghz"))
def test_ghz_prepares_ghz(prompt_id: str) -> None:
    circuit = unitary_part(circuit_of(prompt_id))
    n = circuit.num_qubits
    expected = (_basis(n).data + _basis(n, *range(n)).data) / math.sqrt(2)
    assert Statevector(circuit).equiv(Statevector(expected))


@pytest.mark.parametrize("prompt_id", _ids("w_state"))
def test_w_state_prepares_w(prompt_id: str) -> None:
    circuit = unitary_part(circuit_of(prompt_id))
    n = circuit.num_qubits
    expected = sum(_basis(n, q).data for q in range(n)) / math.sqrt(n)
    assert Statevector(circuit).equiv(Statevector(expected))


def _reversal(n: int) -> QuantumCircuit:
    circuit = QuantumCircuit(n)
    for i in range(n // 2):
        circuit.swap(i, n - 1 - i)
    return circuit


@pytest.mark.parametrize("prompt_id", _ids("qft"))
def test_qft_is_the_fourier_transform(prompt_id: str) -> None:
    circuit = unitary_part(circuit_of(prompt_id))
    n = circuit.num_qubits
    if prompt_id.endswith("_noswap"):
        circuit = circuit.compose(_reversal(n))
    if "_input_" in prompt_id:
        value = int(prompt_id.rsplit("_", 1)[1])
        expected = Statevector.from_int(value, 2**n).evolve(QFTGate(n))
        assert Statevector(circuit).equiv(expected)
    else:
        assert Operator(circuit).equiv(Operator(QFTGate(n)))


@pytest.mark.parametrize("prompt_id", _ids("inverse_qft"))
def test_inverse_qft_inverts_the_fourier_transform(prompt_id: str) -> None:
    circuit = circuit_of(prompt_id)
    n = circuit.num_qubits
    if "_fourier_" in prompt_id:
        value = int(prompt_id.rsplit("_", 1)[1])
        assert int(certain_outcome(circuit), 2) == value
        return
    unitary = unitary_part(circuit)
    if prompt_id.endswith("_noswap"):
        unitary = _reversal(n).compose(unitary)
    assert Operator(unitary).equiv(Operator(QFTGate(n).inverse()))


@pytest.mark.parametrize("prompt_id", _ids("bernstein_vazirani"))
def test_bernstein_vazirani_reveals_the_secret(prompt_id: str) -> None:
    assert certain_outcome(circuit_of(prompt_id)) == prompt_id.rsplit("_", 1)[1]


@pytest.mark.parametrize("prompt_id", _ids("deutsch_jozsa"))
def test_deutsch_jozsa_tells_constant_from_balanced(prompt_id: str) -> None:
    circuit = circuit_of(prompt_id)
    zeros = "0" * circuit.num_clbits
    p_zero = outcome_probabilities(circuit).get(zeros, 0.0)
    assert p_zero == pytest.approx(1.0 if "_const" in prompt_id else 0.0, abs=1e-9)


@pytest.mark.parametrize("prompt_id", _ids("grover"))
def test_grover_finds_the_marked_state(prompt_id: str) -> None:
    marked = prompt_id.rsplit("_m", 1)[1]
    probabilities = outcome_probabilities(circuit_of(prompt_id))
    assert max(probabilities, key=probabilities.__getitem__) == marked
    assert probabilities[marked] > 0.9


@pytest.mark.parametrize("prompt_id", _ids("phase_estimation"))
def test_phase_estimation_reads_the_phase(prompt_id: str) -> None:
    match = re.fullmatch(r"phase_estimation_t(\d+)_(\d+)_(\d+)", prompt_id)
    assert match is not None
    t, num, den = map(int, match.groups())
    probabilities = outcome_probabilities(circuit_of(prompt_id))
    best = max(probabilities, key=probabilities.__getitem__)
    assert int(best, 2) == round(num / den * 2**t) % 2**t
    if (num * 2**t) % den == 0:
        assert probabilities[best] == pytest.approx(1.0)


@pytest.mark.parametrize("prompt_id", _ids("teleportation"))
def test_teleportation_delivers_the_message(prompt_id: str) -> None:
    circuit = unitary_part(circuit_of(prompt_id))
    n = circuit.num_qubits
    prep = QuantumCircuit(1)
    for instruction in circuit.data:
        if any(circuit.find_bit(q).index != 0 for q in instruction.qubits):
            break
        prep.append(instruction.operation, [0])
    assert len(prep.data) >= 1
    bob = partial_trace(Statevector(circuit), list(range(n - 1)))
    assert bob == DensityMatrix(Statevector(prep))


@pytest.mark.parametrize("prompt_id", _ids("adder"))
def test_adder_adds(prompt_id: str) -> None:
    outcome = int(certain_outcome(circuit_of(prompt_id)), 2)
    digits = dict(re.findall(r"_([abc])(\d+)", prompt_id))
    total = sum(int(v) for v in digits.values())
    # sum bit(s) in the low clbits, the carry in the top clbit: the outcome reads a + b (+ c)
    assert outcome == total


@pytest.mark.parametrize("prompt_id", _ids("swap_test"))
def test_swap_test_measures_the_overlap(prompt_id: str) -> None:
    circuit = circuit_of(prompt_id)
    k = (circuit.num_qubits - 1) // 2
    prep = QuantumCircuit(circuit.num_qubits)
    for instruction in circuit.data:
        if instruction.operation.name == "h" and circuit.find_bit(instruction.qubits[0]).index == 0:
            break
        prep.append(instruction.operation, [circuit.find_bit(q).index for q in instruction.qubits])
    state = Statevector(prep)
    swap = QuantumCircuit(circuit.num_qubits)
    for i in range(k):
        swap.swap(1 + i, 1 + k + i)
    overlap = float(np.real(state.inner(state.evolve(swap))))  # |<A|B>|² for product states
    assert outcome_probabilities(circuit)["0"] == pytest.approx((1 + overlap) / 2)


@pytest.mark.parametrize("prompt_id", _ids("qaoa_layer") + _ids("hardware_efficient_ansatz"))
def test_variational_circuits_are_unitary_before_measurement(prompt_id: str) -> None:
    circuit = unitary_part(circuit_of(prompt_id))
    assert "measure" not in circuit.count_ops()
    assert Statevector(circuit).is_valid()
