"""What the screens use of the app: its state, and the few things it does for them.

The screens name this protocol, never the app's class: the app imports the screens, and the
screens import nothing of the app, so the two import each other in one direction only.
The type checker holds `PqidApp` to it (`_as_context` in pqid_tui/app.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

if TYPE_CHECKING:
    import httpx
    from textual.app import App
    from textual.worker import Worker

    from engine.config import LiveRunConfig
    from engine.release import Release
    from engine.run.runs import RunProgress
    from pqid_tui.services.replay import ReplayService
    from pqid_tui.session import RunSession
    from pqid_tui.settings import Settings


class AppContext(Protocol):
    """The app as its screens see it (Textual's own methods they call on `self.app`)."""

    settings: Settings
    replay_image: dict[str, str]
    release_dir: Path
    runs_dir: Path
    transport: httpx.AsyncBaseTransport | None
    replay_service: ReplayService
    env: dict[str, str] | None
    clock: Callable[[], float]
    flush_interval: float
    release: Release | None
    release_error: str | None
    session: RunSession

    def load_release(self) -> None: ...

    def start_run(
        self, config: LiveRunConfig, only: Iterable[str] | None = None
    ) -> RunProgress: ...

    def report_worker_error(self, worker: Worker[Any]) -> str: ...

    def open_screen(self, name: str, **kw: Any) -> None: ...


def app_context(app: App[Any]) -> AppContext:
    """The running app, as its screens see it."""
    return cast("AppContext", app)
