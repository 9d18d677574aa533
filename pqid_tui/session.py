"""The live run of an app session: its progress, its control, its config and how it ended.

Plain Python, no Textual. The App starts the run's worker and shows its monitor; the
session holds what the screens read while the run goes on and after it ends: the progress
a monitor draws, the control it pauses and stops, the config a retry or a resume starts
from, and the error that stopped the run.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from engine.config import LiveRunConfig
from engine.run.live import RunControl
from engine.run.runs import RunProgress
from pqid_tui.text import RUN_IN_PROGRESS


class RunTask(Protocol):
    """The worker that runs the run, as far as the session needs it: has it finished?"""

    @property
    def is_finished(self) -> bool: ...


class RunSession:
    """At most one live run at a time; the last run's state stays after it ends."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.progress: RunProgress | None = None
        self.control: RunControl | None = None
        self.config: LiveRunConfig | None = None
        self.error: str | None = None
        self._task: RunTask | None = None

    @property
    def active(self) -> bool:
        """Whether a run is in progress: its worker has started and not finished."""
        return self._task is not None and not self._task.is_finished

    def begin(self, config: LiveRunConfig) -> RunProgress:
        """Fresh progress and control for a run of `config`; refused while a run is active."""
        if self.active:
            raise RuntimeError(RUN_IN_PROGRESS)
        self.progress = RunProgress(clock=self.clock)
        self.control = RunControl()
        self.config = config
        self.error = None
        return self.progress

    def started(self, task: RunTask) -> None:
        """The worker that runs the run `begin` prepared."""
        self._task = task

    def failed(self, message: str) -> None:
        """The run's worker failed with `message` (what the run's end reports)."""
        self.error = message

    def run_dir(self) -> Path | None:
        """The directory of the run in progress, if one is."""
        if not self.active or self.config is None:
            return None
        return Path(str(self.config.output_dir))

    def runs(self, progress: RunProgress) -> bool:
        """Whether `progress` is the run in progress (so its monitor can pause and stop it)."""
        return self.active and self.progress is progress

    def stop(self) -> None:
        """Ask the run to stop cleanly: requests in flight finish, no new ones start."""
        if self.control is not None:
            self.control.stop()


__all__ = ["RunSession", "RunTask"]
