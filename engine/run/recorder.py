"""From a provider's answer to a run directory's evidence: the one place that reads a reply.

Both sending strategies hand every attempt's outcome here. The recorder parses the reply,
checks the model that answered (and applies --require-exact-model), and writes the
evidence: the raw body, the canonical response, the attempt line and the prompt's record.
While the live sender runs, the writes go through its journal as one group each, durable in
the order the durability rule asks (raw body, then the response and attempt lines, then the
record); without a journal (the Batch API path) they are written one by one, in that order.
"""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, TypeAlias

from engine.errors import ProviderError
from engine.events import AttemptFinished, Event, PromptStateChanged
from engine.providers.adapters import Adapter, Reply
from engine.providers.model_identity import check_model
from engine.run.plan import PlannedRequest
from engine.run.session import Session
from engine.run.summary import response_note
from engine.rundir.journal import Group, Journal
from engine.rundir.records import ERROR, SUCCESS, PromptStatus, RunDir, utc_now
from engine.rundir.shapes import AttemptInfo, AttemptLine, PromptRecord, ResponseLine
from engine.states import AttemptDecision, PromptState
from evaluator.extract import extract_code

# A failed attempt's decision: another attempt, or none.
FailedDecision: TypeAlias = Literal[AttemptDecision.RETRY, AttemptDecision.TERMINAL]


def redact(data: bytes, secret: str | None) -> bytes:
    """`data` with the credential replaced (a provider may echo it back in an error body)."""
    if secret and secret.encode() in data:
        return data.replace(secret.encode(), b"[REDACTED]")
    return data


def redact_text(text: str | None, secret: str | None) -> str | None:
    if text and secret and secret in text:
        return text.replace(secret, "[REDACTED]")
    return text


@dataclass(slots=True)
class AttemptOutcome:
    """What one attempt came to: its history fields (`info`: times, latency, raw body's name,
    ...), the raw body to keep, and either the parsed reply or the error."""

    info: AttemptInfo = field(default_factory=AttemptInfo)
    raw: tuple[Path, bytes] | None = None  # where the raw body goes and its (redacted) bytes
    status: int | None = None  # the HTTP status of the answer, when there was one
    reply: Reply | None = None
    model_check: str = "not_checked"
    error: ProviderError | None = None

    @property
    def latency_ms(self) -> int:
        return int(self.info.get("latency_ms") or 0)


class Recorder:
    """Turns attempt outcomes into evidence in the session's run directory."""

    def __init__(self, session: Session, adapter: Adapter, emit: Callable[[Event], None]) -> None:
        self.session = session
        self.config = session.config
        self.plan = session.plan
        self.run_dir = session.run_dir
        self.adapter = adapter
        self.emit = emit
        # While the live sender runs: every write goes through it, in groups.
        self.journal: Journal | None = None

    # -- reading a reply -----------------------------------------------------------------------
    def raw_body(self, outcome: AttemptOutcome, prompt_id: str, attempt: int, body: bytes) -> None:
        """Name the raw body of an answer and keep it with the outcome, for its evidence."""
        is_json = True
        try:
            json.loads(body)
        except (UnicodeDecodeError, json.JSONDecodeError):
            is_json = False
        name = self.run_dir.raw_name(prompt_id, attempt, is_json)
        outcome.info["raw"] = name
        outcome.raw = (self.run_dir.path / name, body)

    def read_reply(
        self, outcome: AttemptOutcome, status: int, headers: dict[str, str], body: bytes
    ) -> AttemptOutcome:
        """Parse an answer into `outcome.reply` (and its model check) or `outcome.error`."""
        outcome.status = status
        model = self.config.model
        try:
            reply = self.adapter.parse(status, headers, body)
            model_check = check_model(model, reply.returned_model)
            if model_check == "redirected" and self.config.require_exact_model:
                raise ProviderError(
                    "model_redirected",
                    f"asked for {model!r}, the provider answered "
                    f"with {reply.returned_model!r} (--require-exact-model)",
                    retryable=False,
                    status=status,
                )
        except ProviderError as err:
            outcome.error = err
            return outcome
        outcome.reply, outcome.model_check = reply, model_check
        return outcome

    # -- history lines -------------------------------------------------------------------------
    def keep_uncertain(self, req: PlannedRequest, attempt: int) -> None:
        """Keep an interrupted attempt in the history before drawing again."""
        self.run_dir.append_attempt(
            {
                "prompt_id": req.prompt_id,
                "attempt": attempt,
                "started_at_utc": None,
                "finished_at_utc": utc_now(),
                "latency_ms": None,
                "status": None,
                "error_class": PromptState.UNCERTAIN,
                "decision": AttemptDecision.UNCERTAIN,
                "error": "in flight when an earlier run stopped; resent with --retry-uncertain",
                "request_sha256": req.sha256,
                "raw": None,
            }
        )

    def attempt_line(
        self,
        req: PlannedRequest,
        attempt: int,
        outcome: AttemptOutcome,
        decision: FailedDecision,
        delay: float,
    ) -> AttemptLine:
        """A failed attempt's line of provider-attempts.jsonl."""
        error = outcome.error
        assert error is not None
        return {
            **outcome.info,
            "prompt_id": req.prompt_id,
            "attempt": attempt,
            "status": error.status,
            "error_class": error.error_class,
            "error": redact_text(error.message, self.session.secret),
            "decision": decision,
            "retry_after_s": error.retry_after,
            "backoff_s": round(delay, 3) if decision == AttemptDecision.RETRY else None,
            "request_sha256": req.sha256,
        }

    def attempt_failed(
        self, req: PlannedRequest, attempt: int, outcome: AttemptOutcome, decision: FailedDecision
    ) -> None:
        error = outcome.error
        assert error is not None
        self.emit(
            AttemptFinished(
                req.prompt_id,
                attempt,
                error.status,
                outcome.latency_ms,
                error.error_class,
                decision,
            )
        )

    # -- a failure -----------------------------------------------------------------------------
    def failure_group(
        self,
        req: PlannedRequest,
        attempt: int,
        outcome: AttemptOutcome,
        decision: FailedDecision,
        delay: float,
        record: PromptRecord,
    ) -> Group:
        """The writes of a failed attempt, for the journal: its line, the raw body of a
        completed reply (kept as evidence) and the record (`error` or `retry_wait`)."""
        group = Group().append(
            self.run_dir.attempts_path,
            RunDir.line_bytes(self.attempt_line(req, attempt, outcome, decision, delay)),
        )
        if outcome.raw is not None:
            group.create(*outcome.raw)
        group.replace(*self.run_dir.record_bytes(record))
        return group

    def failed_now(
        self, req: PlannedRequest, attempt: int, outcome: AttemptOutcome, record: PromptRecord
    ) -> None:
        """Record a terminal failure at once, without the journal (the Batch API path)."""
        assert record["state"] == ERROR
        if outcome.raw is not None:
            name = outcome.info["raw"]
            assert name is not None  # raw_body names the body whenever it keeps one
            self.run_dir.write_raw(name, outcome.raw[1])
        line = self.attempt_line(req, attempt, outcome, AttemptDecision.TERMINAL, 0.0)
        self.run_dir.append_attempt(line)
        self.attempt_failed(req, attempt, outcome, AttemptDecision.TERMINAL)
        self.run_dir.write_record(record)
        self.emit(
            PromptStateChanged(req.prompt_id, PromptState.ERROR, attempt, record["last_error"])
        )

    # -- a success -----------------------------------------------------------------------------
    def success(self, req: PlannedRequest, attempt: int, outcome: AttemptOutcome) -> None:
        """Record a parsed reply: at once without a journal, else once the requests waiting
        for their in_flight records are on their way."""
        reply, status = outcome.reply, outcome.status
        assert reply is not None and status is not None
        note = response_note(
            {
                "finish_reason": reply.finish_reason,
                "content": reply.content,
                "model_redirected": outcome.model_check == "redirected",
                "returned_model": reply.returned_model,
            }
        )
        self.emit(
            AttemptFinished(
                req.prompt_id,
                attempt,
                status,
                outcome.info["latency_ms"],
                None,
                AttemptDecision.SUCCESS,
                reply.usage,
            )
        )
        if self.journal is None:
            self._write_success(req, attempt, outcome, note)
            return
        # The answer is in and its slot free; "success" follows once its evidence is durable.
        self.emit(PromptStateChanged(req.prompt_id, PromptState.SAVING, attempt, note=note))
        # Written up once the requests waiting for their in_flight records are on their way
        # (Journal.later): none of them waits behind this answer's bookkeeping.
        self.journal.later(functools.partial(self._write_success, req, attempt, outcome, note))

    def _write_success(
        self, req: PlannedRequest, attempt: int, outcome: AttemptOutcome, note: str | None
    ) -> None:
        reply, info, status = outcome.reply, outcome.info, outcome.status
        assert reply is not None
        model_check = outcome.model_check
        extraction = extract_code(reply.content)
        response: ResponseLine = {
            "prompt_id": req.prompt_id,
            "provider": self.plan.route.name,
            "adapter": self.plan.route.adapter,
            "model": self.config.model,
            "returned_model": reply.returned_model,
            "content": reply.content,
            "generated_code": extraction.code,
            "extraction": {"method": extraction.method, "prose_removed": extraction.prose_removed},
            "model_check": model_check,
            "model_redirected": model_check == "redirected",
            "finish_reason": reply.finish_reason,
            "provider_finish_reason": reply.provider_finish_reason,
            "usage": reply.usage,
            "request_sha256": req.sha256,
            "request_id": reply.request_id,
            "created_at_utc": info["finished_at_utc"],
            "attempt": attempt,
            "latency_ms": info["latency_ms"],
            "http_status": status,
            "raw": info["raw"],
        }
        attempt_line: AttemptLine = {
            **info,
            "prompt_id": req.prompt_id,
            "attempt": attempt,
            "status": status,
            "error_class": None,
            "error": None,
            "decision": AttemptDecision.SUCCESS,
            "request_sha256": req.sha256,
        }
        record: PromptRecord = {
            "prompt_id": req.prompt_id,
            "state": SUCCESS,
            "attempt": attempt,
            "attempts": attempt,
            "request_sha256": req.sha256,
            "last_error": None,
            "finish_reason": reply.finish_reason,
        }

        def durable() -> None:
            if self.session.reconciled is not None:
                settled = self.session.reconciled.statuses[req.prompt_id]
                settled.state, settled.last_error = PromptState.SUCCESS, None
            self.emit(PromptStateChanged(req.prompt_id, PromptState.SUCCESS, attempt, note=note))

        if self.journal is None:
            if outcome.raw is not None:
                name = info["raw"]
                assert name is not None  # raw_body names the body whenever it keeps one
                self.run_dir.write_raw(name, outcome.raw[1])
            self.run_dir.append_response(response)
            self.run_dir.append_attempt(attempt_line)
            self.run_dir.write_record(record)
            durable()
            return
        # One group, durable in this order: the raw body, the response and the attempt lines,
        # and only then the record that says success.
        group = Group()
        if outcome.raw is not None:
            group.create(*outcome.raw)
        group.append(self.run_dir.responses_path, RunDir.line_bytes(response))
        group.append(self.run_dir.attempts_path, RunDir.line_bytes(attempt_line))
        group.replace(*self.run_dir.record_bytes(record))
        self.journal.commit_later(group, durable)

    # -- through the journal -------------------------------------------------------------------
    def commit_error(self, group: Group, status: PromptStatus, event: Event) -> None:
        """Commit a terminal failure's group; the prompt is settled once it is durable."""
        assert self.journal is not None

        def settled() -> None:
            status.state = PromptState.ERROR
            self.emit(event)

        self.journal.commit_later(group, settled)

    def commit_retry_wait(self, group: Group) -> asyncio.Task[None]:
        """Commit a retried failure's group; await it before the next attempt's in_flight
        record, which must not overtake it."""
        assert self.journal is not None
        return self.journal.commit_later(group)


__all__ = ["AttemptOutcome", "FailedDecision", "Recorder", "redact", "redact_text"]
