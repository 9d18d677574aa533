"""Replay's checks before anything runs, its outputs and its events, with a fake runner."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from engine.errors import DockerUnavailable, InputError, ResumeRefused, UsageError
from engine.events import EvaluationFinished, EvaluationStarted, Event, ReplayFinished
from engine.events import ProgressCallback as _Progress
from engine.replay.docker import EvaluationItem, EvaluatorConfig, LineCallback, RunOutcome
from engine.replay.replay import OUTPUT_FILES, replay
from engine.rundir.layout import EVALUATIONS_FILE
from tests.conftest import cli
from tests.engine.test_summaries import make_eval
from tests.helpers import tree_bytes, write_release

IDS = [f"ghz_{i:02d}" for i in range(6)]


class FakeRunner:
    """Scores every item `ok` (or as told) and remembers what it was given."""

    def __init__(
        self, categories: dict[str, str] | None = None, not_evaluated: Sequence[str] = ()
    ) -> None:
        self.categories = categories or {}
        self.not_evaluated = set(not_evaluated)
        self.items: list[EvaluationItem] = []
        self.built: bool | None = None

    def ensure_image(self, *, build: bool, progress: _Progress | None = None) -> str:
        self.built = build
        return "fake:image"

    def run(
        self,
        items: Sequence[EvaluationItem],
        config: EvaluatorConfig,
        on_line: LineCallback | None = None,
    ) -> RunOutcome:
        self.items = list(items)
        outcome = RunOutcome(evaluator_version="0.1.0", sessions=1)
        for i, item in enumerate(items):
            if on_line:
                on_line(
                    {
                        "type": "started",
                        "prompt_id": item.prompt_id,
                        "index": i,
                        "total": len(items),
                    }
                )
            if item.prompt_id in self.not_evaluated:
                outcome.not_evaluated[item.prompt_id] = "not evaluated: test"
                continue
            ev = make_eval(item.prompt_id, self.categories.get(item.prompt_id, "ok"))
            outcome.evaluations[item.prompt_id] = ev
            if on_line:
                on_line({"type": "evaluation", "evaluation": ev, "index": i, "total": len(items)})
        return outcome


class ExplodingRunner(FakeRunner):
    def ensure_image(self, *, build: bool, progress: _Progress | None = None) -> str:
        raise AssertionError("the runner must not be used")


def write_responses(path: Path, lines: list[Any]) -> Path:
    path.write_bytes(
        b"".join(
            (line if isinstance(line, bytes) else json.dumps(line).encode()) + b"\n"
            for line in lines
        )
    )
    return path


def good(pid: str, **extra: Any) -> dict[str, Any]:
    return {"prompt_id": pid, "content": "```python\nprint(1)\n```", **extra}


@pytest.fixture
def release(tmp_path: Path) -> Path:
    return write_release(tmp_path / "release", count=6)


def run_replay(release: Path, responses: Path, out: Path, runner: Any = None, **kwargs: Any) -> Any:
    kwargs.setdefault("acknowledge_code_execution", True)
    return replay(release, responses, out, runner=runner or FakeRunner(), **kwargs)


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (b"{not json", r"responses\.jsonl:3: not a JSON line"),
        (b'"just a string"', r"responses\.jsonl:3: expected a JSON object"),
        (b'{"content": "x"}', r"responses\.jsonl:3: no prompt_id"),
        (
            b'{"prompt_id": "nope", "content": "x"}',
            r"responses\.jsonl:3: prompt 'nope' is not in the release test-release 0\.0\.1",
        ),
        (
            b'{"prompt_id": "ghz_00", "content": "again"}',
            r"responses\.jsonl:3: prompt 'ghz_00' repeats line 1",
        ),
        (
            b'{"prompt_id": "ghz_02", "content": ["parts"]}',
            r"responses\.jsonl:3: content must be a string or null",
        ),
        (b'{"prompt_id": "\xc3("}', r"responses\.jsonl:3: not a JSON line \(not UTF-8\)"),
    ],
)
def test_one_bad_line_refuses_the_whole_file(
    release: Path, tmp_path: Path, bad: bytes, message: str
) -> None:
    responses = write_responses(
        tmp_path / "responses.jsonl", [good("ghz_00"), good("ghz_01"), bad, good("ghz_03")]
    )
    out = tmp_path / "out"
    runner = ExplodingRunner()
    with pytest.raises(InputError, match=message + ".*nothing was evaluated"):
        run_replay(release, responses, out, runner)
    assert not out.exists() and runner.items == []


def test_bad_line_in_the_batch_mode_exits_2_naming_the_line(release: Path, tmp_path: Path) -> None:
    responses = write_responses(tmp_path / "responses.jsonl", [good("ghz_00"), b"oops"])
    out = tmp_path / "out"
    result = cli(
        "--batch",
        "replay",
        "--release-dir",
        str(release),
        "--responses",
        str(responses),
        "--output-dir",
        str(out),
        "--acknowledge-code-execution",
    )
    assert result.returncode == 2
    assert result.stderr.startswith(f"pqid-tui: error: {responses}:2: not a JSON line")
    assert result.stdout == "" and not out.exists()


def test_refuses_without_the_acknowledgement(release: Path, tmp_path: Path) -> None:
    responses = write_responses(tmp_path / "responses.jsonl", [good("ghz_00")])
    with pytest.raises(UsageError, match="--acknowledge-code-execution"):
        run_replay(
            release,
            responses,
            tmp_path / "out",
            ExplodingRunner(),
            acknowledge_code_execution=False,
        )
    result = cli(
        "--batch",
        "replay",
        "--release-dir",
        str(release),
        "--responses",
        str(responses),
        "--output-dir",
        str(tmp_path / "out"),
    )
    assert result.returncode == 2 and "--acknowledge-code-execution" in result.stderr
    assert not (tmp_path / "out").exists()


def test_error_records_are_infrastructure_failures_never_run(release: Path, tmp_path: Path) -> None:
    responses = write_responses(
        tmp_path / "responses.jsonl",
        [
            good("ghz_00", finish_reason="stop"),
            {"prompt_id": "ghz_01", "content": None, "error": "RateLimitError: 429"},
            {"prompt_id": "ghz_02", "status": "error", "content": "partial"},
            {"prompt_id": "ghz_03"},
            {"prompt_id": "ghz_04", "generated_code": "x = 1", "finish_reason": "length"},
            {"prompt_id": "ghz_05", "content": "", "status": 200},
        ],
    )
    runner = FakeRunner(categories={"ghz_04": "no_circuit", "ghz_05": "no_code"})
    result = run_replay(release, responses, tmp_path / "out", runner)
    assert [i.prompt_id for i in runner.items] == ["ghz_00", "ghz_04", "ghz_05"]
    assert runner.items[1].generated_code == "x = 1" and runner.items[1].content is None
    assert runner.items[0].target_metadata["num_qubits"] == 2
    cats = {e["prompt_id"]: e["category"] for e in result.evaluations}
    assert cats == {
        "ghz_00": "ok",
        "ghz_01": "no_response",
        "ghz_02": "no_response",
        "ghz_03": "no_response",
        "ghz_04": "no_circuit",
        "ghz_05": "no_code",
    }
    errors = {e["prompt_id"]: e["error"] for e in result.evaluations}
    assert "RateLimitError: 429" in errors["ghz_01"] and "'error'" in errors["ghz_02"]
    s = result.summary
    assert s["infrastructure_failures"]["count"] == 3
    assert s["rates"]["execution"]["over_selected"]["denominator"] == 6
    assert s["rates"]["execution"]["over_answered"] == {
        "count": 2,
        "denominator": 3,
        "rate": 0.666667,
    }
    assert s["finish_reasons"]["stop"]["count"] == 1
    assert s["finish_reasons"]["(none)"]["count"] == 4


def test_only_error_records_need_no_evaluator(release: Path, tmp_path: Path) -> None:
    responses = write_responses(
        tmp_path / "responses.jsonl", [{"prompt_id": "ghz_00", "error": "boom"}]
    )
    result = run_replay(release, responses, tmp_path / "out", ExplodingRunner())
    assert result.summary["categories"]["no_response"] == 1 and result.summary["image"] is None


def test_writes_every_output_in_release_order_and_emits_events(
    release: Path, tmp_path: Path
) -> None:
    responses = write_responses(tmp_path / "responses.jsonl", [good(pid) for pid in reversed(IDS)])
    events: list[Event] = []
    runner = FakeRunner(categories={"ghz_02": "syntax_error"}, not_evaluated=["ghz_05"])
    out = tmp_path / "out"
    result = run_replay(release, responses, out, runner, progress=events.append)
    assert sorted(p.name for p in out.iterdir()) == sorted(OUTPUT_FILES)
    lines = [json.loads(x) for x in (out / EVALUATIONS_FILE).read_text().splitlines()]
    assert [e["prompt_id"] for e in lines] == IDS
    assert lines[5]["category"] == "not_evaluated" and lines[5]["infrastructure_failure"]
    summary = json.loads((out / "pqid_bench_candidate_summary.json").read_text())
    assert summary["release"]["name"] == "test-release" and summary["image"] == "fake:image"
    assert summary["categories"]["syntax_error"] == 1
    assert summary["categories"]["not_evaluated"] == 1
    assert "3/6" not in (out / "pqid_bench_candidate_summary.txt").read_text()
    assert "4/6 66.7%" in (out / "pqid_bench_candidate_summary.txt").read_text()
    assert (out / "pqid_bench_candidate_summary.md").read_text().startswith("# Candidate")
    assert (out / "pqid_bench_candidate_summary.csv").read_text().startswith("section,")
    started = [e for e in events if isinstance(e, EvaluationStarted)]
    finished = [e for e in events if isinstance(e, EvaluationFinished)]
    assert [e.prompt_id for e in started] == IDS
    assert sorted(e.prompt_id for e in finished) == IDS
    assert {e.total for e in finished} == {6}
    assert isinstance(events[-1], ReplayFinished) and events[-1].counts["ok"] == 4
    assert result.files["evaluations"] == out / EVALUATIONS_FILE


def test_earlier_results_are_not_overwritten_unless_asked(release: Path, tmp_path: Path) -> None:
    responses = write_responses(tmp_path / "responses.jsonl", [good("ghz_00")])
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    run_replay(release, responses, out)  # unrelated files are fine
    before = tree_bytes(out)
    responses = write_responses(tmp_path / "responses.jsonl", [good("ghz_01")])
    with pytest.raises(ResumeRefused, match=r"already holds replay results.*--overwrite"):
        run_replay(release, responses, out, ExplodingRunner())
    assert tree_bytes(out) == before
    result = run_replay(release, responses, out, overwrite=True)
    assert [e["prompt_id"] for e in result.evaluations] == ["ghz_01"]
    assert (out / "notes.txt").read_text() == "mine"


def test_the_run_manifest_beside_the_responses_supplies_the_selection(
    release: Path, tmp_path: Path
) -> None:
    from engine.release import load_release

    digest = load_release(release).digest
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    responses = write_responses(run_dir / "responses.jsonl", [good("ghz_01"), good("ghz_02")])
    (run_dir / "run-manifest.json").write_text(
        json.dumps(
            {"release": {"digest": digest}, "selected_prompt_ids": ["ghz_01", "ghz_02", "ghz_04"]}
        )
    )
    result = run_replay(release, responses, run_dir / "evaluation")
    cats = {e["prompt_id"]: e["category"] for e in result.evaluations}
    assert cats == {"ghz_01": "ok", "ghz_02": "ok", "ghz_04": "no_response"}
    assert result.summary["selection"]["source"] == "run-manifest.json"
    # A manifest of another release is not this run's: ignored.
    (run_dir / "run-manifest.json").write_text(
        json.dumps({"release": {"digest": "0" * 64}, "selected_prompt_ids": ["ghz_04"]})
    )
    result = run_replay(release, responses, run_dir / "evaluation", overwrite=True)
    assert [e["prompt_id"] for e in result.evaluations] == ["ghz_01", "ghz_02"]


def test_missing_responses_file_and_empty_file(release: Path, tmp_path: Path) -> None:
    with pytest.raises(InputError, match="responses file does not exist"):
        run_replay(release, tmp_path / "absent.jsonl", tmp_path / "out", ExplodingRunner())
    empty = write_responses(tmp_path / "empty.jsonl", [])
    with pytest.raises(InputError, match="holds no response lines"):
        run_replay(release, empty, tmp_path / "out", ExplodingRunner())


def test_no_docker_engine_names_what_to_start(
    release: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-such-docker.sock")
    responses = write_responses(tmp_path / "responses.jsonl", [good("ghz_00")])
    with pytest.raises(
        DockerUnavailable,
        match=r"no Docker Engine reachable at unix://.*"
        r"systemctl start docker.*DOCKER_HOST",
    ):
        replay(release, responses, tmp_path / "out", acknowledge_code_execution=True)
    assert not (tmp_path / "out").exists()
    env = {**__import__("os").environ, "DOCKER_HOST": f"unix://{tmp_path}/no-such-docker.sock"}
    result = cli(
        "--batch",
        "replay",
        "--release-dir",
        str(release),
        "--responses",
        str(responses),
        "--output-dir",
        str(tmp_path / "out"),
        "--acknowledge-code-execution",
        env=env,
    )
    assert result.returncode == 2 and "systemctl start docker" in result.stderr


def test_the_release_pins_the_evaluation_environment(
    release: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import engine.replay.replay as replay_module

    manifest = json.loads((release / "release.json").read_text())
    manifest["evaluator"]["requirements"] = ["qiskit==2.6.1", "numpy==2.4.6"]
    (release / "release.json").write_text(json.dumps(manifest))
    made: dict[str, Any] = {}

    def fake_runner(**kwargs: Any) -> FakeRunner:
        made.update(kwargs)
        return FakeRunner()

    monkeypatch.setattr(replay_module, "DockerEvaluatorRunner", fake_runner)
    responses = write_responses(tmp_path / "responses.jsonl", [good("ghz_00")])
    replay(
        release,
        responses,
        tmp_path / "out",
        acknowledge_code_execution=True,
        base_image="base:1",
        wheelhouse=tmp_path,
    )
    assert made["requirements"] == ("qiskit==2.6.1", "numpy==2.4.6")
    assert made["base_image"] == "base:1" and made["wheelhouse"] == tmp_path


def test_build_context_holds_every_input_and_its_digest_covers_them(tmp_path: Path) -> None:
    import tarfile

    from engine.replay.docker import BuildContext

    default = BuildContext.assemble()
    names = dict(default.files)
    assert names["requirements.txt"].startswith(b"# The evaluation environment")
    assert b"qiskit==2.6.2" in names["requirements.txt"]
    assert b"ARG BASE_IMAGE=python:3.11-slim" in names["Dockerfile"]
    assert "evaluator/__main__.py" in names and "evaluator/supervisor.py" in names
    assert not any("__pycache__" in n for n in names)
    pinned = BuildContext.assemble(requirements=["qiskit==2.6.1"])
    assert dict(pinned.files)["requirements.txt"] == b"qiskit==2.6.1\n"
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "dill-0.4.1-py3-none-any.whl").write_bytes(b"not really a wheel")
    offline = BuildContext.assemble(wheelhouse=wheels)
    digests = {
        default.digest("sha256:base"),
        pinned.digest("sha256:base"),
        offline.digest("sha256:base"),
        default.digest("sha256:other-base"),
    }
    assert len(digests) == 4
    with tarfile.open(fileobj=offline.tar()) as tar:
        members = tar.getnames()
    assert {
        "Dockerfile",
        "requirements.txt",
        "wheelhouse",
        "wheelhouse/dill-0.4.1-py3-none-any.whl",
    } <= set(members)
    no_wheels = tmp_path / "no-wheels"
    no_wheels.mkdir()
    with pytest.raises(UsageError, match=r"holds no \.whl files"):
        BuildContext.assemble(wheelhouse=no_wheels)
    with pytest.raises(UsageError, match="not a directory"):
        BuildContext.assemble(wheelhouse=tmp_path / "absent")
