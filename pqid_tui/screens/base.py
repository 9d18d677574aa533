"""The base of the app's screens: a worker that fails is reported, never silently dropped."""

from __future__ import annotations

from textual import on
from textual.screen import Screen
from textual.worker import Worker, WorkerState

from pqid_tui.context import app_context


class AppScreen(Screen[None]):
    """A screen whose failed workers are shown to the user by the app."""

    @on(Worker.StateChanged)
    def _report_failed_worker(self, event: Worker.StateChanged) -> None:
        if event.state == WorkerState.ERROR:
            app = app_context(self.app)
            app.report_worker_error(event.worker)
