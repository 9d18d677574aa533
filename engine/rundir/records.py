"""The run directory: its seven artifacts, the per-prompt records and the resume reconciliation."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, cast

from engine.errors import InputError, ResumeRefused
from engine.rundir.layout import ATTEMPTS, MANIFEST, RAW, RECORDS, REQUESTS, RESPONSES, SUMMARY
from engine.rundir.shapes import (
    AttemptLine,
    PromptRecord,
    RequestLine,
    ResponseLine,
    RunManifest,
    RunSummary,
)
from engine.rundir.storage import (
    TEMPORARY_GLOB,
    append_jsonl,
    atomic_write_bytes,
    atomic_write_json,
    canonical_json,
    read_jsonl,
    repair_torn_tail,
)
from engine.states import AttemptDecision, PromptState, RecordState

RUN_FORMAT = "pqid-run/1"

# Record states on disk (engine.states). "uncertain" is never written: it is what "in_flight"
# means after a crash.
IN_FLIGHT, RETRY_WAIT = RecordState.IN_FLIGHT, RecordState.RETRY_WAIT
SUCCESS, ERROR = RecordState.SUCCESS, RecordState.ERROR
_UNSAFE = re.compile(r"[^A-Za-z0-9_.:-]")


def utc_now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _file_stem(prompt_id: str) -> str:
    return _UNSAFE.sub("_", prompt_id)


@dataclass(slots=True)
class PromptStatus:
    """A prompt's state as reconciled from its record, the attempt log and the responses."""

    prompt_id: str
    state: PromptState  # pending, success, error or uncertain
    attempts: int = 0
    last_error: str | None = None
    record: PromptRecord | None = None


@dataclass(slots=True)
class Reconciled:
    """Everything resume needs to know about an existing run directory."""

    statuses: dict[str, PromptStatus] = field(default_factory=dict)
    response_ids: set[str] = field(default_factory=set)
    repaired: list[str] = field(default_factory=list)

    def by_state(self, state: PromptState) -> list[str]:
        return [pid for pid, s in self.statuses.items() if s.state == state]


class RunDir:
    """One run per directory; every write here is atomic or an fsynced append."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.manifest_path = self.path / MANIFEST
        self.requests_path = self.path / REQUESTS
        self.responses_path = self.path / RESPONSES
        self.attempts_path = self.path / ATTEMPTS
        self.records_dir = self.path / RECORDS
        self.raw_dir = self.path / RAW
        self.summary_path = self.path / SUMMARY

    # -- creation and identity -------------------------------------------------------------
    def is_nonempty(self) -> bool:
        return self.path.is_dir() and any(self.path.iterdir())

    def create(self, manifest: RunManifest, requests: list[RequestLine]) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        self.records_dir.mkdir(exist_ok=True)
        self.raw_dir.mkdir(exist_ok=True)
        atomic_write_json(self.manifest_path, manifest)
        self.write_requests(requests)

    def write_requests(self, requests: list[RequestLine]) -> None:
        atomic_write_bytes(
            self.requests_path, b"".join(canonical_json(r) + b"\n" for r in requests)
        )

    def ensure_layout(self) -> None:
        self.records_dir.mkdir(exist_ok=True)
        self.raw_dir.mkdir(exist_ok=True)

    def read_manifest(self) -> RunManifest:
        try:
            data = json.loads(self.manifest_path.read_bytes())
        except FileNotFoundError:
            raise ResumeRefused(
                f"{self.path}: not a run directory (no {MANIFEST}); choose an "
                "empty or new --output-dir"
            ) from None
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ResumeRefused(f"{self.manifest_path}: not valid JSON ({exc})") from None
        if not isinstance(data, dict) or data.get("format") != RUN_FORMAT:
            raise ResumeRefused(f"{self.manifest_path}: not a {RUN_FORMAT} run manifest")
        return cast(RunManifest, data)

    # -- records -------------------------------------------------------------------------------
    def record_path(self, prompt_id: str) -> Path:
        return self.records_dir / f"{_file_stem(prompt_id)}.json"

    def write_record(self, record: PromptRecord) -> None:
        atomic_write_bytes(*self.record_bytes(record))

    def record_bytes(self, record: PromptRecord) -> tuple[Path, bytes]:
        """Where a record goes and its bytes, stamped with the time of writing."""
        record = {**record, "updated_at_utc": utc_now()}
        # Compact, not indented: written twice per request, and the compact form is encoded in
        # C (an indented dump is pure Python, 0.2 ms a record).
        return self.record_path(record["prompt_id"]), canonical_json(record) + b"\n"

    def read_record(self, prompt_id: str) -> PromptRecord | None:
        path = self.record_path(prompt_id)
        try:
            data = json.loads(path.read_bytes())
        except FileNotFoundError:
            return None
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise InputError(
                f"{path}: corrupt record ({exc}); it was not written by pqid-tui's "
                "atomic writer. Move it aside and resume with --retry-uncertain "
                "to resend that prompt"
            ) from None
        if not isinstance(data, dict) or data.get("prompt_id") != prompt_id:
            raise InputError(f"{path}: record does not belong to prompt {prompt_id!r}")
        if data.get("state") not in (IN_FLIGHT, RETRY_WAIT, SUCCESS, ERROR) or not all(
            isinstance(data.get(k, 0), int) and not isinstance(data.get(k, 0), bool)
            for k in ("attempt", "attempts")
        ):
            raise InputError(
                f"{path}: not a record pqid-tui wrote (unknown state or attempt "
                "count); move it aside and resume with --retry-uncertain"
            )
        return cast(PromptRecord, data)

    # -- append-only logs ----------------------------------------------------------------------
    def append_attempt(self, attempt: AttemptLine) -> None:
        append_jsonl(self.attempts_path, attempt)

    def append_response(self, response: ResponseLine) -> None:
        append_jsonl(self.responses_path, response)

    @staticmethod
    def line_bytes(obj: ResponseLine | AttemptLine) -> bytes:
        """One line of responses.jsonl or provider-attempts.jsonl."""
        return canonical_json(obj) + b"\n"

    def raw_name(self, prompt_id: str, attempt: int, is_json: bool) -> str:
        return f"{RAW}/{_file_stem(prompt_id)}.attempt-{attempt}.{'json' if is_json else 'txt'}"

    def write_raw(self, name: str, body: bytes) -> None:
        atomic_write_bytes(self.path / name, body)

    def read_attempts(self) -> list[AttemptLine]:
        rows = self._read_log(self.attempts_path)
        for number, obj in rows:
            if not isinstance(obj.get("attempt"), int) or isinstance(obj.get("attempt"), bool):
                raise InputError(f"{self.attempts_path}:{number}: attempt is not a number")
        # Checked: each line is an object with a prompt_id and a numeric attempt.
        return [cast(AttemptLine, obj) for _, obj in rows]

    def read_responses(self) -> list[ResponseLine]:
        # Checked (_read_log): each line is an object with a prompt_id.
        return [cast(ResponseLine, obj) for _, obj in self._read_log(self.responses_path)]

    def _read_log(self, path: Path) -> list[tuple[int, dict[str, Any]]]:
        try:
            rows = list(read_jsonl(path))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise InputError(f"{path}: a line is not JSON ({exc})") from None
        for number, obj in rows:
            if not isinstance(obj, dict) or not isinstance(obj.get("prompt_id"), str):
                raise InputError(f"{path}:{number}: not a record with a prompt_id")
        return rows

    def write_summary(self, summary: RunSummary) -> None:
        atomic_write_json(self.summary_path, summary)

    # -- resume ----------------------------------------------------------------------------------
    def reconcile(
        self, prompt_ids: list[str] | tuple[str, ...], *, repair: bool = True
    ) -> Reconciled:
        """Read the run back after any crash and say where each prompt stands.

        An append that a crash cut short is removed first. A record still `in_flight` is
        settled from the logs when they show the outcome (the crash came after the attempt or
        the response was written); only an attempt with no outcome anywhere is uncertain.
        """
        if repair:
            # Validate everything read-only first: a corrupt file must change nothing.
            self.reconcile(prompt_ids, repair=False)
        out = Reconciled()
        if repair:
            # A kill between writing a temporary file and renaming it leaves the temporary
            # file behind; the real file still holds the previous complete version.
            for folder in (self.path, self.records_dir, self.raw_dir):
                for tmp in folder.glob(TEMPORARY_GLOB) if folder.is_dir() else ():
                    tmp.unlink(missing_ok=True)
                    out.repaired.append(f"removed {tmp.name}")
            for path in (self.attempts_path, self.responses_path):
                if repair_torn_tail(path):
                    out.repaired.append(path.name)
        responses: dict[str, ResponseLine] = {}
        for obj in self.read_responses():
            responses.setdefault(obj["prompt_id"], obj)
        out.response_ids = set(responses)
        attempts = self.read_attempts()
        logged_keys = {(a["prompt_id"], a.get("attempt")) for a in attempts}
        for pid, resp in responses.items():
            # The response is appended before its attempt line: a crash between the two
            # leaves a success whose attempt is missing from the history. Put it back.
            if (pid, resp.get("attempt")) not in logged_keys and repair:
                recovered: AttemptLine = {
                    "prompt_id": pid,
                    "attempt": resp.get("attempt"),
                    "started_at_utc": None,
                    "finished_at_utc": resp.get("created_at_utc"),
                    "latency_ms": resp.get("latency_ms"),
                    "status": resp.get("http_status"),
                    "error_class": None,
                    "error": None,
                    "decision": AttemptDecision.SUCCESS,
                    "request_sha256": resp.get("request_sha256"),
                    "raw": resp.get("raw"),
                    "recovered": True,
                }
                self.append_attempt(recovered)
                attempts.append(recovered)
                out.repaired.append(f"attempt {resp.get('attempt')} of {pid}")
        last_attempt: dict[str, AttemptLine] = {}
        for line in attempts:
            pid = line["prompt_id"]
            if pid not in last_attempt or line.get("attempt", 0) >= last_attempt[pid].get(
                "attempt", 0
            ):
                last_attempt[pid] = line
        for pid in prompt_ids:
            record = self.read_record(pid)
            logged = last_attempt.get(pid)
            n_attempts = max(
                int(record.get("attempts", 0)) if record else 0,
                int(logged.get("attempt", 0)) if logged else 0,
            )
            last_error = record.get("last_error") if record else None
            if pid in responses:
                state = PromptState.SUCCESS
                if repair and (record is None or record.get("state") != SUCCESS):
                    # Killed after the response line, before the record said so: settle it.
                    resp = responses[pid]
                    record = {
                        "prompt_id": pid,
                        "state": SUCCESS,
                        "attempt": resp.get("attempt", n_attempts),
                        "attempts": n_attempts,
                        "request_sha256": resp.get("request_sha256"),
                        "last_error": None,
                        "finish_reason": resp.get("finish_reason"),
                        "recovered": True,
                    }
                    self.write_record(record)
                    out.repaired.append(f"record of {pid}")
            elif record is None:
                state = PromptState.PENDING
            elif record["state"] == SUCCESS:
                # A success record without its response line cannot be written by the runner
                # (the response is appended first); treat it as needing a resend.
                state = PromptState.PENDING
            elif record["state"] == ERROR:
                state = PromptState.ERROR
            elif record["state"] == RETRY_WAIT:
                state = PromptState.PENDING
            elif logged is not None and int(logged.get("attempt", 0)) >= int(
                record.get("attempt", 0)
            ):
                terminal = logged.get("decision") == AttemptDecision.TERMINAL
                state = PromptState.ERROR if terminal else PromptState.PENDING
                last_error = logged.get("error") or last_error
            else:
                state = PromptState.UNCERTAIN
            out.statuses[pid] = PromptStatus(pid, state, n_attempts, last_error, record)
        return out


def check_same_contract(existing: Mapping[str, Any], new: Mapping[str, Any]) -> None:
    """Refuse a resume whose identity differs from the run directory's manifest."""
    fields = [
        ("release digest", ("release", "digest")),
        ("route provider", ("route", "provider")),
        ("route adapter", ("route", "adapter")),
        ("route base URL", ("route", "base_url")),
        ("model", ("model",)),
        ("generation contract", ("generation_contract",)),
        ("selected prompt IDs", ("selection", "prompt_ids_sha256")),
        ("request-set digest", ("request_set_sha256",)),
    ]
    for label, path in fields:
        a: Any = existing
        b: Any = new
        for key in path:
            a = a.get(key) if isinstance(a, dict) else None
            b = b.get(key) if isinstance(b, dict) else None
        if a != b:
            shown_a = json.dumps(a, sort_keys=True)[:120]
            shown_b = json.dumps(b, sort_keys=True)[:120]
            raise ResumeRefused(
                f"cannot resume: the {label} differs from the run directory's manifest "
                f"(run dir: {shown_a}; now: {shown_b}). One run directory is one contract: "
                "use a new --output-dir for a different run"
            )
