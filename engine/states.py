"""The one vocabulary of states: a prompt's state in a run, a record's state on disk, and
what became of each provider attempt.

All are `str` enums: a member equals its string, hashes like it, prints as it and is
written to JSON as it, so the run directory's bytes are what they were with bare strings.
"""

from __future__ import annotations

from enum import Enum


class _StrState(str, Enum):
    # Without these an f-string or str() would give "PromptState.SUCCESS", not "success".
    def __str__(self) -> str:
        return str.__str__(self)

    def __format__(self, format_spec: str) -> str:
        return str.__format__(self, format_spec)


class PromptState(_StrState):
    """Where a prompt stands in a run: what the grid shows and the progress events carry.

    "saving": answered (its request slot is free again), its evidence being written; "success"
    or "error" follows once that is durable. A prompt is "in_flight" only while its request is
    outstanding, so never more prompts are in flight than the concurrency allows. "uncertain"
    is an attempt that was in flight when a run stopped: the provider may have answered it.
    """

    PENDING = "pending"
    IN_FLIGHT = "in_flight"
    SAVING = "saving"
    RETRYING = "retrying"
    SUCCESS = "success"
    ERROR = "error"
    UNCERTAIN = "uncertain"
    SKIPPED = "skipped"


class RecordState(_StrState):
    """The state a prompt's record on disk holds. "uncertain" is never written: it is what
    "in_flight" means when a run is read back after a crash."""

    IN_FLIGHT = "in_flight"
    RETRY_WAIT = "retry_wait"
    SUCCESS = "success"
    ERROR = "error"


class AttemptDecision(_StrState):
    """What became of one provider attempt (its line of provider-attempts.jsonl): answered,
    to be tried again, given up, or "uncertain": in flight when an earlier run stopped, and
    sent again with --retry-uncertain."""

    SUCCESS = "success"
    RETRY = "retry"
    TERMINAL = "terminal"
    UNCERTAIN = "uncertain"


__all__ = ["AttemptDecision", "PromptState", "RecordState"]
