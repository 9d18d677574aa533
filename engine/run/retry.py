"""How long to wait before trying again: one rule for prompts sent live and for the Batch
API's own calls."""

from __future__ import annotations

import random

from engine.config import LiveRunConfig


def backoff(config: LiveRunConfig, retries_done: int, retry_after: float | None) -> float:
    """The wait before retry number `retries_done + 1`: the provider's Retry-After when it
    gave one (never more than --max-retry-after-seconds), else a doubling backoff, capped and
    jittered downwards so that senders that failed together do not retry together."""
    if retry_after is not None:
        return min(retry_after, config.max_retry_after_seconds)
    base: float = config.retry_backoff_seconds * (2**retries_done)
    return float(min(base, config.max_backoff_seconds) * (1 - 0.25 * random.random()))


__all__ = ["backoff"]
