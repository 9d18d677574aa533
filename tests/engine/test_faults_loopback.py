"""The runner against a real loopback HTTP server that injects provider faults."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from engine import make_config, run_live_model
from engine.release import load_release
from engine.rundir.records import RunDir
from tests.fakes.faults import FaultScript, FaultServer


def run_against(
    release_dir: Path, out: Path, plan: dict[str, list[str]], **kw: Any
) -> tuple[dict[str, Any], FaultServer]:
    script = FaultScript.for_release(load_release(release_dir), plan)
    with FaultServer(script) as server:
        cfg = make_config(
            release_dir=release_dir,
            output_dir=out,
            provider="local",
            base_url=server.base_url,
            model="test-model",
            no_auth=True,
            acknowledge_prompt_export=True,
            retry_backoff_seconds=0.01,
            **{"request_timeout_seconds": 1.0, "max_retries": 3, **kw},
        )
        summary = run_live_model(cfg).to_dict()
    return summary, server


@pytest.mark.parametrize(
    "fault",
    [
        "429",
        "429-ms",
        "500-html",
        "502-html",
        "503",
        "close",
        "truncated",
        "truncated-json",
        "slow:2",
        "200-error",
        "200-html",
    ],
)
def test_retryable_fault_then_success(release_dir: Path, tmp_path: Path, fault: str) -> None:
    summary, server = run_against(
        release_dir, tmp_path / "run", {"ghz_00": [fault, fault]}, limit=2
    )
    assert summary["success"] == 2, summary
    history = [a for a in RunDir(tmp_path / "run").read_attempts() if a["prompt_id"] == "ghz_00"]
    assert [a["decision"] for a in history] == ["retry", "retry", "success"]
    assert len(server.requests_for("ghz_00")) == 3
    # Every completed HTTP reply left its raw body; the mid-body reset did not complete.
    for a in history:
        if a["raw"]:
            assert (tmp_path / "run" / a["raw"]).is_file()


@pytest.mark.parametrize(
    ("fault", "error_class"), [("400", "bad_request"), ("429-quota", "quota_exhausted")]
)
def test_terminal_faults_are_not_retried(
    release_dir: Path, tmp_path: Path, fault: str, error_class: str
) -> None:
    summary, server = run_against(release_dir, tmp_path / "run", {"ghz_00": [fault]}, limit=2)
    assert summary["success"] == 1 and summary["error"] == 1
    assert len(server.requests_for("ghz_00")) == 1
    assert summary["errors"]["ghz_00"].startswith(error_class)


def test_retry_after_longer_than_allowed_ends_the_prompt(release_dir: Path, tmp_path: Path) -> None:
    summary, server = run_against(release_dir, tmp_path / "run", {"ghz_00": ["429:5631"]}, limit=1)
    assert summary["error"] == 1 and len(server.requests_for("ghz_00")) == 1
    assert "asks to wait 5631 s" in summary["errors"]["ghz_00"]


def test_benign_variants_succeed(release_dir: Path, tmp_path: Path) -> None:
    summary, _ = run_against(
        release_dir,
        tmp_path / "run",
        {"ghz_00": ["padding"], "ghz_01": ["fenced"], "ghz_02": ["empty"], "ghz_03": ["length"]},
        limit=4,
    )
    assert summary["success"] == 4
    assert summary["empty_responses"] == 1
    assert summary["finish_reasons"] == {"length": 1, "stop": 3}
    responses = {r["prompt_id"]: r for r in RunDir(tmp_path / "run").read_responses()}
    assert responses["ghz_01"]["extraction"]["method"] == "fenced"
    assert "Here is" not in responses["ghz_01"]["generated_code"]


def test_retries_exhausted(release_dir: Path, tmp_path: Path) -> None:
    summary, server = run_against(
        release_dir, tmp_path / "run", {"ghz_00": ["503"] * 9}, limit=1, max_retries=2
    )
    assert summary["error"] == 1 and len(server.requests_for("ghz_00")) == 3
