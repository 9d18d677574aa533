"""The OpenAI Batch path against a loopback Files and Batches server: artifacts, resume, errors."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from engine import load_release, make_config, run_live_model
from engine.errors import BatchApiError, ConfigError, ResumeRefused, UsageError
from engine.events import BatchPolled, Event
from engine.run.batch import run_batch_api, run_batch_api_async
from engine.run.live import RunControl
from engine.rundir.layout import BATCH_STATE as STATE_FILE
from engine.rundir.records import RunDir
from tests.conftest import ROOT
from tests.fakes.batch import BatchScript, BatchServer
from tests.fakes.faults import FaultScript, FaultServer

KEY = "sk-test-batch-0123456789abcdefXYZ"
ENV = {"OPENAI_API_KEY": KEY}
ARTIFACTS = (
    "run-manifest.json",
    "requests.jsonl",
    "responses.jsonl",
    "provider-attempts.jsonl",
    "records",
    "raw",
    "run-summary.json",
)


def config(release_dir: Path, out: Path, base_url: str, **kw: Any) -> Any:
    base: dict[str, Any] = dict(
        release_dir=release_dir,
        output_dir=out,
        provider="openai",
        model="gpt-test",
        base_url=base_url,
        acknowledge_prompt_export=True,
        batch_api=True,
        batch_poll_seconds=0.02,
        retry_backoff_seconds=0.0,
    )
    base.update(kw)
    return make_config(**base)


def server_for(release_dir: Path, **kw: Any) -> BatchServer:
    return BatchServer(BatchScript.for_release(load_release(release_dir), key=KEY, **kw))


def state(out: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((out / STATE_FILE).read_text())
    return data


def by_prompt(rows: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        out.setdefault(row["prompt_id"], []).append(row)
    return out


def no_key_anywhere(out: Path, key: str = KEY) -> None:
    for path in out.rglob("*"):
        if path.is_file():
            assert key.encode() not in path.read_bytes(), path


def test_batch_run_materialises_the_live_artifacts(release_dir: Path, tmp_path: Path) -> None:
    """One batch, one response per prompt, the same canonical fields as a live run's."""
    out = tmp_path / "batch"
    with server_for(release_dir) as server:
        summary = run_batch_api(config(release_dir, out, server.base_url), env=ENV).to_dict()
        seen = list(server.seen)
        assert server.uploads == 1 and server.create_posts == 1 and server.created == 1
    assert summary["success"] == 6 and summary["error"] == 0 and summary["complete"]
    for name in ARTIFACTS:
        assert (out / name).exists(), name
    # The state file says where the batch stands, with everything resume needs.
    st = state(out)
    assert st["phase"] == "materialised" and st["status"] == "completed"
    assert st["batch_id"] == summary["batch"]["batch_id"] and st["token"]
    assert [h["status"] for h in st["status_history"]][-1] == "completed"
    assert st["prompt_ids"] == [f"ghz_{i:02d}" for i in range(6)]
    assert summary["batch"]["request_counts"] == {"total": 6, "completed": 6, "failed": 0}
    # The input file carries the exact persisted request bodies, one line per prompt.
    requests = {
        json.loads(x)["prompt_id"]: json.loads(x)
        for x in (out / "requests.jsonl").read_text().splitlines()
    }
    lines = [json.loads(x) for x in (out / "batch-input.jsonl").read_text().splitlines()]
    assert [x["custom_id"] for x in lines] == list(requests)
    for line in lines:
        assert line["method"] == "POST" and line["url"] == "/v1/chat/completions"
        assert line["body"] == requests[line["custom_id"]]["body"]
        assert "target_metadata" not in json.dumps(line)
    # Every call was authenticated, and the key is stored nowhere.
    assert seen and all(s.headers["authorization"] == f"Bearer {KEY}" for s in seen)
    no_key_anywhere(out)

    # A live run of the same contract, for the shape of every artifact.
    live = tmp_path / "live"
    with FaultServer(FaultScript.for_release(load_release(release_dir), default="fenced")) as fs:
        run_live_model(config(release_dir, live, fs.base_url, batch_api=False), env=ENV)
    assert (live / "requests.jsonl").read_bytes() == (out / "requests.jsonl").read_bytes()
    rd, ld = RunDir(out), RunDir(live)
    b_resp, l_resp = rd.read_responses(), ld.read_responses()
    assert len(b_resp) == 6 and len({r["prompt_id"] for r in b_resp}) == 6
    assert all(set(r) == set(l_resp[0]) for r in b_resp)
    for r in b_resp:
        assert r["generated_code"].startswith("from qiskit") and r["attempt"] == 1
        assert r["request_id"] and r["http_status"] == 200 and r["model_check"] == "alias"
        assert json.loads((out / r["raw"]).read_text())["choices"]
    live_attempt_keys = set(ld.read_attempts()[0])
    for a in rd.read_attempts():
        assert live_attempt_keys <= set(a) and a["decision"] == "success"
        assert a["batch_id"] == st["batch_id"]
    for pid in requests:
        b_rec, l_rec = rd.read_record(pid), ld.read_record(pid)
        assert b_rec is not None and l_rec is not None
        assert set(b_rec) == set(l_rec) and b_rec["state"] == "success"
    assert set(json.loads((live / "run-summary.json").read_text())) | {"batch"} == set(
        json.loads((out / "run-summary.json").read_text())
    )


def start_cli(release: Path, out: Path, base_url: str, *extra: str) -> subprocess.Popen[str]:
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
            "openai",
            "--base-url",
            base_url,
            "--model",
            "gpt-test",
            "--acknowledge-third-party-prompt-export",
            "--batch-api",
            "--batch-poll-seconds",
            "0.1",
            "--quiet",
            *extra,
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **ENV},
    )


def wait_for(condition: Any, timeout: float = 30.0) -> None:
    end = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > end:
            raise AssertionError("timed out waiting")
        time.sleep(0.02)


def test_sigkill_between_upload_and_completion_creates_no_second_batch(
    release_dir: Path, tmp_path: Path
) -> None:
    """The proof of issue 5: a real process killed mid-batch, resumed, one batch in all."""
    out = tmp_path / "run"
    with server_for(release_dir) as server:
        server.hold = True  # the batch stays in_progress until released

        def polling() -> bool:
            try:
                batch_id = state(out).get("batch_id")
            except (FileNotFoundError, json.JSONDecodeError):
                return False
            return bool(batch_id) and server.polls.get(batch_id, 0) >= 1

        proc = start_cli(release_dir, out, server.base_url)
        try:
            wait_for(polling)
        finally:
            os.kill(proc.pid, signal.SIGKILL)
            proc.communicate(timeout=30)
        assert proc.returncode == -signal.SIGKILL
        st = state(out)
        assert st["phase"] == "created" and server.created == 1
        # The crash leaves every prompt in flight and owned by the batch.
        for pid in st["prompt_ids"]:
            record = RunDir(out).read_record(pid)
            assert record is not None
            assert record["state"] == "in_flight" and record["batch_id"] == st["batch_id"]

        server.hold = False
        resumed = start_cli(release_dir, out, server.base_url, "--resume")
        stdout, stderr = resumed.communicate(timeout=60)
        assert resumed.returncode == 0, stderr
        assert server.create_posts == 1 and server.created == 1 and server.uploads == 1
    summary = json.loads(stdout)
    assert summary["success"] == 6 and summary["uncertain"] == 0 and summary["pending"] == 0
    assert summary["batch"]["batch_id"] == st["batch_id"]
    assert summary["batch"]["status"] == "completed"
    assert len(RunDir(out).read_responses()) == 6
    no_key_anywhere(out)


class Killed(BaseException):
    """The process dying: nothing after it runs."""


class DieAfterCreate(httpx.AsyncBaseTransport):
    """Real HTTP, except the process 'dies' once the create request reached the server."""

    def __init__(self) -> None:
        self.inner = httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        if request.method == "POST" and request.url.path.endswith("/batches"):
            await response.aread()
            await response.aclose()
            raise Killed
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()


def test_killed_after_create_before_saving_the_id_adopts_the_batch(
    release_dir: Path, tmp_path: Path
) -> None:
    out = tmp_path / "run"
    with server_for(release_dir) as server:
        with pytest.raises(Killed):
            run_batch_api(
                config(release_dir, out, server.base_url), transport=DieAfterCreate(), env=ENV
            )
        st = state(out)
        # The state knows the token, not the batch; the server holds a batch with that token.
        assert st["phase"] == "creating" and st["token"] and st["batch_id"] is None
        (held,) = server.batches.values()
        assert held["metadata"] == {"pqid_run_token": st["token"]}
        summary = run_batch_api(
            config(release_dir, out, server.base_url, resume=True), env=ENV
        ).to_dict()
        assert server.create_posts == 1 and server.created == 1 and server.uploads == 1
    assert summary["success"] == 6 and summary["batch"]["adopted"] is True
    assert summary["batch"]["batch_id"] == held["id"]


@pytest.mark.parametrize("fault, posts", [("500-created", 1), ("500", 2)])
def test_a_create_whose_answer_is_lost_is_settled_by_the_token(
    release_dir: Path, tmp_path: Path, fault: str, posts: int
) -> None:
    """A 500 may or may not have created the batch: list first, create only when absent."""
    out = tmp_path / "run"
    with server_for(release_dir, create_faults=[fault]) as server:
        summary = run_batch_api(config(release_dir, out, server.base_url), env=ENV).to_dict()
        assert server.created == 1 and server.create_posts == posts
    assert summary["success"] == 6
    assert summary["batch"]["adopted"] is (fault == "500-created")


def test_uploaded_but_not_created_reuses_the_file(release_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    with server_for(release_dir, create_faults=["400"]) as server:
        with pytest.raises(BatchApiError, match=r"refused the batch creation .*HTTP 400") as exc:
            run_batch_api(config(release_dir, out, server.base_url), env=ENV)
        assert isinstance(exc.value, UsageError) and exc.value.status == 400
        st = state(out)
        assert st["phase"] == "creating" and st["input_file_id"] and server.created == 0
        summary = run_batch_api(
            config(release_dir, out, server.base_url, resume=True), env=ENV
        ).to_dict()
        assert server.uploads == 1 and server.created == 1
    assert summary["success"] == 6 and summary["batch"]["input_file_id"] == st["input_file_id"]


def test_line_errors_are_terminal_and_retry_errors_sends_only_them(
    release_dir: Path, tmp_path: Path
) -> None:
    out = tmp_path / "run"
    faulty = {"ghz_01": "400", "ghz_02": "error", "ghz_03": "missing", "ghz_04": "500"}
    with server_for(release_dir, line_errors=dict(faulty)) as server:
        first = run_batch_api(config(release_dir, out, server.base_url), env=ENV).to_dict()
        assert first["success"] == 2 and first["error"] == 4 and first["complete"]
        errors = first["errors"]
        assert errors["ghz_01"] == ("bad_request: HTTP 400: Unsupported value: injected 400")
        assert (
            errors["ghz_02"] == "batch_error: batch request error batch_failed_line: "
            "injected line error"
        )
        assert errors["ghz_03"].startswith("batch_missing: missing from batch output (batch ")
        assert errors["ghz_04"].startswith("server_error: HTTP 500")
        history = by_prompt(RunDir(out).read_attempts())
        for pid in faulty:
            (attempt,) = history[pid]
            assert attempt["decision"] == "terminal" and attempt["attempt"] == 1
        # The error line's bytes are kept as the attempt's raw evidence.
        assert json.loads((out / history["ghz_02"][0]["raw"]).read_text())["error"]
        assert history["ghz_03"][0]["raw"] is None

        # A plain resume behaves like a live one: nothing to send, no batch.
        again = run_batch_api(
            config(release_dir, out, server.base_url, resume=True), env=ENV
        ).to_dict()
        assert again["error"] == 4 and server.created == 1 and server.uploads == 1

        server.script.line_errors.clear()
        last = run_batch_api(
            config(release_dir, out, server.base_url, resume=True, retry_errors=True), env=ENV
        ).to_dict()
        assert server.created == 2
        first_id, second_id = list(server.batch_prompts)
        assert server.batch_prompts[second_id] == sorted(faulty)
        # No prompt went into two batches except the ones that failed in the first.
        assert set(server.batch_prompts[first_id]) & set(server.batch_prompts[second_id]) == set(
            faulty
        )
    assert last["success"] == 6 and last["error"] == 0
    assert last["batch"]["batch_id"] == second_id
    assert [p["batch_id"] for p in last["batch"]["previous"]] == [first_id]
    st = state(out)
    assert st["seq"] == 2 and st["input_file"] == "batch-input.2.jsonl"
    assert (out / "batch-input.jsonl").exists()
    history = by_prompt(RunDir(out).read_attempts())
    for pid in faulty:
        assert [(a["attempt"], a["decision"]) for a in history[pid]] == [
            (1, "terminal"),
            (2, "success"),
        ]
    ids = [r["prompt_id"] for r in RunDir(out).read_responses()]
    assert sorted(ids) == sorted(set(ids)) and len(ids) == 6


@pytest.mark.parametrize("final", ["failed", "expired"])
def test_a_batch_that_ends_badly_leaves_terminal_errors(
    release_dir: Path, tmp_path: Path, final: str
) -> None:
    out = tmp_path / "run"
    with server_for(release_dir, final_status=final) as server:
        summary = run_batch_api(config(release_dir, out, server.base_url), env=ENV).to_dict()
    assert summary["batch"]["status"] == final and summary["complete"]
    if final == "failed":
        assert summary["error"] == 6
        assert all(
            "missing from batch output" in e and "the input file is not valid" in e
            for e in summary["errors"].values()
        )
    else:
        assert summary["success"] == 3 and summary["error"] == 3
        assert all("batch_expired" in e for e in summary["errors"].values())


def test_stop_while_polling_then_resume_with_a_stray_uncertain_prompt(
    release_dir: Path, tmp_path: Path
) -> None:
    """Stopped mid-batch: its prompts are pending in it, not uncertain. A prompt in flight
    outside the batch still needs --retry-uncertain, and rides the next batch."""
    out = tmp_path / "run"
    control = RunControl()
    polled: list[BatchPolled] = []

    def progress(event: Event) -> None:
        if isinstance(event, BatchPolled):
            polled.append(event)
            if event.status == "in_progress":
                control.stop()

    with server_for(release_dir) as server:
        server.hold = True
        summary = asyncio.run(
            run_batch_api_async(
                config(release_dir, out, server.base_url, max_new=4),
                control=control,
                progress=progress,
                env=ENV,
            )
        ).to_dict()
        assert summary["stopped"] and summary["uncertain"] == 0 and summary["pending"] == 6
        assert summary["batch"]["pending_in_batch"] == 4
        assert summary["batch"]["phase"] == "created" and polled
        # A live attempt of ghz_05 died in flight in the same directory.
        RunDir(out).write_record(
            {"prompt_id": "ghz_05", "state": "in_flight", "attempt": 1, "attempts": 1}
        )
        server.hold = False
        with pytest.raises(ResumeRefused, match=r"in flight .*--retry-uncertain"):
            run_batch_api(config(release_dir, out, server.base_url, resume=True), env=ENV)
        summary = run_batch_api(
            config(release_dir, out, server.base_url, resume=True, retry_uncertain=True), env=ENV
        ).to_dict()
        first_id, second_id = list(server.batch_prompts)
        assert server.batch_prompts[first_id] == ["ghz_00", "ghz_01", "ghz_02", "ghz_03"]
        assert server.batch_prompts[second_id] == ["ghz_04", "ghz_05"]
    assert summary["success"] == 6 and summary["uncertain"] == 0
    history = by_prompt(RunDir(out).read_attempts())
    assert [(a["attempt"], a["decision"]) for a in history["ghz_05"]] == [
        (1, "uncertain"),
        (2, "success"),
    ]


def test_refusals_and_endpoint_errors(release_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="--batch-api needs --provider openai"):
        run_batch_api(
            config(release_dir, tmp_path / "a", "http://127.0.0.1:9/v1", provider="groq"), env=ENV
        )
    with pytest.raises(ConfigError, match="--sleep-seconds"):
        run_batch_api(
            config(release_dir, tmp_path / "b", "http://127.0.0.1:9/v1", sleep_seconds=1.0), env=ENV
        )
    wrong = "sk-wrong-key-0123456789abcdefghij"
    out = tmp_path / "c"
    with server_for(release_dir) as server:
        with pytest.raises(BatchApiError, match=r"HTTP 401.*check the key") as exc:
            run_batch_api(config(release_dir, out, server.base_url), env={"OPENAI_API_KEY": wrong})
        assert exc.value.status == 401 and wrong not in str(exc.value)
        no_key_anywhere(out, wrong)

    # Transient poll failures are retried; too many of them stop the run, resumably.
    out = tmp_path / "d"
    with server_for(release_dir, poll_faults=[503, 502]) as server:
        summary = run_batch_api(
            config(release_dir, out, server.base_url, max_retries=2), env=ENV
        ).to_dict()
        assert summary["success"] == 6
    out = tmp_path / "e"
    with server_for(release_dir, poll_faults=[503] * 3) as server:
        with pytest.raises(BatchApiError, match=r"polling batch .*3 tries.*--resume"):
            run_batch_api(config(release_dir, out, server.base_url, max_retries=2), env=ENV)
        assert state(out)["phase"] == "created"
        summary = run_batch_api(
            config(release_dir, out, server.base_url, resume=True), env=ENV
        ).to_dict()
        assert summary["success"] == 6 and server.created == 1


def test_killed_while_materialising_resumes_without_a_second_batch(
    release_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Killed after ghz_02's response and attempt line landed, before its record did."""
    out = tmp_path / "run"
    real_write = RunDir.write_record

    def dying_write(self: RunDir, record: dict[str, Any]) -> None:
        if record["prompt_id"] == "ghz_02" and record["state"] == "success":
            raise Killed
        real_write(self, record)

    with server_for(release_dir) as server:
        monkeypatch.setattr(RunDir, "write_record", dying_write)
        with pytest.raises(Killed):
            run_batch_api(config(release_dir, out, server.base_url), env=ENV)
        monkeypatch.setattr(RunDir, "write_record", real_write)
        assert state(out)["phase"] == "downloaded"
        assert len(RunDir(out).read_responses()) == 3
        downloads = sum(1 for s in server.seen if s.path.endswith("/content"))
        summary = run_batch_api(
            config(release_dir, out, server.base_url, resume=True), env=ENV
        ).to_dict()
        assert server.created == 1
        assert sum(1 for s in server.seen if s.path.endswith("/content")) == downloads
    assert summary["success"] == 6 and summary["batch"]["phase"] == "materialised"
    rd = RunDir(out)
    assert sorted(r["prompt_id"] for r in rd.read_responses()) == [f"ghz_{i:02d}" for i in range(6)]
    assert [a["prompt_id"] for a in rd.read_attempts()].count("ghz_02") == 1


def test_recast_draws_a_second_batch_into_its_own_run(release_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    with server_for(release_dir) as server:
        summary = run_batch_api(
            config(release_dir, out, server.base_url, recast=True), env=ENV
        ).to_dict()
        assert server.created == 2
    assert summary["success"] == 6 and summary["recast"]["success"] == 6
    assert summary["stability"]["compared"] == 6 and summary["stability"]["changed"] == 0
    assert state(out / "recast")["phase"] == "materialised"
