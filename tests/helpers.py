"""Building small releases for tests (metadata here is test data, not a release of the project)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

GHZ_CODE = """from qiskit import QuantumCircuit


def build_circuit():
    qc = QuantumCircuit({n}, {n})
    qc.h(0)
    for i in range({n} - 1):
        qc.cx(i, i + 1)
    qc.measure(range({n}), range({n}))
    return qc
"""


def prompt_line(pid: str, n: int, split: str = "test") -> dict[str, Any]:
    return {
        "prompt_id": pid,
        "split": split,
        "messages": [
            {"role": "system", "content": "Answer with Python code only."},
            {"role": "user", "content": f"Build a {n}-qubit GHZ circuit ({pid}) with measurement."},
        ],
        "target_metadata": {
            "family": "ghz",
            "entrypoint": "build_circuit",
            "num_qubits": n,
            "num_clbits": n,
            "ops": {"cx": n - 1, "h": 1, "measure": n},
            "depth": n + 1,
            "reference_code": GHZ_CODE.format(n=n) + f"# SECRET-REFERENCE-MARKER-{pid}\n",
        },
    }


def write_release(
    root: Path,
    count: int = 6,
    *,
    lines: list[dict[str, Any]] | None = None,
    frozen: dict[str, list[dict[str, Any]]] | None = None,
) -> Path:
    """A pqid-release/1 directory with `count` GHZ prompts (or the given lines)."""
    root.mkdir(parents=True, exist_ok=True)
    if lines is None:
        lines = [
            prompt_line(f"ghz_{i:02d}", 2 + i % 4, "test" if i % 3 else "dev") for i in range(count)
        ]
    data = "".join(json.dumps(line, sort_keys=True) + "\n" for line in lines).encode()
    (root / "prompts.jsonl").write_bytes(data)
    files: dict[str, str] = {}
    if frozen is not None:
        (root / "frozen").mkdir(exist_ok=True)
        rows = []
        for label, evaluations in frozen.items():
            rel = f"frozen/{label}.evaluations.jsonl"
            (root / rel).write_text("".join(json.dumps(e) + "\n" for e in evaluations))
            rows.append(
                {
                    "label": label,
                    "kind": "reference",
                    "provider": None,
                    "model": None,
                    "evaluations": rel,
                }
            )
        (root / "frozen" / "matrix.json").write_text(json.dumps({"rows": rows}))
        for path in sorted((root / "frozen").iterdir()):
            rel = f"frozen/{path.name}"
            files[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    manifest = {
        "format": "pqid-release/1",
        "name": "test-release",
        "version": "0.0.1",
        "prompts": {
            "path": "prompts.jsonl",
            "count": len(lines),
            "sha256": hashlib.sha256(data).hexdigest(),
        },
        "files": files,
        "evaluator": {"version": "0.1.0"},
    }
    (root / "release.json").write_text(json.dumps(manifest, indent=2))
    return root


def tree_bytes(root: Path) -> dict[str, bytes]:
    """Every file under root with its bytes (to prove something changed nothing)."""
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }
