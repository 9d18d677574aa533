"""The bundled demo release: 154 Qiskit circuit prompts in `pqid-release/1` format.

`DEMO_RELEASE_DIR` is the release directory shipped as package data. It is produced by
`python -m tests.tools.demo_build` (which needs qiskit); reading it needs nothing but the engine.
"""

from __future__ import annotations

from pathlib import Path

DEMO_RELEASE_DIR: Path = Path(__file__).resolve().parent / "release"

__all__ = ["DEMO_RELEASE_DIR"]
