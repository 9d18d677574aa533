"""Builds and checks the demo release: `python -m tests.tools.demo_build [--output DIR] [--check]`.

Without flags it regenerates `prompts.jsonl` and `release.json` in the bundled release
directory; every number in a prompt's target metadata comes from executing its reference
code with qiskit here. The frozen model matrix is not built here (`tests.tools.demo_frozen`
scores its rows in the evaluator container): an existing `frozen/matrix.json` is left as it
is, a missing one starts as `{"rows": []}`, and `release.json` records the SHA-256 of every
file under `frozen/`. `release.json` also pins the evaluation environment: the evaluator
version and the exact pins of `evaluator/requirements.txt` (its non-comment lines, in file
order), which replay then installs instead of the file, so that a candidate is scored in the
environment the frozen rows were scored in.

`--check` rebuilds into a temporary directory, compares it with the committed release
byte for byte and verifies every digest in `release.json`.

qiskit is imported only while building: the engine reads the release without it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
import time
import warnings
from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from engine.demo import DEMO_RELEASE_DIR
from tests.tools.demo_families import ENTRYPOINT, SYSTEM_PROMPT, Variant, all_variants

FORMAT = "pqid-release/1"
NAME = "pqid-demo"
VERSION = "1.0.0"
PROMPTS_FILE = "prompts.jsonl"
MANIFEST_FILE = "release.json"
FROZEN_DIR = "frozen"
MATRIX_FILE = "frozen/matrix.json"

TEST_PER_FAMILY = 5
MIN_PROMPTS = 150
MIN_FAMILIES = 12
MAX_QUBITS = 12
_SPLIT_SALT = "pqid-demo/split/"


class BuildError(Exception):
    """The panel or a reference circuit breaks one of the release's invariants."""


# --- prompts ---------------------------------------------------------------------------


def reference_metadata(source: str) -> dict[str, Any]:
    """Execute one reference solution and describe the circuit it returns."""
    from qiskit import QuantumCircuit

    namespace: dict[str, Any] = {"__name__": "pqid_demo_reference"}
    # A deprecated API in a reference would make the release depend on a warning filter.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        exec(compile(source, "<reference_code>", "exec"), namespace)
        circuit = namespace[ENTRYPOINT]()
    if not isinstance(circuit, QuantumCircuit):
        raise BuildError(f"{ENTRYPOINT}() returned {type(circuit).__name__}, not a QuantumCircuit")
    counts = circuit.count_ops()
    return {
        "num_qubits": int(circuit.num_qubits),
        "num_clbits": int(circuit.num_clbits),
        "ops": {name: int(counts[name]) for name in sorted(counts) if name != "barrier"},
        "depth": int(circuit.depth()),
    }


def split_of(variants: Sequence[Variant]) -> dict[str, str]:
    """Per family, the five ids with the lowest salted SHA-256 are `test`, the rest `dev`.

    A digest rather than list position keeps a prompt's split stable when variants are
    reordered or added, and mixes sizes instead of reserving the largest ones for test.
    """
    by_family: dict[str, list[str]] = defaultdict(list)
    for variant in variants:
        by_family[variant.family].append(variant.prompt_id)
    splits: dict[str, str] = {}
    for ids in by_family.values():
        ranked = sorted(ids, key=lambda i: hashlib.sha256((_SPLIT_SALT + i).encode()).hexdigest())
        for rank, prompt_id in enumerate(ranked):
            splits[prompt_id] = "test" if rank < TEST_PER_FAMILY else "dev"
    return splits


def build_prompts() -> list[dict[str, Any]]:
    """The panel's prompt lines, in panel order, with metadata computed by qiskit."""
    variants = all_variants()
    splits = split_of(variants)
    prompts: list[dict[str, Any]] = []
    for variant in variants:
        try:
            computed = reference_metadata(variant.reference_code)
        except Exception as exc:
            raise BuildError(f"{variant.prompt_id}: reference code failed: {exc!r}") from exc
        prompts.append(
            {
                "prompt_id": variant.prompt_id,
                "split": splits[variant.prompt_id],
                "messages": [
                    {"role": "system", "content": SYSTEM_PROMPT},
                    {"role": "user", "content": variant.user_message()},
                ],
                "target_metadata": {
                    "family": variant.family,
                    "size": variant.size,
                    "entrypoint": ENTRYPOINT,
                    **computed,
                    "reference_code": variant.reference_code,
                },
            }
        )
    check_panel(prompts)
    return prompts


def check_panel(prompts: Sequence[dict[str, Any]]) -> None:
    """Raise `BuildError` listing every invariant the panel breaks."""
    problems: list[str] = []
    ids = Counter(p["prompt_id"] for p in prompts)
    problems += [f"duplicate prompt id {i}" for i, n in sorted(ids.items()) if n > 1]
    if len(prompts) < MIN_PROMPTS:
        problems.append(f"{len(prompts)} prompts, fewer than {MIN_PROMPTS}")
    splits: dict[str, set[str]] = defaultdict(set)
    for p in prompts:
        splits[p["target_metadata"]["family"]].add(p["split"])
    if len(splits) < MIN_FAMILIES:
        problems.append(f"{len(splits)} families, fewer than {MIN_FAMILIES}")
    problems += [
        f"family {f} lacks a split: has only {sorted(s)}"
        for f, s in sorted(splits.items())
        if s != {"dev", "test"}
    ]
    for p in prompts:
        meta = p["target_metadata"]
        if meta["num_qubits"] > MAX_QUBITS:
            problems.append(f"{p['prompt_id']}: {meta['num_qubits']} qubits > {MAX_QUBITS}")
        for message in p["messages"]:
            if (
                meta["reference_code"] in message["content"]
                or "target_metadata" in message["content"]
            ):
                problems.append(f"{p['prompt_id']}: a message leaks evaluator-only data")
    if problems:
        raise BuildError("; ".join(problems))


# --- files -----------------------------------------------------------------------------


def prompts_bytes(prompts: Sequence[dict[str, Any]]) -> bytes:
    lines = [
        json.dumps(p, sort_keys=True, ensure_ascii=False, separators=(",", ":")) + "\n"
        for p in prompts
    ]
    return "".join(lines).encode("utf-8")


def _pretty(obj: Any) -> bytes:
    return (json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8")


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _frozen_files(release_dir: Path) -> list[str]:
    """Release-relative paths of the files under `frozen/`, which must be flat."""
    frozen = release_dir / FROZEN_DIR
    names: list[str] = []
    for entry in sorted(frozen.iterdir()):
        if not entry.is_file():
            # The package data ships `frozen/*` only: a subdirectory would be lost.
            raise BuildError(f"{entry}: only plain files may live under {FROZEN_DIR}/")
        names.append(f"{FROZEN_DIR}/{entry.name}")
    return names


def _evaluator_version() -> str:
    import evaluator

    return str(evaluator.__version__)


_PIN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*==[A-Za-z0-9][A-Za-z0-9.+!_-]*$")


def evaluator_requirements(path: Path | None = None) -> list[str]:
    """The exact pins of `evaluator/requirements.txt`: its non-blank, non-comment lines, in
    file order. Anything but `name==version` is refused: a release pins exactly."""
    if path is None:
        import evaluator

        path = Path(evaluator.__file__).resolve().parent / "requirements.txt"
    pins: list[str] = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        text = line.split("#", 1)[0].strip()
        if not text:
            continue
        if not _PIN.match(text):
            raise BuildError(f"{path}:{number}: {text!r} is not an exact pin (name==version)")
        pins.append(text)
    if not pins:
        raise BuildError(f"{path}: holds no requirement pins")
    return pins


def manifest(release_dir: Path, prompts_data: bytes, count: int) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "name": NAME,
        "version": VERSION,
        "prompts": {"path": PROMPTS_FILE, "count": count, "sha256": _sha256(prompts_data)},
        "files": {
            name: _sha256((release_dir / name).read_bytes()) for name in _frozen_files(release_dir)
        },
        "evaluator": {"version": _evaluator_version(), "requirements": evaluator_requirements()},
    }


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def write_release(release_dir: Path, prompts: Sequence[dict[str, Any]]) -> None:
    """Write prompts.jsonl and release.json; start an empty frozen matrix if there is none."""
    (release_dir / FROZEN_DIR).mkdir(parents=True, exist_ok=True)
    matrix = release_dir / MATRIX_FILE
    if not matrix.exists():
        _write_atomic(matrix, _pretty({"rows": []}))
    data = prompts_bytes(prompts)
    _write_atomic(release_dir / PROMPTS_FILE, data)
    _write_atomic(release_dir / MANIFEST_FILE, _pretty(manifest(release_dir, data, len(prompts))))


# --- check -----------------------------------------------------------------------------


def _tree(root: Path) -> dict[str, bytes]:
    if not root.is_dir():
        return {}
    return {
        path.relative_to(root).as_posix(): path.read_bytes()
        for path in sorted(root.rglob("*"))
        if path.is_file()
    }


def _prompt_diffs(committed: bytes, built: bytes) -> list[str]:
    def by_id(data: bytes) -> dict[str, str]:
        lines: dict[str, str] = {}
        for n, line in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
            try:
                lines[str(json.loads(line)["prompt_id"])] = line
            except (ValueError, KeyError, TypeError):
                lines[f"<unreadable line {n}>"] = line
        return lines

    old, new = by_id(committed), by_id(built)
    diffs = [f"{PROMPTS_FILE}: prompt {i} differs" for i in new if i in old and old[i] != new[i]]
    diffs += [f"{PROMPTS_FILE}: prompt {i} missing" for i in new if i not in old]
    diffs += [f"{PROMPTS_FILE}: unexpected prompt {i}" for i in old if i not in new]
    if not diffs:
        diffs.append(f"{PROMPTS_FILE}: same prompts, different bytes (order or line endings)")
    return diffs


def _verify_digests(release_dir: Path) -> list[str]:
    problems: list[str] = []
    try:
        data = json.loads((release_dir / MANIFEST_FILE).read_bytes())
        prompts_entry = data["prompts"]
        named: dict[str, str] = {prompts_entry["path"]: prompts_entry["sha256"], **data["files"]}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return [f"{MANIFEST_FILE}: unreadable ({exc})"]
    for name, expected in sorted(named.items()):
        path = release_dir / name
        if not path.is_file():
            problems.append(f"{name}: listed in {MANIFEST_FILE} but missing")
        elif _sha256(path.read_bytes()) != expected:
            problems.append(f"{name}: sha256 does not match {MANIFEST_FILE}")
    prompts_path = release_dir / str(prompts_entry["path"])
    if prompts_path.is_file():
        count = len(prompts_path.read_bytes().splitlines())
        if count != prompts_entry.get("count"):
            problems.append(
                f"{prompts_path.name}: {count} lines, {MANIFEST_FILE} says {prompts_entry['count']}"
            )
    return problems


def check(release_dir: Path) -> list[str]:
    """Every difference between the committed release and a fresh build (empty when equal)."""
    problems: list[str] = []
    with tempfile.TemporaryDirectory(prefix="pqid-demo-check-") as tmp:
        built_dir = Path(tmp) / "release"
        built_dir.mkdir()
        # Frozen rows come from elsewhere: take them as committed, then rebuild the rest.
        if (release_dir / FROZEN_DIR).is_dir():
            shutil.copytree(release_dir / FROZEN_DIR, built_dir / FROZEN_DIR)
        write_release(built_dir, build_prompts())
        committed, built = _tree(release_dir), _tree(built_dir)
    for name in sorted(built.keys() | committed.keys()):
        if name not in committed:
            problems.append(f"{name}: missing from {release_dir}")
        elif name not in built:
            problems.append(f"{name}: not produced by the builder")
        elif committed[name] != built[name]:
            if name == PROMPTS_FILE:
                problems += _prompt_diffs(committed[name], built[name])
            else:
                problems.append(f"{name}: differs from a fresh build")
    problems += _verify_digests(release_dir)
    return problems


# --- command line ----------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.tools.demo_build", description="Build or check the demo release."
    )
    parser.add_argument(
        "--output",
        type=Path,
        default=DEMO_RELEASE_DIR,
        metavar="DIR",
        help="release directory (default: the bundled engine/demo/release)",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="rebuild in a temporary directory and compare with DIR byte for byte",
    )
    args = parser.parse_args(argv)
    release_dir: Path = args.output
    started = time.monotonic()
    try:
        if args.check:
            problems = check(release_dir)
            if problems:
                for problem in problems:
                    print(f"DIFF {problem}", file=sys.stderr)
                print(f"{len(problems)} difference(s) in {release_dir}", file=sys.stderr)
                return 1
            print(f"OK {release_dir} matches a fresh build ({time.monotonic() - started:.1f} s)")
            return 0
        prompts = build_prompts()
        write_release(release_dir, prompts)
    except BuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    splits = Counter(p["split"] for p in prompts)
    families = len({p["target_metadata"]["family"] for p in prompts})
    print(
        f"wrote {release_dir}: {len(prompts)} prompts, {families} families, "
        f"{splits['dev']} dev / {splits['test']} test ({time.monotonic() - started:.1f} s)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
