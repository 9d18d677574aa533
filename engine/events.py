"""Typed progress events: what the batch mode prints and what the app shows.

A progress callback receives these objects, one at a time, on the engine's own thread or loop.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

from engine.rundir.shapes import RunSummary
from engine.states import AttemptDecision, PromptState

# The states a PromptStateChanged carries and an AttemptFinished's decision: one vocabulary,
# engine.states.


@dataclass(frozen=True, slots=True)
class RunStarted:
    """A run began: how many prompts are selected, to be sent now, and skipped by resume."""

    run_dir: str
    provider: str
    model: str
    selected: int
    to_send: int
    skipped: int
    prompt_ids: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class PromptStateChanged:
    """One prompt moved to a new state (the grid's unit of change)."""

    prompt_id: str
    state: PromptState
    attempt: int = 0
    error: str | None = None
    next_attempt_at: float | None = None  # unix time of the next attempt when retrying
    note: str | None = None  # on success: "truncated", "empty", "redirected to M", joined


@dataclass(frozen=True, slots=True)
class AttemptFinished:
    """One HTTP attempt ended, with its outcome and the retry decision taken."""

    prompt_id: str
    attempt: int
    status: int | None
    latency_ms: int | None  # None on the Batch API path
    error_class: str | None
    decision: Literal[AttemptDecision.SUCCESS, AttemptDecision.RETRY, AttemptDecision.TERMINAL]
    usage: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class RunFinished:
    """A run ended (completed, stopped or interrupted); `summary` is run-summary.json."""

    summary: RunSummary


@dataclass(frozen=True, slots=True)
class BatchPolled:
    """An OpenAI batch was polled: its status and request counts."""

    batch_id: str
    status: str
    total: int
    completed: int
    failed: int


@dataclass(frozen=True, slots=True)
class ImageBuildLog:
    """One line of the evaluator image build."""

    line: str


@dataclass(frozen=True, slots=True)
class ImageReady:
    """The evaluator image exists under `tag` (`built` says whether this call built it)."""

    tag: str
    built: bool


@dataclass(frozen=True, slots=True)
class EvaluationStarted:
    """The evaluator began one prompt."""

    prompt_id: str
    index: int
    total: int


@dataclass(frozen=True, slots=True)
class EvaluationFinished:
    """The evaluator scored one prompt."""

    prompt_id: str
    category: str
    index: int
    total: int


@dataclass(frozen=True, slots=True)
class ReplayFinished:
    """A replay ended and wrote its outputs under `output_dir`."""

    output_dir: str
    counts: dict[str, int] = field(default_factory=dict)


Event: TypeAlias = (
    RunStarted
    | PromptStateChanged
    | AttemptFinished
    | RunFinished
    | BatchPolled
    | ImageBuildLog
    | ImageReady
    | EvaluationStarted
    | EvaluationFinished
    | ReplayFinished
)
ProgressCallback: TypeAlias = Callable[[Event], None]
