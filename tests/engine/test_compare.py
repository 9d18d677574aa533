"""Compare: same prompt IDs only, partial refused or restricted, infrastructure kept apart."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

import pytest

from engine.errors import CompareRefused, InputError
from engine.release import Release, load_release
from engine.replay.compare import compare
from tests.conftest import cli
from tests.engine.test_summaries import make_eval
from tests.helpers import write_release

# write_release(count=6): ghz_00 and ghz_03 are dev, ghz_01, 02, 04, 05 are test.
TEST_IDS = ["ghz_01", "ghz_02", "ghz_04", "ghz_05"]
ALL_IDS = [f"ghz_{i:02d}" for i in range(6)]


def frozen_release(root: Path, **kwargs: Any) -> Path:
    return write_release(
        root,
        count=6,
        frozen={
            "oracle": [make_eval(pid) for pid in ALL_IDS],
            "half": [
                make_eval(pid, "ok" if i % 2 else "gate_count_mismatch")
                for i, pid in enumerate(ALL_IDS)
            ],
            "empty": [make_eval(pid, "no_code") for pid in ALL_IDS],
        },
        **kwargs,
    )


@pytest.fixture
def release(tmp_path: Path) -> Release:
    return load_release(frozen_release(tmp_path / "release"))


def write_evals(path: Path, evaluations: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(e) + "\n" for e in evaluations))
    return path


def candidate(tmp_path: Path, categories: dict[str, str], **fields: Any) -> Path:
    return write_evals(
        tmp_path / "cand.jsonl", [make_eval(pid, cat, **fields) for pid, cat in categories.items()]
    )


def row(data: dict[str, Any], label: str) -> dict[str, Any]:
    return next(r for r in data["rows"] if r["label"] == label)


def test_complete_test_split_is_compared_on_the_full_panel(
    release: Release, tmp_path: Path
) -> None:
    cats = {"ghz_01": "ok", "ghz_02": "ok", "ghz_04": "execution_error", "ghz_05": "no_code"}
    c = compare(release, candidate(tmp_path, cats))
    d = c.data
    assert c.publishable and d["not_publishable_reasons"] == []
    assert d["selection"]["complete"] and not d["selection"]["restricted_to_candidate"]
    assert d["prompt_ids"] == TEST_IDS
    assert d["candidate"]["summary"]["rates"]["structural_match"]["over_selected"] == {
        "count": 2,
        "denominator": 4,
        "rate": 0.5,
    }
    oracle = row(d, "oracle")
    assert oracle["summary"]["rates"]["structural_match"]["over_selected"] == {
        "count": 4,
        "denominator": 4,
        "rate": 1.0,
    }
    s = oracle["paired"]["structural_match"]
    assert (s["candidate_only"], s["row_only"], s["both"]) == (0, 2, 2)
    assert s["row_only_ids"] == ["ghz_04", "ghz_05"]
    # half: ghz_01 and ghz_05 ok (odd positions), ghz_02 and ghz_04 mismatch
    h = row(d, "half")["paired"]["structural_match"]
    assert (h["candidate_only"], h["row_only"], h["both"], h["neither"]) == (1, 1, 1, 1)
    assert h["candidate_only_ids"] == ["ghz_02"] and h["row_only_ids"] == ["ghz_05"]
    e = row(d, "empty")
    assert e["summary"]["rates"]["execution"]["over_selected"]["count"] == 0
    assert e["paired"]["execution"]["candidate_only"] == 2
    assert d["release"]["digest"] == release.digest and d["release"]["modified"] is False


def test_partial_candidate_is_refused_without_allow_partial(
    release: Release, tmp_path: Path
) -> None:
    path = candidate(tmp_path, {"ghz_01": "ok", "ghz_04": "ok"})
    with pytest.raises(CompareRefused, match=r"partial \(test 2/4 prompts\).*--allow-partial"):
        compare(release, path)


def test_partial_candidate_restricts_every_row_to_its_prompts(
    release: Release, tmp_path: Path
) -> None:
    c = compare(release, candidate(tmp_path, {"ghz_01": "ok", "ghz_04": "ok"}), allow_partial=True)
    d = c.data
    assert not c.publishable and "partial candidate" in d["not_publishable_reasons"]
    assert d["selection"]["restricted_to_candidate"]
    for r in d["rows"]:
        for key in ("execution", "structural_match", "qasm3_export", "equivalence"):
            assert r["summary"]["rates"][key]["over_selected"]["denominator"] == 2
    assert row(d, "half")["summary"]["rates"]["structural_match"]["over_selected"]["count"] == 1
    text = c.render("text")
    assert "PARTIAL" in text and "restricted to the candidate's 2 prompt IDs" in text


def test_non_test_split_is_not_publishable_but_a_split_filter_is(
    release: Release, tmp_path: Path
) -> None:
    path = candidate(tmp_path, dict.fromkeys(ALL_IDS, "ok"))
    whole = compare(release, path)
    assert whole.data["selection"]["complete"]
    assert any("not the test split alone" in r for r in whole.data["not_publishable_reasons"])
    only_test = compare(release, path, split="test")
    assert only_test.publishable and only_test.data["prompt_ids"] == TEST_IDS
    with pytest.raises(CompareRefused, match="no split 'train'"):
        compare(release, path, split="train")


def test_infrastructure_failures_are_kept_apart_and_gate_publishing(
    release: Release, tmp_path: Path
) -> None:
    cats = {"ghz_01": "ok", "ghz_02": "ok", "ghz_04": "ok", "ghz_05": "no_response"}
    c = compare(release, candidate(tmp_path, cats))
    rates = c.data["candidate"]["summary"]["rates"]["structural_match"]
    assert rates["over_selected"] == {"count": 3, "denominator": 4, "rate": 0.75}
    assert rates["over_answered"] == {"count": 3, "denominator": 3, "rate": 1.0}
    assert not c.publishable
    assert any(
        "infrastructure failures 1/4 exceed the threshold of 2%" in r
        for r in c.data["not_publishable_reasons"]
    )
    assert compare(release, candidate(tmp_path, cats), infra_threshold=0.25).publishable


def test_manifest_selection_counts_missing_prompts(release: Release, tmp_path: Path) -> None:
    path = candidate(tmp_path, {"ghz_01": "ok", "ghz_02": "ok", "ghz_04": "ok"})
    manifest = tmp_path / "run-manifest.json"
    manifest.write_text(
        json.dumps(
            {
                "selected_prompt_ids": TEST_IDS,
                "model": "m",
                "route": {"provider": "groq"},
                "release": {"digest": release.digest},
            }
        )
    )
    c = compare(release, path, candidate_manifest=manifest, infra_threshold=0.5)
    d = c.data
    assert d["selection"]["complete"] and d["selection"]["source"] == "run manifest"
    assert d["candidate"]["label"] == "groq/m"
    assert d["candidate"]["summary"]["categories"]["missing"] == 1
    assert d["candidate"]["summary"]["rates"]["execution"]["over_selected"]["denominator"] == 4
    assert c.publishable


def test_manifest_mismatches_are_refused(release: Release, tmp_path: Path) -> None:
    path = candidate(tmp_path, {"ghz_01": "ok", "ghz_02": "ok"})
    manifest = tmp_path / "run-manifest.json"
    manifest.write_text(
        json.dumps({"selected_prompt_ids": ["ghz_01"], "release": {"digest": release.digest}})
    )
    with pytest.raises(InputError, match=r"evaluates prompts the run did not select \(ghz_02"):
        compare(release, path, candidate_manifest=manifest)
    manifest.write_text(
        json.dumps({"selected_prompt_ids": TEST_IDS, "release": {"digest": "0" * 64}})
    )
    with pytest.raises(CompareRefused, match="ran on another release"):
        compare(release, path, candidate_manifest=manifest)


def test_environment_mismatch_is_refused_or_marked(release: Release, tmp_path: Path) -> None:
    path = candidate(tmp_path, dict.fromkeys(TEST_IDS, "ok"), qiskit="2.6.1")
    with pytest.raises(
        CompareRefused,
        match=r"frozen row oracle was scored with evaluator "
        r"0\.1\.0, qiskit 2\.6\.2.*--allow-environment",
    ):
        compare(release, path)
    c = compare(release, path, allow_environment_mismatch=True)
    assert not c.publishable
    assert any(r.startswith("environment mismatch") for r in c.data["not_publishable_reasons"])
    other = candidate(tmp_path, dict.fromkeys(TEST_IDS, "ok"), version="9.9.9")
    with pytest.raises(CompareRefused, match=r"the release pins 0\.1\.0"):
        compare(release, other)


def test_modified_release_is_stamped_and_not_publishable(tmp_path: Path) -> None:
    root = frozen_release(tmp_path / "release")
    prompts = root / "prompts.jsonl"
    prompts.write_bytes(prompts.read_bytes().replace(b"GHZ", b"GhZ", 1))
    release = load_release(root, allow_modified=True)
    c = compare(release, candidate(tmp_path, dict.fromkeys(TEST_IDS, "ok")))
    assert c.data["release"]["modified"] is True and not c.publishable
    assert "modified: yes" in c.render("text")


def test_release_without_a_frozen_matrix_is_refused(tmp_path: Path) -> None:
    release = load_release(write_release(tmp_path / "bare", count=6))
    with pytest.raises(CompareRefused, match="no frozen matrix"):
        compare(release, candidate(tmp_path, dict.fromkeys(TEST_IDS, "ok")))


def test_frozen_row_lacking_selected_prompts_is_not_publishable(tmp_path: Path) -> None:
    root = write_release(
        tmp_path / "r", count=6, frozen={"oracle": [make_eval(pid) for pid in TEST_IDS[:3]]}
    )
    c = compare(load_release(root), candidate(tmp_path, dict.fromkeys(TEST_IDS, "ok")))
    assert (
        "frozen row oracle has no evaluation for 1 selected prompts"
        in c.data["not_publishable_reasons"]
    )
    assert row(c.data, "oracle")["summary"]["categories"]["missing"] == 1


def test_every_format_is_stamped_with_the_release(release: Release, tmp_path: Path) -> None:
    c = compare(release, candidate(tmp_path, dict.fromkeys(TEST_IDS, "ok")))
    text, md = c.render("text"), c.render("markdown")
    for out in (text, md):
        assert release.digest in out and "test-release 0.0.1" in out
        assert "publishable" in out
    assert "| oracle | reference | 4/4 100.0% |" in md
    data = json.loads(c.render("json"))
    assert data["release"]["digest"] == release.digest and data["publishable"] is True
    rows = list(csv.DictReader(io.StringIO(c.render("csv"))))
    assert {r["release_digest"] for r in rows} == {release.digest}
    oracle = [
        r
        for r in rows
        if r["row"] == "oracle" and r["metric"] == "structural_match" and r["scope"] == "selected"
    ]
    assert oracle[0]["count"] == "4" and oracle[0]["denominator"] == "4"
    assert oracle[0]["candidate_only"] == "0" and oracle[0]["row_only"] == "0"
    with pytest.raises(ValueError, match="unknown format"):
        c.render("xml")


def test_batch_compare_exit_codes_and_output_file(tmp_path: Path) -> None:
    root = frozen_release(tmp_path / "release")
    partial = candidate(tmp_path, {"ghz_01": "ok"})
    refused = cli("--batch", "compare", "--release-dir", str(root), "--evaluations", str(partial))
    assert refused.returncode == 2
    assert refused.stderr.startswith("pqid-tui: error: the candidate is partial")
    out = tmp_path / "table.md"
    done = cli(
        "--batch",
        "compare",
        "--release-dir",
        str(root),
        "--evaluations",
        str(partial),
        "--allow-partial",
        "--format",
        "markdown",
        "--output",
        str(out),
    )
    assert done.returncode == 0, done.stderr
    assert "publishable: no" in done.stderr and done.stdout == ""
    assert out.read_text().startswith("# Comparison with the frozen matrix")
    as_json = cli(
        "--batch",
        "compare",
        "--release-dir",
        str(root),
        "--evaluations",
        str(partial),
        "--allow-partial",
        "--format",
        "json",
    )
    assert json.loads(as_json.stdout)["selection"]["selected"] == 1


def test_publishable_split_is_test_only_for_mixed_runs(tmp_path: Path) -> None:
    from engine.release import load_release
    from engine.replay.compare import publishable_split
    from tests.helpers import write_release

    release = load_release(write_release(tmp_path / "r", count=6))  # dev: 00, 03; test: others
    assert publishable_split(release, ["ghz_00", "ghz_01"]) == "test"
    assert publishable_split(release, ["ghz_01", "ghz_02"]) is None
    assert publishable_split(release, ["ghz_00", "ghz_03"]) is None
