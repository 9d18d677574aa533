"""The OpenAI Batch path: the planned requests sent as one batch, resumable, never created twice.

A batch run is a live run whose requests travel through the Files and Batches endpoints
instead of one POST each. `BatchRun` is a sending strategy over the same parts as the live
sender: the session (engine.run.session: acknowledgement, resume rules, credential,
manifest, the list to send) and the recorder (engine.run.recorder: reply parsing, the model
check, responses, records, attempt log, raw bodies). What it adds is a state machine kept in
`batch-state.json`:

    input_written -> uploaded -> creating -> created -> ended -> downloaded -> materialised
    (batch-input    (file id)    (token,     (batch id;  (terminal  (output and  (every prompt
     .jsonl, token,              then POST   records    status,    error files  recorded as a
     prompt IDs)                 /batches)   in_flight) file ids)  saved)       live run would)

Each phase is written atomically before the next step starts, so a process killed at any
instant resumes from the last phase it saved:

- `input_written`: upload the saved input file again (an orphaned upload costs nothing).
- `uploaded`/`creating`: the idempotency token was saved before the create request; first
  list the batches and adopt the one whose metadata carries the token, and create one only
  when none does. The same check follows a create request whose answer was lost.
- `created`: poll the saved batch ID; never create another.
- `ended`/`downloaded`: download (again) and materialise the prompts not yet settled.

While a batch is unfinished its prompts' records say `in_flight` with its `batch_id`. The
run directory's reconciliation reads such a record as "uncertain" (it cannot know about
batches), so `BatchRun.prepare` first decides which uncertain prompts belong to the
unfinished batch: when every uncertain prompt does, the session's uncertain check is
satisfied, and the batch's prompts are held out of the list to send; they are settled by
finishing the batch, not by a new request. An uncertain prompt that does not
belong to the batch (a live run killed in the same directory) still needs
`--retry-uncertain`, exactly as in a live resume.

One invocation first finishes an unfinished batch, then sends what the resume rules select
(none of the finished batch's prompts) as a new batch. Once materialised, a later `--resume`
behaves like a live resume: successes are skipped, errors only with `--retry-errors`.
"""

from __future__ import annotations

import asyncio
import functools
import json
import secrets
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from typing import Any, Literal, Unpack, cast

import httpx

from engine import __version__
from engine.config import LiveRunConfig
from engine.errors import (
    BatchApiError,
    ConfigError,
    InputError,
    ProviderError,
    ResumeRefused,
)
from engine.events import (
    BatchPolled,
    Event,
    ProgressCallback,
    PromptStateChanged,
    RunFinished,
    RunStarted,
)
from engine.providers.adapters import Adapter, adapter_for, error_for_status
from engine.run.control import RunControl, RunResult
from engine.run.plan import PlannedRequest, build_plan
from engine.run.recast import run_with_recast
from engine.run.recorder import AttemptOutcome, Recorder, redact, redact_text
from engine.run.retry import backoff
from engine.run.session import Session
from engine.run.summary import Tally, invocation_summary, write_summary
from engine.rundir.layout import BATCH_STATE
from engine.rundir.records import ERROR, IN_FLIGHT, Reconciled, RunDir, utc_now
from engine.rundir.shapes import BatchState, RunSummary
from engine.rundir.storage import atomic_write_bytes, atomic_write_json, canonical_json, sha256_hex
from engine.states import PromptState

STATE_FILE = BATCH_STATE
STATE_FORMAT = "pqid-batch-state/1"
ENDPOINT = "/v1/chat/completions"
COMPLETION_WINDOW = "24h"
TOKEN_KEY = "pqid_run_token"
TERMINAL = frozenset({"completed", "failed", "expired", "cancelled"})

INPUT_WRITTEN, UPLOADED, CREATING, CREATED = "input_written", "uploaded", "creating", "created"
ENDED, DOWNLOADED, MATERIALISED = "ended", "downloaded", "materialised"
PHASES = (INPUT_WRITTEN, UPLOADED, CREATING, CREATED, ENDED, DOWNLOADED, MATERIALISED)

_LIST_PAGE = 100
_LIST_MAX_PAGES = 20
# Listed batches are newest first; stop paging once they are this much older than our create.
_LIST_SLACK_SECONDS = 3600
# The batch's two result files: the state's keys of the file ID, the saved file's name and
# its SHA-256, and the name the saved file is given.
_RESULT_FILES: tuple[
    tuple[
        Literal["output_file_id", "error_file_id"],
        Literal["output_file", "error_file"],
        Literal["output_sha256", "error_sha256"],
        str,
    ],
    ...,
] = (
    ("output_file_id", "output_file", "output_sha256", "output"),
    ("error_file_id", "error_file", "error_sha256", "errors"),
)


def _utc(ts: Any) -> str | None:
    if isinstance(ts, (int, float)) and not isinstance(ts, bool):
        return datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return None


def _counts(batch: dict[str, Any]) -> dict[str, int]:
    raw = batch.get("request_counts")
    raw = raw if isinstance(raw, dict) else {}
    out = {}
    for key in ("total", "completed", "failed"):
        value = raw.get(key)
        out[key] = value if isinstance(value, int) and not isinstance(value, bool) else 0
    return out


def input_bytes(requests: list[PlannedRequest]) -> bytes:
    """The batch input file: one line per request, its body exactly the planned body."""
    return b"".join(
        canonical_json(
            {"custom_id": r.prompt_id, "method": "POST", "url": ENDPOINT, "body": r.body}
        )
        + b"\n"
        for r in requests
    )


def _lines(data: bytes) -> Iterator[dict[str, Any]]:
    for line in data.splitlines():
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except (UnicodeDecodeError, json.JSONDecodeError):
            continue  # unattributable; its prompt ends up "missing from batch output"
        if isinstance(obj, dict) and isinstance(obj.get("custom_id"), str):
            yield obj


class BatchApi:
    """The Files and Batches endpoints under one base URL, with the error rules of the path."""

    def __init__(
        self,
        client: httpx.AsyncClient,
        base_url: str,
        headers: dict[str, str],
        secret: str | None,
        *,
        retries: int,
        backoff: Callable[[int, float | None], float],
    ) -> None:
        self.client = client
        self.base_url = base_url.rstrip("/")
        self.headers = headers
        self.secret = secret
        self.retries = retries
        self.backoff = backoff

    async def _call(
        self, method: str, path: str, what: str, *, retry: bool, **kw: Any
    ) -> httpx.Response:
        tries = 0
        while True:
            status: int | None = None
            retry_after: float | None = None
            try:
                response = await self.client.request(
                    method, self.base_url + path, headers=self.headers, **kw
                )
                body = response.content
            except httpx.HTTPError as exc:
                problem = (
                    f"{exc.__class__.__name__}: "
                    f"{redact_text(str(exc), self.secret) or 'connection failed'}"
                )
            else:
                if 200 <= response.status_code < 300:
                    return response
                status = response.status_code
                headers = {k.lower(): v for k, v in response.headers.items()}
                err = error_for_status(status, headers, redact(body, self.secret))
                problem = f"{err.error_class}: {redact_text(err.message, self.secret)}"
                if not err.retryable:
                    hint = (
                        " (check the key: --api-key-file, $OPENAI_API_KEY or the keyring)"
                        if status in (401, 403)
                        else ""
                    )
                    raise BatchApiError(
                        f"OpenAI Batch API refused {what}: {problem}{hint}", status=status
                    )
                retry_after = err.retry_after
            if not retry or tries >= self.retries:
                raise BatchApiError(
                    f"OpenAI Batch API: {what} failed after {tries + 1} tr"
                    f"{'y' if tries == 0 else 'ies'}: {problem}; the batch state is kept in "
                    f"{STATE_FILE}, rerun with --resume to continue",
                    status=status,
                    transient=True,
                )
            delay = self.backoff(tries, retry_after)
            tries += 1
            await asyncio.sleep(delay)

    def _json(self, response: httpx.Response, what: str, need_id: bool = True) -> dict[str, Any]:
        try:
            payload = json.loads(response.content)
        except (UnicodeDecodeError, json.JSONDecodeError):
            payload = None
        if not isinstance(payload, dict) or (need_id and not isinstance(payload.get("id"), str)):
            raise BatchApiError(
                f"OpenAI Batch API: {what} answered HTTP "
                f"{response.status_code} without the expected JSON object"
            )
        return payload

    async def upload(self, name: str, data: bytes) -> dict[str, Any]:
        response = await self._call(
            "POST",
            "/files",
            "the input file upload (POST /files)",
            retry=True,
            data={"purpose": "batch"},
            files={"file": (name, data, "application/jsonl")},
        )
        return self._json(response, "POST /files")

    async def create(self, input_file_id: str | None, token: str) -> dict[str, Any]:
        # Never retried here: a lost answer is settled by listing batches for the token.
        # (`input_file_id` as the state holds it: None only in a state file changed by hand.)
        response = await self._call(
            "POST",
            "/batches",
            "the batch creation (POST /batches)",
            retry=False,
            json={
                "input_file_id": input_file_id,
                "endpoint": ENDPOINT,
                "completion_window": COMPLETION_WINDOW,
                "metadata": {TOKEN_KEY: token},
            },
        )
        return self._json(response, "POST /batches")

    async def find(self, token: str, not_before: float | None) -> dict[str, Any] | None:
        """The batch whose metadata carries `token`, from the newest-first listing."""
        after: str | None = None
        for _ in range(_LIST_MAX_PAGES):
            params: dict[str, Any] = {"limit": _LIST_PAGE}
            if after:
                params["after"] = after
            response = await self._call(
                "GET", "/batches", "the batch listing (GET /batches)", retry=True, params=params
            )
            page = self._json(response, "GET /batches", need_id=False)
            data = page.get("data")
            items = [b for b in data if isinstance(b, dict)] if isinstance(data, list) else []
            for batch in items:
                meta = batch.get("metadata")
                if isinstance(meta, dict) and meta.get(TOKEN_KEY) == token:
                    return batch
            if not items or not page.get("has_more"):
                return None
            oldest = items[-1].get("created_at")
            if (
                not_before is not None
                and isinstance(oldest, (int, float))
                and oldest < not_before - _LIST_SLACK_SECONDS
            ):
                return None
            after = str(items[-1].get("id"))
        return None

    async def get(self, batch_id: str) -> dict[str, Any]:
        response = await self._call(
            "GET", f"/batches/{batch_id}", f"polling batch {batch_id}", retry=True
        )
        return self._json(response, f"GET /batches/{batch_id}")

    async def content(self, file_id: str) -> bytes:
        response = await self._call(
            "GET", f"/files/{file_id}/content", f"the download of file {file_id}", retry=True
        )
        return response.content


class BatchRun:
    """One invocation of a batch run over a run directory (see the module docstring): the
    Batch API as the sending strategy over the same session and recorder as a live run."""

    def __init__(
        self,
        config: LiveRunConfig,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        progress: ProgressCallback | None = None,
        control: RunControl | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        check_batch_config(config)
        self.config = config
        self.plan = build_plan(config)
        self.adapter: Adapter = adapter_for(self.plan.route)
        self.transport = transport
        self.progress = progress
        self.control = control or RunControl()
        if config.output_dir is None:
            raise ConfigError("--output-dir is required for a run")
        self.run_dir = RunDir(config.output_dir)
        self.session = Session(config, self.plan, self.run_dir, env=env)
        self.recorder = Recorder(self.session, self.adapter, self._emit)
        self.tally = Tally()
        self.state_path = self.run_dir.path / STATE_FILE
        self.state: BatchState | None = None

    def _emit(self, event: Event) -> None:
        if self.progress is not None:
            self.progress(event)

    # -- the state file --------------------------------------------------------------------------
    def _load_state(self) -> BatchState | None:
        try:
            data = json.loads(self.state_path.read_bytes())
        except FileNotFoundError:
            return None
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise InputError(
                f"{self.state_path}: not valid JSON ({exc}); it is written "
                "atomically, so something else changed it"
            ) from None
        if (
            not isinstance(data, dict)
            or data.get("format") != STATE_FORMAT
            or data.get("phase") not in PHASES
            or not isinstance(data.get("prompt_ids"), list)
        ):
            raise InputError(f"{self.state_path}: not a {STATE_FORMAT} batch state")
        return cast(BatchState, data)

    def _save(self, **changes: Unpack[BatchState]) -> None:
        assert self.state is not None
        self.state.update(changes)
        self.state["updated_at_utc"] = utc_now()
        atomic_write_json(self.state_path, self.state)

    def _active(self) -> BatchState | None:
        if self.state is not None and self.state["phase"] != MATERIALISED:
            return self.state
        return None

    @staticmethod
    def _belongs(rec: Reconciled, pid: str, state: BatchState) -> bool:
        record = rec.statuses[pid].record
        return (
            pid in state["prompt_ids"]
            and state.get("batch_id") is not None
            and record is not None
            and record.get("batch_id") == state["batch_id"]
        )

    # -- preparation ---------------------------------------------------------------------------
    def prepare(self) -> list[PlannedRequest]:
        config = self.config
        self.state = self._load_state() if config.resume and self.run_dir.is_nonempty() else None
        active = self._active()
        in_batch = set(active["prompt_ids"]) if active else set()
        uncertain_held = False
        if active is not None and not config.retry_uncertain:
            pre = self.run_dir.reconcile(self.plan.prompt_ids, repair=False)
            uncertain = pre.by_state(PromptState.UNCERTAIN)
            # Pending in the batch, not uncertain: finishing the batch settles them.
            uncertain_held = bool(uncertain) and all(
                self._belongs(pre, pid, active) for pid in uncertain
            )
        # The contract check comes first: its message is the clearest.
        to_send = self.session.prepare(held=in_batch, uncertain_held=uncertain_held)
        unknown = in_batch - set(self.plan.prompt_ids)
        if unknown:
            raise ResumeRefused(
                f"{self.state_path}: the unfinished batch holds prompts outside "
                f"this run's selection ({', '.join(sorted(unknown)[:5])})"
            )
        return to_send

    # -- the run -------------------------------------------------------------------------------
    async def run(self) -> RunResult:
        to_send = self.prepare()
        statuses = self.session.statuses
        active = self._active()
        in_batch = set(active["prompt_ids"]) if active else set()
        sending = {r.prompt_id for r in to_send} | in_batch
        self._emit(
            RunStarted(
                str(self.run_dir.path),
                self.plan.route.name,
                self.config.model,
                len(self.plan.requests),
                len(sending),
                len(self.plan.requests) - len(sending),
                self.plan.prompt_ids,
            )
        )
        for pid, status in statuses.items():
            if active is not None and pid in in_batch:
                self._emit(
                    PromptStateChanged(pid, PromptState.IN_FLIGHT, int(active["attempts"][pid]))
                )
            elif pid in sending:
                self._emit(PromptStateChanged(pid, PromptState.PENDING, status.attempts))
            else:
                self._emit(
                    PromptStateChanged(pid, status.state, status.attempts, status.last_error)
                )
        timeout = httpx.Timeout(
            self.config.request_timeout_seconds,
            connect=min(10.0, self.config.request_timeout_seconds),
        )
        try:
            async with httpx.AsyncClient(
                transport=self.transport, timeout=timeout, follow_redirects=False, trust_env=False
            ) as client:
                api = self._api(client)
                finished = True
                if active is not None:
                    finished = await self._drive(api)
                if finished and to_send and not self.control.stopped:
                    self._start_batch(to_send)
                    await self._drive(api)
        finally:
            summary = self.write_summary()
            self._emit(RunFinished(summary))
        return RunResult(summary, str(self.run_dir.path))

    def _api(self, client: httpx.AsyncClient) -> BatchApi:
        route, secret = self.plan.route, self.session.secret
        headers = {
            "User-Agent": f"pqid-tui/{__version__}",
            **route.headers,
            **self.adapter.auth_headers(route, secret),
        }
        return BatchApi(
            client,
            route.base_url,
            headers,
            secret,
            retries=self.config.max_retries,
            backoff=functools.partial(backoff, self.config),
        )

    async def _drive(self, api: BatchApi) -> bool:
        """Advance the current batch to `materialised`; False when stopped while polling."""
        while True:
            assert self.state is not None
            phase = self.state["phase"]
            if phase == INPUT_WRITTEN:
                await self._upload(api)
            elif phase in (UPLOADED, CREATING):
                await self._create(api)
            elif phase == CREATED:
                self._mark_in_flight()
                if not await self._poll(api):
                    return False
            elif phase == ENDED:
                await self._download(api)
            elif phase == DOWNLOADED:
                self._materialise()
            else:
                return True

    # -- step 1: the input file ----------------------------------------------------------------
    def _input_name(self, seq: int) -> str:
        return "batch-input.jsonl" if seq == 1 else f"batch-input.{seq}.jsonl"

    def _start_batch(self, to_send: list[PlannedRequest]) -> None:
        statuses = self.session.statuses
        attempts: dict[str, int] = {}
        for req in to_send:
            status = statuses[req.prompt_id]
            if status.state == PromptState.UNCERTAIN:
                self.recorder.keep_uncertain(req, status.attempts)
            attempts[req.prompt_id] = status.attempts + 1
        previous: list[BatchState] = []
        seq = 1
        if self.state is not None:
            old = self.state.copy()
            old.pop("previous_batches", None)
            previous = [*self.state.get("previous_batches", []), old]
            seq = int(self.state.get("seq", 1)) + 1
        data = input_bytes(to_send)
        name = self._input_name(seq)
        atomic_write_bytes(self.run_dir.path / name, data)
        self.state = {
            "format": STATE_FORMAT,
            "seq": seq,
            "phase": INPUT_WRITTEN,
            "input_file": name,
            "input_sha256": sha256_hex(data),
            "input_bytes": len(data),
            "prompt_ids": [r.prompt_id for r in to_send],
            "attempts": attempts,
            "token": secrets.token_hex(16),
            "input_file_id": None,
            "batch_id": None,
            "status": None,
            "status_history": [],
            "request_counts": None,
            "output_file_id": None,
            "error_file_id": None,
            "output_file": None,
            "output_sha256": None,
            "error_file": None,
            "error_sha256": None,
            "batch_errors": None,
            "created_at_utc": utc_now(),
            "previous_batches": previous,
        }
        self._save()

    def _batch_requests(self) -> list[PlannedRequest]:
        assert self.state is not None
        by_id = {r.prompt_id: r for r in self.plan.requests}
        return [by_id[pid] for pid in self.state["prompt_ids"]]

    # -- step 2: upload ------------------------------------------------------------------------
    async def _upload(self, api: BatchApi) -> None:
        assert self.state is not None
        path = self.run_dir.path / self.state["input_file"]
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            data = b""
        if sha256_hex(data) != self.state["input_sha256"]:
            data = input_bytes(self._batch_requests())  # the bodies are deterministic
            if sha256_hex(data) != self.state["input_sha256"]:
                raise ResumeRefused(
                    f"{path}: the batch input no longer matches "
                    f"{STATE_FILE}; the run's requests changed"
                )
            atomic_write_bytes(path, data)
        uploaded = await api.upload(path.name, data)
        self._save(phase=UPLOADED, input_file_id=uploaded["id"])

    # -- step 3: create, exactly once ----------------------------------------------------------
    async def _create(self, api: BatchApi) -> None:
        assert self.state is not None
        if self.state["phase"] == UPLOADED:
            self._save(phase=CREATING, creating_at_unix=time.time())
        token, file_id = self.state["token"], self.state["input_file_id"]
        tries = 0
        while True:
            # A create whose answer was lost (a crash, a dropped connection) may have made a
            # batch: look for the token first, every time.
            batch = await api.find(token, self.state.get("creating_at_unix"))
            adopted = batch is not None
            if batch is None:
                try:
                    batch = await api.create(file_id, token)
                except BatchApiError as exc:
                    if not exc.transient or tries >= self.config.max_retries:
                        raise
                    await asyncio.sleep(backoff(self.config, tries, None))
                    tries += 1
                    continue
            self._save(phase=CREATED, batch_id=batch["id"], adopted=adopted)
            self._note(batch)
            return

    def _mark_in_flight(self) -> None:
        """Every prompt of the batch says in_flight with the batch ID (idempotent)."""
        assert self.state is not None
        batch_id = self.state["batch_id"]
        for req in self._batch_requests():
            attempt = int(self.state["attempts"][req.prompt_id])
            record = self.run_dir.read_record(req.prompt_id)
            if (
                record is not None
                and record.get("state") == IN_FLIGHT
                and record.get("batch_id") == batch_id
            ):
                continue
            self.run_dir.write_record(
                {
                    "prompt_id": req.prompt_id,
                    "state": IN_FLIGHT,
                    "attempt": attempt,
                    "attempts": attempt,
                    "request_sha256": req.sha256,
                    "last_error": record.get("last_error") if record is not None else None,
                    "batch_id": batch_id,
                }
            )
            self._emit(PromptStateChanged(req.prompt_id, PromptState.IN_FLIGHT, attempt))

    # -- step 4: poll --------------------------------------------------------------------------
    def _note(self, batch: dict[str, Any]) -> None:
        """Save the batch's status and counts when they changed."""
        assert self.state is not None
        status = str(batch.get("status"))
        counts = _counts(batch)
        changes: BatchState = {}
        if status != self.state.get("status"):
            changes["status"] = status
            changes["status_history"] = [
                *self.state["status_history"],
                {"status": status, "at_utc": utc_now(), "request_counts": counts},
            ]
        if counts != self.state.get("request_counts"):
            changes["request_counts"] = counts
        if self.state.get("batch_created_at_utc") is None and _utc(batch.get("created_at")):
            changes["batch_created_at_utc"] = _utc(batch.get("created_at"))
        if changes:
            self._save(**changes)
        self._emit(
            BatchPolled(
                str(batch.get("id")), status, counts["total"], counts["completed"], counts["failed"]
            )
        )

    async def _sleep_poll(self) -> bool:
        """Wait one poll interval; False when the run was stopped meanwhile."""
        end = time.monotonic() + self.config.batch_poll_seconds
        while (left := end - time.monotonic()) > 0:
            if self.control.stopped:
                return False
            await asyncio.sleep(min(left, 0.25))
        await self.control.wait_running()
        return not self.control.stopped

    async def _poll(self, api: BatchApi) -> bool:
        assert self.state is not None
        batch_id = self.state["batch_id"]
        while True:
            batch = await api.get(str(batch_id))
            self._note(batch)
            status = str(batch.get("status"))
            if status in TERMINAL:
                ended = _utc(batch.get(f"{status}_at"))
                errors = batch.get("errors")
                data = errors.get("data") if isinstance(errors, dict) else None
                messages = [
                    str(e.get("message") or e.get("code"))
                    for e in data or []
                    if isinstance(e, dict)
                ]
                self._save(
                    phase=ENDED,
                    ended_at_utc=ended or utc_now(),
                    output_file_id=batch.get("output_file_id"),
                    error_file_id=batch.get("error_file_id"),
                    batch_errors=messages or None,
                )
                return True
            if not await self._sleep_poll():
                return False

    # -- step 5: download ----------------------------------------------------------------------
    async def _download(self, api: BatchApi) -> None:
        assert self.state is not None
        secret = self.session.secret
        seq = int(self.state["seq"])
        changes: BatchState = {"phase": DOWNLOADED}
        for id_key, file_key, sha_key, label in _RESULT_FILES:
            file_id = self.state.get(id_key)
            if not file_id:
                continue
            data = redact(await api.content(str(file_id)), secret)
            name = f"batch-{label}.jsonl" if seq == 1 else f"batch-{label}.{seq}.jsonl"
            atomic_write_bytes(self.run_dir.path / name, data)
            changes[file_key] = name
            changes[sha_key] = sha256_hex(data)
        self._save(**changes)

    # -- step 6: materialise -------------------------------------------------------------------
    def _read_saved(
        self,
        file_key: Literal["output_file", "error_file"],
        sha_key: Literal["output_sha256", "error_sha256"],
    ) -> bytes:
        assert self.state is not None
        name = self.state.get(file_key)
        if not name:
            return b""
        path = self.run_dir.path / str(name)
        data = path.read_bytes()
        if sha256_hex(data) != self.state.get(sha_key):
            raise InputError(f"{path}: does not match its SHA-256 in {STATE_FILE}")
        return data

    def _materialise(self) -> None:
        """Record each prompt of the batch as a live run would, skipping settled ones."""
        assert self.state is not None
        state = self.state
        lines: dict[str, dict[str, Any]] = {}
        for _, file_key, sha_key, _ in _RESULT_FILES:  # an output line wins over an error line
            for obj in _lines(self._read_saved(file_key, sha_key)):
                lines.setdefault(obj["custom_id"], obj)
        settled = {(a["prompt_id"], a.get("attempt")) for a in self.run_dir.read_attempts()}
        settled |= {(r["prompt_id"], r.get("attempt")) for r in self.run_dir.read_responses()}
        for req in self._batch_requests():
            attempt = int(state["attempts"][req.prompt_id])
            if (req.prompt_id, attempt) in settled:
                continue  # recorded before a crash interrupted materialisation
            self.tally.attempts += 1
            self.tally.attempted_prompts.add(req.prompt_id)
            self._materialise_one(req, attempt, lines.get(req.prompt_id))
        self._save(phase=MATERIALISED, materialised_at_utc=utc_now())

    def _materialise_one(
        self, req: PlannedRequest, attempt: int, line: dict[str, Any] | None
    ) -> None:
        assert self.state is not None
        state = self.state
        secret = self.session.secret
        outcome = AttemptOutcome(
            {
                "started_at_utc": state.get("batch_created_at_utc"),
                "finished_at_utc": state.get("ended_at_utc") or utc_now(),
                "latency_ms": None,
                "raw": None,
                "batch_id": state["batch_id"],
                "batch_request_id": line.get("id") if line else None,
            }
        )
        if line is None:
            detail = "; ".join(state.get("batch_errors") or [])
            outcome.error = ProviderError(
                "batch_missing",
                f"missing from batch output (batch {state['batch_id']} ended "
                f"{state.get('status')}{': ' + detail if detail else ''})",
                retryable=False,
            )
            self._fail(req, attempt, outcome)
            return
        response = line.get("response")
        error = line.get("error")
        if error or not isinstance(response, dict):
            self._raw(outcome, req.prompt_id, attempt, redact(canonical_json(line), secret))
            err = error if isinstance(error, dict) else {}
            code = err.get("code") or "error"
            message = err.get("message") or "the batch line has an error and no response"
            outcome.error = ProviderError(
                "batch_error", f"batch request error {code}: {message}", retryable=False
            )
            self._fail(req, attempt, outcome)
            return
        status = response.get("status_code")
        status = status if isinstance(status, int) else 0
        payload = response.get("body")
        body = (
            payload.encode()
            if isinstance(payload, str)
            else json.dumps(payload, ensure_ascii=False).encode()
        )
        body = redact(body, secret)
        self._raw(outcome, req.prompt_id, attempt, body)
        headers = {"content-type": "application/json"}
        if isinstance(response.get("request_id"), str):
            headers["x-request-id"] = response["request_id"]
        if self.recorder.read_reply(outcome, status, headers, body).error is not None:
            # Inside a batch nothing is retried; --retry-errors sends it again in a new batch.
            self._fail(req, attempt, outcome)
            return
        self.recorder.success(req, attempt, outcome)

    def _raw(self, outcome: AttemptOutcome, prompt_id: str, attempt: int, body: bytes) -> None:
        self.recorder.raw_body(outcome, prompt_id, attempt, body)
        outcome.info.update({"content_type": "application/json", "bytes": len(body)})

    def _fail(self, req: PlannedRequest, attempt: int, outcome: AttemptOutcome) -> None:
        assert self.state is not None and outcome.error is not None
        error = outcome.error
        last_error = redact_text(f"{error.error_class}: {error.message}", self.session.secret)
        self.recorder.failed_now(
            req,
            attempt,
            outcome,
            {
                "prompt_id": req.prompt_id,
                "state": ERROR,
                "attempt": attempt,
                "attempts": attempt,
                "request_sha256": req.sha256,
                "last_error": last_error,
                "batch_id": self.state["batch_id"],
            },
        )

    # -- summary -------------------------------------------------------------------------------
    def write_summary(self) -> RunSummary:
        state = self.state
        reconciled, waiting = None, None
        if state is not None and state["phase"] != MATERIALISED:
            # In-flight records of an unfinished batch are pending in it, not uncertain.
            reconciled = self.run_dir.reconcile(self.plan.prompt_ids, repair=False)
            held = [
                pid
                for pid in reconciled.by_state(PromptState.UNCERTAIN)
                if self._belongs(reconciled, pid, state)
            ]
            for pid in held:
                reconciled.statuses[pid].state = PromptState.PENDING
            waiting = len(held)
        summary = invocation_summary(
            self.config,
            self.run_dir,
            self.plan.prompt_ids,
            self.tally,
            stopped=self.control.stopped,
            reconciled=reconciled,
        )
        if state is not None:
            summary["batch"] = self._batch_summary(state, waiting)
        write_summary(self.run_dir, summary)
        return summary

    def _batch_summary(self, state: BatchState, waiting: int | None) -> dict[str, Any]:
        """The summary's `batch`; `waiting`: the prompts pending in an unfinished batch."""
        info: dict[str, Any] = {
            "batch_id": state.get("batch_id"),
            "status": state.get("status"),
            "phase": state.get("phase"),
            "request_counts": state.get("request_counts"),
            "prompts": len(state["prompt_ids"]),
            "input_file_id": state.get("input_file_id"),
            "output_file_id": state.get("output_file_id"),
            "error_file_id": state.get("error_file_id"),
            "adopted": state.get("adopted", False),
            "state_file": STATE_FILE,
            "previous": [
                {
                    "batch_id": p.get("batch_id"),
                    "status": p.get("status"),
                    "request_counts": p.get("request_counts"),
                    "prompts": len(p.get("prompt_ids") or []),
                }
                for p in state.get("previous_batches", [])
            ],
        }
        if waiting is not None:
            info["pending_in_batch"] = waiting
        return info


def check_batch_config(config: LiveRunConfig) -> None:
    """Refuse what the Batch path cannot honour, before anything is read or written."""
    if config.provider != "openai":
        raise ConfigError(
            f"--batch-api needs --provider openai (the OpenAI Batch API); "
            f"{config.provider!r} has no batch path here (any --base-url that "
            "speaks the OpenAI Files and Batches endpoints works with openai)"
        )
    if config.sleep_seconds > 0:
        raise ConfigError(
            "--sleep-seconds paces individual requests; with --batch-api every "
            "request goes in one upload. Drop one of the two"
        )
    if config.stop_on_error:
        raise ConfigError(
            "--stop-on-error cannot stop a batch that is already submitted; "
            "with --batch-api drop it (use --max-new to send smaller batches)"
        )


async def run_batch_api_async(
    config: LiveRunConfig,
    *,
    transport: httpx.AsyncBaseTransport | None = None,
    progress: ProgressCallback | None = None,
    control: RunControl | None = None,
    env: dict[str, str] | None = None,
) -> RunResult:
    """Run (or resume) a batch run on the current event loop."""
    return await BatchRun(
        config, transport=transport, progress=progress, control=control, env=env
    ).run()


def run_batch_api(
    config: LiveRunConfig,
    *,
    transport: httpx.AsyncBaseTransport | None = None,
    progress: ProgressCallback | None = None,
    env: dict[str, str] | None = None,
) -> RunResult:
    """Run (or resume) a batch run to completion; blocking. With `recast`, the second draw
    goes into `OUTPUT/recast/` as its own batch, and the summary gains `stability`."""

    return asyncio.run(
        run_with_recast(
            run_batch_api_async, config, transport=transport, progress=progress, env=env
        )
    )


__all__ = [
    "BatchApi",
    "BatchApiError",
    "BatchPolled",
    "BatchRun",
    "check_batch_config",
    "input_bytes",
    "run_batch_api",
    "run_batch_api_async",
]
