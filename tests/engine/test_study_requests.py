"""Same requests as the frozen PQID-Bench study: identities, bodies, and `trace`.

Held against the real archived requests of the 21 frozen models (the `pqid_bench` fixture).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from engine import make_config, run_live_model
from engine.errors import ReleaseError
from engine.release import load_release
from engine.release.model import (
    FORMAT_PQID_BENCH_CORE,
    FORMAT_PQID_BENCH_EVIDENCE,
    Prompt,
    Release,
)
from engine.release.study import (
    ArchivedRow,
    read_archived_rows,
    recorded_body,
    sent_body,
    stable_json,
)
from engine.release.trace import TRACE_FORMATS, trace_run
from engine.run.plan import build_plan, trace_plan
from engine.rundir.storage import canonical_json
from tests.conftest import PqidBenchCopies, cli
from tests.fakes.faults import FaultScript, FaultServer, messages_key
from tests.helpers import write_release

PROMPTS = "artifacts/test_split_154/pqid_bench_external_generation_prompts_154.jsonl"
# The project's route for each of the study's OpenAI-compatible chat providers.
ROUTE = {
    "groq": "groq",
    "deepseek": "deepseek",
    "github_models": "github-models",
    "huggingface_router": "hugging-face",
    "openrouter": "openrouter",
}
# What a user passes with --extra-body-json to repeat a row's per-model settings (the study's
# target definitions; README material).
EXTRA_BODY: dict[str, dict[str, Any]] = {
    "deepseek-v4-pro": {"reasoning_effort": "high", "thinking": {"type": "enabled"}},
    "deepseek-v4-flash": {"reasoning_effort": "high", "thinking": {"type": "enabled"}},
    "mistralai/mistral-small-3.2-24b-instruct": {
        "provider": {
            "only": ["mistral"],
            "allow_fallbacks": False,
            "require_parameters": True,
            "data_collection": "deny",
        }
    },
}
# How many frozen rows each route has in the archive (chat family only).
ROWS_PER_ROUTE = {"groq": 6, "deepseek": 2, "github-models": 2, "hugging-face": 1, "openrouter": 1}


def _release(root: Path, fmt: str) -> Release:
    release = load_release(root)
    assert release.format == fmt
    return release


@pytest.fixture(scope="module")
def evidence(pqid_bench: PqidBenchCopies) -> Release:
    return _release(pqid_bench.evidence, FORMAT_PQID_BENCH_EVIDENCE)


@pytest.fixture(scope="module")
def archived(evidence: Release) -> list[ArchivedRow]:
    return read_archived_rows(evidence)


def test_the_archive_holds_21_rows_of_154_requests(archived: list[ArchivedRow]) -> None:
    assert len(archived) == 21
    assert {len(r.records) for r in archived} == {154}
    families = sorted(r.request_family for r in archived)
    assert families.count("openai_compatible_chat") == 12


@pytest.mark.parametrize("route", sorted(ROWS_PER_ROUTE))
def test_dry_run_reproduces_every_archived_chat_body(
    route: str, evidence: Release, archived: list[ArchivedRow]
) -> None:
    rows = [
        r
        for r in archived
        if r.request_family == "openai_compatible_chat" and ROUTE[r.provider] == route
    ]
    assert len(rows) == ROWS_PER_ROUTE[route]
    for row in rows:
        config = make_config(
            release_dir=evidence.root,
            provider=route,
            model=row.api_model_id,
            generation_contract="pqid-bench",
            extra_body=EXTRA_BODY.get(row.api_model_id, {}),
        )
        plan = build_plan(config, evidence)
        assert len(plan.requests) == 154
        same = {"body": 0, "model_input": 0, "prompt_record": 0, "request": 0, "sent": 0}
        for req in plan.requests:
            rec = row.records[req.prompt_id]
            # Byte for byte in the study's canonical form (a 0 for 0.0 would differ here).
            same["body"] += stable_json(
                recorded_body("openai-chat", row.api_model_id, req.body)
            ) == stable_json(rec["request_body"])
            same["sent"] += req.body == sent_body(rec)
            assert req.study is not None
            same["model_input"] += req.study["model_input_sha256"] == rec["model_input_sha256"]
            same["prompt_record"] += (
                req.study["prompt_record_sha256"] == rec["prompt_record_sha256"]
            )
            same["request"] += req.study["request_sha256"] == rec["request_sha256"]
            # Only messages and settings leave the machine; the identities are hashes.
            data = canonical_json(req.body)
            assert b"target_metadata" not in data and b"gate_types" not in data
            assert b"row_id" not in data and b"prompt_record" not in data
        assert same == dict.fromkeys(same, 154), row.slug
        summary = plan.to_dict()["study"]
        assert summary["trace"]["replicates"]["slug"] == row.slug
        assert summary["trace"]["replicates"]["scope"] == "full"
        assert (
            summary["requests"][0]["request_sha256"]
            == row.records[plan.requests[0].prompt_id]["request_sha256"]
        )


def test_project_defaults_already_are_the_study_settings_on_chat_routes(
    evidence: Release, archived: list[ArchivedRow]
) -> None:
    row = next(r for r in archived if r.slug == "groq_llama-3_3-70b-versatile")
    plan = build_plan(
        make_config(release_dir=evidence.root, provider="groq", model=row.api_model_id), evidence
    )
    assert trace_plan(plan).replicates is not None


def test_explicit_settings_override_the_named_contract(tmp_path: Path) -> None:
    release_dir = write_release(tmp_path / "r", count=2)
    base = dict(release_dir=release_dir, generation_contract="pqid-bench")
    openai = make_config(**base, provider="openai", model="m")
    assert openai.max_output_field == "max_tokens"  # the route's default is max_completion_tokens
    assert (
        make_config(
            **base, provider="openai", model="m", max_output_field="max_completion_tokens"
        ).max_output_field
        == "max_completion_tokens"
    )
    assert make_config(**base, provider="groq", model="m", temperature=0.4).temperature == 0.4
    # The study's Anthropic runner never sent top_p; an explicit --top-p still wins.
    anthropic = build_plan(make_config(**base, provider="anthropic", model="c"))
    assert "top_p" not in anthropic.requests[0].body
    explicit = build_plan(make_config(**base, provider="anthropic", model="c", top_p=0.9))
    assert explicit.requests[0].body["top_p"] == 0.9
    plain = build_plan(make_config(release_dir=release_dir, provider="anthropic", model="c"))
    assert plain.requests[0].body["top_p"] == 1.0
    # Not a PQID-Bench release: no study identities anywhere.
    assert plain.requests[0].study is None and "study" not in plain.to_dict()


def test_cli_flags_fill_only_what_was_given() -> None:
    from pqid_tui.cli.main import batch_parser

    ns = batch_parser().parse_args(
        [
            "run-model",
            "--provider",
            "openai",
            "--model",
            "m",
            "--generation-contract",
            "pqid-bench",
            "--temperature",
            "0.3",
        ]
    )
    from pqid_tui.cli.run_model import config_from_args

    config = config_from_args(ns)
    assert (config.temperature, config.top_p, config.max_output_field) == (0.3, 1.0, "max_tokens")
    assert (
        config_from_args(
            batch_parser().parse_args(["run-model", "--provider", "openai", "--model", "m"])
        ).max_output_field
        is None
    )
    from pqid_tui.cli import trace as trace_cmd

    assert trace_cmd.FORMATS == TRACE_FORMATS


def test_trace_names_the_settings_model_and_messages_that_differ(
    evidence: Release, archived: list[ArchivedRow]
) -> None:
    ids = tuple(p.prompt_id for p in evidence.prompts[:5])
    base = dict(
        release_dir=evidence.root,
        provider="groq",
        model="llama-3.3-70b-versatile",
        generation_contract="pqid-bench",
        prompt_ids=ids,
    )
    hot = trace_plan(build_plan(make_config(**base, temperature=0.7), evidence))
    assert hot.replicates is None
    assert hot.closest is not None and hot.closest.row.slug == "groq_llama-3_3-70b-versatile"
    assert hot.differences["generation_settings"] == [
        {"field": "temperature", "run": 0.7, "study": 0.0, "prompts": 5}
    ]
    assert [d["prompt_id"] for d in hot.differing_prompts] == list(ids)
    assert all(d["aspects"] == ["generation_settings"] for d in hot.differing_prompts)
    assert hot.differences["not_sent"] == 149
    # The right settings on a subset: a partial replica.
    ok = trace_plan(build_plan(make_config(**base), evidence))
    assert ok.replicates is not None and ok.scope == "partial" and not ok.differing_prompts
    # DeepSeek without the row's per-model settings: both named, absent from the run.
    ds = trace_plan(
        build_plan(
            make_config(**dict(base, provider="deepseek", model="deepseek-v4-pro")), evidence
        )
    )
    assert ds.closest is not None and ds.closest.row.slug == "deepseek_deepseek-v4-pro"
    assert {(d["field"], d["run"]) for d in ds.differences["generation_settings"]} == {
        ("reasoning_effort", "(absent)"),
        ("thinking", "(absent)"),
    }
    # Another model on the route: the model differs, nothing else.
    other = trace_plan(
        build_plan(make_config(**dict(base, model="llama-3.3-70b-specdec")), evidence)
    )
    assert other.differences["model"] == {
        "run": "llama-3.3-70b-specdec",
        "study": "llama-3.3-70b-versatile",
    }
    assert all(d["aspects"] == ["model"] for d in other.differing_prompts)
    # One prompt's messages changed in a copy of the release: that prompt only.
    first = evidence.prompts[0]
    changed = Prompt(
        first.prompt_id,
        first.split,
        (first.messages[0], {"role": "user", "content": "something else"}),
        first.target_metadata,
        first.line,
        first.row_id,
        first.label,
        first.source_record,
    )
    edited = Release(
        evidence.root,
        evidence.name,
        evidence.version,
        evidence.digest,
        evidence.prompts_sha256,
        True,
        (changed, *evidence.prompts[1:]),
        (),
        None,
        None,
        format=FORMAT_PQID_BENCH_EVIDENCE,
    )
    msgs = trace_plan(build_plan(make_config(**base), edited))
    assert msgs.differences["messages"] == {"prompts": 1, "prompt_ids": [first.prompt_id]}
    assert msgs.differing_prompts == [{"prompt_id": first.prompt_id, "aspects": ["messages"]}]
    assert "temperature: run 0.7, study 0.0 (5 prompt(s))" in hot.render("text")


def test_native_families_send_what_the_study_sent(evidence: Release) -> None:
    def traced(provider: str, model: str, **kw: Any) -> Any:
        return trace_plan(
            build_plan(
                make_config(
                    release_dir=evidence.root,
                    provider=provider,
                    model=model,
                    generation_contract="pqid-bench",
                    **kw,
                ),
                evidence,
            )
        )

    for model in ("gemini-2.5-pro", "gemini-3.1-pro-preview"):
        assert traced("gemini", model).scope == "full"
    assert traced("anthropic", "claude-fable-5", omit_temperature=True).scope == "full"
    # The study recorded temperature and top_p for these two but its runner removed them
    # (top_p for both, temperature for Opus 4.8): same JSON sent, other request identity.
    for model, kw, removed in (
        ("claude-sonnet-4-6", {}, {"top_p": 1.0}),
        ("claude-opus-4-8", {"omit_temperature": True}, {"temperature": 0.0, "top_p": 1.0}),
    ):
        t = traced("anthropic", model, **kw)
        assert t.replicates is None
        assert t.same_sent_bodies is not None and t.same_sent_bodies.row.api_model_id == model
        assert t.same_sent_bodies.identical_sent_bodies == 154
        assert {tuple(d["aspects"]) for d in t.differing_prompts} == {("recorded_form",)}
        assert t.differences["recorded_form"] == [
            {"field": k, "run": "(absent)", "study": v, "prompts": 154} for k, v in removed.items()
        ]
        assert "top_p: the study's record says 1.0, its runner did not send it" in t.render("text")


def test_trace_needs_the_evidence_repository(pqid_bench: PqidBenchCopies, tmp_path: Path) -> None:
    core = _release(pqid_bench.core, FORMAT_PQID_BENCH_CORE)
    with pytest.raises(ReleaseError, match="evidence repository"):
        read_archived_rows(core)
    with pytest.raises(ReleaseError, match="evidence repository"):
        read_archived_rows(load_release(write_release(tmp_path / "r", count=2)))
    # The core's prompts carry the same identities: a dry run there names them too.
    plan = build_plan(make_config(release_dir=core.root, provider="groq", model="m", limit=2), core)
    study = plan.to_dict()["study"]
    assert study["trace"] is None and study["requests"][0]["model_input_sha256"]


def test_live_run_records_identities_and_trace_names_the_row(
    evidence: Release, archived: list[ArchivedRow], tmp_path: Path
) -> None:
    row = next(r for r in archived if r.slug == "deepseek_deepseek-v4-pro")
    answers = {
        messages_key(p.request_messages()): (p.prompt_id, "qc = QuantumCircuit(1)")
        for p in evidence.prompts
    }
    out = tmp_path / "run"
    with FaultServer(FaultScript(answers=answers)) as server:
        summary = run_live_model(
            make_config(
                release_dir=evidence.root,
                output_dir=out,
                provider="deepseek",
                base_url=server.base_url,
                model=row.api_model_id,
                generation_contract="pqid-bench",
                extra_body=EXTRA_BODY[row.api_model_id],
                acknowledge_prompt_export=True,
                concurrency=8,
            ),
            env={"DEEPSEEK_API_KEY": "sk-test0123456789abcdefghij"},
        ).to_dict()
        seen = sorted(canonical_json(s.body) for s in server.seen)
    assert summary["success"] == 154
    # What reached the provider is what the study's SDK sent: extra_body merged at the top.
    # (Compared as a multiset: two prompts, 0004 and 0124, have the same messages.)
    assert seen == sorted(canonical_json(sent_body(rec)) for rec in row.records.values())
    assert all(b'"thinking":{"type":"enabled"}' in body for body in seen)
    lines = [json.loads(x) for x in (out / "requests.jsonl").read_text().splitlines()]
    for line in lines:
        rec = row.records[line["prompt_id"]]
        assert {
            k: line["study"][k]
            for k in ("model_input_sha256", "prompt_record_sha256", "request_sha256")
        } == {k: rec[k] for k in ("model_input_sha256", "prompt_record_sha256", "request_sha256")}
        assert line["study"]["provider"] == "deepseek"
    manifest = json.loads((out / "run-manifest.json").read_text())
    assert manifest["generation_contract_preset"] == "pqid-bench"
    trace = trace_run(evidence, out)
    assert trace.replicates is not None and trace.replicates.row.slug == row.slug
    assert trace.scope == "full" and trace.recorded_identities_agree == 154
    assert trace.request_hashes_ok == 154 and trace.to_dict()["run"]["base_url"] == server.base_url
    result = cli(
        "--batch",
        "trace",
        "--release-dir",
        str(evidence.root),
        "--run-dir",
        str(out),
        "--format",
        "text",
    )
    assert result.returncode == 0, result.stderr
    assert (
        "replicates: DeepSeek V4 Pro [deepseek deepseek-v4-pro], request for request, "
        "154 of 154 prompts (full)" in result.stdout
    )

    # A body edited after the run: its hash no longer matches, and that prompt now differs.
    copy = tmp_path / "edited"
    shutil.copytree(out, copy)
    lines[3]["body"]["temperature"] = 0.2
    (copy / "requests.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    edited = trace_run(evidence, copy)
    assert edited.replicates is None and edited.request_hashes_ok == 153
    assert edited.recorded_identities_agree == 153
    assert edited.differing_prompts == [
        {"prompt_id": lines[3]["prompt_id"], "aspects": ["generation_settings"]}
    ]


def _run_dir_of(plan: Any, path: Path) -> Path:
    """A run directory as a run writes it before sending (manifest and requests)."""
    from engine.run.live import build_manifest, request_record
    from engine.rundir.records import RunDir

    RunDir(path).create(build_manifest(plan, "none"), [request_record(r) for r in plan.requests])
    return path


def test_dry_run_on_the_command_line_names_the_replicated_row(evidence: Release) -> None:
    args = [
        "--batch",
        "run-model",
        "--release-dir",
        str(evidence.root),
        "--provider",
        "groq",
        "--model",
        "llama-3.3-70b-versatile",
        "--generation-contract",
        "pqid-bench",
        "--dry-run",
    ]
    same = cli(*args)
    assert same.returncode == 0, same.stderr
    plan = json.loads(same.stdout)
    assert plan["generation_contract_preset"] == "pqid-bench"
    assert plan["study"]["trace"] == {
        "replicates": {
            "model_label": "Llama 3.3 70B Versatile",
            "slug": "groq_llama-3_3-70b-versatile",
            "provider": "groq",
            "api_model_id": "llama-3.3-70b-versatile",
            "scope": "full",
            "prompts": 154,
            "of": 154,
        },
        "closest": "groq_llama-3_3-70b-versatile",
        "differing_prompts": 0,
    }
    assert len(plan["study"]["requests"]) == 154
    other = json.loads(cli(*args, "--top-p", "0.95").stdout)["study"]["trace"]
    assert other["replicates"] is None and other["differing_prompts"] == 154


def test_trace_verifies_the_archived_requests_it_reads(
    pqid_bench: PqidBenchCopies, evidence: Release, tmp_path: Path
) -> None:
    plan = build_plan(
        make_config(
            release_dir=evidence.root, provider="groq", model="llama-3.1-8b-instant", limit=3
        ),
        evidence,
    )
    run = _run_dir_of(plan, tmp_path / "run")
    copy = tmp_path / "evidence"
    shutil.copytree(pqid_bench.evidence, copy, symlinks=True)
    rel = "artifacts/external_model_batches_154/requests/groq_llama-3_1-8b-instant_requests.jsonl"
    data = bytearray((copy / rel).read_bytes())
    data[-20] ^= 0x01  # one flipped bit inside a record: same size, other SHA-256
    (copy / rel).write_bytes(bytes(data))
    result = cli("--batch", "trace", "--release-dir", str(copy), "--run-dir", str(run))
    assert result.returncode == 2
    assert "groq_llama-3_1-8b-instant_requests.jsonl" in result.stderr
    assert "SHA-256" in result.stderr  # caught by verification, not by parsing
    assert "Traceback" not in result.stderr
    # The untouched copy: a partial replica of that row, in JSON.
    ok = cli("--batch", "trace", "--release-dir", str(pqid_bench.evidence), "--run-dir", str(run))
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["replicates"]["scope"] == "partial"
    core = cli("--batch", "trace", "--release-dir", str(pqid_bench.core), "--run-dir", str(run))
    assert core.returncode == 2 and "evidence repository" in core.stderr


def test_trace_of_a_run_on_another_release_is_one_clear_error(
    evidence: Release, tmp_path: Path
) -> None:
    demo = write_release(tmp_path / "demo", count=3)
    plan = build_plan(make_config(release_dir=demo, provider="groq", model="m"))
    run = _run_dir_of(plan, tmp_path / "run")
    result = cli("--batch", "trace", "--release-dir", str(evidence.root), "--run-dir", str(run))
    assert result.returncode == 2 and "none of its 3 prompts" in result.stderr
    missing = cli(
        "--batch",
        "trace",
        "--release-dir",
        str(evidence.root),
        "--run-dir",
        str(tmp_path / "nowhere"),
    )
    assert missing.returncode == 2 and "run-manifest.json: file is missing" in missing.stderr


def test_families_without_a_project_adapter_are_named_as_route_differences(
    evidence: Release,
) -> None:
    for provider, model, family in (
        (
            "hugging-face",
            "Qiskit/mistral-small-3.2-24b-qiskit:featherless-ai",
            "openai_compatible_completion",
        ),
        ("openai", "gpt-5.5", "openai_responses"),
    ):
        t = trace_plan(
            build_plan(
                make_config(release_dir=evidence.root, provider=provider, model=model, limit=2),
                evidence,
            )
        )
        assert t.replicates is None and t.same_sent_bodies is None
        assert t.closest is not None and t.closest.row.api_model_id == model
        assert t.differences["route"]["study"]["request_family"] == family
        assert all({"route", "messages"} <= set(d["aspects"]) for d in t.differing_prompts)
