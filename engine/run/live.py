"""The live sender: one POST per prompt, with bounded retries, over a session and a recorder.

The session (engine.run.session) decides what is sent; the recorder (engine.run.recorder)
turns each answer into evidence. What is here is the sending itself: the workers, the
governor's admission, pacing, the in_flight record made durable before each request, and
the retry decisions.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import itertools
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from engine import __version__
from engine.config import LiveRunConfig
from engine.errors import ConfigError, ProviderError, RunWriteError
from engine.events import (
    Event,
    ProgressCallback,
    PromptStateChanged,
    RunFinished,
    RunStarted,
)
from engine.providers.adapters import Adapter, adapter_for
from engine.providers.oracle import OracleTransport
from engine.run.control import RunControl, RunResult
from engine.run.plan import PlannedRequest, build_plan
from engine.run.recast import run_with_recast
from engine.run.recorder import AttemptOutcome, FailedDecision, Recorder, redact, redact_text
from engine.run.retry import backoff
from engine.run.session import Session, build_manifest, request_record
from engine.run.summary import (
    Tally,
    invocation_summary,
    response_note,
    summarize_run,
    write_summary,
)
from engine.rundir.journal import Journal
from engine.rundir.records import ERROR, IN_FLIGHT, RETRY_WAIT, RunDir, utc_now
from engine.rundir.shapes import PromptRecord, RunSummary
from engine.states import AttemptDecision, PromptState
from engine.transport.governor import Governor
from engine.transport.http import NetworkSender, Sender, SendFailed, SendTimeout, TransportSender


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

    def to_dict(self) -> dict[str, Any] | None:
        n = self.requests
        if not n or self.first_send is None or self.last_answer is None:
            return None
        parts = {
            "slot": self.slot,
            "in_flight_record": self.in_flight,
            "to_send": self.to_send,
            "round_trip": self.round_trip,
            "bookkeeping": self.bookkeeping,
        }
        parts["between_requests"] = max(0.0, self.workers - sum(parts.values()))
        return {
            "requests": n,
            "first_request_after_s": round(self.first_send - self.started, 4),
            "last_answer_after_s": round(self.last_answer - self.started, 4),
            "mean_ms": {k: round(v / n * 1000, 3) for k, v in parts.items()},
        }


class LiveRun:
    """One invocation of a live run over a run directory."""

    def __init__(
        self,
        config: LiveRunConfig,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        progress: ProgressCallback | None = None,
        control: RunControl | None = None,
        env: dict[str, str] | None = None,
        only: Iterable[str] | None = None,
    ) -> None:
        """`only`: send no prompt outside it (see Session)."""
        self._clock = _SendClock()  # first: it times the setup too
        self.config = config
        self.plan = build_plan(config)
        self.adapter: Adapter = adapter_for(self.plan.route)
        self.transport = transport
        self.progress = progress
        self.control = control or RunControl()
        if config.output_dir is None:
            raise ConfigError("--output-dir is required for a run")
        self.run_dir = RunDir(config.output_dir)
        self.session = Session(config, self.plan, self.run_dir, env=env, only=only)
        self.recorder = Recorder(self.session, self.adapter, self._emit)
        self.journal: Journal | None = None
        self.governor = Governor(config.concurrency)
        self._tracked = False  # whether the session's states follow every write
        self._write_stats: dict[str, Any] | None = None
        # in_flight records written ahead: prompt -> (attempt, path, bytes)
        self._ahead: dict[str, tuple[int, Path, bytes]] = {}
        self.tally = Tally()
        self._pace_lock = asyncio.Lock()
        self._last_start = 0.0
        self._stop_new = False

    def _emit(self, event: Event) -> None:
        if self.progress is not None:
            self.progress(event)

    # -- the loop ------------------------------------------------------------------------------
    async def run(self) -> RunResult:
        to_send = self.session.prepare()
        statuses = self.session.statuses
        sending = {r.prompt_id for r in to_send}
        self._emit(
            RunStarted(
                str(self.run_dir.path),
                self.plan.route.name,
                self.config.model,
                len(self.plan.requests),
                len(to_send),
                len(self.plan.requests) - len(to_send),
                self.plan.prompt_ids,
            )
        )
        for pid, status in statuses.items():
            if pid not in sending:
                self._emit(
                    PromptStateChanged(pid, status.state, status.attempts, status.last_error)
                )
        queue: collections.deque[PlannedRequest] = collections.deque(to_send)
        for req in to_send:
            self._emit(
                PromptStateChanged(
                    req.prompt_id, PromptState.PENDING, statuses[req.prompt_id].attempts
                )
            )
        sender = self._sender()
        self.journal = self.recorder.journal = Journal(self.run_dir.path)
        self.governor = Governor(self.config.concurrency)
        self._tracked = True
        write_failure: BaseException | None = None
        try:
            workers = [
                asyncio.create_task(self._worker(sender, queue))
                for _ in range(min(self.config.concurrency, max(1, len(to_send))))
            ]
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
                self.journal = self.recorder.journal = None
            if write_failure is not None:
                raise RunWriteError(
                    f"could not write the run's evidence to {self.run_dir.path}: "
                    f"{write_failure}; sending stopped. Free space or fix the directory, then "
                    "resume the run"
                ) from write_failure
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
            return TransportSender(
                transport, timeout_seconds=timeout, connect_timeout_seconds=connect
            )
        return NetworkSender(
            connections=self.config.concurrency,
            timeout_seconds=timeout,
            connect_timeout_seconds=connect,
        )

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

    def _in_flight_record(self, req: PlannedRequest, attempt: int) -> PromptRecord:
        return {
            "prompt_id": req.prompt_id,
            "state": IN_FLIGHT,
            "attempt": attempt,
            "attempts": attempt,
            "request_sha256": req.sha256,
            "last_error": self.session.statuses[req.prompt_id].last_error,
        }

    def _prepare_ahead(self, queue: collections.deque[PlannedRequest]) -> None:
        """Write the in_flight records of the prompts next in the queue (a round trip's worth:
        as many as may be in flight) to their temporary files, so the flushes in between make
        them durable before they are needed. It runs later than the pop that asked for it
        (Journal.later), so after a burst of pops one call catches up for all of them."""
        if self.session.reconciled is None:
            return
        statuses = self.session.reconciled.statuses
        for req in itertools.islice(queue, self.config.concurrency):
            if req.prompt_id in self._ahead:
                continue
            status = statuses[req.prompt_id]
            if status.state == PromptState.UNCERTAIN:
                continue  # its history line comes first; written the usual way
            path, data = self.run_dir.record_bytes(self._in_flight_record(req, status.attempts + 1))
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

    async def _send_prompt(self, sender: Sender, req: PlannedRequest) -> None:
        status = self.session.statuses[req.prompt_id]
        attempt = status.attempts
        if status.state == PromptState.UNCERTAIN:
            self.recorder.keep_uncertain(req, attempt)
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
                    self._emit(
                        PromptStateChanged(
                            req.prompt_id, PromptState.PENDING, attempt, status.last_error
                        )
                    )
                return
            attempt += 1
            record = self._in_flight_record(req, attempt)
            ahead = self._ahead.pop(req.prompt_id, None)
            path, data = (
                ahead[1:]
                if ahead is not None and ahead[0] == attempt
                else self.run_dir.record_bytes(record)
            )
            try:
                await self._live_journal.replace_now(path, data)
            except OSError as exc:
                self.governor.failed()
                self._live_journal.failure = self._live_journal.failure or exc
                return
            durable = time.perf_counter()
            # What a crash now would leave: the attempt's outcome is unknown.
            status.state, status.attempts = PromptState.UNCERTAIN, attempt
            self.tally.attempted_prompts.add(req.prompt_id)
            self._emit(PromptStateChanged(req.prompt_id, PromptState.IN_FLIGHT, attempt))
            self.tally.attempts += 1
            sent = time.perf_counter()
            clock.in_flight += durable - admitted
            clock.to_send += sent - durable
            if clock.first_send is None:
                clock.first_send = sent
            outcome = await self._attempt(sender, req, attempt, ticket)
            error = outcome.error
            if error is None:
                answer_at = time.perf_counter()
                self.recorder.success(req, attempt, outcome)
                clock.last_answer = answered = time.perf_counter()
                clock.requests += 1
                clock.round_trip += answer_at - sent
                clock.bookkeeping += answered - answer_at
                return
            clock.last_answer = answered = time.perf_counter()
            clock.requests += 1
            clock.round_trip += answered - sent
            status.last_error = f"{error.error_class}: {error.message}"
            give_up = not error.retryable or retries >= self.config.max_retries
            too_long = (
                error.retry_after is not None
                and error.retry_after > self.config.max_retry_after_seconds
            )
            if too_long and error.retryable:
                give_up = True
                status.last_error += (
                    f" (the provider asks to wait {error.retry_after:.0f} s, "
                    f"more than --max-retry-after-seconds; resume later "
                    "with --retry-errors)"
                )
            delay = 0.0 if give_up else backoff(self.config, retries, error.retry_after)
            decision: FailedDecision = (
                AttemptDecision.TERMINAL if give_up else AttemptDecision.RETRY
            )
            if give_up:
                group = self.recorder.failure_group(
                    req,
                    attempt,
                    outcome,
                    decision,
                    delay,
                    {**record, "state": ERROR, "last_error": status.last_error},
                )
                self.recorder.attempt_failed(req, attempt, outcome, decision)
                # Answered (its slot is free), the error not yet durable: "saving", not in flight.
                self._emit(
                    PromptStateChanged(
                        req.prompt_id, PromptState.SAVING, attempt, status.last_error
                    )
                )
                self.recorder.commit_error(
                    group,
                    status,
                    PromptStateChanged(
                        req.prompt_id, PromptState.ERROR, attempt, status.last_error
                    ),
                )
                if self.config.stop_on_error:
                    self._stop_new = True
                return
            group = self.recorder.failure_group(
                req,
                attempt,
                outcome,
                decision,
                delay,
                {**record, "state": RETRY_WAIT, "last_error": status.last_error},
            )
            # The answer is in and the slot is free: the prompt is no longer in flight.
            self.recorder.attempt_failed(req, attempt, outcome, decision)
            self._emit(
                PromptStateChanged(
                    req.prompt_id,
                    PromptState.RETRYING,
                    attempt,
                    status.last_error,
                    time.time() + delay,
                )
            )
            try:
                # The next attempt's in_flight record must not overtake this one.
                await self.recorder.commit_retry_wait(group)
            except OSError:
                return
            status.state = PromptState.PENDING
            retries += 1
            await self.control.sleep(delay)
            if self.control.stopped:
                # No next try will come: the prompt is pending again, as its record says.
                self._emit(
                    PromptStateChanged(
                        req.prompt_id, PromptState.PENDING, attempt, status.last_error
                    )
                )
                return

    async def _attempt(
        self, sender: Sender, req: PlannedRequest, attempt: int, ticket: float
    ) -> AttemptOutcome:
        """Send one request and read its answer; the governor hears how it went."""
        route, secret = self.plan.route, self.session.secret
        headers = {
            "Content-Type": "application/json",
            "User-Agent": f"pqid-tui/{__version__}",
            **route.headers,
            **self.adapter.auth_headers(route, secret),
        }
        url = self.adapter.url(route, self.config.model)
        started_utc, t0 = utc_now(), time.monotonic()
        outcome = AttemptOutcome({"started_at_utc": started_utc})
        info = outcome.info
        try:
            response = await sender.post(url, req.body_bytes, headers)
        except (SendTimeout, SendFailed) as exc:
            self.governor.failed()
            if isinstance(exc, SendTimeout):
                outcome.error = ProviderError(
                    "timeout", f"no complete reply within the timeout ({exc})", retryable=True
                )
            else:
                outcome.error = ProviderError(
                    "connection_error",
                    redact_text(str(exc), secret) or "connection failed",
                    retryable=True,
                )
            info.update(
                {
                    "latency_ms": int((time.monotonic() - t0) * 1000),
                    "finished_at_utc": utc_now(),
                    "raw": None,
                }
            )
            return outcome
        latency_ms = int((time.monotonic() - t0) * 1000)
        body = redact(response.body, secret)
        resp_headers = response.headers
        info.update({"latency_ms": latency_ms, "finished_at_utc": utc_now()})
        self.recorder.raw_body(outcome, req.prompt_id, attempt, body)
        info.update({"content_type": resp_headers.get("content-type"), "bytes": len(body)})
        self.recorder.read_reply(outcome, response.status, resp_headers, body)
        err = outcome.error
        if err is not None and err.status == 429 and err.retryable:
            long_wait = (
                err.retry_after is not None
                and err.retry_after > self.config.max_retry_after_seconds
            )
            # "limit" (the route paused and slowed) or "isolated" (only this prompt waits,
            # by its own backoff), kept in the attempt's history line.
            info["throttle"] = self.governor.throttled(
                ticket,
                err.retry_after,
                resp_headers,
                honour_pause=not long_wait,
                prompt=req.prompt_id,
            )
        else:
            self.governor.answered(ticket, resp_headers)
        return outcome

    # -- summary -------------------------------------------------------------------------------
    def write_summary(self) -> RunSummary:
        batch = self.config.batch_api
        summary = invocation_summary(
            self.config,
            self.run_dir,
            self.plan.prompt_ids,
            self.tally,
            stopped=self.control.stopped or self._stop_new,
            reconciled=self.session.reconciled if self._tracked else None,
            rate_control=None if batch else self.governor.state(),
            durable_writes=self._write_stats,
            send_path=None if batch else self._clock.to_dict(),
        )
        write_summary(self.run_dir, summary)
        return summary


async def run_live_model_async(
    config: LiveRunConfig,
    *,
    transport: httpx.AsyncBaseTransport | None = None,
    progress: ProgressCallback | None = None,
    control: RunControl | None = None,
    env: dict[str, str] | None = None,
) -> RunResult:
    """Run (or resume) a live run on the current event loop."""
    return await LiveRun(
        config, transport=transport, progress=progress, control=control, env=env
    ).run()


def run_live_model(
    config: LiveRunConfig,
    *,
    transport: httpx.AsyncBaseTransport | None = None,
    progress: ProgressCallback | None = None,
    env: dict[str, str] | None = None,
) -> RunResult:
    """Run (or resume) a live run to completion; blocking. With `recast`, then the second
    draw into `OUTPUT/recast/`, and the summary gains `stability` and `recast`."""
    return asyncio.run(
        run_with_recast(
            run_live_model_async, config, transport=transport, progress=progress, env=env
        )
    )


__all__ = [
    "LiveRun",
    "RunControl",
    "RunResult",
    "build_manifest",
    "request_record",
    "response_note",
    "run_live_model",
    "run_live_model_async",
    "summarize_run",
]
