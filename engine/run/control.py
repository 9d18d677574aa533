"""What a run is steered by from outside (RunControl) and what it hands back (RunResult).

Kept apart from the senders so that the live path, the Batch API path and the recast
wrapper can all name them without importing each other.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass

from engine.rundir.shapes import RunSummary


@dataclass
class RunResult:
    """What a live run did; `to_dict()` is run-summary.json."""

    summary: RunSummary
    run_dir: str

    def to_dict(self) -> RunSummary:
        return self.summary.copy()


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


__all__ = ["RunControl", "RunResult"]
