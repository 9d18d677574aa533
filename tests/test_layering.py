"""The engine and the evaluator run without the UI; the evaluator without anything but qiskit."""

from __future__ import annotations

import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.conftest import ROOT

ENGINE_MODULES = [
    "engine",
    "engine.run.live",
    "engine.run.plan",
    "engine.run.batch",
    "engine.run.recast",
    "engine.run.runs",
    "engine.rundir.records",
    "engine.release",
    "engine.release.prices",
    "engine.providers.credentials",
    "engine.providers.routes",
    "engine.providers.adapters",
    "engine.providers.oracle",
    "engine.providers.check",
    "engine.providers.model_identity",
    "engine.replay.docker",
    "engine.replay.replay",
    "engine.replay.compare",
    "engine.replay.evaluations",
]
EVALUATOR_MODULES = [
    "evaluator",
    "evaluator.extract",
    "evaluator.schema",
    "evaluator.supervisor",
    "evaluator.executor",
    "evaluator.grader",
]


@pytest.mark.parametrize("module", ENGINE_MODULES + EVALUATOR_MODULES)
def test_headless_modules_do_not_load_textual(module: str) -> None:
    code = (
        f"import sys, importlib; importlib.import_module({module!r}); "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('textual', 'pqid_tui')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True
    ).stdout.strip()
    assert out == "[]"


@pytest.mark.parametrize("module", EVALUATOR_MODULES)
def test_evaluator_imports_only_stdlib_and_qiskit(module: str) -> None:
    code = (
        f"import sys, importlib; importlib.import_module({module!r}); "
        "bad = ('engine', 'pydantic', 'httpx', 'docker', 'keyring', 'platformdirs', "
        "'textual', 'pqid_tui'); "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in bad))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True
    ).stdout.strip()
    assert out == "[]"


def test_import_linter_contracts_hold() -> None:
    lint = Path(sys.executable).parent / "lint-imports"
    result = subprocess.run([str(lint), "--no-cache"], capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_and_strict_mypy_are_clean() -> None:
    bin_dir = Path(sys.executable).parent
    ruff = subprocess.run(
        [str(bin_dir / "ruff"), "check", "."], capture_output=True, text=True, cwd=ROOT
    )
    assert ruff.returncode == 0, ruff.stdout[-3000:]
    # One layout for the whole tree: `ruff format` leaves every file as it is.
    fmt = subprocess.run(
        [str(bin_dir / "ruff"), "format", "--check", "."], capture_output=True, text=True, cwd=ROOT
    )
    assert fmt.returncode == 0, fmt.stdout[-3000:]
    mypy = subprocess.run([str(bin_dir / "mypy")], capture_output=True, text=True, cwd=ROOT)
    assert mypy.returncode == 0, mypy.stdout[-3000:]


def test_the_wheel_holds_the_product_only(tmp_path: Path) -> None:
    """Benchmarks, fake servers, the screenshot maker and the demo release's authoring code
    live under tests/ and stay out of the wheel; the bundled demo release goes in."""
    pip = [
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "--quiet",
        "--no-deps",
        "--no-build-isolation",
        "--wheel-dir",
        str(tmp_path),
        str(ROOT),
    ]
    result = subprocess.run(pip, capture_output=True, text=True, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    (wheel,) = tmp_path.glob("pqid_tui-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert tops == {"engine", "evaluator", "pqid_tui"}
    assert "engine/demo/release/prompts.jsonl" in names
    assert "evaluator/Dockerfile" in names
    tools = re.compile(
        r"(^|/)(bench|fakes|tools)/|bench_(live|replay|rescore|governor)|loopback"
        r"|screenshots|demo[_/](build|families|frozen)"
    )
    assert not [n for n in names if tools.search(n)]
