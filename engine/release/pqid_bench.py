"""PQID-Bench releases: the core distribution and the evidence repository.

Both are verified by their own `ARTIFACT_MANIFEST.tsv` (size, then SHA-256, of every file).
Loading verifies the files the Release is built from before reading them: the release
metadata, the prompts, the pinned evaluator environment and, for the evidence repository,
every file the frozen matrix's rows are read from (`engine.release.pqid_bench_matrix`, handed
a verifying `require`). Commands verify the other files they read through `Release.require`
(each file at most once); `Release.verify_all()` checks every present file. Files the
manifest lists that the copy lacks are `Release.absent`: named, and refused only by a command
that needs one.

`Release.digest` is the release's identity, not the copy's: the SHA-256 of the canonical JSON
of {identity, name, version, contract, predicate, prompts_sha256} (see `identity_digest`). The
core distribution and the evidence repository of one benchmark release therefore have the same
digest (a run on one compares with the frozen matrix of the other); the copy's own file list is
`Release.manifest_sha256`, the SHA-256 of its ARTIFACT_MANIFEST.tsv bytes.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.errors import ReleaseError
from engine.release.manifest import (
    MANIFEST_NAME,
    ManifestVerifier,
    read_artifact_manifest,
    safe_relative_path,
)
from engine.release.model import (
    CONTRACT_PQID_BENCH,
    FORMAT_PQID_BENCH_CORE,
    FORMAT_PQID_BENCH_EVIDENCE,
    PREDICATE_PQID_BENCH,
    FrozenRow,
    Prompt,
    Release,
)
from engine.release.pqid_release import PROMPT_ID_RE, parse_messages
from engine.rundir.storage import read_jsonl_objects, sha256_file

NAME = "PQID-Bench"
PROFILE_CORE = "core"
PROFILE_EVIDENCE = "evidence"
BENCHMARK_JSON = "benchmark.json"
VERSION_MODULE = "src/pqid_bench/version.py"  # the evidence repository's version constants
EVIDENCE_PROMPTS = "artifacts/test_split_154/pqid_bench_external_generation_prompts_154.jsonl"
REQUIREMENTS = "requirements/evaluator-container.txt"
DOCKERFILE = "docker/evaluator/Dockerfile"
# Scoring contracts and predicates whose rules this version implements.
KNOWN_CONTRACTS = (CONTRACT_PQID_BENCH,)
KNOWN_PREDICATES = (PREDICATE_PQID_BENCH,)
IDENTITY_FORMAT = "pqid-bench-release-identity/1"
_FROM_PYTHON = re.compile(r"^FROM\s+(?:--\S+\s+)*(?:\S+/)?python:(\d+\.\d+)", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class BenchmarkIdentity:
    """What a PQID-Bench copy says it is: from benchmark.json, or the evidence repository's
    version constants."""

    name: str
    version: str
    contract: str
    predicate: str
    prompts: str  # relative path of the test prompts


def _read_benchmark_json(path: Path) -> dict[str, Any] | None:
    """benchmark.json as an object, or None when it is absent or not a JSON object."""
    try:
        data = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def is_core(root: Path) -> bool:
    """A folder whose benchmark.json declares `distribution_profile: core`."""
    data = _read_benchmark_json(root / BENCHMARK_JSON)
    return data is not None and data.get("distribution_profile") == PROFILE_CORE


def is_evidence(root: Path) -> bool:
    """The evidence repository: ARTIFACT_MANIFEST.tsv at the root, not a core distribution."""
    return (root / MANIFEST_NAME).is_file() and not is_core(root)


def single_core_child(root: Path) -> Path | None:
    """The core distribution a folder holds as its only (non-hidden) subfolder, as
    `pqid-bench download` leaves it beside its archive."""
    try:
        children = [c for c in root.iterdir() if c.is_dir() and not c.name.startswith(".")]
    except OSError:
        return None
    if len(children) == 1 and is_core(children[0]):
        return children[0]
    return None


def _string(data: dict[str, Any], key: str, where: Path) -> str:
    value = data.get(key)
    if not isinstance(value, str) or not value:
        raise ReleaseError(f"{where}: {key!r} must be a non-empty string")
    return value


def _known(contract: str, predicate: str, where: Path) -> None:
    if contract not in KNOWN_CONTRACTS:
        raise ReleaseError(
            f"{where}: evaluator {contract!r} is not a scoring contract this "
            f"version knows ({', '.join(KNOWN_CONTRACTS)})"
        )
    if predicate not in KNOWN_PREDICATES:
        raise ReleaseError(
            f"{where}: predicate {predicate!r} is not a structural predicate "
            f"this version knows ({', '.join(KNOWN_PREDICATES)})"
        )


def identity_from_benchmark_json(
    path: Path, *, default_prompts: str | None = None
) -> BenchmarkIdentity:
    data = _read_benchmark_json(path)
    if data is None:
        raise ReleaseError(f"{path}: not a JSON object")
    name = data.get("name", NAME)
    if not isinstance(name, str) or not name:
        raise ReleaseError(f"{path}: 'name' must be a non-empty string")
    version = _string(data, "benchmark_release", path)
    contract = _string(data, "evaluator_version", path)
    predicate = _string(data, "predicate_version", path)
    _known(contract, predicate, path)
    paths = data.get("paths")
    prompts = paths.get("test_prompts") if isinstance(paths, dict) else None
    if prompts is None and default_prompts is not None:
        prompts = default_prompts
    if not isinstance(prompts, str):
        raise ReleaseError(f"{path}: paths.test_prompts must name the test prompts file")
    safe_relative_path(prompts, f"{path}: paths.test_prompts")
    return BenchmarkIdentity(name, version, contract, predicate, prompts)


def identity_from_version_module(path: Path) -> BenchmarkIdentity:
    """The evidence repository's version constants, read as literals (never executed)."""
    try:
        tree = ast.parse(path.read_bytes(), filename=str(path))
    except (OSError, SyntaxError, ValueError) as exc:
        raise ReleaseError(f"{path}: cannot read the release's version constants ({exc})") from None
    constants: dict[str, str] = {}
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            constants[node.targets[0].id] = node.value.value
    missing = [
        k
        for k in ("BENCHMARK_RELEASE", "EVALUATOR_VERSION", "PREDICATE_VERSION")
        if not constants.get(k)
    ]
    if missing:
        raise ReleaseError(f"{path}: does not define {', '.join(missing)}")
    contract, predicate = constants["EVALUATOR_VERSION"], constants["PREDICATE_VERSION"]
    _known(contract, predicate, path)
    return BenchmarkIdentity(
        NAME, constants["BENCHMARK_RELEASE"], contract, predicate, EVIDENCE_PROMPTS
    )


def identity_digest(identity: BenchmarkIdentity, prompts_sha256: str) -> str:
    """`Release.digest` of a PQID-Bench release (the same for its core and evidence copies)."""
    from engine.rundir.storage import canonical_json, sha256_hex

    return sha256_hex(
        canonical_json(
            {
                "identity": IDENTITY_FORMAT,
                "name": identity.name,
                "version": identity.version,
                "contract": identity.contract,
                "predicate": identity.predicate,
                "prompts_sha256": prompts_sha256,
            }
        )
    )


_TARGET_INTS = ("num_qubits", "num_clbits", "gate_count")


def _parse_prompt(path: Path, number: int, obj: dict[str, Any]) -> Prompt:
    where = f"{path}:{number}"
    pid = obj.get("prompt_id")
    if not isinstance(pid, str) or not PROMPT_ID_RE.match(pid):
        raise ReleaseError(f"{where}: prompt_id must be a short string of letters, digits, _.:-")
    split = obj.get("split", "test")
    if not isinstance(split, str) or not split:
        raise ReleaseError(f"{where}: prompt {pid}: split must be a non-empty string")
    for key in ("row_id", "label"):
        if not isinstance(obj.get(key), str) or not obj[key]:
            raise ReleaseError(f"{where}: prompt {pid}: {key} must be a non-empty string")
    messages = parse_messages(where, pid, obj.get("messages"))
    meta = obj.get("target_metadata")
    if not isinstance(meta, dict):
        raise ReleaseError(f"{where}: prompt {pid} has no target_metadata object")
    for key in _TARGET_INTS:
        value = meta.get(key)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ReleaseError(
                f"{where}: prompt {pid}: target_metadata.{key} must be a non-negative integer"
            )
    types = meta.get("gate_types")
    if not isinstance(types, dict) or not all(
        isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) and v >= 0
        for k, v in types.items()
    ):
        raise ReleaseError(
            f"{where}: prompt {pid}: target_metadata.gate_types must map operation names to counts"
        )
    return Prompt(
        pid,
        split,
        messages,
        meta,
        number,
        row_id=obj["row_id"],
        label=obj["label"],
        source_record=obj,
    )


def read_prompts(path: Path) -> tuple[Prompt, ...]:
    prompts: list[Prompt] = []
    seen: dict[str, int] = {}
    for number, obj in read_jsonl_objects(path, ReleaseError):
        prompt = _parse_prompt(path, number, obj)
        if prompt.prompt_id in seen:
            raise ReleaseError(
                f"{path}:{number}: duplicate prompt_id {prompt.prompt_id!r}"
                f" (first on line {seen[prompt.prompt_id]})"
            )
        seen[prompt.prompt_id] = number
        prompts.append(prompt)
    if not prompts:
        raise ReleaseError(f"{path}: the release has no prompts")
    return tuple(prompts)


def read_requirements(path: Path) -> tuple[str, ...]:
    """The pinned requirements of the frozen rows' evaluator, one per non-comment line."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ReleaseError(
            f"{path}: cannot read the pinned evaluator environment ({exc})"
        ) from None
    pins = tuple(
        line.strip()
        for line in text.splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    )
    if not pins:
        raise ReleaseError(f"{path}: pins no package")
    return pins


def read_python_version(path: Path) -> str | None:
    """The Python of the frozen rows' evaluator, from its Dockerfile's `FROM python:X.Y`."""
    try:
        match = _FROM_PYTHON.search(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError):
        return None
    return match.group(1) if match else None


def _frozen_matrix(root: Path, verifier: ManifestVerifier) -> tuple[tuple[FrozenRow, ...], Any]:
    """The evidence repository's frozen rows and their cell loader, when the matrix module
    is part of this version (no rows otherwise). Every file the rows are built from is
    verified before it is read."""
    try:
        from engine.release import pqid_bench_matrix  # type: ignore[attr-defined, unused-ignore]
    except ModuleNotFoundError as exc:
        if exc.name != "engine.release.pqid_bench_matrix":
            raise
        return (), None

    def require(rel: str, purpose: str) -> Path:
        verifier.check(rel, purpose)
        return root / rel

    rows = tuple(pqid_bench_matrix.frozen_rows(root, require=require))
    return rows, pqid_bench_matrix.frozen_cells


def load_pqid_bench(
    root: Path | str,
    profile: str,
    *,
    allow_modified: bool = False,
    archive: Path | None = None,
    archive_sha256: str | None = None,
) -> Release:
    """Load a PQID-Bench core distribution (`profile="core"`) or evidence repository.

    A listed file that does not match its size or SHA-256 raises ReleaseError naming it,
    unless `allow_modified`: then every present file is verified at once, the release comes
    back with `modified=True` and the mismatches in `problems` (not publishable).
    """
    root = Path(root)
    manifest = read_artifact_manifest(root / MANIFEST_NAME)
    verifier = ManifestVerifier(root, manifest, allow_modified=allow_modified)

    def needed(rel: str, purpose: str) -> Path:
        verifier.check(rel, purpose)
        return root / rel

    if profile == PROFILE_CORE:
        fmt = FORMAT_PQID_BENCH_CORE
        identity = identity_from_benchmark_json(needed(BENCHMARK_JSON, "the release metadata"))
    elif profile == PROFILE_EVIDENCE:
        fmt = FORMAT_PQID_BENCH_EVIDENCE
        if (root / BENCHMARK_JSON).is_file():
            identity = identity_from_benchmark_json(
                needed(BENCHMARK_JSON, "the release metadata"), default_prompts=EVIDENCE_PROMPTS
            )
        else:
            identity = identity_from_version_module(
                needed(VERSION_MODULE, "the release's version constants")
            )
    else:
        raise ValueError(f"unknown PQID-Bench profile {profile!r}")

    prompts_path = needed(identity.prompts, "the test prompts")
    prompts = read_prompts(prompts_path)
    prompts_sha = next(e.sha256 for e in manifest.entries if e.path == identity.prompts)
    if allow_modified:
        prompts_sha = sha256_file(prompts_path)

    requirements: tuple[str, ...] | None = None
    if verifier.listed(REQUIREMENTS) and REQUIREMENTS not in verifier.absent:
        verifier.check(REQUIREMENTS, "the pinned evaluator environment")
        requirements = read_requirements(root / REQUIREMENTS)
    python_version: str | None = None
    if verifier.listed(DOCKERFILE) and DOCKERFILE not in verifier.absent:
        verifier.check(DOCKERFILE, "the pinned evaluator environment")
        python_version = read_python_version(root / DOCKERFILE)

    rows: tuple[FrozenRow, ...] = ()
    cells_loader = None
    if profile == PROFILE_EVIDENCE:
        rows, cells_loader = _frozen_matrix(root, verifier)

    # With allow_modified every present file is checked now, so that `modified` and
    # `problems` are complete; otherwise a mismatch has already raised.
    problems = verifier.verify_all().problems if allow_modified else ()
    return Release(
        root=root,
        name=identity.name,
        version=identity.version,
        digest=identity_digest(identity, prompts_sha),
        prompts_sha256=prompts_sha,
        modified=bool(problems),
        prompts=prompts,
        matrix_rows=rows,
        evaluator_version=identity.contract,
        evaluator_requirements=requirements,
        problems=problems,
        format=fmt,
        profile=profile,
        contract=identity.contract,
        predicate=identity.predicate,
        python_version=python_version,
        absent=verifier.absent,
        verified_files=verifier.verified_count(),
        manifest_files=len(manifest.entries),
        cells_loader=cells_loader,
        manifest_sha256=manifest.sha256,
        archive=str(archive) if archive is not None else None,
        archive_sha256=archive_sha256,
        verifier=verifier,
    )


def describe_layout(root: Path) -> str | None:
    """Which PQID-Bench profile a folder is, or None."""
    if is_core(root):
        return PROFILE_CORE
    if is_evidence(root):
        return PROFILE_EVIDENCE
    return None
