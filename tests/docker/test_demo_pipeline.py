"""The main job end to end against the real Docker Engine, and every failure category
produced in the container by a response built to produce it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from engine.demo import DEMO_RELEASE_DIR
from engine.release import load_release
from engine.replay.replay import replay
from tests.conftest import BASE_IMAGE, _wheelhouse, cli
from tests.docker.test_replay_docker import replay_containers

pytestmark = pytest.mark.docker


def test_the_main_job_scores_the_oracle_at_100_percent(
    tmp_path: Path, docker_client: Any, image: str
) -> None:
    """`pqid-tui --batch demo`: oracle run, replay in Docker, comparison on the test split."""
    out = tmp_path / "demo"
    args = ["--batch", "demo", "--output-dir", str(out), "--base-image", BASE_IMAGE]
    if _wheelhouse():
        args += ["--wheelhouse", str(_wheelhouse())]
    result = cli(*args, timeout=1200)
    assert result.returncode == 0, result.stderr[-2000:]
    evaluations = [
        json.loads(line)
        for line in (out / "evaluation" / "pqid_bench_canonical_evaluations.jsonl")
        .read_text()
        .splitlines()
    ]
    release = load_release(DEMO_RELEASE_DIR)
    assert len(evaluations) == len(release.prompts) == 154
    assert all(
        e["category"] == "ok"
        and e["execution_ok"]
        and e["structural_match"]
        and e["qasm3_ok"]
        and e["equivalent"] is True
        for e in evaluations
    )
    summary = json.loads((out / "evaluation" / "pqid_bench_candidate_summary.json").read_text())
    assert summary["categories"].get("ok") == 154
    assert "publishable  yes" in result.stdout


GHZ3 = """from qiskit import QuantumCircuit


def build_circuit():
    qc = QuantumCircuit(3, 3)
    qc.h(0)
    qc.cx(0, 1)
    qc.cx(1, 2)
    qc.measure(range(3), range(3))
    return qc
"""
CATEGORY_RESPONSES = {
    "ok": GHZ3,
    "no_code": "I cannot help with that.",
    "syntax_error": "from qiskit import QuantumCircuit\ndef build_circuit(:\n    pass\n",
    "timeout": "while True:\n    pass\n",
    "execution_error": "from qiskit import execute\n",
    "no_circuit": "def build_circuit():\n    return 42\n",
    "width_mismatch": GHZ3.replace("QuantumCircuit(3, 3)", "QuantumCircuit(4, 3)"),
    "gate_type_mismatch": GHZ3.replace("qc.cx(1, 2)", "qc.cz(1, 2)"),
    "gate_count_mismatch": GHZ3.replace("qc.cx(1, 2)", "qc.cx(1, 2)\n    qc.cx(1, 2)"),
}


def test_every_category_in_the_container(tmp_path: Path, docker_client: Any, image: str) -> None:
    release = load_release(DEMO_RELEASE_DIR)
    target = next(
        p
        for p in release.prompts
        if p.target_metadata["family"] == "ghz"
        and p.target_metadata["num_qubits"] == 3
        and p.target_metadata["ops"] == {"cx": 2, "h": 1, "measure": 3}
    )
    # One release per category (a responses file holds one line per prompt).
    from tests.helpers import write_release

    lines = []
    for category in CATEGORY_RESPONSES:
        lines.append(
            {
                "prompt_id": f"case_{category}",
                "split": "test",
                "messages": list(target.messages),
                "target_metadata": dict(target.target_metadata),
            }
        )
    release_dir = write_release(tmp_path / "release", lines=lines)
    responses = tmp_path / "responses.jsonl"
    responses.write_text(
        "".join(
            json.dumps({"prompt_id": f"case_{c}", "content": text}) + "\n"
            for c, text in CATEGORY_RESPONSES.items()
        )
    )
    result = replay(
        release_dir,
        responses,
        tmp_path / "out",
        acknowledge_code_execution=True,
        build_image=True,
        base_image=BASE_IMAGE,
        wheelhouse=_wheelhouse(),
        timeout_seconds=5,
    )
    got = {e["prompt_id"].removeprefix("case_"): e["category"] for e in result.evaluations}
    assert got == {c: c for c in CATEGORY_RESPONSES}
    from engine.replay.docker import OWNER_LABEL, _owner

    mine = [c for c in replay_containers(docker_client) if c.labels.get(OWNER_LABEL) == _owner()]
    assert mine == []
