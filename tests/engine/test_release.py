"""Release loading: every SHA-256 verified, every malformed input named by file and line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.errors import ReleaseError
from engine.release import load_release
from tests.conftest import cli
from tests.helpers import prompt_line, write_release


def test_loads_and_verifies(release_dir: Path) -> None:
    release = load_release(release_dir)
    assert len(release.prompts) == 6
    assert release.split_counts() == {"dev": 2, "test": 4}
    assert not release.modified and len(release.digest) == 64


def test_sha_mismatch_names_the_file(release_dir: Path) -> None:
    path = release_dir / "prompts.jsonl"
    path.write_bytes(path.read_bytes().replace(b"GHZ", b"GHz", 1))
    with pytest.raises(ReleaseError, match=r"prompts\.jsonl: SHA-256 is .*modified"):
        load_release(release_dir)
    modified = load_release(release_dir, allow_modified=True)
    assert modified.modified and modified.problems


def test_missing_file(tmp_path: Path) -> None:
    root = write_release(tmp_path / "r", frozen={"oracle": [{"prompt_id": "ghz_00"}]})
    (root / "frozen" / "oracle.evaluations.jsonl").unlink()
    with pytest.raises(ReleaseError, match=r"oracle\.evaluations\.jsonl: file is missing"):
        load_release(root)


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (
            lambda lines: [*lines, lines[0]],
            r"prompts\.jsonl:4: duplicate prompt_id 'a' \(first on "
            r"line 1\)",
        ),
        (lambda lines: [*lines[:1], "{not json", *lines[1:]], r"prompts\.jsonl:2: not a JSON line"),
        (
            lambda lines: [*lines[:2], '{"prompt_id": "x"}'],
            r"prompts\.jsonl:3: prompt x has no split",
        ),
        (lambda lines: [*lines[:2], "[1, 2]"], r"prompts\.jsonl:3: expected a JSON object"),
    ],
)
def test_malformed_prompt_lines_name_file_and_line(tmp_path: Path, mutate, expected) -> None:  # type: ignore[no-untyped-def]
    lines = [json.dumps(prompt_line(pid, 2)) for pid in ("a", "b", "c")]
    root = tmp_path / "r"
    write_release(root, lines=[prompt_line(pid, 2) for pid in ("a", "b", "c")])
    text = "\n".join(mutate(lines)) + "\n"
    (root / "prompts.jsonl").write_text(text)
    manifest = json.loads((root / "release.json").read_text())
    import hashlib

    manifest["prompts"]["sha256"] = hashlib.sha256(text.encode()).hexdigest()
    manifest["prompts"].pop("count")
    (root / "release.json").write_text(json.dumps(manifest))
    with pytest.raises(ReleaseError, match=expected):
        load_release(root)


def test_wrong_format_and_paths(tmp_path: Path) -> None:
    root = write_release(tmp_path / "r")
    manifest = json.loads((root / "release.json").read_text())
    manifest["prompts"]["path"] = "../outside.jsonl"
    (root / "release.json").write_text(json.dumps(manifest))
    with pytest.raises(ReleaseError, match="not a relative path inside the release"):
        load_release(root)
    (root / "release.json").write_text('{"format": "other"}')
    with pytest.raises(ReleaseError, match="expected 'pqid-release/1'"):
        load_release(root)


def test_cli_reports_release_error_in_one_line(tmp_path: Path) -> None:
    root = write_release(tmp_path / "r")
    (root / "prompts.jsonl").write_text("garbage\n")
    result = cli(
        "--batch", "run-model", "--release-dir", str(root), "--provider", "oracle", "--dry-run"
    )
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "prompts.jsonl" in result.stderr
    assert "Traceback" not in result.stderr


def test_demo_release_verifies() -> None:
    from engine.demo import DEMO_RELEASE_DIR

    release = load_release(DEMO_RELEASE_DIR)
    assert len(release.prompts) >= 150
    families = {p.target_metadata["family"] for p in release.prompts}
    assert len(families) >= 12
