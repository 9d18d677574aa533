"""The live runner: sends the planned requests with bounded retries and keeps durable evidence."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import itertools
import json
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import httpx

from engine import __version__
from engine.config import LiveRunConfig
from engine.errors import ConfigError, ProviderError, ResumeRefused, RunWriteError
from engine.events import (
    AttemptFinished,
    Event,
    ProgressCallback,
    PromptState,
    PromptStateChanged,
    RunFinished,
    RunStarted,
)
from engine.providers.adapters import Adapter, Reply, adapter_for
from engine.providers.credentials import Credential, resolve_credential
from engine.providers.model_identity import check_model
from engine.providers.oracle import OracleTransport
from engine.release.prices import PriceTable, load_prices, spent
from engine.run.plan import (
    Plan,
    PlannedRequest,
    build_plan,
    check_resumable,
    environment_dict,
    release_dict,
)
from engine.rundir.journal import Group, Journal
from engine.rundir.records import (
    ERROR,
    IN_FLIGHT,
    RETRY_WAIT,
    RUN_FORMAT,
    SUCCESS,
    PromptStatus,
    Reconciled,
    RunDir,
    utc_now,
)
from engine.transport.governor import Governor
from engine.transport.http import NetworkSender, Sender, SendFailed, SendTimeout, TransportSender
from evaluator.extract import extract_code


@dataclass
class RunResult:
    """What a live run did; `to_dict()` is run-summary.json."""

    summary: dict[str, Any]
    run_dir: str

    def to_dict(self) -> dict[str, Any]:
        return dict(self.summary)


class RunControl:
    """Pause, resume and stop a run from outside (the app's buttons, a signal handler)."""

    def __init__(self) -> None:
        self._running = asyncio.Event()
        self._running.set()
        self._stopping = asyncio.Event()
        self.stopped = False

    def pause(self) -> None:
        self._running.clear()

    def resume(self) -> None:
        self._running.set()

    def stop(self) -> None:
        self.stopped = True
        self._running.set()
        self._stopping.set()

    async def sleep(self, seconds: float) -> None:
        """Wait `seconds`, or until the run is stopped if that comes first (a backoff of a
        minute must not hold a stop up)."""
        if self.stopped or seconds <= 0:
            await asyncio.sleep(0)
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), seconds)

    @property
    def paused(self) -> bool:
        return not self._running.is_set()

    async def wait_running(self) -> None:
        await self._running.wait()


def build_manifest(plan: Plan, credential_source: str) -> dict[str, Any]:
    c = plan.config
    return {
        "format": RUN_FORMAT,
        "kind": "live_replication",
        "created_at_utc": utc_now(),
        "tool": {"name": "pqid-tui", "version": __version__},
        "environment": environment_dict(),
        "release": release_dict(plan.release),
        "publishable": not plan.release.modified,
        "route": plan.route_dict(),
        "model": c.model,
        "selection": plan.selection_dict(),
        "selected_prompt_ids": list(plan.prompt_ids),
        "request_set_sha256": plan.request_set_sha256,
        "generation_contract": plan.contract,
        "generation_contract_preset": c.generation_contract,
        "credential_source": credential_source,
        "contacts_provider": plan.route.adapter != "oracle",
        "send_mode": "batch-api" if c.batch_api else "live",
        "target_metadata_exported": False,
    }


def request_record(req: PlannedRequest) -> dict[str, Any]:
    """One line of requests.jsonl: the exact body, the project's hash of its bytes and, on a
    PQID-Bench release, the frozen study's identities of the same request (`study`)."""
    record: dict[str, Any] = {"prompt_id": req.prompt_id, "request_sha256": req.sha256,
                              "body": req.body}
    if req.study is not None:
        record["study"] = req.study
    return record


def refuse_live_resume_of_open_batch(run_dir: RunDir) -> None:
    """A batch still open at the provider must be finished by the batch path: sending its
    prompts live as well would pay for each of them twice."""
    path = run_dir.path / "batch-state.json"
    if not path.exists():
        return
    try:
        phase = json.loads(path.read_text()).get("phase")
    except (OSError, ValueError, AttributeError):
        phase = "unreadable"
    if phase != "materialised":
        raise ResumeRefused(f"{run_dir.path} holds an OpenAI batch that is not finished "
                            f"(phase {phase!r}); resume it with --batch-api so its prompts are "
                            "not sent (and paid for) twice")


def _redact(data: bytes, secret: str | None) -> bytes:
    if secret and secret.encode() in data:
        return data.replace(secret.encode(), b"[REDACTED]")
    return data


def _redact_text(text: str | None, secret: str | None) -> str | None:
    if text and secret and secret in text:
        return text.replace(secret, "[REDACTED]")
    return text


@dataclass
class _Tally:
    attempts: int = 0
    attempted_prompts: set[str] = field(default_factory=set)
    started: float = field(default_factory=time.time)


@dataclass
class _SendClock:
    """Where the senders' time went, summed over requests (seconds, `time.perf_counter`);
    the rest of their lifetimes is `between_requests` (picking the next prompt, an error's
    bookkeeping, retry backoffs, --sleep-seconds)."""

    started: float = field(default_factory=time.perf_counter)
    requests: int = 0
    slot: float = 0.0  # waiting for the governor to admit the request
    in_flight: float = 0.0  # writing the in_flight record and waiting for its flush
    to_send: float = 0.0  # from the record being durable to the request being handed over
    round_trip: float = 0.0  # the request, its answer, parsing it (less `bookkeeping`)
    bookkeeping: float = 0.0  # turning an answer into its records and events
    workers: float = 0.0  # the senders' lifetimes
    first_send: float | None = None
    last_answer: float | None = None
    answer_at: float = 0.0  # when the last reply's bookkeeping began

    def to_dict(self) -> dict[str, Any] | None:
        n = self.requests
        if not n or self.first_send is None or self.last_answer is None:
            return None
        parts = {"slot": self.slot, "in_flight_record": self.in_flight,
                 "to_send": self.to_send, "round_trip": self.round_trip,
                 "bookkeeping": self.bookkeeping}
        parts["between_requests"] = max(0.0, self.workers - sum(parts.values()))
        return {"requests": n,
                "first_request_after_s": round(self.first_send - self.started, 4),
                "last_answer_after_s": round(self.last_answer - self.started, 4),
                "mean_ms": {k: round(v / n * 1000, 3) for k, v in parts.items()}}


class LiveRun:
    """One invocation of a live run over a run directory."""

    def __init__(self, config: LiveRunConfig, *, transport: httpx.AsyncBaseTransport | None = None,
                 progress: ProgressCallback | None = None, control: RunControl | None = None,
                 env: dict[str, str] | None = None) -> None:
        self._clock = _SendClock()  # first: it times the setup too
        self.config = config
        self.plan = build_plan(config)
        self.adapter: Adapter = adapter_for(self.plan.route)
        self.transport = transport
        self.progress = progress
        self.control = control or RunControl()
        self.env = env
        if config.output_dir is None:
            raise ConfigError("--output-dir is required for a run")
        self.run_dir = RunDir(config.output_dir)
        self.credential: Credential | None = None
        self.journal: Journal | None = None
        self.governor = Governor(config.concurrency)
        self._tracked = False  # whether _reconciled follows every write (the live path)
        self._write_stats: dict[str, Any] | None = None
        # in_flight records written ahead: prompt -> (attempt, path, bytes)
        self._ahead: dict[str, tuple[int, Path, bytes]] = {}
        self.tally = _Tally()
        self._pace_lock = asyncio.Lock()
        self._last_start = 0.0
        self._stop_new = False
        self._reconciled: Reconciled | None = None
        # When set, this invocation sends no prompt outside it (and only its own uncertain
        # prompts can block it).
        self.only: set[str] | None = None

    def _emit(self, event: Event) -> None:
        if self.progress is not None:
            self.progress(event)

    # -- preparation ---------------------------------------------------------------------------
    def prepare(self) -> list[PlannedRequest]:
        """Check the output directory, read the credential, create or resume the run dir."""
        c, plan = self.config, self.plan
        if plan.route.adapter != "oracle" and not c.acknowledge_prompt_export:
            raise ConfigError(
                "sending prompts to a provider needs --acknowledge-third-party-prompt-export "
                "(the provider's retention, policy, quota and billing terms apply)")
        # The same refusals as the dry run's plan (engine.run.plan), read-only.
        resuming = check_resumable(plan)
        if resuming and not c.batch_api:
            refuse_live_resume_of_open_batch(self.run_dir)
        self.credential = resolve_credential(plan.route, c.api_key_file, no_auth=c.no_auth,
                                             env=self.env)
        requests = [request_record(r) for r in plan.requests]
        if resuming:
            self.run_dir.ensure_layout()
            if not self.run_dir.requests_path.exists():
                self.run_dir.write_requests(requests)
        else:
            self.run_dir.create(build_manifest(plan, self.credential.source), requests)
        if resuming:
            rec = self.run_dir.reconcile(plan.prompt_ids)
        else:  # just created: nothing to read back
            rec = Reconciled(statuses={pid: PromptStatus(pid, "pending")
                                       for pid in plan.prompt_ids})
        self._reconciled = rec
        uncertain = [p for p in rec.by_state("uncertain") if self.only is None or p in self.only]
        if uncertain and not c.retry_uncertain:
            raise ResumeRefused(
                f"{len(uncertain)} prompt(s) were in flight when an earlier run stopped "
                f"({', '.join(uncertain[:5])}{', ...' if len(uncertain) > 5 else ''}); the "
                "provider may have answered them. Pass --retry-uncertain to send them again "
                "(a possible extra paid draw; the uncertain attempt stays in the history)")
        to_send = []
        for req in plan.requests:
            if self.only is not None and req.prompt_id not in self.only:
                continue
            state = rec.statuses[req.prompt_id].state
            if state == "pending" or (state == "error" and c.retry_errors) or (
                    state == "uncertain" and c.retry_uncertain):
                to_send.append(req)
        if c.max_new is not None:
            to_send = to_send[: c.max_new]
        return to_send

    # -- the loop ------------------------------------------------------------------------------
    async def run(self) -> RunResult:
        to_send = self.prepare()
        rec = self._reconciled
        assert rec is not None
        sending = {r.prompt_id for r in to_send}
        self._emit(RunStarted(str(self.run_dir.path), self.plan.route.name, self.config.model,
                              len(self.plan.requests), len(to_send),
                              len(self.plan.requests) - len(to_send), self.plan.prompt_ids))
        for pid, status in rec.statuses.items():
            if pid not in sending:
                self._emit(PromptStateChanged(pid, cast(PromptState, status.state),
                                              status.attempts, status.last_error))
        queue: collections.deque[PlannedRequest] = collections.deque(to_send)
        for req in to_send:
            self._emit(PromptStateChanged(req.prompt_id, "pending",
                                          rec.statuses[req.prompt_id].attempts))
        sender = self._sender()
        self.journal = Journal(self.run_dir.path)
        self.governor = Governor(self.config.concurrency)
        self._tracked = True
        write_failure: BaseException | None = None
        try:
            workers = [asyncio.create_task(self._worker(sender, queue))
                       for _ in range(min(self.config.concurrency, max(1, len(to_send))))]
            try:
                await asyncio.gather(*workers)
            except BaseException:
                self._tracked = False  # cut short: read the states back from disk instead
                raise
            finally:
                for w in workers:
                    w.cancel()
                await asyncio.gather(*workers, return_exceptions=True)
                await sender.aclose()
        finally:
            try:
                await self.journal.drain()
            except OSError as exc:
                write_failure = exc
            finally:
                self.journal.close()
                self._write_stats = self.journal.stats()
                self.journal = None
            if write_failure is not None:
                raise RunWriteError(
                    f"could not write the run's evidence to {self.run_dir.path}: "
                    f"{write_failure}; sending stopped. Free space or fix the directory, then "
                    "resume the run") from write_failure
            summary = self.write_summary()
            self._emit(RunFinished(summary))
        return RunResult(summary, str(self.run_dir.path))

    def _sender(self) -> Sender:
        timeout = self.config.request_timeout_seconds
        connect = min(10.0, timeout)
        transport = self.transport
        if transport is None and self.plan.route.adapter == "oracle":
            transport = OracleTransport(self.plan.release)
        if transport is not None:
            return TransportSender(transport, timeout_seconds=timeout,
                                   connect_timeout_seconds=connect)
        return NetworkSender(connections=self.config.concurrency, timeout_seconds=timeout,
                             connect_timeout_seconds=connect)

    @property
    def _live_journal(self) -> Journal:
        assert self.journal is not None, "only while run() is sending"
        return self.journal

    def _halted(self) -> bool:
        return self.control.stopped or self._stop_new or self._live_journal.failure is not None

    async def _worker(self, sender: Sender, queue: collections.deque[PlannedRequest]) -> None:
        born = time.perf_counter()
        try:
            while True:
                await self.control.wait_running()
                if self._halted() or not queue:
                    return
                req = queue.popleft()
                if queue:
                    self._live_journal.later(functools.partial(self._prepare_ahead, queue))
                else:
                    self._live_journal.wind_down()
                await self._send_prompt(sender, req)
        finally:
            self._clock.workers += time.perf_counter() - born

    def _in_flight_record(self, req: PlannedRequest, attempt: int) -> dict[str, Any]:
        assert self._reconciled is not None
        return {"prompt_id": req.prompt_id, "state": IN_FLIGHT, "attempt": attempt,
                "attempts": attempt, "request_sha256": req.sha256,
                "last_error": self._reconciled.statuses[req.prompt_id].last_error}

    def _prepare_ahead(self, queue: collections.deque[PlannedRequest]) -> None:
        """Write the in_flight records of the prompts next in the queue (a round trip's worth:
        as many as may be in flight) to their temporary files, so the flushes in between make
        them durable before they are needed. It runs later than the pop that asked for it
        (Journal.later), so after a burst of pops one call catches up for all of them."""
        if self._reconciled is None:
            return
        for req in itertools.islice(queue, self.config.concurrency):
            if req.prompt_id in self._ahead:
                continue
            status = self._reconciled.statuses[req.prompt_id]
            if status.state == "uncertain":
                continue  # its history line comes first; written the usual way
            path, data = self.run_dir.record_bytes(
                self._in_flight_record(req, status.attempts + 1))
            self._ahead[req.prompt_id] = (status.attempts + 1, path, data)
            self._live_journal.prepare(path, data)

    async def _pace(self) -> None:
        if self.config.sleep_seconds <= 0:
            return
        async with self._pace_lock:
            wait = self._last_start + self.config.sleep_seconds - time.monotonic()
            if wait > 0 and self._last_start:
                await asyncio.sleep(wait)
            self._last_start = time.monotonic()

    def _backoff(self, retries_done: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return retry_after
        base: float = self.config.retry_backoff_seconds * (2 ** retries_done)
        return float(min(base, self.config.max_backoff_seconds) * (1 - 0.25 * random.random()))

    async def _send_prompt(self, sender: Sender, req: PlannedRequest) -> None:
        rec = self._reconciled
        assert rec is not None
        status = rec.statuses[req.prompt_id]
        attempt = status.attempts
        if status.state == "uncertain":
            # Keep the interrupted attempt in the history before drawing again.
            self.run_dir.append_attempt({
                "prompt_id": req.prompt_id, "attempt": attempt, "started_at_utc": None,
                "finished_at_utc": utc_now(), "latency_ms": None, "status": None,
                "error_class": "uncertain", "decision": "uncertain",
                "error": "in flight when an earlier run stopped; resent with --retry-uncertain",
                "request_sha256": req.sha256, "raw": None})
        retries = 0
        clock = self._clock
        while True:
            await self._pace()
            await self.control.wait_running()
            asked = time.perf_counter()
            ticket = await self.governor.acquire()
            admitted = time.perf_counter()
            clock.slot += admitted - asked
            if self._halted():
                self.governor.failed()
                if retries:  # it was shown retrying: it is left pending, for a resume
                    self._emit(PromptStateChanged(req.prompt_id, "pending", attempt,
                                                  status.last_error))
                return
            attempt += 1
            record = self._in_flight_record(req, attempt)
            ahead = self._ahead.pop(req.prompt_id, None)
            path, data = (ahead[1:] if ahead is not None and ahead[0] == attempt
                          else self.run_dir.record_bytes(record))
            try:
                await self._live_journal.replace_now(path, data)
            except OSError as exc:
                self.governor.failed()
                self._live_journal.failure = self._live_journal.failure or exc
                return
            durable = time.perf_counter()
            # What a crash now would leave: the attempt's outcome is unknown.
            status.state, status.attempts = "uncertain", attempt
            self.tally.attempted_prompts.add(req.prompt_id)
            self._emit(PromptStateChanged(req.prompt_id, "in_flight", attempt))
            self.tally.attempts += 1
            sent = time.perf_counter()
            clock.in_flight += durable - admitted
            clock.to_send += sent - durable
            if clock.first_send is None:
                clock.first_send = sent
            outcome = await self._attempt(sender, req, attempt, ticket)
            clock.last_answer = answered = time.perf_counter()
            clock.requests += 1
            if isinstance(outcome, Reply):
                # Its bookkeeping (_record_success) ran last in this same step.
                clock.round_trip += clock.answer_at - sent
                clock.bookkeeping += answered - clock.answer_at
                return
            clock.round_trip += answered - sent
            error = outcome
            status.last_error = f"{error.error_class}: {error.message}"
            give_up = not error.retryable or retries >= self.config.max_retries
            too_long = (error.retry_after is not None
                        and error.retry_after > self.config.max_retry_after_seconds)
            if too_long and error.retryable:
                give_up = True
                status.last_error += (f" (the provider asks to wait {error.retry_after:.0f} s, "
                                      f"more than --max-retry-after-seconds; resume later "
                                      "with --retry-errors)")
            delay = 0.0 if give_up else self._backoff(retries, error.retry_after)
            decision = "terminal" if give_up else "retry"
            group = Group().append(self.run_dir.attempts_path, RunDir.line_bytes(
                self._attempt_line(req, attempt, error, decision, delay)))
            raw = getattr(error, "_raw", None)
            if raw is not None:
                group.create(*raw)  # the body of a completed reply, kept as evidence
            if give_up:
                group.replace(*self.run_dir.record_bytes(
                    dict(record, state=ERROR, last_error=status.last_error)))
                self._emit_attempt_error(req, attempt, error, decision)
                # Answered (its slot is free), the error not yet durable: "saving", not in flight.
                self._emit(PromptStateChanged(req.prompt_id, "saving", attempt,
                                              status.last_error))
                self._live_journal.commit_later(group, functools.partial(
                    self._settled, status, "error",
                    PromptStateChanged(req.prompt_id, "error", attempt, status.last_error)))
                if self.config.stop_on_error:
                    self._stop_new = True
                return
            group.replace(*self.run_dir.record_bytes(
                dict(record, state=RETRY_WAIT, last_error=status.last_error)))
            # The answer is in and the slot is free: the prompt is no longer in flight.
            self._emit_attempt_error(req, attempt, error, decision)
            self._emit(PromptStateChanged(req.prompt_id, "retrying", attempt, status.last_error,
                                          time.time() + delay))
            try:
                # The next attempt's in_flight record must not overtake this one.
                await self._live_journal.commit_later(group)
            except OSError:
                return
            status.state = "pending"
            retries += 1
            await self.control.sleep(delay)
            if self.control.stopped:
                # No next try will come: the prompt is pending again, as its record says.
                self._emit(PromptStateChanged(req.prompt_id, "pending", attempt,
                                              status.last_error))
                return

    def _settled(self, status: PromptStatus, state: str, event: Event) -> None:
        status.state = state
        self._emit(event)

    def _log_attempt_error(self, req: PlannedRequest, attempt: int, error: ProviderError,
                           decision: str, delay: float) -> None:
        """Write an attempt's line now and tell the listener (the batch path)."""
        self.run_dir.append_attempt(self._attempt_line(req, attempt, error, decision, delay))
        self._emit_attempt_error(req, attempt, error, decision)

    def _attempt_line(self, req: PlannedRequest, attempt: int, error: ProviderError,
                      decision: str, delay: float) -> dict[str, Any]:
        info = getattr(error, "_attempt_info", {})
        return dict(
            info, prompt_id=req.prompt_id, attempt=attempt, status=error.status,
            error_class=error.error_class,
            error=_redact_text(error.message, self.credential.secret if self.credential else None),
            decision=decision, retry_after_s=error.retry_after,
            backoff_s=round(delay, 3) if decision == "retry" else None,
            request_sha256=req.sha256)

    def _emit_attempt_error(self, req: PlannedRequest, attempt: int, error: ProviderError,
                            decision: str) -> None:
        info = getattr(error, "_attempt_info", {})
        self._emit(AttemptFinished(req.prompt_id, attempt, error.status,
                                   int(info.get("latency_ms") or 0), error.error_class,
                                   "retry" if decision == "retry" else "terminal"))

    async def _attempt(self, sender: Sender, req: PlannedRequest, attempt: int, ticket: float
                       ) -> Reply | ProviderError:
        route, secret = self.plan.route, self.credential.secret if self.credential else None
        headers = {"Content-Type": "application/json", "User-Agent": f"pqid-tui/{__version__}",
                   **route.headers, **self.adapter.auth_headers(route, secret)}
        url = self.adapter.url(route, self.config.model)
        started_utc, t0 = utc_now(), time.monotonic()
        info: dict[str, Any] = {"started_at_utc": started_utc}
        try:
            response = await sender.post(url, req.body_bytes, headers)
        except (SendTimeout, SendFailed) as exc:
            self.governor.failed()
            if isinstance(exc, SendTimeout):
                err = ProviderError("timeout", f"no complete reply within the timeout ({exc})",
                                    retryable=True)
            else:
                err = ProviderError("connection_error", _redact_text(str(exc), secret)
                                    or "connection failed", retryable=True)
            info.update(latency_ms=int((time.monotonic() - t0) * 1000),
                        finished_at_utc=utc_now(), raw=None)
            err._attempt_info = info  # type: ignore[attr-defined]
            return err
        latency_ms = int((time.monotonic() - t0) * 1000)
        body = _redact(response.body, secret)
        resp_headers = response.headers
        is_json = True
        try:
            json.loads(body)
        except (UnicodeDecodeError, json.JSONDecodeError):
            is_json = False
        raw_name = self.run_dir.raw_name(req.prompt_id, attempt, is_json)
        info.update(latency_ms=latency_ms, finished_at_utc=utc_now(), raw=raw_name,
                    content_type=resp_headers.get("content-type"), bytes=len(body))
        raw = (self.run_dir.path / raw_name, body)
        try:
            reply = self.adapter.parse(response.status, resp_headers, body)
            model_check = check_model(self.config.model, reply.returned_model)
            if model_check == "redirected" and self.config.require_exact_model:
                raise ProviderError(
                    "model_redirected", f"asked for {self.config.model!r}, the provider answered "
                    f"with {reply.returned_model!r} (--require-exact-model)", retryable=False,
                    status=response.status)
        except ProviderError as err:
            if err.status == 429 and err.retryable:
                long_wait = (err.retry_after is not None
                             and err.retry_after > self.config.max_retry_after_seconds)
                # "limit" (the route paused and slowed) or "isolated" (only this prompt waits,
                # by its own backoff), kept in the attempt's history line.
                info["throttle"] = self.governor.throttled(
                    ticket, err.retry_after, resp_headers, honour_pause=not long_wait,
                    prompt=req.prompt_id)
            else:
                self.governor.answered(ticket, resp_headers)
            err._attempt_info = info  # type: ignore[attr-defined]
            err._raw = raw  # type: ignore[attr-defined]
            return err
        self.governor.answered(ticket, resp_headers)
        self._record_success(req, attempt, reply, response.status, info, model_check, raw)
        return reply

    def _record_success(self, req: PlannedRequest, attempt: int, reply: Reply, status: int,
                        info: dict[str, Any], model_check: str,
                        raw: tuple[Path, bytes] | None = None) -> None:
        self._clock.answer_at = time.perf_counter()
        note = response_note({"finish_reason": reply.finish_reason, "content": reply.content,
                              "model_redirected": model_check == "redirected",
                              "returned_model": reply.returned_model})
        self._emit(AttemptFinished(req.prompt_id, attempt, status, info["latency_ms"], None,
                                   "success", reply.usage))
        if self.journal is None:
            # The batch path writes as it goes (its raw body is written already).
            self._write_success(req, attempt, reply, status, info, model_check, raw, note)
            return
        # The answer is in and its slot free; "success" follows once its evidence is durable.
        self._emit(PromptStateChanged(req.prompt_id, "saving", attempt, note=note))
        # Written up once the requests waiting for their in_flight records are on their way
        # (Journal.later): none of them waits behind this answer's bookkeeping.
        self.journal.later(functools.partial(self._write_success, req, attempt, reply, status,
                                             info, model_check, raw, note))

    def _write_success(self, req: PlannedRequest, attempt: int, reply: Reply, status: int,
                       info: dict[str, Any], model_check: str, raw: tuple[Path, bytes] | None,
                       note: str | None) -> None:
        extraction = extract_code(reply.content)
        response = {
            "prompt_id": req.prompt_id, "provider": self.plan.route.name,
            "adapter": self.plan.route.adapter, "model": self.config.model,
            "returned_model": reply.returned_model, "content": reply.content,
            "generated_code": extraction.code,
            "extraction": {"method": extraction.method,
                           "prose_removed": extraction.prose_removed},
            "model_check": model_check, "model_redirected": model_check == "redirected",
            "finish_reason": reply.finish_reason,
            "provider_finish_reason": reply.provider_finish_reason, "usage": reply.usage,
            "request_sha256": req.sha256, "request_id": reply.request_id,
            "created_at_utc": info["finished_at_utc"], "attempt": attempt,
            "latency_ms": info["latency_ms"], "http_status": status, "raw": info["raw"],
        }
        attempt_line = dict(info, prompt_id=req.prompt_id, attempt=attempt, status=status,
                            error_class=None, error=None, decision="success",
                            request_sha256=req.sha256)
        record = {"prompt_id": req.prompt_id, "state": SUCCESS, "attempt": attempt,
                  "attempts": attempt, "request_sha256": req.sha256, "last_error": None,
                  "finish_reason": reply.finish_reason}

        def durable() -> None:
            if self._reconciled is not None:
                settled = self._reconciled.statuses[req.prompt_id]
                settled.state, settled.last_error = "success", None
            self._emit(PromptStateChanged(req.prompt_id, "success", attempt, note=note))

        if self.journal is None:
            self.run_dir.append_response(response)
            self.run_dir.append_attempt(attempt_line)
            self.run_dir.write_record(record)
            durable()
            return
        # One group, durable in this order: the raw body, the response and the attempt lines,
        # and only then the record that says success.
        group = Group()
        if raw is not None:
            group.create(*raw)
        group.append(self.run_dir.responses_path, RunDir.line_bytes(response))
        group.append(self.run_dir.attempts_path, RunDir.line_bytes(attempt_line))
        group.replace(*self.run_dir.record_bytes(record))
        self.journal.commit_later(group, durable)

    # -- summary -------------------------------------------------------------------------------
    def write_summary(self) -> dict[str, Any]:
        try:
            prices = load_prices(self.config.prices_path)
        except ConfigError:
            prices = None
        summary = summarize_run(self.run_dir, self.plan.prompt_ids, repair=False,
                                prices=prices, model=self.config.model,
                                batch=self.config.batch_api,
                                reconciled=self._reconciled if self._tracked else None)
        summary.update({
            "attempted": len(self.tally.attempted_prompts),
            "requests_sent": self.tally.attempts,
            "skipped": len(self.plan.prompt_ids) - len(self.tally.attempted_prompts),
            "stopped": self.control.stopped or self._stop_new,
            "elapsed_seconds": round(time.time() - self.tally.started, 3),
        })
        summary["rate_control"] = None if self.config.batch_api else self.governor.state()
        summary["durable_writes"] = self._write_stats
        summary["send_path"] = None if self.config.batch_api else self._clock.to_dict()
        with contextlib.suppress(OSError):
            self.run_dir.write_summary(summary)
        return summary


def response_note(response: dict[str, Any]) -> str | None:
    """What a success should not hide: truncation, emptiness, another model answering."""
    notes = []
    if response.get("finish_reason") == "length":
        notes.append("truncated (length)")
    elif response.get("finish_reason") in ("content_filter", "refusal"):
        notes.append(str(response["finish_reason"]))
    if not (response.get("content") or "").strip():
        notes.append("empty")
    if response.get("model_redirected"):
        notes.append(f"redirected to {response.get('returned_model')}")
    return ", ".join(notes) or None


def summarize_run(run_dir: RunDir, prompt_ids: tuple[str, ...] | list[str], *,
                  repair: bool = False, prices: PriceTable | None = None,
                  model: str | None = None, batch: bool = False,
                  reconciled: Reconciled | None = None) -> dict[str, Any]:
    """Counts over the selected prompts, read back from the run directory. A live run that
    has just drained its writes passes the states it wrote (`reconciled`) instead of reading
    every record back."""
    rec = reconciled if reconciled is not None else run_dir.reconcile(prompt_ids, repair=repair)
    counts = Counter(s.state for s in rec.statuses.values())
    responses = [r for r in run_dir.read_responses() if r["prompt_id"] in rec.statuses]
    finish = Counter(str(r.get("finish_reason")) for r in responses)
    usage = Counter[str]()
    for r in responses:
        for key in ("prompt_tokens", "completion_tokens", "total_tokens"):
            value = (r.get("usage") or {}).get(key)
            if isinstance(value, int):
                usage[key] += value
    models = Counter(str(r.get("returned_model")) for r in responses)
    checks = Counter(str(r.get("model_check", "not_checked")) for r in responses)
    attempts = run_dir.read_attempts()
    requested = model or (responses[0].get("model") if responses else None)
    return {
        "run_dir": str(run_dir.path),
        "selected": len(prompt_ids),
        "success": counts["success"], "error": counts["error"],
        "pending": counts["pending"], "uncertain": counts["uncertain"],
        "complete": counts["success"] + counts["error"] == len(prompt_ids),
        "total_attempts": len(attempts),
        "empty_responses": sum(1 for r in responses if not (r.get("content") or "").strip()),
        "no_code_extracted": sum(1 for r in responses if not r.get("generated_code")),
        "finish_reasons": dict(sorted(finish.items())),
        "returned_models": dict(sorted(models.items())),
        "model_checks": dict(sorted(checks.items())),
        "redirected_prompts": sorted(r["prompt_id"] for r in responses
                                     if r.get("model_redirected")),
        "truncated_prompts": sorted(r["prompt_id"] for r in responses
                                    if r.get("finish_reason") == "length"),
        "empty_prompts": sorted(r["prompt_id"] for r in responses
                                if not (r.get("content") or "").strip()),
        "usage": dict(usage),
        "cost": spent(prices, str(requested), dict(usage), batch=batch) if requested else None,
        "errors": {pid: s.last_error for pid, s in rec.statuses.items() if s.state == "error"},
        "updated_at_utc": utc_now(),
    }


async def run_live_model_async(config: LiveRunConfig, *,
                               transport: httpx.AsyncBaseTransport | None = None,
                               progress: ProgressCallback | None = None,
                               control: RunControl | None = None,
                               env: dict[str, str] | None = None) -> RunResult:
    """Run (or resume) a live run on the current event loop."""
    return await LiveRun(config, transport=transport, progress=progress, control=control,
                         env=env).run()


def run_live_model(config: LiveRunConfig, *, transport: httpx.AsyncBaseTransport | None = None,
                   progress: ProgressCallback | None = None,
                   env: dict[str, str] | None = None) -> RunResult:
    """Run (or resume) a live run to completion; blocking. With `recast`, then the second
    draw into `OUTPUT/recast/`, and the summary gains `stability` and `recast`."""

    async def both() -> RunResult:
        result = await run_live_model_async(config, transport=transport, progress=progress,
                                            env=env)
        if config.recast:
            from engine.run.recast import run_recast_async

            second, report = await run_recast_async(config, transport=transport,
                                                    progress=progress, env=env)
            result.summary["recast"] = second.to_dict()
            result.summary["stability"] = report
        return result

    return asyncio.run(both())


__all__ = ["LiveRun", "RunControl", "RunResult", "run_live_model", "run_live_model_async",
           "summarize_run"]
