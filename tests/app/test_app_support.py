"""Fakes and fixtures for the app tests (no tests here): providers, keyring, replay service."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import keyring.backend
import pytest

from engine import make_config, run_live_model_async
from engine.events import (
    EvaluationFinished,
    EvaluationStarted,
    ImageBuildLog,
    ImageReady,
    ProgressCallback,
    ReplayFinished,
)
from engine.release import load_release
from engine.rundir.records import RunDir
from pqid_tui.app import PqidApp, make_app
from pqid_tui.services.replay import CompareRow, Comparison, DockerStatus, ImageOptions
from tests.fakes.faults import messages_key
from tests.helpers import write_release

SIZE = (120, 40)
GROQ_ENV = {"GROQ_API_KEY": "gsk_test_key_value_0123456789"}
FROZEN_TIME = 1_800_000_000.0
# Model output that tries to drive the terminal: OSC 52 clipboard write, colour, a hyperlink,
# a cursor move, and Rich markup that must stay literal.
HOSTILE = (
    "\x1b]52;c;cm0gLXJmIH4=\x07\x1b[31mred\x1b[0m \x1b]8;;http://evil.invalid\x1b\\link"
    "\x1b]8;;\x1b\\ \x1b[2J[bold]not bold[/bold]\n"
)


def frozen_clock() -> float:
    return FROZEN_TIME


class MemoryKeyring(keyring.backend.KeyringBackend):
    """An in-process keyring: what the OS keyring would hold, inspectable by the test."""

    priority = 1  # type: ignore[assignment]

    def __init__(self) -> None:
        super().__init__()
        self.entries: dict[tuple[str, str], str] = {}

    def get_password(self, service: str, username: str) -> str | None:
        return self.entries.get((service, username))

    def set_password(self, service: str, username: str, password: str) -> None:
        self.entries[(service, username)] = password

    def delete_password(self, service: str, username: str) -> None:
        import keyring.errors

        if (service, username) not in self.entries:
            raise keyring.errors.PasswordDeleteError("no such entry")
        del self.entries[(service, username)]


@pytest.fixture
def memory_keyring() -> Any:
    import keyring

    previous = keyring.get_keyring()
    backend = MemoryKeyring()
    keyring.set_keyring(backend)
    yield backend
    keyring.set_keyring(previous)


def scripted_transport(
    release_dir: Path,
    plan: dict[str, list[Any]] | None = None,
    content: Callable[[str, str], str] | None = None,
    seen: list[str] | None = None,
) -> httpx.MockTransport:
    """An OpenAI-compatible provider answering reference code; `plan` scripts failures first.

    A plan step is an HTTP status (answered with a JSON error) or "hang" (never answers until
    the request is cancelled).
    """
    release = load_release(release_dir)
    answers = {
        messages_key(p.request_messages()): (p.prompt_id, str(p.target_metadata["reference_code"]))
        for p in release.prompts
    }
    counts: dict[str, int] = {}

    async def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        pid, code = answers[messages_key(body["messages"])]
        if seen is not None:
            seen.append(pid)
        n = counts.get(pid, 0)
        counts[pid] = n + 1
        steps = (plan or {}).get(pid, [])
        if n < len(steps):
            step = steps[n]
            if step == "hang":
                await asyncio.sleep(3600)
            return httpx.Response(
                int(step),
                json={"error": {"message": f"status {step}"}},
                headers={"retry-after": "0"},
            )
        text = content(pid, code) if content else code
        return httpx.Response(
            200,
            json={
                "id": "x",
                "model": body["model"],
                "choices": [
                    {
                        "index": 0,
                        "finish_reason": "stop",
                        "message": {"role": "assistant", "content": text},
                    }
                ],
                "usage": {"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12},
            },
        )

    return httpx.MockTransport(handler)


def normalize_run(run_dir: Path) -> None:
    """Replace the clock-dependent fields of a run with fixed values (for snapshots)."""
    for name in ("provider-attempts.jsonl", "responses.jsonl"):
        path = run_dir / name
        if not path.exists():
            continue
        lines = []
        for line in path.read_text().splitlines():
            obj = json.loads(line)
            for key in ("started_at_utc", "finished_at_utc", "created_at_utc"):
                if obj.get(key):
                    obj[key] = "2027-01-15T08:00:00.000000Z"
            if obj.get("latency_ms") is not None:
                obj["latency_ms"] = 42
            lines.append(json.dumps(obj, sort_keys=True))
        path.write_text("\n".join(lines) + "\n")


async def make_run(
    root: Path,
    release_dir: Path,
    name: str = "groq-demo",
    *,
    plan: dict[str, list[Any]] | None = None,
    content: Callable[[str, str], str] | None = None,
    uncertain: tuple[str, ...] = (),
    **config: Any,
) -> Path:
    """A finished run directory made by the real engine over a scripted provider."""
    out = root / name
    fields: dict[str, Any] = dict(
        release_dir=release_dir,
        output_dir=out,
        provider="groq",
        model="demo-model",
        acknowledge_prompt_export=True,
        retry_backoff_seconds=0.0,
        max_retries=1,
        concurrency=1,
    )
    fields.update(config)
    await run_live_model_async(
        make_config(**fields),
        transport=scripted_transport(release_dir, plan, content),
        env=GROQ_ENV,
    )
    run = RunDir(out)
    for pid in uncertain:
        # What a crash mid-request leaves behind: a record in flight, nothing logged.
        for path in (run.responses_path, run.attempts_path):
            kept = [
                line
                for line in path.read_text().splitlines()
                if json.loads(line)["prompt_id"] != pid
            ]
            path.write_text("".join(line + "\n" for line in kept))
        run.write_record(
            {
                "prompt_id": pid,
                "state": "in_flight",
                "attempt": 1,
                "attempts": 1,
                "request_sha256": "x",
                "last_error": None,
            }
        )
    normalize_run(out)
    return out


def small_release(tmp: Path) -> Path:
    return write_release(tmp / "release", count=6)


async def errored_run_app(tmp: Path, plan: dict[str, list[Any]]) -> tuple[PqidApp, Path, list[str]]:
    """A groq run whose prompts in `plan` ended in errors, and an app over it whose provider
    answers every request; the prompts it is asked for are appended to the returned list."""
    release = small_release(tmp)
    runs = tmp / "runs"
    out = await make_run(runs, release, plan=plan)
    seen: list[str] = []
    app = make_app(
        release,
        runs,
        transport=scripted_transport(release, seen=seen),
        env=GROQ_ENV,
        replay_service=FakeReplayService(),
    )
    return app, out, seen


async def uncertain_run_app(tmp: Path, name: str) -> tuple[PqidApp, Path]:
    """An oracle run named `name` with ghz_02 left in flight (uncertain), and an app over it."""
    release = small_release(tmp)
    runs = tmp / "runs"
    out = await make_run(
        runs, release, name, provider="oracle", model="oracle", uncertain=("ghz_02",)
    )
    return make_app(release, runs, replay_service=FakeReplayService()), out


async def open_run_monitor(app: PqidApp, pilot: Any, run_dir: Path) -> None:
    """Once the app has loaded its runs, open the monitor on `run_dir`."""
    await app.workers.wait_for_complete()
    await pilot.pause()
    app.open_screen("monitor", run_dir=run_dir)
    await pilot.pause()


class FakeReplayService:
    """A replay service that records what it was asked and answers from a script."""

    def __init__(
        self,
        *,
        reachable: bool = True,
        image_present: bool = False,
        comparison: Comparison | None = None,
        taxonomy: dict[str, int] | None = None,
    ) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.reachable = reachable
        self.image_present = image_present
        self.comparison = comparison or Comparison(
            4,
            True,
            (
                CompareRow(
                    "groq/demo-model",
                    "candidate",
                    4,
                    {"execution": 3, "structural_match": 2, "qasm3_export": 3, "equivalence": 1},
                    True,
                    4,
                ),
                CompareRow(
                    "oracle",
                    "reference",
                    4,
                    {"execution": 4, "structural_match": 4, "qasm3_export": 4, "equivalence": 4},
                    True,
                    4,
                ),
            ),
            note="partial candidate (test 4/4 prompts) | not publishable: partial candidate",
        )
        self.taxonomy_counts = (
            taxonomy
            if taxonomy is not None
            else {"ok": 2, "gate_count_mismatch": 1, "syntax_error": 1}
        )

    def docker_status(self, options: ImageOptions) -> DockerStatus:
        self.calls.append(("docker_status", options))
        if not self.reachable:
            return DockerStatus(False, detail="no Docker Engine reachable (fake)")
        return DockerStatus(
            True,
            "99.0-fake",
            "pqid-evaluator:0123456789abcdef",
            self.image_present,
            "" if self.image_present else "the evaluator image needs a build",
        )

    def build_image(self, options: ImageOptions, progress: ProgressCallback) -> str:
        self.calls.append(("build_image", options))
        for line in (
            "Step 1/4 : FROM base",
            "Step 2/4 : RUN pip install \x1b[31mqiskit",
            "Successfully built",
        ):
            progress(ImageBuildLog(line))
        self.image_present = True
        progress(ImageReady("pqid-evaluator:0123456789abcdef", built=True))
        return "pqid-evaluator:0123456789abcdef"

    def replay(
        self,
        run_dir: Path,
        release_dir: Path,
        options: ImageOptions,
        progress: ProgressCallback,
        *,
        acknowledge_code_execution: bool,
        overwrite: bool,
    ) -> dict[str, int]:
        self.calls.append(("replay", run_dir, acknowledge_code_execution, overwrite))
        ids = ["ghz_01", "ghz_02", "ghz_04", "ghz_05"]
        cats = ["ok", "ok", "gate_count_mismatch", "syntax_error"]
        for i, (pid, cat) in enumerate(zip(ids, cats, strict=True)):
            progress(EvaluationStarted(pid, i, len(ids)))
            progress(EvaluationFinished(pid, cat, i, len(ids)))
        out = run_dir / "evaluation"
        out.mkdir(exist_ok=True)
        (out / "pqid_bench_canonical_evaluations.jsonl").write_text(
            "".join(
                json.dumps({"prompt_id": pid, "category": cat}) + "\n"
                for pid, cat in zip(ids, cats, strict=True)
            )
        )
        progress(ReplayFinished(str(out), {"ok": 2, "gate_count_mismatch": 1, "syntax_error": 1}))
        return {"ok": 2, "gate_count_mismatch": 1, "syntax_error": 1}

    def compare(self, run_dir: Path, release_dir: Path, *, allow_partial: bool) -> Comparison:
        self.calls.append(("compare", run_dir, allow_partial))
        return self.comparison

    def taxonomy(self, run_dir: Path) -> dict[str, int]:
        return dict(self.taxonomy_counts) if (run_dir / "evaluation").exists() else {}

    def export(self, run_dir: Path, release_dir: Path, *, allow_partial: bool) -> list[Path]:
        self.calls.append(("export", run_dir, allow_partial))
        return [run_dir / "evaluation" / "pqid_bench_comparison.txt"]
