"""The project's own release format, `pqid-release/1`: loading and verification."""

from __future__ import annotations

import hashlib
import re
import time
from pathlib import Path
from typing import Any

from engine.errors import ReleaseError
from engine.release.model import (
    CONTRACT_PQID_BENCH,
    CONTRACT_PROJECT,
    FORMAT_PQID_RELEASE,
    FrozenRow,
    Prompt,
    Release,
    Verification,
)
from engine.rundir.storage import (
    parse_json_bytes,
    read_file_bytes,
    read_json_file,
    read_jsonl_objects,
    sha256_file,
)

RELEASE_FORMAT = FORMAT_PQID_RELEASE
PROMPT_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")
ROW_KINDS = ("reference", "model")


def _read_json(path: Path) -> Any:
    return read_json_file(path, ReleaseError)


def _safe_relative(root: Path, rel: object, where: str) -> Path:
    if not isinstance(rel, str) or not rel or rel.startswith("/") or ".." in Path(rel).parts:
        raise ReleaseError(f"{where}: {rel!r} is not a relative path inside the release")
    return root / rel


def parse_messages(where: str, pid: str, messages: object) -> tuple[dict[str, str], ...]:
    """A prompt's model-facing messages, checked: each a role and a string content."""
    if not isinstance(messages, list) or not messages:
        raise ReleaseError(f"{where}: prompt {pid} has no messages list")
    clean: list[dict[str, str]] = []
    for m in messages:
        if (
            not isinstance(m, dict)
            or m.get("role") not in ("system", "user", "assistant")
            or not isinstance(m.get("content"), str)
        ):
            raise ReleaseError(
                f"{where}: prompt {pid}: each message needs a role (system, user, assistant)"
                " and a string content"
            )
        clean.append({"role": m["role"], "content": m["content"]})
    return tuple(clean)


def _parse_prompt(path: Path, number: int, obj: dict[str, Any]) -> Prompt:
    where = f"{path}:{number}"
    pid = obj.get("prompt_id")
    if not isinstance(pid, str) or not PROMPT_ID_RE.match(pid):
        raise ReleaseError(f"{where}: prompt_id must be a short string of letters, digits, _.:-")
    split = obj.get("split")
    if not isinstance(split, str) or not split:
        raise ReleaseError(f"{where}: prompt {pid} has no split")
    clean = parse_messages(where, pid, obj.get("messages"))
    meta = obj.get("target_metadata")
    if not isinstance(meta, dict):
        raise ReleaseError(f"{where}: prompt {pid} has no target_metadata object")
    entry = meta.get("entrypoint", "build_circuit")
    if not isinstance(entry, str) or not entry.isidentifier():
        raise ReleaseError(f"{where}: prompt {pid}: entrypoint must be a Python identifier")
    return Prompt(pid, split, clean, meta, number)


def load_pqid_release(root: Path | str, *, allow_modified: bool = False) -> Release:
    """Load a release directory and verify every SHA-256 its manifest names.

    A mismatch raises ReleaseError unless `allow_modified`, in which case the release is
    returned with `modified=True` and the mismatches in `problems` (not publishable).
    """
    root = Path(root)
    if not root.is_dir():
        raise ReleaseError(f"{root}: release directory does not exist")
    manifest_path = root / "release.json"
    manifest_bytes = read_file_bytes(
        manifest_path, ReleaseError, missing="file is missing; is this a pqid-release/1 directory?"
    )
    manifest = parse_json_bytes(manifest_bytes, manifest_path, ReleaseError)
    if not isinstance(manifest, dict):
        raise ReleaseError(f"{manifest_path}: expected a JSON object")
    if manifest.get("format") != RELEASE_FORMAT:
        raise ReleaseError(
            f"{manifest_path}: format is {manifest.get('format')!r}, expected {RELEASE_FORMAT!r}"
        )
    for key in ("name", "version"):
        if not isinstance(manifest.get(key), str) or not manifest[key]:
            raise ReleaseError(f"{manifest_path}: {key!r} must be a non-empty string")

    start = time.perf_counter()
    problems: list[str] = []
    mismatched: list[str] = []
    prompts_entry = manifest.get("prompts")
    if not isinstance(prompts_entry, dict):
        raise ReleaseError(f"{manifest_path}: 'prompts' must be an object with path, count, sha256")
    prompts_path = _safe_relative(root, prompts_entry.get("path"), f"{manifest_path}: prompts.path")
    expected_sha = prompts_entry.get("sha256")
    if not isinstance(expected_sha, str):
        raise ReleaseError(f"{manifest_path}: prompts.sha256 is missing")
    if not prompts_path.is_file():
        raise ReleaseError(f"{prompts_path}: file is missing (named in {manifest_path})")
    prompts_sha = sha256_file(prompts_path)
    if prompts_sha != expected_sha:
        mismatched.append(str(prompts_entry.get("path")))
        problems.append(
            f"{prompts_path}: SHA-256 is {prompts_sha}, release.json says {expected_sha}"
        )

    files = manifest.get("files", {})
    if not isinstance(files, dict):
        raise ReleaseError(f"{manifest_path}: 'files' must map relative paths to SHA-256")
    for rel, sha in sorted(files.items()):
        path = _safe_relative(root, rel, f"{manifest_path}: files")
        if not path.is_file():
            raise ReleaseError(f"{path}: file is missing (named in {manifest_path})")
        actual = sha256_file(path)
        if actual != sha:
            mismatched.append(rel)
            problems.append(f"{path}: SHA-256 is {actual}, release.json says {sha}")
    if problems and not allow_modified:
        raise ReleaseError(
            problems[0]
            + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else "")
            + "; the release was modified"
        )
    listed = 1 + len(files)
    verification = Verification(
        "release.json",
        listed,
        listed - len(mismatched),
        (),
        tuple(mismatched),
        tuple(problems),
        time.perf_counter() - start,
    )

    prompts: list[Prompt] = []
    seen: dict[str, int] = {}
    for number, obj in read_jsonl_objects(prompts_path, ReleaseError):
        prompt = _parse_prompt(prompts_path, number, obj)
        if prompt.prompt_id in seen:
            raise ReleaseError(
                f"{prompts_path}:{number}: duplicate prompt_id {prompt.prompt_id!r}"
                f" (first on line {seen[prompt.prompt_id]})"
            )
        seen[prompt.prompt_id] = number
        prompts.append(prompt)
    count = prompts_entry.get("count")
    if count is not None and count != len(prompts):
        msg = f"{prompts_path}: holds {len(prompts)} prompts, release.json says {count}"
        if not allow_modified:
            raise ReleaseError(msg)
        problems.append(msg)
    if not prompts:
        raise ReleaseError(f"{prompts_path}: the release has no prompts")

    rows = _load_matrix(root, files)
    evaluator = manifest.get("evaluator") or {}
    if not isinstance(evaluator, dict):
        raise ReleaseError(f"{manifest_path}: 'evaluator' must be an object")
    reqs = evaluator.get("requirements")
    if reqs is not None and (
        not isinstance(reqs, list) or not all(isinstance(r, str) and r for r in reqs)
    ):
        raise ReleaseError(f"{manifest_path}: evaluator.requirements must be a list of pins")
    return Release(
        root=root,
        name=manifest["name"],
        version=manifest["version"],
        digest=hashlib.sha256(manifest_bytes).hexdigest(),
        prompts_sha256=prompts_sha,
        modified=bool(problems),
        prompts=tuple(prompts),
        matrix_rows=rows,
        evaluator_version=evaluator.get("version")
        if isinstance(evaluator.get("version"), str)
        else None,
        evaluator_requirements=tuple(reqs) if reqs is not None else None,
        problems=tuple(problems),
        contract=_contract(manifest_path, evaluator),
        verified_files=1 + len(files),
        manifest_files=1 + len(files),
        verifier=_LoadedVerification(verification),
    )


class _LoadedVerification:
    """pqid-release/1 verifies every file at load: `verify_all` reports that check."""

    def __init__(self, verification: Verification) -> None:
        self._verification = verification

    def check(self, rel: str, purpose: str) -> None:
        return None

    def verify_all(self) -> Verification:
        return self._verification


def _contract(manifest_path: Path, evaluator: dict[str, Any]) -> str:
    contract = evaluator.get("contract", CONTRACT_PROJECT)
    if contract not in (CONTRACT_PROJECT, CONTRACT_PQID_BENCH):
        raise ReleaseError(
            f"{manifest_path}: evaluator.contract {contract!r} is not a scoring "
            f"contract this version knows ({CONTRACT_PROJECT}, "
            f"{CONTRACT_PQID_BENCH})"
        )
    return str(contract)


def _load_matrix(root: Path, files: dict[str, Any]) -> tuple[FrozenRow, ...]:
    path = root / "frozen" / "matrix.json"
    if not path.exists():
        return ()
    if "frozen/matrix.json" not in files:
        raise ReleaseError(f"{path}: present but not listed with its SHA-256 in release.json")
    data = _read_json(path)
    if not isinstance(data, dict) or not isinstance(data.get("rows"), list):
        raise ReleaseError(f'{path}: expected {{"rows": [...]}}')
    rows: list[FrozenRow] = []
    labels: set[str] = set()
    for i, row in enumerate(data["rows"], start=1):
        where = f"{path}: row {i}"
        if not isinstance(row, dict):
            raise ReleaseError(f"{where}: expected an object")
        label, kind = row.get("label"), row.get("kind")
        if not isinstance(label, str) or not label or label in labels:
            raise ReleaseError(f"{where}: label must be a unique non-empty string")
        if kind not in ROW_KINDS:
            raise ReleaseError(f"{where}: kind must be one of {', '.join(ROW_KINDS)}")
        ev = row.get("evaluations")
        _safe_relative(root, ev, where)
        if ev not in files:
            raise ReleaseError(f"{where}: {ev} is not listed with its SHA-256 in release.json")
        labels.add(label)
        rows.append(FrozenRow(label, kind, row.get("provider"), row.get("model"), str(ev)))
    return tuple(rows)
