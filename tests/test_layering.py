"""The engine and the evaluator run without the UI; the evaluator without anything but qiskit."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

ENGINE_MODULES = ["engine", "engine.runner", "engine.plan", "engine.records", "engine.release",
                  "engine.credentials", "engine.routes", "engine.adapters", "engine.oracle",
                  "engine.docker_runner", "engine.replay", "engine.compare",
                  "engine.evaluations", "engine.batch_api", "engine.prices", "engine.recast",
                  "engine.provider_check", "engine.runs", "engine.model_identity"]
EVALUATOR_MODULES = ["evaluator", "evaluator.extract", "evaluator.schema",
                     "evaluator.supervisor", "evaluator.executor", "evaluator.grader"]


@pytest.mark.parametrize("module", ENGINE_MODULES + EVALUATOR_MODULES)
def test_headless_modules_do_not_load_textual(module: str) -> None:
    code = (f"import sys, importlib; importlib.import_module({module!r}); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('textual', 'pqid_tui')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, check=True).stdout.strip()
    assert out == "[]"


@pytest.mark.parametrize("module", EVALUATOR_MODULES)
def test_evaluator_imports_only_stdlib_and_qiskit(module: str) -> None:
    code = (f"import sys, importlib; importlib.import_module({module!r}); "
            "bad = ('engine', 'pydantic', 'httpx', 'docker', 'keyring', 'platformdirs', "
            "'textual', 'pqid_tui'); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in bad))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, check=True).stdout.strip()
    assert out == "[]"


def test_import_linter_contracts_hold() -> None:
    lint = Path(sys.executable).parent / "lint-imports"
    result = subprocess.run([str(lint), "--no-cache"], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_and_strict_mypy_are_clean() -> None:
    bin_dir = Path(sys.executable).parent
    ruff = subprocess.run([str(bin_dir / "ruff"), "check", "."], capture_output=True, text=True,
                          cwd=ROOT)
    assert ruff.returncode == 0, ruff.stdout[-3000:]
    mypy = subprocess.run([str(bin_dir / "mypy")], capture_output=True, text=True, cwd=ROOT)
    assert mypy.returncode == 0, mypy.stdout[-3000:]
