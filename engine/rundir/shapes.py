"""The shapes of what a run directory holds: its manifest, records, JSON lines, batch state
and summary."""

from __future__ import annotations

from typing import Any, NotRequired, TypedDict


class RunManifest(TypedDict):
    """run-manifest.json: what was asked, written once when the run directory is created.

    Read back (RunDir.read_manifest) only `format` is checked; the readers take the other keys
    with `.get`. The parts that make a run one contract are the ones Plan.identity gives.
    """

    format: str  # "pqid-run/1"
    kind: str  # "live_replication"
    created_at_utc: str
    tool: dict[str, str]  # name, version
    environment: dict[str, str]  # pqid_tui, python, httpx, platform
    release: dict[str, Any]  # name, version, digest, modified, prompt counts, absent files
    publishable: bool  # false on a modified release
    route: dict[str, Any]  # provider, adapter, base_url, auth, credential_env, header names
    model: str
    selection: dict[str, Any]  # split, limit, prompt_ids_filter, count, prompt_ids_sha256
    selected_prompt_ids: list[str]
    request_set_sha256: str
    generation_contract: dict[str, Any]  # the settings that shape every request body
    generation_contract_preset: str | None  # "pqid-bench" or None
    credential_source: str  # where the credential came from; "none" without one
    contacts_provider: bool  # false on the oracle route
    send_mode: str  # "live" or "batch-api"
    target_metadata_exported: bool  # always false: only the prompts' messages are sent


class PromptRecord(TypedDict):
    """records/<id>.json: where one prompt stands, the source of truth for resume.

    Read back (RunDir.read_record) only `prompt_id`, `state`, `attempt` and `attempts` are
    checked; the readers take the other keys with `.get`.
    """

    prompt_id: str
    state: str  # a RecordState value: the writers pass the member, a read gives the string
    attempt: int
    attempts: int
    request_sha256: str
    last_error: str | None
    finish_reason: NotRequired[str | None]  # success records
    batch_id: NotRequired[str | None]  # the Batch API path: in_flight and error records
    recovered: NotRequired[bool]  # a success settled by reconcile after a crash
    updated_at_utc: NotRequired[str]  # stamped by RunDir.record_bytes when written


class RequestLine(TypedDict):
    """One line of requests.jsonl: the exact, credential-free body and its SHA-256."""

    prompt_id: str
    request_sha256: str
    body: dict[str, Any]  # the provider's request body, exactly as sent
    study: NotRequired[dict[str, str]]  # PQID-Bench releases: the frozen study's identities


class AttemptInfo(TypedDict, total=False):
    """The keys of an attempt's line that not every attempt has. The sender fills the first
    ones as the attempt goes (AttemptOutcome.info, the first keys of the line); the recorder
    adds a failure's, reconcile a recovered line's. One class, not three, so that an info can
    be spread into an AttemptLine."""

    started_at_utc: str | None
    finished_at_utc: str | None
    latency_ms: int | None  # None on the Batch API path
    raw: str | None  # the raw body's name under raw/, when there was an answer
    content_type: str | None
    bytes: int
    throttle: str  # a 429: "limit" or "isolated" (Governor.throttled)
    batch_id: str | None
    batch_request_id: str | None  # the batch output line's `id`, copied unchecked
    retry_after_s: float | None  # failed attempts: what the provider asked for
    backoff_s: float | None  # failed attempts: the delay before the retry
    recovered: bool  # put back by reconcile from its response line


class AttemptLine(AttemptInfo):
    """One line of provider-attempts.jsonl: every attempt, with its retry decision."""

    prompt_id: str
    attempt: int
    status: int | None  # the HTTP status, when there was an answer
    error_class: str | None
    error: str | None
    decision: str  # an AttemptDecision value: the writers pass the member, a read the string
    request_sha256: str


class Extraction(TypedDict):
    method: str  # "fenced", "raw" or "none"
    prose_removed: bool


class ResponseLine(TypedDict):
    """One line of responses.jsonl: a canonical response, what replay reads."""

    prompt_id: str
    provider: str
    adapter: str
    model: str
    returned_model: str | None
    content: str | None
    generated_code: str
    extraction: Extraction
    model_check: str
    model_redirected: bool
    finish_reason: str | None
    provider_finish_reason: str | None
    usage: dict[str, Any] | None  # token counts as the adapter normalised them, and the rest
    request_sha256: str
    request_id: str | None
    created_at_utc: str | None
    attempt: int
    latency_ms: int | None
    http_status: int | None
    raw: str | None


class BatchStatusChange(TypedDict):
    """One entry of the batch state's `status_history`."""

    status: str
    at_utc: str
    request_counts: dict[str, int]  # total, completed, failed


class BatchState(TypedDict, total=False):
    """batch-state.json (engine.run.batch), which grows phase by phase. A new batch writes
    every key from `format` to `previous_batches`; the later phases add theirs (`creating`:
    creating_at_unix; `created`: adopted; `ended`: ended_at_utc; `materialised`:
    materialised_at_utc) and every save stamps `updated_at_utc`. Read back only `format`,
    `phase` and `prompt_ids` are checked. Not total, so that a save's changes are one too."""

    format: str
    seq: int
    phase: str
    input_file: str
    input_sha256: str
    input_bytes: int
    prompt_ids: list[str]
    attempts: dict[str, int]  # prompt -> the attempt number this batch is
    token: str  # the idempotency token in the batch's metadata
    input_file_id: str | None
    batch_id: str | None
    status: str | None
    status_history: list[BatchStatusChange]
    request_counts: dict[str, int] | None
    output_file_id: str | None
    error_file_id: str | None
    output_file: str | None
    output_sha256: str | None
    error_file: str | None
    error_sha256: str | None
    batch_errors: list[str] | None
    created_at_utc: str
    previous_batches: list[BatchState]  # the earlier batches' states, without this key
    updated_at_utc: str
    creating_at_unix: float
    adopted: bool
    batch_created_at_utc: str | None
    ended_at_utc: str
    materialised_at_utc: str


class RunCounts(TypedDict):
    """The part of run-summary.json read back from the run directory (summarize_run): counts
    over the selected prompts. `success`, `error`, `pending` and `uncertain` count the prompts
    in that PromptState."""

    run_dir: str
    selected: int
    success: int
    error: int
    pending: int
    uncertain: int
    complete: bool  # every selected prompt is a success or an error
    total_attempts: int  # lines of provider-attempts.jsonl, every invocation's
    empty_responses: int
    no_code_extracted: int
    finish_reasons: dict[str, int]  # finish reason (or "None") -> responses
    returned_models: dict[str, int]  # the model that answered (or "None") -> responses
    model_checks: dict[str, int]  # "exact", "alias", "redirected", ... -> responses
    redirected_prompts: list[str]
    truncated_prompts: list[str]  # finish reason "length"
    empty_prompts: list[str]
    usage: dict[str, int]  # prompt_tokens, completion_tokens, total_tokens summed
    cost: dict[str, Any] | None  # USD spent at the price table's rates (prices.spent)
    errors: dict[str, str | None]  # each error prompt's last error
    updated_at_utc: str


class RunSummary(RunCounts):
    """run-summary.json (RunResult.summary, RunFinished.summary): the run's counts, what this
    invocation did and how its sending went."""

    attempted: int  # prompts this invocation sent a request for
    requests_sent: int  # this invocation's requests
    skipped: int  # selected prompts this invocation sent nothing for
    stopped: bool  # stopped before the end (a stop, --stop-on-error)
    elapsed_seconds: float  # this invocation's wall time
    rate_control: dict[str, Any] | None  # the governor's state (Governor.state); None in a batch
    durable_writes: dict[str, Any] | None  # the journal's figures (Journal.stats); None in a batch
    send_path: dict[str, Any] | None  # where the senders' time went; None in a batch
    batch: NotRequired[dict[str, Any]]  # the Batch API path, once it has a batch: its ids, phase
    recast: NotRequired[RunSummary]  # --recast: the second draw's summary
    stability: NotRequired[dict[str, Any]]  # --recast: how many responses changed (recast.py)


__all__ = [
    "AttemptInfo",
    "AttemptLine",
    "BatchState",
    "BatchStatusChange",
    "Extraction",
    "PromptRecord",
    "RequestLine",
    "ResponseLine",
    "RunCounts",
    "RunManifest",
    "RunSummary",
]
