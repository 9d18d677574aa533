"""The run loop's parts on their own: the session's resume policy, the recorder's reading of
a reply, the one backoff rule."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from engine import make_config, run_live_model
from engine.errors import ConfigError, ResumeRefused
from engine.providers.adapters import adapter_for
from engine.run.plan import build_plan
from engine.run.recorder import AttemptOutcome, Recorder
from engine.run.retry import backoff
from engine.run.session import Session
from engine.rundir.records import IN_FLIGHT, RunDir

ENV = {"GROQ_API_KEY": "gsk_test_key_value_0123456789"}


def config(release_dir: Path, out: Path, **kw: Any) -> Any:
    base: dict[str, Any] = dict(
        release_dir=release_dir,
        output_dir=out,
        provider="groq",
        model="m",
        acknowledge_prompt_export=True,
        retry_backoff_seconds=0.0,
    )
    base.update(kw)
    return make_config(**base)


def session_for(cfg: Any, only: set[str] | None = None) -> Session:
    plan = build_plan(cfg)
    return Session(cfg, plan, RunDir(cfg.output_dir), env=ENV, only=only)


def test_backoff_takes_retry_after_up_to_its_cap_else_doubles_with_jitter(
    release_dir: Path, tmp_path: Path
) -> None:
    cfg = config(
        release_dir,
        tmp_path / "run",
        retry_backoff_seconds=2.0,
        max_backoff_seconds=5.0,
        max_retry_after_seconds=30.0,
    )
    assert backoff(cfg, 0, 7.0) == 7.0
    assert backoff(cfg, 0, 300.0) == 30.0
    for retries_done, ceiling in ((0, 2.0), (1, 4.0), (2, 5.0), (6, 5.0)):
        wait = backoff(cfg, retries_done, None)
        assert 0.75 * ceiling <= wait <= ceiling, (retries_done, wait)


def test_the_recorder_reads_a_redirected_reply_per_require_exact_model(
    release_dir: Path, tmp_path: Path
) -> None:
    body = json.dumps(
        {
            "id": "x",
            "model": "other-model",
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "stop",
                    "message": {"role": "assistant", "content": "print(1)"},
                }
            ],
        }
    ).encode()
    headers = {"content-type": "application/json"}
    for exact in (False, True):
        session = session_for(
            config(release_dir, tmp_path / f"run-{exact}", require_exact_model=exact)
        )
        recorder = Recorder(session, adapter_for(session.plan.route), lambda event: None)
        outcome = recorder.read_reply(AttemptOutcome(), 200, headers, body)
        assert outcome.status == 200
        if exact:
            assert outcome.reply is None and outcome.error is not None
            assert outcome.error.error_class == "model_redirected"
            assert not outcome.error.retryable
        else:
            assert outcome.error is None and outcome.reply is not None
            assert outcome.model_check == "redirected"
            assert outcome.reply.returned_model == "other-model"


def test_the_session_holds_a_batch_prompts_and_refuses_other_uncertain_ones(
    release_dir: Path, tmp_path: Path
) -> None:
    out = tmp_path / "run"
    # An empty run (nothing sent), then two prompts left in flight as a crash would leave them.
    run_live_model(
        config(release_dir, out, max_new=0),
        transport=httpx.MockTransport(lambda request: httpx.Response(500)),
        env=ENV,
    )
    ids = list(build_plan(config(release_dir, out)).prompt_ids)
    run_dir = RunDir(out)
    for pid in ids[:2]:
        run_dir.write_record(
            {
                "prompt_id": pid,
                "state": IN_FLIGHT,
                "attempt": 1,
                "attempts": 1,
                "request_sha256": "x",
                "last_error": None,
            }
        )
    resume = config(release_dir, out, resume=True)
    with pytest.raises(ResumeRefused, match="2 prompt"):
        session_for(resume).prepare()
    # Only the chosen prompts' uncertainty can block a run restricted to them.
    assert [r.prompt_id for r in session_for(resume, only={ids[3]}).prepare()] == [ids[3]]
    with pytest.raises(ConfigError, match="no prompt 'nope'"):
        session_for(resume, only={"nope"})
    # Held by an unfinished batch: not uncertain, and not sent again.
    session = session_for(resume)
    to_send = session.prepare(held=set(ids[:2]), uncertain_held=True)
    assert [r.prompt_id for r in to_send] == ids[2:]
    assert session.statuses[ids[0]].state == "uncertain"
    # With --retry-uncertain they are sent with the rest, in plan order, and --max-new counts
    # them; a held prompt is still not sent.
    retry = config(release_dir, out, resume=True, retry_uncertain=True, max_new=3)
    assert [r.prompt_id for r in session_for(retry).prepare()] == ids[:3]
    assert [r.prompt_id for r in session_for(retry).prepare(held={ids[0]})] == ids[1:4]
