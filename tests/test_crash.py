"""Real runs in a subprocess, SIGKILLed at several moments, then resumed."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from engine.records import RunDir
from engine.release import load_release
from tests.conftest import ROOT
from tests.faultserver import FaultScript, FaultServer
from tests.helpers import write_release


def start_run(release: Path, out: Path, base_url: str, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "pqid_tui", "--batch", "run-model", "--release-dir",
         str(release), "--output-dir", str(out), "--provider", "local", "--base-url", base_url,
         "--model", "m", "--no-auth", "--acknowledge-third-party-prompt-export",
         "--concurrency", "3", "--retry-backoff-seconds", "0.05", "--quiet", *extra],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_sigkill_at_several_points_then_resume(tmp_path: Path) -> None:
    release_dir = write_release(tmp_path / "release", count=24)
    release = load_release(release_dir)
    out = tmp_path / "run"
    rng = random.Random(1234)
    # Some prompts fail once first, so kills also land during retries and backoffs.
    plan = {p.prompt_id: ["503"] for p in release.prompts[::5]}
    script = FaultScript.for_release(release, plan, hang_seconds=0.12)
    kills = 0
    refused_while_uncertain = 0
    with FaultServer(script) as server:
        recorded_success_at: dict[str, float] = {}
        for round_ in range(12):
            first = round_ == 0
            args = [] if first else ["--resume", "--retry-uncertain"]
            if not first and round_ % 2:
                # A plain --resume must refuse whenever something is uncertain.
                probe = start_run(release_dir, out, server.base_url, "--resume")
                _, err = probe.communicate(timeout=60)
                if "in flight" in err:
                    assert probe.returncode == 2
                    refused_while_uncertain += 1
            proc = start_run(release_dir, out, server.base_url, *args)
            time.sleep(rng.uniform(0.25, 1.2))
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

    assert kills >= 5, "the run finished before enough kills landed"
    assert summary["success"] == 24 and summary["uncertain"] == 0 and summary["pending"] == 0
    rd = RunDir(out)
    # Every artifact parses.
    json.loads((out / "run-manifest.json").read_text())
    json.loads((out / "run-summary.json").read_text())
    for name in ("requests.jsonl", "responses.jsonl", "provider-attempts.jsonl"):
        for line in (out / name).read_text().splitlines():
            json.loads(line)
    for record in (out / "records").iterdir():
        assert json.loads(record.read_text())["state"] == "success"
    # No prompt has two canonical responses.
    ids = [r["prompt_id"] for r in rd.read_responses()]
    assert len(ids) == len(set(ids)) == 24
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
