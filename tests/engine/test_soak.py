"""Soak: many prompts through the fault-injecting loopback server at high concurrency.

Prints the figure the README's Guarantees section states. The default test command runs a
reduced soak; `pytest -m slow tests/engine/test_soak.py -s` runs the full one (2,000 prompts,
concurrency 32, a 20% fault rate).
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import pytest

from engine import make_config, run_live_model
from engine.release import load_release
from engine.rundir.records import RunDir
from tests.fakes.faults import FaultScript, FaultServer
from tests.helpers import write_release

FAULTS = {
    "openai": (
        "429",
        "429-ms",
        "429-date",
        "429-none",
        "500-html",
        "502-html",
        "503",
        "200-error",
        "200-html",
        "close",
        "truncated",
        "truncated-json",
        "slow:1.3",
        "padding",
        "empty",
        "length",
        "substitute",
    ),
    "anthropic": (
        "overloaded",
        "429",
        "500-html",
        "close",
        "truncated-json",
        "empty",
        "length",
        "substitute",
    ),
    "gemini": (
        "429",
        "overloaded",
        "500-html",
        "close",
        "truncated",
        "blocked",
        "length",
        "substitute",
    ),
}
SUCCESS_SHAPED = {"padding", "empty", "length", "substitute", "blocked"}


def soak(tmp_path: Path, wire: str, prompts: int, concurrency: int, rate: float) -> str:
    release_dir = write_release(tmp_path / f"release-{wire}", count=prompts)
    release = load_release(release_dir)
    script = FaultScript.for_release(
        release, fault_rate=rate, fault_kinds=FAULTS[wire], seed=prompts
    )
    out = tmp_path / f"run-{wire}"
    provider = {"openai": "local", "anthropic": "anthropic", "gemini": "gemini"}[wire]
    with FaultServer(script) as server:
        base = server.base_url
        if wire == "anthropic":
            base = base.removesuffix("/v1")
        elif wire == "gemini":
            base = base.removesuffix("/v1") + "/v1beta"
        cfg = make_config(
            release_dir=release_dir,
            output_dir=out,
            provider=provider,
            base_url=base,
            model="test-model",
            no_auth=True,
            acknowledge_prompt_export=True,
            concurrency=concurrency,
            max_retries=8,
            retry_backoff_seconds=0.01,
            max_backoff_seconds=0.05,
            request_timeout_seconds=1.0,
        )
        started = time.monotonic()
        summary = run_live_model(cfg).to_dict()
        wall = time.monotonic() - started
        seen = list(server.seen)

    rd = RunDir(out)
    responses = rd.read_responses()
    attempts = rd.read_attempts()
    ids = [p.prompt_id for p in release.prompts]
    by_prompt = Counter(r["prompt_id"] for r in responses)
    duplicated = sum(1 for n in by_prompt.values() if n > 1)
    ended = {pid: s.state for pid, s in rd.reconcile(ids, repair=False).statuses.items()}
    lost = sum(1 for pid in ids if ended[pid] not in ("success", "error"))
    faults = sum(1 for s in seen if s.behaviour != "ok")
    # Every request the server saw is an attempt in the history. The history may hold more:
    # a pooled connection the server had closed fails before the request reaches it.
    served = Counter(s.prompt_id for s in seen)
    logged = Counter(a["prompt_id"] for a in attempts)
    assert all(logged[pid] >= n for pid, n in served.items())
    assert duplicated == 0 and lost == 0
    assert summary["success"] + summary["error"] == prompts
    for pid, n in by_prompt.items():
        assert n == 1, pid
    hard = sum(1 for s in seen if s.behaviour not in SUCCESS_SHAPED and s.behaviour != "ok")
    rc = summary["rate_control"]
    figure = (
        f"soak[{wire}]: {prompts} prompts at concurrency {concurrency}, {len(seen)} "
        f"requests, {faults} faults injected ({hard} failing), "
        f"{summary['success']} success, {summary['error']} terminal errors, "
        f"{lost} lost, {duplicated} duplicated; {rc['throttled_answers']} 429s "
        f"({rc['isolated_429s']} isolated, {rc['limit_429s']} taken as a limit); "
        f"{wall:.1f} s"
    )
    print(figure)
    return figure


@pytest.mark.parametrize("wire", ["openai", "anthropic", "gemini"])
def test_soak_reduced(tmp_path: Path, wire: str) -> None:
    soak(tmp_path, wire, prompts=150, concurrency=16, rate=0.2)


@pytest.mark.slow
def test_soak_full(tmp_path: Path) -> None:
    soak(tmp_path, "openai", prompts=2000, concurrency=32, rate=0.2)
    soak(tmp_path, "anthropic", prompts=500, concurrency=32, rate=0.2)
    soak(tmp_path, "gemini", prompts=500, concurrency=32, rate=0.2)
