"""The live runner against httpx.MockTransport: artifacts, retries, resume rules."""

from __future__ import annotations

import json
import typing
from pathlib import Path
from typing import Any

import httpx
import pytest

from engine import make_config, run_live_model
from engine.errors import ConfigError, ResumeRefused
from engine.release import load_release
from engine.rundir.records import RunDir
from engine.rundir.shapes import RunManifest, RunSummary
from engine.states import AttemptDecision
from tests.fakes.faults import messages_key


def answering_transport(
    release_dir: Path,
    plan: dict[str, list[int]] | None = None,
    seen: list[dict[str, Any]] | None = None,
) -> httpx.MockTransport:
    """A provider that answers with reference code, failing with the given statuses first."""
    release = load_release(release_dir)
    answers = {
        messages_key(p.request_messages()): (p.prompt_id, p.target_metadata["reference_code"])
        for p in release.prompts
    }
    counts: dict[str, int] = {}

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        pid, code = answers[messages_key(body["messages"])]
        if seen is not None:
            seen.append({"prompt_id": pid, "body": body, "headers": dict(request.headers)})
        n = counts.get(pid, 0)
        counts[pid] = n + 1
        steps = (plan or {}).get(pid, [])
        if n < len(steps):
            return httpx.Response(
                steps[n],
                json={"error": {"message": f"status {steps[n]}"}},
                headers={"retry-after": "0"},
            )
        return httpx.Response(
            200,
            json={
                "id": "x",
                "model": body["model"] + "-2025",
                "choices": [
                    {
                        "index": 0,
                        "finish_reason": "stop",
                        "message": {"role": "assistant", "content": f"```python\n{code}```"},
                    }
                ],
                "usage": {"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12},
            },
        )

    return httpx.MockTransport(handler)


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


ENV = {"GROQ_API_KEY": "gsk_test_key_value_0123456789"}


def test_run_writes_the_seven_artifacts(release_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    seen: list[dict[str, Any]] = []
    result = run_live_model(
        config(release_dir, out), transport=answering_transport(release_dir, seen=seen), env=ENV
    )
    summary = result.to_dict()
    assert summary["success"] == 6 and summary["error"] == 0 and summary["complete"]
    for name in (
        "run-manifest.json",
        "requests.jsonl",
        "responses.jsonl",
        "provider-attempts.jsonl",
        "records",
        "raw",
        "run-summary.json",
    ):
        assert (out / name).exists(), name
    manifest = json.loads((out / "run-manifest.json").read_text())
    assert manifest["credential_source"] == "env:GROQ_API_KEY"
    assert manifest["target_metadata_exported"] is False
    responses = [json.loads(line) for line in (out / "responses.jsonl").read_text().splitlines()]
    assert len(responses) == 6
    r = responses[0]
    for field in (
        "prompt_id",
        "provider",
        "model",
        "returned_model",
        "content",
        "generated_code",
        "finish_reason",
        "usage",
        "request_sha256",
        "request_id",
        "created_at_utc",
    ):
        assert field in r
    assert r["returned_model"] == "m-2025" and r["model"] == "m"
    assert r["generated_code"].startswith("from qiskit") and "```" not in r["generated_code"]
    # What went over the wire is exactly the persisted body, and nothing but messages of it.
    requests = {
        json.loads(line)["prompt_id"]: json.loads(line)
        for line in (out / "requests.jsonl").read_text().splitlines()
    }
    for s in seen:
        assert s["body"] == requests[s["prompt_id"]]["body"]
        assert "target_metadata" not in json.dumps(s["body"])
        assert s["headers"]["authorization"] == "Bearer " + ENV["GROQ_API_KEY"]
    everything = "".join(p.read_text() for p in out.rglob("*") if p.is_file())
    assert ENV["GROQ_API_KEY"] not in everything


def shape_keys(shape: type) -> tuple[set[str], set[str]]:
    """A TypedDict's required and optional keys. Its annotations are strings (`from __future__
    import annotations`), which `__optional_keys__` does not see through."""
    hints = typing.get_type_hints(shape, include_extras=True)
    optional = {k for k, t in hints.items() if typing.get_origin(t) is typing.NotRequired}
    return set(hints) - optional, optional


def test_the_manifest_summary_and_attempt_lines_hold_what_their_shapes_say(
    release_dir: Path, tmp_path: Path
) -> None:
    """The type checker holds the writers to RunManifest and RunSummary; this holds the shapes
    to the files: every key they name and no other, the summary's optional ones on the runs
    that have them (here a recast), and every attempt's decision one of AttemptDecision."""
    out = tmp_path / "run"
    result = run_live_model(
        config(release_dir, out, recast=True, max_retries=1),
        transport=answering_transport(release_dir, {"ghz_00": [500], "ghz_01": [400]}),
        env=ENV,
    )
    manifest_keys, manifest_optional = shape_keys(RunManifest)
    assert set(json.loads((out / "run-manifest.json").read_text())) == manifest_keys
    assert not manifest_optional
    required, optional = shape_keys(RunSummary)
    assert optional == {"batch", "recast", "stability"}
    # run-summary.json is the first draw's, written before the recast began.
    assert set(json.loads((out / "run-summary.json").read_text())) == required
    assert set(result.summary) == required | {"recast", "stability"}
    assert set(result.summary["recast"]) == required
    decisions = [a["decision"] for a in RunDir(out).read_attempts()]
    assert set(decisions) == {"retry", "success", "terminal"} <= set(AttemptDecision)


def test_retryable_then_success_and_terminal_error(release_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    transport = answering_transport(
        release_dir, {"ghz_00": [429, 500, 503], "ghz_01": [400], "ghz_02": [500] * 10}
    )
    summary = run_live_model(
        config(release_dir, out, max_retries=3), transport=transport, env=ENV
    ).to_dict()
    assert summary["success"] == 4 and summary["error"] == 2
    attempts = RunDir(out).read_attempts()
    by = {}
    for a in attempts:
        by.setdefault(a["prompt_id"], []).append(a)
    assert [a["decision"] for a in by["ghz_00"]] == ["retry", "retry", "retry", "success"]
    assert [a["decision"] for a in by["ghz_01"]] == ["terminal"]
    assert [a["status"] for a in by["ghz_02"]] == [500] * 4
    assert by["ghz_02"][-1]["decision"] == "terminal"
    assert summary["errors"]["ghz_01"].startswith("bad_request: HTTP 400")


def test_resume_rules(release_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    seen: list[dict[str, Any]] = []
    run_live_model(
        config(release_dir, out, max_retries=0),
        transport=answering_transport(release_dir, {"ghz_01": [400]}),
        env=ENV,
    )
    # Non-empty directory without --resume: refused.
    with pytest.raises(ResumeRefused, match="not empty: pass --resume"):
        run_live_model(
            config(release_dir, out), transport=answering_transport(release_dir), env=ENV
        )
    # Resume: success and terminal errors skipped.
    s = run_live_model(
        config(release_dir, out, resume=True),
        transport=answering_transport(release_dir, seen=seen),
        env=ENV,
    ).to_dict()
    assert seen == [] and s["error"] == 1
    # --retry-errors sends only the error again.
    s = run_live_model(
        config(release_dir, out, resume=True, retry_errors=True),
        transport=answering_transport(release_dir, seen=seen),
        env=ENV,
    ).to_dict()
    assert [x["prompt_id"] for x in seen] == ["ghz_01"] and s["success"] == 6
    responses = RunDir(out).read_responses()
    assert sorted(r["prompt_id"] for r in responses) == sorted({r["prompt_id"] for r in responses})
    attempts = [a for a in RunDir(out).read_attempts() if a["prompt_id"] == "ghz_01"]
    assert [a["attempt"] for a in attempts] == [1, 2]


def test_resume_refuses_a_different_contract(release_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    run_live_model(
        config(release_dir, out, limit=2), transport=answering_transport(release_dir), env=ENV
    )
    for change, field in (
        ({"model": "other"}, "model"),
        ({"temperature": 0.7}, "generation contract"),
        ({"limit": 3}, "selected prompt IDs"),
        ({"base_url": "https://example.com/v1"}, "route base URL"),
    ):
        with pytest.raises(ResumeRefused, match=f"the {field} differs"):
            run_live_model(
                config(release_dir, out, **{"limit": 2, "resume": True, **change}),
                transport=answering_transport(release_dir),
                env=ENV,
            )


def test_uncertain_prompts_refuse_resume_until_retry_uncertain(
    release_dir: Path, tmp_path: Path
) -> None:
    out = tmp_path / "run"
    run_live_model(
        config(release_dir, out, limit=3), transport=answering_transport(release_dir), env=ENV
    )
    rd = RunDir(out)
    # Simulate a crash while ghz_02 was in flight: its record says so and nothing else exists.
    responses = [r for r in rd.read_responses() if r["prompt_id"] != "ghz_02"]
    rd.responses_path.write_text("".join(json.dumps(r) + "\n" for r in responses))
    attempts = [a for a in rd.read_attempts() if a["prompt_id"] != "ghz_02"]
    rd.attempts_path.write_text("".join(json.dumps(a) + "\n" for a in attempts))
    rd.write_record({"prompt_id": "ghz_02", "state": "in_flight", "attempt": 1, "attempts": 1})
    with pytest.raises(ResumeRefused, match=r"1 prompt.* in flight .*--retry-uncertain"):
        run_live_model(
            config(release_dir, out, limit=3, resume=True),
            transport=answering_transport(release_dir),
            env=ENV,
        )
    seen: list[dict[str, Any]] = []
    s = run_live_model(
        config(release_dir, out, limit=3, resume=True, retry_uncertain=True),
        transport=answering_transport(release_dir, seen=seen),
        env=ENV,
    ).to_dict()
    assert [x["prompt_id"] for x in seen] == ["ghz_02"] and s["success"] == 3
    history = [a for a in rd.read_attempts() if a["prompt_id"] == "ghz_02"]
    assert [(a["attempt"], a["decision"]) for a in history] == [(1, "uncertain"), (2, "success")]


def test_crash_after_response_before_record_is_settled_without_resend(
    release_dir: Path, tmp_path: Path
) -> None:
    out = tmp_path / "run"
    run_live_model(
        config(release_dir, out, limit=2), transport=answering_transport(release_dir), env=ENV
    )
    rd = RunDir(out)
    # The response line landed but neither the attempt line nor the record update did.
    attempts = [a for a in rd.read_attempts() if a["prompt_id"] != "ghz_01"]
    rd.attempts_path.write_text("".join(json.dumps(a) + "\n" for a in attempts))
    rd.write_record({"prompt_id": "ghz_01", "state": "in_flight", "attempt": 1, "attempts": 1})
    # And a torn half-line at the end of the attempt log.
    with rd.attempts_path.open("a") as fh:
        fh.write('{"prompt_id": "ghz_0')
    seen: list[dict[str, Any]] = []
    s = run_live_model(
        config(release_dir, out, limit=2, resume=True),
        transport=answering_transport(release_dir, seen=seen),
        env=ENV,
    ).to_dict()
    assert seen == [] and s["success"] == 2 and s["uncertain"] == 0
    recovered = [a for a in rd.read_attempts() if a["prompt_id"] == "ghz_01"]
    assert len(recovered) == 1 and recovered[0]["recovered"] is True


def test_max_new_and_stop_on_error(release_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    s = run_live_model(
        config(release_dir, out, max_new=2, concurrency=1),
        transport=answering_transport(release_dir),
        env=ENV,
    ).to_dict()
    assert s["success"] == 2 and s["pending"] == 4
    s = run_live_model(
        config(release_dir, out, max_new=2, concurrency=1, resume=True),
        transport=answering_transport(release_dir),
        env=ENV,
    ).to_dict()
    assert s["success"] == 4
    out2 = tmp_path / "run2"
    s = run_live_model(
        config(release_dir, out2, concurrency=1, stop_on_error=True, max_retries=0),
        transport=answering_transport(release_dir, {"ghz_01": [401]}),
        env=ENV,
    ).to_dict()
    assert s["success"] == 1 and s["error"] == 1 and s["pending"] == 4 and s["stopped"]


def test_acknowledgement_required_but_not_for_oracle(release_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="--acknowledge-third-party-prompt-export"):
        run_live_model(
            config(release_dir, tmp_path / "a", acknowledge_prompt_export=False),
            transport=answering_transport(release_dir),
            env=ENV,
        )
    assert not (tmp_path / "a").exists()
    s = run_live_model(
        make_config(
            release_dir=release_dir, output_dir=tmp_path / "o", provider="oracle", model="reference"
        )
    ).to_dict()
    assert s["success"] == 6
    responses = RunDir(tmp_path / "o").read_responses()
    release = load_release(release_dir)
    assert all(
        r["generated_code"].strip()
        == release.by_id[r["prompt_id"]].target_metadata["reference_code"].strip()
        for r in responses
    )


def test_missing_credential_is_clear_and_writes_nothing(
    release_dir: Path, tmp_path: Path, no_credentials: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    import keyring

    monkeypatch.setattr(keyring, "get_password", lambda *a: None)
    from engine.errors import CredentialError

    with pytest.raises(CredentialError, match=r"set \$GROQ_API_KEY, pass --api-key-file"):
        run_live_model(config(release_dir, tmp_path / "run"), env={})
    assert not (tmp_path / "run").exists()


def test_sending_only_some_prompts_ignores_unrelated_uncertain_ones(
    release_dir: Path, tmp_path: Path
) -> None:
    """Retrying one error is not blocked by another prompt's uncertain attempt."""
    import asyncio

    from engine.run.runs import resend_async

    out = tmp_path / "run"
    run_live_model(
        config(release_dir, out, limit=3, max_retries=0),
        transport=answering_transport(release_dir, {"ghz_00": [400]}),
        env=ENV,
    )
    rd = RunDir(out)
    responses = [r for r in rd.read_responses() if r["prompt_id"] != "ghz_02"]
    rd.responses_path.write_text("".join(json.dumps(r) + "\n" for r in responses))
    attempts = [a for a in rd.read_attempts() if a["prompt_id"] != "ghz_02"]
    rd.attempts_path.write_text("".join(json.dumps(a) + "\n" for a in attempts))
    rd.write_record({"prompt_id": "ghz_02", "state": "in_flight", "attempt": 1, "attempts": 1})
    seen: list[dict[str, Any]] = []
    cfg = config(release_dir, out, limit=3, resume=True, retry_errors=True)
    result = asyncio.run(
        resend_async(
            cfg, {"ghz_00"}, env=ENV, transport=answering_transport(release_dir, seen=seen)
        )
    )
    assert [s["prompt_id"] for s in seen] == ["ghz_00"]
    assert result.to_dict()["uncertain"] == 1 and result.to_dict()["error"] == 0
    with pytest.raises(ResumeRefused, match="in flight"):
        asyncio.run(
            resend_async(cfg, {"ghz_02"}, env=ENV, transport=answering_transport(release_dir))
        )


def test_the_summary_says_where_each_requests_time_went(release_dir: Path, tmp_path: Path) -> None:
    """The figures the overhead benchmark splits its time with, and no temporary file left."""
    out = tmp_path / "run"
    s = run_live_model(
        config(release_dir, out, concurrency=2),
        transport=answering_transport(release_dir, {"ghz_02": [503]}),
        env=ENV,
    ).to_dict()
    path, writes = s["send_path"], s["durable_writes"]
    assert s["requests_sent"] == path["requests"] == writes["in_flight_records"] == 7
    assert set(path["mean_ms"]) == {
        "slot",
        "in_flight_record",
        "to_send",
        "round_trip",
        "bookkeeping",
        "between_requests",
    }
    assert all(v >= 0 for v in path["mean_ms"].values())
    assert 0 < path["first_request_after_s"] <= path["last_answer_after_s"]
    # The in_flight record's wait is a part of the time its request spent on the record.
    split = writes["mean_wait_split_ms"]
    assert set(split) == {"to_begin", "flush", "to_resume"}
    assert sum(split.values()) <= path["mean_ms"]["in_flight_record"] + 0.01
    assert writes["flushes"] >= 1 and writes["flush_ms"]["max"] >= writes["flush_ms"]["p50"]
    assert not list(out.rglob(".*.tmp"))
    assert {json.loads(p.read_bytes())["state"] for p in (out / "records").iterdir()} == {"success"}


@pytest.mark.parametrize("concurrency", [1, 2])
def test_in_flight_never_exceeds_the_concurrency(
    release_dir: Path, tmp_path: Path, concurrency: int
) -> None:
    """A prompt whose answer is in (its evidence still being written) is no longer in flight:
    the events never show more prompts in flight than requests may be outstanding."""
    from engine.events import Event, PromptStateChanged
    from engine.run.runs import RunProgress

    progress = RunProgress()
    states: dict[str, str] = {}
    peak = 0

    def on_event(event: Event) -> None:
        nonlocal peak
        progress.apply(event)
        if isinstance(event, PromptStateChanged):
            states[event.prompt_id] = event.state
            peak = max(peak, sum(1 for s in states.values() if s == "in_flight"))

    run_live_model(
        config(release_dir, tmp_path / "run", concurrency=concurrency),
        transport=answering_transport(release_dir, {"ghz_02": [503]}),
        progress=on_event,
        env=ENV,
    )
    assert 1 <= peak <= concurrency
    assert progress.counts["success"] == 6 and progress.finished_prompts == 6
    assert set(states.values()) == {"success"}


def test_batch_progress_sends_one_at_a_time_at_concurrency_one(
    release_dir: Path, tmp_path: Path
) -> None:
    from tests.conftest import cli

    result = cli(
        "--batch",
        "run-model",
        "--release-dir",
        str(release_dir),
        "--provider",
        "oracle",
        "--concurrency",
        "1",
        "--limit",
        "4",
        "--output-dir",
        str(tmp_path / "run"),
    )
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()[1:-1]
    first_answer = next(i for i, line in enumerate(lines) if "sending" not in line)
    assert first_answer == 1, lines
    # Every request start is followed by its answer before the next one starts.
    assert [("sending" in line) for line in lines[::2]] == [True] * 4, lines

    again = cli(
        "--batch",
        "run-model",
        "--release-dir",
        str(release_dir),
        "--provider",
        "oracle",
        "--limit",
        "4",
        "--output-dir",
        str(tmp_path / "run"),
        "--resume",
    )
    assert again.returncode == 0, again.stderr
    # Resuming a complete run sends nothing, and says so in one line, not one per prompt.
    assert again.stderr.splitlines()[0].endswith(
        "4 selected, 0 to send, 4 skipped -> " + str(tmp_path / "run")
    ), again.stderr
    assert len(again.stderr.splitlines()) == 2, again.stderr
