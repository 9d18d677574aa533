"""engine.run.runs: the read-only helpers the app stands on (headless, no textual)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from engine.errors import ConfigError
from engine.events import AttemptFinished, PromptStateChanged, RunFinished, RunStarted
from engine.run.runs import (
    RunProgress,
    list_runs,
    prompt_detail,
    read_run_info,
    resend_async,
    resume_config,
)
from engine.rundir.records import RunDir
from tests.app.test_app_support import make_run, scripted_transport
from tests.conftest import ROOT
from tests.helpers import write_release


def test_engine_runs_does_not_load_the_ui() -> None:
    code = (
        "import sys, engine.run.runs; print(sorted(m for m in sys.modules "
        "if m.split('.')[0] in ('textual', 'pqid_tui')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True
    ).stdout.strip()
    assert out == "[]"


async def test_list_runs_and_prompt_detail(tmp_path: Path) -> None:
    release = write_release(tmp_path / "release", count=6)
    runs = tmp_path / "runs"
    assert list_runs(runs) == []
    out = await make_run(
        runs, release, plan={"ghz_01": [400], "ghz_02": [503]}, uncertain=("ghz_05",)
    )
    (runs / "junk").mkdir()
    (runs / "broken").mkdir()
    (runs / "broken" / "run-manifest.json").write_text("{")
    infos = list_runs(runs)
    assert [i.name for i in infos] == ["broken", "groq-demo"]
    assert infos[0].problem is not None and "not valid JSON" in infos[0].problem
    info = infos[1]
    assert (info.selected, info.success, info.error, info.pending, info.uncertain) == (
        6,
        4,
        1,
        0,
        1,
    )
    assert not info.complete and not info.evaluated

    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    detail = prompt_detail(out, "ghz_02")
    assert detail.state == "success" and detail.request_sha256_ok
    assert detail.request_body is not None and detail.request_body["model"] == "demo-model"
    assert [a["decision"] for a in detail.attempts] == ["retry", "success"]
    assert [(r.attempt, r.is_json) for r in detail.raw_bodies] == [(1, True), (2, True)]
    assert json.loads(detail.raw_bodies[1].pretty())["choices"][0]["finish_reason"] == "stop"
    assert detail.response is not None and detail.response["attempt"] == 2
    missing = prompt_detail(out, "ghz_05")
    assert missing.state == "uncertain" and missing.response is None
    # Reading never changes the run directory (no repair, no appended attempt).
    assert before == {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}


async def test_raw_names_cannot_leave_the_run_dir(tmp_path: Path) -> None:
    release = write_release(tmp_path / "release", count=6)
    out = await make_run(tmp_path / "runs", release)
    (tmp_path / "secret.txt").write_text("outside")
    run = RunDir(out)
    run.append_attempt(
        {"prompt_id": "ghz_00", "attempt": 9, "raw": "../../secret.txt", "decision": "retry"}
    )
    detail = prompt_detail(out, "ghz_00")
    assert all(r.name != "../../secret.txt" for r in detail.raw_bodies)


def test_progress_coalesces_and_counts() -> None:
    now = [100.0]
    p = RunProgress(clock=lambda: now[0])
    p.apply(RunStarted("d", "groq", "m", 3, 2, 1, ("a", "b", "c")))
    assert [r.prompt_id for r in p.take_dirty()] == ["a", "b", "c"]
    assert p.counts["pending"] == 3
    for attempt in range(1, 101):
        p.apply(PromptStateChanged("a", "in_flight", attempt))
        p.apply(PromptStateChanged("a", "retrying", attempt, "HTTP 503", 200.0))
    assert [r.prompt_id for r in p.take_dirty()] == ["a"]  # 200 events, one redraw
    assert p.rows["a"].attempt == 100 and p.rows["a"].error == "HTTP 503"
    assert [r.prompt_id for r in p.queue()] == ["a"]
    p.apply(PromptStateChanged("c", "success", 1))  # skipped by resume: not "finished"
    p.apply(PromptStateChanged("a", "in_flight", 101))
    p.apply(AttemptFinished("a", 101, 200, 5, None, "success", {"total_tokens": 30}))
    p.apply(PromptStateChanged("a", "success", 101))
    now[0] = 110.0
    assert (p.requests, p.tokens, p.finished_prompts) == (1, 30, 1)
    assert p.requests_per_second == pytest.approx(0.1)
    assert p.eta_seconds == pytest.approx(10.0)  # one of two sent in 10 s
    assert p.queue() == []
    assert dict(p.counts) == {"pending": 1, "success": 2, "in_flight": 0, "retrying": 0}
    p.apply(RunFinished({"stopped": False}))
    assert not p.running and p.eta_seconds is None and p.elapsed == 10.0


async def test_resume_config_and_resend_only_the_chosen(tmp_path: Path) -> None:
    release = write_release(tmp_path / "release", count=6)
    out = await make_run(
        tmp_path / "runs",
        release,
        plan={"ghz_01": [400], "ghz_03": [400]},
        temperature=0.3,
        omit_top_p=True,
        seed=7,
        limit=5,
        extra_body={"reasoning_effort": "low"},
    )
    config = resume_config(out, release, acknowledge_prompt_export=True, retry_errors=True)
    assert (
        config.provider,
        config.model,
        config.temperature,
        config.omit_top_p,
        config.seed,
        config.limit,
    ) == ("groq", "demo-model", 0.3, True, 7, 5)
    seen: list[str] = []
    result = await resend_async(
        config,
        ["ghz_03"],
        transport=scripted_transport(release, seen=seen),
        env={"GROQ_API_KEY": "gsk_test_key_value_0123456789"},
    )
    assert seen == ["ghz_03"]
    assert result.summary["success"] == 4 and result.summary["error"] == 1
    assert read_run_info(out).error == 1
    with pytest.raises(ConfigError, match="no prompt 'ghz_05'"):
        await resend_async(
            config,
            ["ghz_05"],
            transport=scripted_transport(release),
            env={"GROQ_API_KEY": "gsk_test_key_value_0123456789"},
        )
