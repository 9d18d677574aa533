"""Real runs in a subprocess, SIGKILLed at random moments, then resumed.

The default test command runs a reduced campaign; `pytest -m slow tests/engine/test_crash.py -s`
runs the full one (at least 30 kills) and prints the figure.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from engine.release import load_release
from engine.rundir.records import RunDir
from tests.conftest import ROOT
from tests.fakes.faults import FaultScript, FaultServer
from tests.helpers import write_release


def start_run(release: Path, out: Path, base_url: str, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pqid_tui",
            "--batch",
            "run-model",
            "--release-dir",
            str(release),
            "--output-dir",
            str(out),
            "--provider",
            "local",
            "--base-url",
            base_url,
            "--model",
            "m",
            "--no-auth",
            "--acknowledge-third-party-prompt-export",
            "--concurrency",
            "3",
            "--retry-backoff-seconds",
            "0.05",
            "--quiet",
            *extra,
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def crash_campaign(tmp_path: Path, prompts: int, rounds: int, seed: int) -> str:
    release_dir = write_release(tmp_path / "release", count=prompts)
    release = load_release(release_dir)
    out = tmp_path / "run"
    rng = random.Random(seed)
    # Some prompts fail once first, so kills also land during retries and backoffs.
    plan = {p.prompt_id: ["503"] for p in release.prompts[::5]}
    script = FaultScript.for_release(release, plan, hang_seconds=0.12)
    kills = 0
    refused_while_uncertain = 0
    with FaultServer(script) as server:
        recorded_success_at: dict[str, float] = {}
        for round_ in range(rounds):
            first = round_ == 0
            args = [] if first else ["--resume", "--retry-uncertain"]
            if not first and round_ % 2:
                # A plain --resume must refuse whenever something is uncertain.
                probe = start_run(release_dir, out, server.base_url, "--resume")
                _, err = probe.communicate(timeout=60)
                if "in flight" in err:
                    assert probe.returncode == 2
                    refused_while_uncertain += 1
            before = len(server.seen)
            proc = start_run(release_dir, out, server.base_url, *args)
            # Wait for the first request of this round, then kill at a random moment: with
            # requests in flight, records being replaced, logs appended, or the summary
            # being written at the end.
            deadline = time.time() + 15
            while len(server.seen) == before and proc.poll() is None and time.time() < deadline:
                time.sleep(0.005)
            time.sleep(rng.uniform(0.0, 0.5))
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGKILL)
                kills += 1
            proc.communicate(timeout=60)
            now = time.time()
            for r in RunDir(out).read_responses():
                recorded_success_at.setdefault(r["prompt_id"], now)
        final = start_run(release_dir, out, server.base_url, "--resume", "--retry-uncertain")
        stdout, stderr = final.communicate(timeout=120)
        assert final.returncode == 0, stderr
        summary = json.loads(stdout)
        seen = list(server.seen)

    assert kills >= rounds // 2, "the run finished before enough kills landed"
    assert summary["success"] == prompts and summary["uncertain"] == 0
    assert summary["pending"] == 0
    rd = RunDir(out)
    # Every artifact parses.
    json.loads((out / "run-manifest.json").read_text())
    json.loads((out / "run-summary.json").read_text())
    for name in ("requests.jsonl", "responses.jsonl", "provider-attempts.jsonl"):
        for line in (out / name).read_text().splitlines():
            json.loads(line)
    for record in (out / "records").iterdir():
        # Only complete records remain: resume removes temporaries a kill left behind.
        assert record.suffix == ".json" and not record.name.startswith("."), record.name
        assert json.loads(record.read_text())["state"] == "success"
    # Nor is any other temporary file left (raw bodies are written under one and renamed).
    assert not list(out.rglob(".*.tmp"))
    # No prompt has two canonical responses.
    ids = [r["prompt_id"] for r in rd.read_responses()]
    assert len(ids) == len(set(ids)) == prompts
    # No prompt whose success was recorded was sent again afterwards.
    for s in seen:
        if s.prompt_id in recorded_success_at:
            assert s.at <= recorded_success_at[s.prompt_id] + 0.05, s.prompt_id
    # The attempt history accounts for every request the server saw.
    attempts = rd.read_attempts()
    for p in release.prompts:
        history = [a for a in attempts if a["prompt_id"] == p.prompt_id]
        served = [s for s in seen if s.prompt_id == p.prompt_id]
        assert len(history) >= len(served), p.prompt_id
        assert sorted(a["attempt"] for a in history) == list(range(1, len(history) + 1))
    uncertain_resent = sum(1 for a in attempts if a["decision"] == "uncertain")
    figure = (
        f"crash: {kills} SIGKILLs over {rounds} rounds of a {prompts}-prompt run, "
        f"{refused_while_uncertain} plain resumes refused while uncertain, "
        f"{uncertain_resent} uncertain attempts kept in the history, {len(seen)} requests "
        "served, 0 corrupt artifacts, 0 duplicate responses, 0 recorded successes resent"
    )
    print(figure)
    return figure


def test_sigkill_at_random_points_then_resume(tmp_path: Path) -> None:
    crash_campaign(tmp_path, prompts=60, rounds=10, seed=1234)


@pytest.mark.slow
def test_sigkill_campaign_full(tmp_path: Path) -> None:
    figure = crash_campaign(tmp_path, prompts=200, rounds=40, seed=99)
    kills = int(figure.split(": ", 1)[1].split(" ", 1)[0])
    assert kills >= 30
