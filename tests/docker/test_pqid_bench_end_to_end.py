"""End to end on the real benchmark: a live run on the PQID-Bench core distribution through a
loopback provider that answers each prompt with one frozen model's archived reply, replayed in
the pinned container under the PQID-Bench contract, then compared with the evidence repository's
21 frozen rows: the candidate must equal that model's frozen row cell for cell."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from engine import make_config, run_live_model
from engine.release import load_release
from tests.conftest import PqidBenchCopies
from tests.fakes.faults import FaultScript, FaultServer, messages_key

MODEL = "groq_llama-3_3-70b-versatile"
RESPONSES = f"artifacts/external_model_batches_154/responses/{MODEL}_responses.jsonl"
VERDICTS = (
    "report_executable",
    "report_assembly_admissible",
    "report_signature_match",
    "num_qubits_match",
    "num_clbits_match",
    "gate_count_match",
    "gate_types_match",
)


def archived_contents(evidence: Path) -> dict[str, str]:
    """The text each archived reply carried (the chat message content), by prompt ID."""
    out: dict[str, str] = {}
    for line in (evidence / RESPONSES).read_text().splitlines():
        record = json.loads(line)
        raw = json.loads(record["raw_response"])
        out[record["prompt_id"]] = raw["choices"][0]["message"]["content"]
    return out


def live_run(pqid_bench: PqidBenchCopies, out: Path, *, limit: int | None = None) -> dict[str, Any]:
    release = load_release(pqid_bench.core)
    contents = archived_contents(pqid_bench.evidence)
    queues: dict[str, list[tuple[str, str]]] = {}
    for p in release.prompts:
        queues.setdefault(messages_key(p.request_messages()), []).append(
            (p.prompt_id, contents[p.prompt_id])
        )
    # Two of the 154 prompts carry identical messages: a provider cannot tell them apart, so
    # they are sent one at a time in release order (concurrency 1) and answered in that order.
    script = FaultScript(answer_queues=queues, model_override="llama-3.3-70b-versatile")
    with FaultServer(script) as server:
        cfg = make_config(
            release_dir=pqid_bench.core,
            output_dir=out,
            provider="local",
            base_url=server.base_url,
            model="llama-3.3-70b-versatile",
            no_auth=True,
            acknowledge_prompt_export=True,
            retry_backoff_seconds=0.01,
            limit=limit,
            concurrency=1,
        )
        return run_live_model(cfg).to_dict()


def test_live_run_on_the_core_distribution_keeps_the_archived_replies(
    pqid_bench: PqidBenchCopies, tmp_path: Path
) -> None:
    """A live run on the core distribution: every prompt answered, the replies recorded as
    the provider sent them, and no target metadata in anything sent."""
    summary = live_run(pqid_bench, tmp_path / "run", limit=12)
    assert summary["success"] == 12, summary
    contents = archived_contents(pqid_bench.evidence)
    lines = [
        json.loads(line) for line in (tmp_path / "run" / "responses.jsonl").read_text().splitlines()
    ]
    assert len(lines) == 12
    for line in lines:
        assert line["content"] == contents[line["prompt_id"]]
    sent = (tmp_path / "run" / "requests.jsonl").read_text()
    assert "target_metadata" not in sent and "gate_types" not in sent


@pytest.mark.docker
def test_replayed_candidate_equals_its_frozen_row(
    pqid_bench: PqidBenchCopies, tmp_path: Path, pqid_bench_runner: Any
) -> None:
    """Live run of all 154 prompts, replay in the pinned environment, compare with the 21
    frozen rows: the candidate's cells equal the frozen model's, paired difference +0/-0."""
    from engine.replay.compare import compare
    from engine.replay.replay import replay

    run = tmp_path / "run"
    summary = live_run(pqid_bench, run)
    assert summary["success"] == 154, summary
    result = replay(
        pqid_bench.core,
        run / "responses.jsonl",
        run / "evaluation",
        acknowledge_code_execution=True,
        runner=pqid_bench_runner,
    )
    evidence = load_release(pqid_bench.evidence)
    frozen = {c["prompt_id"]: c for c in evidence.frozen_evaluations(MODEL)}
    mismatched = [
        (ev["prompt_id"], key, frozen[ev["prompt_id"]][key], ev.get(key))
        for ev in result.evaluations
        for key in VERDICTS
        if ev.get(key) != frozen[ev["prompt_id"]][key]
    ]
    assert mismatched == []
    comparison = compare(
        evidence, result.files["evaluations"], candidate_manifest=run / "run-manifest.json"
    )
    row = next(r for r in comparison.data["table"] if r["label"] == MODEL)
    for key, paired in row["paired"].items():
        assert (paired["candidate_only"], paired["row_only"]) == (0, 0), key
