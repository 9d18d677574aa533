"""run-summary.json: the counts read back from a run directory, and what one invocation did."""

from __future__ import annotations

import contextlib
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from engine.config import LiveRunConfig
from engine.errors import ConfigError
from engine.release.prices import PriceTable, load_prices, spent
from engine.rundir.records import Reconciled, RunDir, utc_now
from engine.rundir.shapes import RunCounts, RunSummary
from engine.states import PromptState


@dataclass
class Tally:
    """What this invocation sent: its requests, and the prompts they were for."""

    attempts: int = 0
    attempted_prompts: set[str] = field(default_factory=set)
    started: float = field(default_factory=time.time)


def response_note(response: Mapping[str, Any]) -> str | None:
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


def summarize_run(
    run_dir: RunDir,
    prompt_ids: tuple[str, ...] | list[str],
    *,
    repair: bool = False,
    prices: PriceTable | None = None,
    model: str | None = None,
    batch: bool = False,
    reconciled: Reconciled | None = None,
) -> RunCounts:
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
        "success": counts[PromptState.SUCCESS],
        "error": counts[PromptState.ERROR],
        "pending": counts[PromptState.PENDING],
        "uncertain": counts[PromptState.UNCERTAIN],
        "complete": counts[PromptState.SUCCESS] + counts[PromptState.ERROR] == len(prompt_ids),
        "total_attempts": len(attempts),
        "empty_responses": sum(1 for r in responses if not (r.get("content") or "").strip()),
        "no_code_extracted": sum(1 for r in responses if not r.get("generated_code")),
        "finish_reasons": dict(sorted(finish.items())),
        "returned_models": dict(sorted(models.items())),
        "model_checks": dict(sorted(checks.items())),
        "redirected_prompts": sorted(
            r["prompt_id"] for r in responses if r.get("model_redirected")
        ),
        "truncated_prompts": sorted(
            r["prompt_id"] for r in responses if r.get("finish_reason") == "length"
        ),
        "empty_prompts": sorted(
            r["prompt_id"] for r in responses if not (r.get("content") or "").strip()
        ),
        "usage": dict(usage),
        "cost": spent(prices, str(requested), dict(usage), batch=batch) if requested else None,
        "errors": {
            pid: s.last_error for pid, s in rec.statuses.items() if s.state == PromptState.ERROR
        },
        "updated_at_utc": utc_now(),
    }


def invocation_summary(
    config: LiveRunConfig,
    run_dir: RunDir,
    prompt_ids: tuple[str, ...],
    tally: Tally,
    *,
    stopped: bool,
    reconciled: Reconciled | None = None,
    rate_control: dict[str, Any] | None = None,
    durable_writes: dict[str, Any] | None = None,
    send_path: dict[str, Any] | None = None,
) -> RunSummary:
    """The run's counts plus what this invocation did and how its sending went (the summary
    before a sending strategy adds its own part and writes it)."""
    try:
        prices = load_prices(config.prices_path)
    except ConfigError:
        prices = None
    counts = summarize_run(
        run_dir,
        prompt_ids,
        repair=False,
        prices=prices,
        model=config.model,
        batch=config.batch_api,
        reconciled=reconciled,
    )
    # `counts` is summarize_run's own dict, without `batch`, `recast` or `stability`; mypy
    # cannot know that (a RunCounts may hold more keys), hence the ignore.
    return {
        **counts,  # type: ignore[typeddict-item]
        "attempted": len(tally.attempted_prompts),
        "requests_sent": tally.attempts,
        "skipped": len(prompt_ids) - len(tally.attempted_prompts),
        "stopped": stopped,
        "elapsed_seconds": round(time.time() - tally.started, 3),
        "rate_control": rate_control,
        "durable_writes": durable_writes,
        "send_path": send_path,
    }


def write_summary(run_dir: RunDir, summary: RunSummary) -> None:
    """Write run-summary.json; a run that could not keep it still returns its summary."""
    with contextlib.suppress(OSError):
        run_dir.write_summary(summary)


__all__ = ["Tally", "invocation_summary", "response_note", "summarize_run", "write_summary"]
