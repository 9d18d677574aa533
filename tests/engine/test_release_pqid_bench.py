"""PQID-Bench v1.0.0 as a release: detection of every layout, verification against
ARTIFACT_MANIFEST.tsv, absent files, safe zip extraction, `verify` and `download`."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import zipfile
from pathlib import Path

import pytest

from engine.errors import ReleaseError
from engine.release import (
    CONTRACT_PQID_BENCH,
    FORMAT_PQID_BENCH_CORE,
    FORMAT_PQID_BENCH_EVIDENCE,
    PREDICATE_PQID_BENCH,
    PROMPT_ID_RE,
    load_release,
)
from engine.release.archive import extract_cached
from tests.conftest import PqidBenchCopies, cli

PIN = "d6df084c7acf7a06bc4800f25b952e26f9903ee4a69ce851ab83b7723970c647"
PROMPTS = "artifacts/test_split_154/pqid_bench_external_generation_prompts_154.jsonl"
# Named as absent by ../shared/pqid-bench-1.0.0/README.md.
ABSENT = (
    "artifacts/analysis_154/pqid_bench_ordered_operand_cell_audit.jsonl",
    "data/pqid_bench_clean_generation_734.jsonl",
)
ABSENT_DIR = "artifacts/stochastic_repeatability_21x72/"
# The pinned runtime of the frozen rows, as that README states it.
PINS = ("qiskit==2.1.1", "qiskit-aer==0.17.0", "python-dateutil==2.9.0.post0")


def listed(root: Path) -> list[str]:
    lines = (root / "ARTIFACT_MANIFEST.tsv").read_text().splitlines()
    return [line.split("\t")[0] for line in lines[1:] if line]


def relist(root: Path, rel: str) -> None:
    """Make ARTIFACT_MANIFEST.tsv agree with the file as it now is (a consistent edit)."""
    data = (root / rel).read_bytes()
    path = root / "ARTIFACT_MANIFEST.tsv"
    out = []
    for line in path.read_text().splitlines():
        if line.split("\t")[0] == rel:
            line = f"{rel}\t{len(data)}\t{hashlib.sha256(data).hexdigest()}"
        out.append(line)
    path.write_text("\n".join(out) + "\n")


def flip_byte(path: Path, offset: int = 10) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))


def cache_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith(("_API_KEY", "_TOKEN"))}
    env["XDG_CACHE_HOME"] = str(tmp_path / "xdg-cache")
    return env


# -- detection -------------------------------------------------------------------------------


def check_pqid_bench(release, fmt: str, profile: str) -> None:  # type: ignore[no-untyped-def]
    assert (release.format, release.profile) == (fmt, profile)
    assert (release.name, release.version) == ("PQID-Bench", "1.0.0")
    assert release.contract == CONTRACT_PQID_BENCH
    assert release.predicate == PREDICATE_PQID_BENCH
    assert release.python_version == "3.13"
    assert release.evaluator_requirements == PINS
    assert not release.modified and release.problems == ()
    assert len(release.prompts) == 154 and release.split_counts() == {"test": 154}
    lines = (release.root / PROMPTS).read_bytes().splitlines()
    for prompt, line in zip(release.prompts, lines, strict=True):
        record = json.loads(line)
        assert PROMPT_ID_RE.match(prompt.prompt_id)
        assert prompt.prompt_id == record["prompt_id"]
        assert (prompt.row_id, prompt.label) == (record["row_id"], record["label"])
        assert prompt.request_messages() == record["messages"]
        assert prompt.target_metadata == record["target_metadata"]
        assert prompt.source_record == record
    assert release.prompts_sha256 == hashlib.sha256(b"\n".join(lines) + b"\n").hexdigest()
    manifest = (release.root / "ARTIFACT_MANIFEST.tsv").read_bytes()
    assert release.manifest_sha256 == hashlib.sha256(manifest).hexdigest()
    assert release.manifest_files == len(listed(release.root))


def test_core_distribution_its_parent_and_its_zip(
    pqid_bench: PqidBenchCopies, tmp_path: Path
) -> None:
    core = load_release(pqid_bench.core)
    check_pqid_bench(core, FORMAT_PQID_BENCH_CORE, "core")
    assert core.absent == () and core.matrix_rows == () and core.archive is None
    parent = load_release(pqid_bench.core.parent)  # holds exactly that one folder
    assert parent.root == pqid_bench.core and parent.digest == core.digest

    first = load_release(pqid_bench.core_zip, cache_dir=tmp_path / "cache")
    check_pqid_bench(first, FORMAT_PQID_BENCH_CORE, "core")
    assert first.root == tmp_path / "cache" / "releases" / PIN / "PQID-Bench-v1.0.0-core"
    assert (first.archive, first.archive_sha256) == (str(pqid_bench.core_zip), PIN)
    assert first.digest == core.digest
    mtime = (first.root / "benchmark.json").stat().st_mtime_ns
    again = load_release(pqid_bench.core_zip, cache_dir=tmp_path / "cache")
    assert again.root == first.root
    assert (again.root / "benchmark.json").stat().st_mtime_ns == mtime  # reused, not redone


def test_evidence_repository(pqid_bench: PqidBenchCopies) -> None:
    evidence = load_release(pqid_bench.evidence)
    check_pqid_bench(evidence, FORMAT_PQID_BENCH_EVIDENCE, "evidence")
    core = load_release(pqid_bench.core)
    # One benchmark release, two copies: the same identity, different file lists.
    assert evidence.digest == core.digest
    assert evidence.manifest_sha256 != core.manifest_sha256
    for rel in ABSENT:
        assert rel in evidence.absent
    in_dir = [r for r in evidence.absent if r.startswith(ABSENT_DIR)]
    assert len(in_dir) == 435
    assert len(evidence.absent) == len(ABSENT) + len(in_dir)
    assert f"{ABSENT_DIR} (435 files)" in evidence.absent_summary()
    try:
        import engine.release.pqid_bench_matrix  # noqa: F401
    except ModuleNotFoundError:
        assert evidence.matrix_rows == ()
    else:
        assert len([r for r in evidence.matrix_rows if r.kind == "model"]) == 21


def test_not_a_release_says_what_was_looked_for(
    pqid_bench: PqidBenchCopies, tmp_path: Path
) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "notes.txt").write_text("hello\n")
    two = tmp_path / "two"
    for name in ("a", "b"):
        shutil.copytree(pqid_bench.core, two / name)
    for path in (tmp_path / "empty", tmp_path / "notes.txt", two):
        with pytest.raises(ReleaseError) as info:
            load_release(path)
        message = str(info.value)
        assert message.startswith(f"{path}: not a release this version reads")
        for looked_for in ("release.json", "benchmark.json", "ARTIFACT_MANIFEST.tsv", ".zip"):
            assert looked_for in message


def test_unknown_contract_is_refused(pqid_bench: PqidBenchCopies, tmp_path: Path) -> None:
    root = tmp_path / "core"
    shutil.copytree(pqid_bench.core, root)
    meta = json.loads((root / "benchmark.json").read_text())
    meta["evaluator_version"] = "pqid-bench-evaluator-9.0.0"
    (root / "benchmark.json").write_text(json.dumps(meta))
    relist(root, "benchmark.json")
    with pytest.raises(
        ReleaseError,
        match=r"benchmark\.json: evaluator "
        r"'pqid-bench-evaluator-9\.0\.0' is not a scoring "
        r"contract this version knows",
    ):
        load_release(root)


# -- verification ----------------------------------------------------------------------------


def test_flipped_byte_in_a_file_loading_reads_is_named(
    pqid_bench: PqidBenchCopies, tmp_path: Path
) -> None:
    root = tmp_path / "core"
    shutil.copytree(pqid_bench.core, root)
    flip_byte(root / PROMPTS, 5000)
    with pytest.raises(
        ReleaseError,
        match=rf"{PROMPTS}: SHA-256 is [0-9a-f]{{64}}, "
        r"ARTIFACT_MANIFEST\.tsv says cc6ba5c8.*modified",
    ):
        load_release(root)
    modified = load_release(root, allow_modified=True)
    assert modified.modified and len(modified.problems) == 1 and PROMPTS in modified.problems[0]
    (root / "benchmark.json").write_bytes((root / "benchmark.json").read_bytes() + b" ")
    with pytest.raises(
        ReleaseError,
        match=r"benchmark\.json: size is 1445 bytes, "
        r"ARTIFACT_MANIFEST\.tsv says 1444",
    ):
        load_release(root)


def test_flipped_byte_anywhere_is_caught_and_named(
    pqid_bench: PqidBenchCopies, tmp_path: Path
) -> None:
    root = tmp_path / "evidence"
    shutil.copytree(pqid_bench.evidence, root)
    flipped = "CHANGELOG.md"
    flip_byte(root / flipped)
    # Loading stays fast: it verifies what the release is built from, not every file ...
    release = load_release(root)
    with pytest.raises(ReleaseError, match=rf"{flipped}: SHA-256 is .*modified"):
        release.require(flipped, "this test")
    # ... and verify_all checks every present file.
    check = release.verify_all()
    assert check.mismatched == (flipped,) and not check.ok
    assert check.listed == len(listed(root)) and check.absent == release.absent
    assert check.verified == check.listed - len(check.absent) - 1
    assert check.verified == 649  # the README's 650 present files, one of them flipped
    modified = load_release(root, allow_modified=True)
    assert modified.modified and [flipped in p for p in modified.problems] == [True]

    result = cli("--batch", "verify", "--release-dir", str(root))
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and flipped in result.stderr
    assert "Traceback" not in result.stderr
    data = json.loads(result.stdout)
    assert data["files"]["mismatched_files"] == [flipped] and data["verified"] is False


def test_absent_files_are_named_and_only_needed_ones_refuse(pqid_bench: PqidBenchCopies) -> None:
    release = load_release(pqid_bench.evidence)
    with pytest.raises(
        ReleaseError,
        match=rf"{ABSENT[0]}: the cell audit needs this file, "
        r"which the release manifest lists but this copy "
        r"does not have",
    ):
        release.require(ABSENT[0], "the cell audit")
    with pytest.raises(
        ReleaseError,
        match=r"not-listed\.txt: a test needs this file, which "
        r"ARTIFACT_MANIFEST\.tsv does not list",
    ):
        release.require("not-listed.txt", "a test")
    assert release.require(PROMPTS, "the prompts") == pqid_bench.evidence / PROMPTS


def test_verify_command_on_each_layout(pqid_bench: PqidBenchCopies, tmp_path: Path) -> None:
    env = cache_env(tmp_path)
    evidence = cli("--batch", "verify", "--release-dir", str(pqid_bench.evidence), env=env)
    assert evidence.returncode == 0, evidence.stderr
    data = json.loads(evidence.stdout)
    assert (data["format"], data["profile"], data["name"], data["version"]) == (
        FORMAT_PQID_BENCH_EVIDENCE,
        "evidence",
        "PQID-Bench",
        "1.0.0",
    )
    assert (data["contract"], data["predicate"]) == (CONTRACT_PQID_BENCH, PREDICATE_PQID_BENCH)
    assert data["environment"]["python"] == "3.13"
    assert tuple(data["environment"]["requirements"]) == PINS
    assert data["prompts"]["by_split"] == {"test": 154}
    files = data["files"]
    assert files["listed"] == len(listed(pqid_bench.evidence))
    assert (files["verified"], files["mismatched"]) == (650, 0)
    assert set(ABSENT) <= set(files["absent_files"])
    assert files["absent"] == len(files["absent_files"]) == files["listed"] - 650
    assert data["verified"] is True

    text = cli(
        "--batch", "verify", "--release-dir", str(pqid_bench.core_zip), "--format", "text", env=env
    )
    assert text.returncode == 0, text.stderr
    assert "PQID-Bench 1.0.0: verified" in text.stdout
    assert f"SHA-256 {PIN}" in text.stdout
    assert "31 listed in ARTIFACT_MANIFEST.tsv: 31 verified, 0 absent, 0 mismatched" in text.stdout
    assert (tmp_path / "xdg-cache" / "pqid-tui" / "releases" / PIN).is_dir()


# -- the dry run on each layout --------------------------------------------------------------


@pytest.mark.parametrize("layout", ["core", "parent", "zip", "evidence"])
def test_dry_run_on_each_layout(pqid_bench: PqidBenchCopies, tmp_path: Path, layout: str) -> None:
    path = {
        "core": pqid_bench.core,
        "parent": pqid_bench.core.parent,
        "zip": pqid_bench.core_zip,
        "evidence": pqid_bench.evidence,
    }[layout]
    result = cli(
        "--batch",
        "run-model",
        "--release-dir",
        str(path),
        "--provider",
        "groq",
        "--model",
        "llama-3.3-70b-versatile",
        "--limit",
        "1",
        "--dry-run",
        env=cache_env(tmp_path),
    )
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    release = plan["release"]
    assert release["release_format"] == (
        FORMAT_PQID_BENCH_EVIDENCE if layout == "evidence" else FORMAT_PQID_BENCH_CORE
    )
    assert (release["name"], release["version"], release["prompt_count"]) == (
        "PQID-Bench",
        "1.0.0",
        154,
    )
    first = json.loads((pqid_bench.core / PROMPTS).read_bytes().splitlines()[0])
    assert plan["first_prompt_ids"] == [first["prompt_id"]]
    assert plan["selected_prompt_count"] == 1 and plan["target_metadata_exported"] is False
    if layout == "evidence":
        assert release["absent_files"] > len(ABSENT)
        assert set(ABSENT) <= set(release["absent"])
    else:
        assert (release["absent_files"], release["absent"]) == (0, [])
    assert json.dumps(first["target_metadata"]["gate_types"]) not in result.stdout


# -- safe zip extraction ---------------------------------------------------------------------


def make_zip(path: Path, members: list[tuple[str, bytes]], *, symlink: str | None = None) -> Path:
    with zipfile.ZipFile(path, "w") as bundle:
        for name, data in members:
            bundle.writestr(name, data)
        if symlink is not None:
            info = zipfile.ZipInfo(symlink)
            info.create_system = 3
            info.external_attr = (stat.S_IFLNK | 0o777) << 16
            bundle.writestr(info, "/etc/passwd")
    return path


@pytest.mark.parametrize(
    ("members", "symlink", "expected"),
    [
        ([("root/a.txt", b"a"), ("root/../../escaped.txt", b"x")], None, "escapes the extraction"),
        ([("root/a.txt", b"a"), ("/abs/escaped.txt", b"x")], None, "absolute path"),
        ([("root/a.txt", b"a"), ("C:/escaped.txt", b"x")], None, "escapes the extraction"),
        ([("root/a.txt", b"a"), ("root\\..\\escaped.txt", b"x")], None, "unsafe name"),
        ([("root/a.txt", b"a")], "root/link", "symbolic links are not allowed"),
        ([("root/a.txt", b"a"), ("other/b.txt", b"b")], None, "exactly one top-level folder"),
        ([("root/a.txt", b"a"), ("loose.txt", b"b")], None, "outside the archive's top-level"),
        ([("root/a.txt", b"a"), ("root/A.TXT", b"b")], None, "differ only in case"),
    ],
)
def test_unsafe_archives_are_refused_before_anything_is_written(
    tmp_path: Path, members: list[tuple[str, bytes]], symlink: str | None, expected: str
) -> None:
    archive = make_zip(tmp_path / "bad.zip", members, symlink=symlink)
    cache = tmp_path / "cache"
    with pytest.raises(ReleaseError, match=expected):
        extract_cached(archive, cache_dir=cache)
    assert not (tmp_path / "escaped.txt").exists() and not Path("/abs/escaped.txt").exists()
    assert list((cache / "releases").iterdir()) == []  # no extraction, no leftover staging


def test_member_count_and_size_limits(tmp_path: Path) -> None:
    many = make_zip(tmp_path / "many.zip", [(f"root/{i}.txt", b"x") for i in range(11)])
    with pytest.raises(ReleaseError, match="11 members, more than the 10"):
        extract_cached(many, cache_dir=tmp_path / "cache", max_members=10)
    big = make_zip(
        tmp_path / "big.zip", [("root/a.bin", b"\0" * 600_000), ("root/b.bin", b"\0" * 600_000)]
    )
    with pytest.raises(ReleaseError, match="expands to more than 1000000 bytes"):
        extract_cached(big, cache_dir=tmp_path / "cache", max_total_bytes=1_000_000)
    assert list((tmp_path / "cache" / "releases").iterdir()) == []
    fine = extract_cached(big, cache_dir=tmp_path / "cache", max_total_bytes=1_200_000)
    assert (fine.release_dir / "b.bin").stat().st_size == 600_000


def test_a_damaged_extraction_is_redone_not_reused(tmp_path: Path) -> None:
    archive = make_zip(tmp_path / "ok.zip", [("root/a.txt", b"alpha"), ("root/d/b.txt", b"b")])
    first = extract_cached(archive, cache_dir=tmp_path / "cache")
    assert not first.reused and (first.release_dir / "d" / "b.txt").read_bytes() == b"b"
    assert extract_cached(archive, cache_dir=tmp_path / "cache").reused
    (first.release_dir / "a.txt").write_bytes(b"alphA")
    redone = extract_cached(archive, cache_dir=tmp_path / "cache")
    assert not redone.reused and (redone.release_dir / "a.txt").read_bytes() == b"alpha"


def test_a_zip_that_is_not_a_core_distribution(tmp_path: Path) -> None:
    archive = make_zip(tmp_path / "other.zip", [("root/readme.txt", b"hi")])
    with pytest.raises(
        ReleaseError,
        match=r"other\.zip: its folder root/ is not a PQID-Bench "
        "core distribution",
    ):
        load_release(archive, cache_dir=tmp_path / "cache")


# -- download --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "http://huggingface.co/x.zip",
        "ftp://example.org/x.zip",
        "file:///tmp/x.zip",
        "https://user:pw@example.org/x.zip",
    ],
)
def test_download_refuses_anything_but_https(tmp_path: Path, url: str) -> None:
    result = cli(
        "--batch",
        "download",
        "--version",
        "1.0.0",
        "--url",
        url,
        "--cache-dir",
        str(tmp_path / "cache"),
    )
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert (
        "only fetched over HTTPS" in result.stderr
        or "must not carry a user name or password" in result.stderr
    )
    assert not (tmp_path / "cache").exists()


def test_download_from_a_wrong_file_names_both_digests(tmp_path: Path) -> None:
    wrong = make_zip(tmp_path / "PQID-Bench-v1.0.0-core.zip", [("x/a.txt", b"not the release")])
    actual = hashlib.sha256(wrong.read_bytes()).hexdigest()
    result = cli(
        "--batch",
        "download",
        "--version",
        "1.0.0",
        "--from",
        str(wrong),
        "--cache-dir",
        str(tmp_path / "cache"),
    )
    assert result.returncode == 2 and result.stdout == ""
    assert actual in result.stderr and PIN in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "cache" / "releases" / PIN).exists()


def test_download_from_the_real_zip_then_reuse(pqid_bench: PqidBenchCopies, tmp_path: Path) -> None:
    args = (
        "--batch",
        "download",
        "--version",
        "1.0.0",
        "--from",
        str(pqid_bench.core_zip),
        "--cache-dir",
        str(tmp_path / "cache"),
    )
    first = cli(*args)
    assert first.returncode == 0, first.stderr
    path = Path(first.stdout.strip())
    assert path == tmp_path / "cache" / "releases" / PIN / "PQID-Bench-v1.0.0-core"
    assert "imported" in first.stderr and PIN in first.stderr
    assert load_release(path).digest == load_release(pqid_bench.core).digest
    second = cli(*args[:4], "--cache-dir", str(tmp_path / "cache"), "--format", "json")
    assert second.returncode == 0, second.stderr
    record = json.loads(second.stdout)
    assert (record["reused"], record["source"], record["release_dir"]) == (True, "cache", str(path))
    assert "reused the verified extraction" in second.stderr


def test_download_over_https_follows_https_redirects_and_checks_the_pin(
    pqid_bench: PqidBenchCopies, tmp_path: Path
) -> None:
    """The network path, against an in-process transport (these machines have no internet)."""
    import httpx

    from engine.release.download import get_core_distribution

    body = pqid_bench.core_zip.read_bytes()
    seen: list[str] = []

    def serve(request: httpx.Request) -> httpx.Response:
        seen.append(str(request.url))
        if request.url.host == "official.test":
            return httpx.Response(302, headers={"location": "https://cdn.test/core.zip"})
        if request.url.host == "downgrade.test":
            return httpx.Response(302, headers={"location": "http://cdn.test/core.zip"})
        if request.url.host == "tampered.test":
            return httpx.Response(200, content=body[:-1] + bytes([body[-1] ^ 1]))
        return httpx.Response(200, content=body)

    transport = httpx.MockTransport(serve)
    cache = tmp_path / "cache"
    with pytest.raises(ReleaseError, match="only fetched over HTTPS"):
        get_core_distribution(
            "1.0.0", url="https://downgrade.test/core.zip", cache_dir=cache, transport=transport
        )
    with pytest.raises(
        ReleaseError,
        match=rf"SHA-256 is [0-9a-f]{{64}}, the pinned digest is "
        rf"{PIN}; nothing was extracted",
    ):
        get_core_distribution(
            "1.0.0", url="https://tampered.test/core.zip", cache_dir=cache, transport=transport
        )
    assert sorted(p.name for p in (cache / "releases").iterdir()) == []
    got = get_core_distribution(
        "1.0.0", url="https://official.test/core.zip", cache_dir=cache, transport=transport
    )
    assert (got.source, got.reused) == ("download", False)
    assert seen[-2:] == ["https://official.test/core.zip", "https://cdn.test/core.zip"]
    count = len(seen)
    again = get_core_distribution(
        "1.0.0", url="https://official.test/core.zip", cache_dir=cache, transport=transport
    )
    assert (again.source, again.reused, again.release_dir) == ("cache", True, got.release_dir)
    assert len(seen) == count  # no second download
