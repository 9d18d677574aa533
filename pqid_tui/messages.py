"""App-level messages: what the run worker tells every screen."""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.message import Message

if TYPE_CHECKING:
    from engine.rundir.shapes import RunSummary


class RunLaunched(Message, bubble=False):
    """A live run (or a resend of some of its prompts) began in the run worker."""

    def __init__(self, run_dir: str) -> None:
        super().__init__()
        self.run_dir = run_dir


class RunEnded(Message, bubble=False):
    """The run worker ended: with the run summary, or with the error that stopped it."""

    def __init__(self, run_dir: str, summary: RunSummary | None, error: str | None) -> None:
        super().__init__()
        self.run_dir = run_dir
        self.summary = summary
        self.error = error
