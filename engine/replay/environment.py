"""Evaluation environments: the exact package set a release is scored in, and how to check one.

A release names the pins of its frozen rows (`Release.evaluator_requirements`, and
`Release.python_version` for the interpreter). When those pins are only the top of the
dependency tree (PQID-Bench pins qiskit, qiskit-aer and python-dateutil), the project keeps the
complete, exact set for that release as a pin file of its own under `evaluator/environments/`
(package data, one file per frozen environment, each saying how it was derived and which Python
it is for in a `# python: X.Y` line). The engine builds the evaluator image from that set, and
every replay records what the image actually holds and whether it is what the release pins.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_SEPARATORS = re.compile(r"[-_.]+")
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*([A-Za-z0-9.+!_-]+)$")
_PYTHON_LINE = re.compile(r"^#\s*python:\s*(\d+\.\d+)\s*$")

SOURCE_PROJECT = "evaluator/requirements.txt"
SOURCE_RELEASE = "release"


def canonical_name(name: str) -> str:
    """A distribution's name as package indexes compare it (PEP 503)."""
    return _SEPARATORS.sub("-", name).lower()


def parse_pins(requirements: Sequence[str]) -> dict[str, str]:
    """`name==version` lines as {canonical name: version}; other lines are ignored."""
    pins: dict[str, str] = {}
    for line in requirements:
        match = _PIN.match(line.split("#", 1)[0].strip())
        if match:
            pins[canonical_name(match.group(1))] = match.group(2)
    return pins


def python_series(version: str | None) -> str | None:
    """`3.13.5` -> `3.13` (the part a pin names)."""
    if not version:
        return None
    parts = version.split(".")
    return ".".join(parts[:2]) if len(parts) >= 2 else version


@dataclass(frozen=True, slots=True)
class EnvironmentPin:
    """What a release is scored in: an interpreter series and an exact package set."""

    python: str | None  # "3.13"; None: the release does not pin one
    requirements: tuple[str, ...]
    source: str  # where the set comes from: a pin file, the release itself, the project

    @property
    def pins(self) -> dict[str, str]:
        return parse_pins(self.requirements)

    def to_dict(self) -> dict[str, Any]:
        return {
            "python": self.python,
            "requirements": list(self.requirements),
            "source": self.source,
        }


def environments_dir() -> Path:
    """The project's pin files, one per frozen environment (shipped with the evaluator)."""
    import evaluator

    return Path(evaluator.__file__).resolve().parent / "environments"


def read_pin_file(path: Path) -> tuple[str | None, tuple[str, ...]]:
    """A pin file's `# python: X.Y` and its requirement lines."""
    python: str | None = None
    lines: list[str] = []
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        found = _PYTHON_LINE.match(line)
        if found:
            python = found.group(1)
        elif line and not line.startswith("#"):
            lines.append(line)
    return python, tuple(lines)


def release_environment(
    requirements: Sequence[str] | None, python_version: str | None, *, directory: Path | None = None
) -> EnvironmentPin:
    """The complete environment for a release's pins.

    No pins: the project's own `evaluator/requirements.txt`. Pins that a project pin file
    contains exactly (same versions, same Python): that file's complete set. Otherwise the
    release's pins as they are (complete or not: the replay's record says what else the
    image holds).
    """
    if requirements is None:
        _, project = read_pin_file(environments_dir().parent / "requirements.txt")
        return EnvironmentPin(python_version, project, SOURCE_PROJECT)
    wanted = parse_pins(requirements)
    folder = directory or environments_dir()
    if wanted and folder.is_dir():
        for path in sorted(folder.glob("*.txt")):
            python, lines = read_pin_file(path)
            if python_version is not None and python != python_version:
                continue
            have = parse_pins(lines)
            if all(have.get(name) == version for name, version in wanted.items()):
                return EnvironmentPin(
                    python or python_version, lines, f"evaluator/environments/{path.name}"
                )
    return EnvironmentPin(python_version, tuple(requirements), SOURCE_RELEASE)


def environment_differences(pin: EnvironmentPin, facts: Mapping[str, Any]) -> list[str]:
    """How an environment differs from a pin, one sentence each (empty: it is the pinned one).

    `facts` is what an image holds: `python`, `packages` {name: version} and `complete` (True
    when `packages` lists every installed distribution, as an image probe does; the
    evaluator's own `hello` names only a few, so nothing is concluded about the others).
    """
    out: list[str] = []
    python = facts.get("python")
    if pin.python is not None:
        if not isinstance(python, str):
            out.append(f"the Python version is unknown; the release pins {pin.python}")
        elif python_series(python) != pin.python:
            out.append(f"python {python} where the release pins {pin.python}")
    raw = facts.get("packages")
    installed = (
        {canonical_name(str(k)): str(v) for k, v in raw.items() if v is not None}
        if isinstance(raw, Mapping)
        else {}
    )
    complete = bool(facts.get("complete"))
    pins = pin.pins
    for name, version in sorted(pins.items()):
        have = installed.get(name)
        if have is None:
            if complete:
                out.append(f"{name} is not installed; the release pins {version}")
        elif have != version:
            out.append(f"{name} {have} where the release pins {version}")
    if complete:
        for name in sorted(set(installed) - set(pins)):
            out.append(f"{name} {installed[name]} is installed but not pinned")
    return out


def hello_facts(environment: Mapping[str, Any] | None) -> dict[str, Any]:
    """The evaluator's own `hello` environment as facts (python and the few packages it names)."""
    env = dict(environment or {})
    python = env.get("python")
    packages = {
        canonical_name(str(k)): v
        for k, v in env.items()
        if k not in ("python", "implementation", "machine") and isinstance(v, str)
    }
    return {
        "python": python if isinstance(python, str) else None,
        "packages": packages,
        "complete": False,
    }
