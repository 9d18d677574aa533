"""Reading runs back: the runs under a directory, one prompt's evidence, live progress.

Everything here reads a run directory and never changes it (reconciliation runs with
`repair=False`), except `resend_async`, which is a live run restricted to chosen prompts.
The app and the batch mode share these; nothing here imports the UI.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from engine.config import LiveRunConfig, make_config
from engine.errors import PqidError, ResumeRefused
from engine.events import (
    AttemptFinished,
    Event,
    ProgressCallback,
    PromptStateChanged,
    RunFinished,
    RunStarted,
)
from engine.providers.routes import PRESETS
from engine.run.live import LiveRun, RunControl, RunResult, response_note
from engine.rundir import layout
from engine.rundir.layout import EVALUATION_DIR, MANIFEST
from engine.rundir.records import RunDir
from engine.rundir.shapes import AttemptLine, ResponseLine, RunSummary
from engine.rundir.storage import canonical_json, sha256_hex
from engine.states import PromptState

EVALUATIONS_FILE = f"{EVALUATION_DIR}/{layout.EVALUATIONS_FILE}"
STATES = tuple(PromptState)
QUEUE_STATES = (PromptState.RETRYING, PromptState.ERROR, PromptState.UNCERTAIN)


# -- the runs under a directory ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RunInfo:
    """One run directory as the home screen lists it."""

    path: Path
    name: str
    provider: str | None = None
    model: str | None = None
    created_at_utc: str | None = None
    selected: int = 0
    success: int = 0
    error: int = 0
    pending: int = 0
    uncertain: int = 0
    evaluated: bool = False
    problem: str | None = None

    @property
    def complete(self) -> bool:
        return (
            self.problem is None
            and self.selected > 0
            and (self.success + self.error == self.selected)
        )


def is_evaluated(run_dir: Path) -> bool:
    """Whether replay has written the run's canonical evaluations."""
    return (Path(run_dir) / EVALUATIONS_FILE).is_file()


def evaluation_counts(run_dir: Path) -> dict[str, int]:
    """The candidate's failure taxonomy: how many evaluations fell in each category."""
    path = Path(run_dir) / EVALUATIONS_FILE
    counts: Counter[str] = Counter()
    try:
        lines = path.read_bytes().splitlines()
    except FileNotFoundError:
        return {}
    for line in lines:
        try:
            obj = json.loads(line)
        except (UnicodeDecodeError, json.JSONDecodeError):
            continue
        if isinstance(obj, dict):
            counts[str(obj.get("category"))] += 1
    return dict(counts.most_common())


def read_run_info(path: Path) -> RunInfo:
    """Summary counts of one run directory, or the reason it cannot be read."""
    path = Path(path)
    run = RunDir(path)
    evaluated = is_evaluated(path)
    try:
        manifest = run.read_manifest()
    except PqidError as exc:
        return RunInfo(path, path.name, evaluated=evaluated, problem=str(exc))
    route = manifest.get("route") or {}
    ids = [str(x) for x in manifest.get("selected_prompt_ids") or []]
    try:
        rec = run.reconcile(ids, repair=False)
    except PqidError as exc:
        return RunInfo(
            path,
            path.name,
            route.get("provider"),
            manifest.get("model"),
            manifest.get("created_at_utc"),
            len(ids),
            evaluated=evaluated,
            problem=str(exc),
        )
    counts = Counter(s.state for s in rec.statuses.values())
    return RunInfo(
        path,
        path.name,
        route.get("provider"),
        manifest.get("model"),
        manifest.get("created_at_utc"),
        len(ids),
        counts[PromptState.SUCCESS],
        counts[PromptState.ERROR],
        counts[PromptState.PENDING],
        counts[PromptState.UNCERTAIN],
        evaluated,
    )


def list_runs(runs_dir: Path) -> list[RunInfo]:
    """Every run directory (one holding run-manifest.json) directly under `runs_dir`, by name."""
    runs_dir = Path(runs_dir)
    if not runs_dir.is_dir():
        return []
    return [
        read_run_info(child)
        for child in sorted(runs_dir.iterdir())
        if child.is_dir() and (child / MANIFEST).exists()
    ]


# -- one prompt's evidence -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RawBody:
    """The raw provider body of one attempt, as stored under raw/."""

    attempt: int
    name: str
    data: bytes
    is_json: bool

    def pretty(self) -> str:
        """The body as text: JSON indented, anything else decoded with replacement."""
        if self.is_json:
            try:
                return json.dumps(json.loads(self.data), indent=2, ensure_ascii=False)
            except (UnicodeDecodeError, json.JSONDecodeError):
                pass
        return self.data.decode("utf-8", "replace")


@dataclass(frozen=True, slots=True)
class PromptDetail:
    """Everything a run directory holds about one prompt."""

    prompt_id: str
    state: str
    attempts_count: int
    last_error: str | None
    request_body: dict[str, Any] | None
    request_sha256: str | None
    request_sha256_ok: bool | None  # the stored hash recomputed from the stored body
    attempts: tuple[AttemptLine, ...]
    raw_bodies: tuple[RawBody, ...]
    response: ResponseLine | None

    @property
    def request_text(self) -> str:
        if self.request_body is None:
            return ""
        return json.dumps(self.request_body, indent=2, ensure_ascii=False)


def _read_raw(run: RunDir, name: str) -> bytes | None:
    path = (run.path / name).resolve()
    # A raw name comes from a log file; never follow one out of the run directory.
    if run.path.resolve() not in path.parents:
        return None
    try:
        return path.read_bytes()
    except OSError:
        return None


def prompt_detail(run_dir: Path, prompt_id: str) -> PromptDetail:
    """The request body and its hash, every attempt, each raw body and the canonical response."""
    run = RunDir(Path(run_dir))
    body: dict[str, Any] | None = None
    sha: str | None = None
    try:
        lines = run.requests_path.read_bytes().splitlines()
    except FileNotFoundError:
        lines = []
    for line in lines:
        try:
            obj = json.loads(line)
        except (UnicodeDecodeError, json.JSONDecodeError):
            continue
        if isinstance(obj, dict) and obj.get("prompt_id") == prompt_id:
            body = obj.get("body") if isinstance(obj.get("body"), dict) else None
            sha = obj.get("request_sha256")
            break
    sha_ok = None if body is None or sha is None else sha256_hex(canonical_json(body)) == sha
    attempts = tuple(a for a in run.read_attempts() if a["prompt_id"] == prompt_id)
    raws: list[RawBody] = []
    for a in attempts:
        name = a.get("raw")
        if not isinstance(name, str) or not name:
            continue
        data = _read_raw(run, name)
        if data is None:
            continue
        is_json = name.endswith(".json")
        if is_json:
            try:
                json.loads(data)
            except (UnicodeDecodeError, json.JSONDecodeError):
                is_json = False
        raws.append(RawBody(int(a.get("attempt") or 0), name, data, is_json))
    response = next((r for r in run.read_responses() if r["prompt_id"] == prompt_id), None)
    status = run.reconcile([prompt_id], repair=False).statuses[prompt_id]
    return PromptDetail(
        prompt_id,
        status.state,
        status.attempts,
        status.last_error,
        body,
        sha,
        sha_ok,
        attempts,
        tuple(raws),
        response,
    )


# -- resuming a run from its manifest ------------------------------------------------------------


def resume_config(run_dir: Path, release_dir: Path, **overrides: Any) -> LiveRunConfig:
    """The config that resumes `run_dir`: route, model, contract and selection from its manifest.

    Connection settings that are not part of the run's identity (concurrency, retries,
    timeouts, extra headers) take their defaults unless given in `overrides`.
    """
    manifest = RunDir(Path(run_dir)).read_manifest()
    route = manifest.get("route") or {}
    provider = str(route.get("provider"))
    preset = PRESETS.get(provider)
    if preset is None:
        raise ResumeRefused(f"{run_dir}: the manifest names an unknown provider {provider!r}")
    base_url = route.get("base_url")
    if preset.adapter == "oracle" or base_url == preset.base_url:
        base_url = None
    contract = manifest.get("generation_contract") or {}
    selection = manifest.get("selection") or {}
    fields: dict[str, Any] = dict(
        release_dir=Path(release_dir),
        output_dir=Path(run_dir),
        provider=provider,
        model=manifest.get("model") or "",
        base_url=base_url,
        no_auth=manifest.get("credential_source") == "none" and preset.needs_credential,
        temperature=contract.get("temperature") if contract.get("temperature") is not None else 0.0,
        omit_temperature=contract.get("temperature") is None,
        top_p=contract.get("top_p") if contract.get("top_p") is not None else 1.0,
        omit_top_p=contract.get("top_p") is None,
        max_output_tokens=contract.get("max_output_tokens", 2048),
        max_output_field=contract.get("max_output_field"),
        seed=contract.get("seed"),
        extra_body=contract.get("extra_body") or {},
        split=selection.get("split"),
        limit=selection.get("limit"),
        prompt_ids=tuple(selection["prompt_ids_filter"])
        if selection.get("prompt_ids_filter")
        else None,
        resume=True,
    )
    fields.update(overrides)
    return make_config(**fields)


async def resend_async(
    config: LiveRunConfig,
    only: Iterable[str] | None = None,
    *,
    transport: httpx.AsyncBaseTransport | None = None,
    progress: ProgressCallback | None = None,
    control: RunControl | None = None,
    env: dict[str, str] | None = None,
) -> RunResult:
    """Run or resume like `run_live_model_async`; with `only`, send no prompt outside it.

    The selection (and so the run's identity) stays the run directory's; `only` narrows what
    this invocation sends, which is how "retry the selected prompts" is a library call.
    """
    run = LiveRun(
        config, transport=transport, progress=progress, control=control, env=env, only=only
    )
    return await run.run()


# -- live progress, coalesced --------------------------------------------------------------------


@dataclass(slots=True)
class PromptRow:
    """The latest known state of one prompt."""

    prompt_id: str
    state: str = PromptState.PENDING
    attempt: int = 0
    error: str | None = None
    next_attempt_at: float | None = None
    note: str | None = None  # a success's flags: truncated, empty, redirected


def in_retry_queue(row: PromptRow) -> bool:
    """Waiting for a backoff, in flight again after a failed attempt, errored, or uncertain.

    A prompt stays in the queue through its retries until it succeeds, so a queue that is
    redrawn often does not churn as prompts go from waiting to in flight and back.
    """
    return row.state in QUEUE_STATES or (
        row.state in (PromptState.IN_FLIGHT, PromptState.SAVING) and row.error is not None
    )


@dataclass
class RunProgress:
    """Folds engine events into the latest state per prompt plus run totals.

    Events may arrive thousands of times a second; `apply` is O(1) and only marks rows dirty.
    A viewer calls `take_dirty()` at its own pace and redraws just those rows.
    """

    clock: Callable[[], float] = time.time
    rows: dict[str, PromptRow] = field(default_factory=dict)
    counts: Counter[str] = field(default_factory=Counter)
    run_dir: str | None = None
    provider: str | None = None
    model: str | None = None
    selected: int = 0
    to_send: int = 0
    skipped: int = 0
    requests: int = 0
    finished_prompts: int = 0
    tokens: int = 0
    started_at: float | None = None
    finished_at: float | None = None
    summary: RunSummary | None = None
    paused_seconds: float = 0.0  # time spent paused during this invocation, ended pauses
    paused_since: float | None = None  # when the current pause began (None: not paused)
    # The wall time of the last invocation read from the run directory (a run not running).
    recorded_elapsed: float | None = None
    _dirty: dict[str, None] = field(default_factory=dict)

    def _row(self, prompt_id: str) -> PromptRow:
        row = self.rows.get(prompt_id)
        if row is None:
            row = self.rows[prompt_id] = PromptRow(prompt_id)
            self.counts[PromptState.PENDING] += 1
            self._dirty[prompt_id] = None
        return row

    def set_state(
        self,
        prompt_id: str,
        state: str,
        attempt: int = 0,
        error: str | None = None,
        next_attempt_at: float | None = None,
        note: str | None = None,
    ) -> None:
        row = self._row(prompt_id)
        row.note = note if state == PromptState.SUCCESS else None
        if row.state != state:
            self.counts[row.state] -= 1
            self.counts[state] += 1
            if state in (PromptState.SUCCESS, PromptState.ERROR) and row.state in (
                PromptState.IN_FLIGHT,
                PromptState.SAVING,
                PromptState.RETRYING,
            ):
                self.finished_prompts += 1
        row.state, row.attempt = state, attempt
        kept = error is not None or state in (PromptState.SUCCESS, PromptState.PENDING)
        row.error = error if kept else row.error
        row.next_attempt_at = next_attempt_at
        self._dirty[prompt_id] = None

    def apply(self, event: Event) -> None:
        """The progress callback: fold one engine event in."""
        if isinstance(event, PromptStateChanged):
            self.set_state(
                event.prompt_id,
                event.state,
                event.attempt,
                event.error,
                event.next_attempt_at,
                event.note,
            )
        elif isinstance(event, AttemptFinished):
            self.requests += 1
            total = (event.usage or {}).get("total_tokens")
            if isinstance(total, int):
                self.tokens += total
        elif isinstance(event, RunStarted):
            self.run_dir, self.provider, self.model = event.run_dir, event.provider, event.model
            self.selected, self.to_send, self.skipped = (
                event.selected,
                event.to_send,
                event.skipped,
            )
            self.started_at, self.finished_at, self.summary = self.clock(), None, None
            self.requests = self.finished_prompts = self.tokens = 0
            self.paused_seconds, self.paused_since = 0.0, None
            for pid in event.prompt_ids:
                self._row(pid)
        elif isinstance(event, RunFinished):
            self.resumed()
            self.finished_at = self.clock()
            self.summary = event.summary.copy()

    def paused(self) -> None:
        """Sending was paused: the clock of rates and ETA stops until `resumed`."""
        if self.paused_since is None and self.running:
            self.paused_since = self.clock()

    def resumed(self) -> None:
        if self.paused_since is not None:
            self.paused_seconds += max(0.0, self.clock() - self.paused_since)
            self.paused_since = None

    def take_dirty(self) -> list[PromptRow]:
        """The rows changed since the last call, in first-change order."""
        if not self._dirty:
            return []
        out = [self.rows[pid] for pid in self._dirty]
        self._dirty = {}
        return out

    @property
    def running(self) -> bool:
        return self.started_at is not None and self.finished_at is None

    @property
    def elapsed(self) -> float:
        """Wall time of this invocation, pauses included."""
        if self.started_at is None:
            return 0.0
        return max(0.0, (self.finished_at or self.clock()) - self.started_at)

    @property
    def sending_seconds(self) -> float:
        """Wall time of this invocation while not paused: what rates and the ETA use, so
        neither drifts while nothing is sent."""
        if self.started_at is None:
            return 0.0
        end = self.paused_since or self.finished_at or self.clock()
        return max(0.0, end - self.started_at - self.paused_seconds)

    @property
    def requests_per_second(self) -> float:
        sending = self.sending_seconds
        return self.requests / sending if sending > 0 else 0.0

    @property
    def eta_seconds(self) -> float | None:
        """Seconds until every prompt being sent has finished, at the rate seen so far."""
        if not self.running:
            return None
        remaining = max(0, self.to_send - self.finished_prompts)
        if remaining == 0:
            return 0.0
        done = self.finished_prompts
        sending = self.sending_seconds
        if done == 0 or sending <= 0:
            return None
        return remaining * sending / done

    def queue(self) -> list[PromptRow]:
        """Prompts being retried, ended in a terminal error, or uncertain."""
        return [r for r in self.rows.values() if in_retry_queue(r)]

    @classmethod
    def from_run_dir(cls, run_dir: Path, *, clock: Callable[[], float] = time.time) -> RunProgress:
        """The final (or last known) state of a run that is not running here."""
        run = RunDir(Path(run_dir))
        manifest = run.read_manifest()
        ids = [str(x) for x in manifest.get("selected_prompt_ids") or []]
        rec = run.reconcile(ids, repair=False)
        route = manifest.get("route") or {}
        progress = cls(
            clock=clock,
            run_dir=str(run.path),
            provider=route.get("provider"),
            model=manifest.get("model"),
            selected=len(ids),
        )
        responses = {r["prompt_id"]: r for r in run.read_responses()}
        for pid in ids:
            s = rec.statuses[pid]
            note = response_note(responses[pid]) if pid in responses else None
            progress.set_state(pid, s.state, s.attempts, s.last_error, note=note)
        progress.requests = len(run.read_attempts())
        with contextlib.suppress(OSError, ValueError, TypeError, AttributeError):
            summary = json.loads(run.summary_path.read_text())
            progress.recorded_elapsed = float(summary["elapsed_seconds"])
        for r in responses.values():
            total = (r.get("usage") or {}).get("total_tokens")
            if isinstance(total, int):
                progress.tokens += total
        return progress


__all__ = [
    "EVALUATIONS_FILE",
    "PromptDetail",
    "PromptRow",
    "RawBody",
    "RunInfo",
    "RunProgress",
    "evaluation_counts",
    "is_evaluated",
    "list_runs",
    "prompt_detail",
    "read_run_info",
    "resend_async",
    "resume_config",
]
