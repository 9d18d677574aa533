"""The Textual app: built by `make_app` from engine objects, run by `run_app` from the CLI."""

from __future__ import annotations

import argparse
import gc
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, ClassVar

import httpx
from textual import on, work
from textual.app import App, SystemCommand
from textual.binding import Binding, BindingType
from textual.screen import Screen
from textual.worker import Worker, WorkerState

from engine.config import LiveRunConfig
from engine.errors import PqidError
from engine.events import Event, ProgressCallback, RunStarted
from engine.release import Release, load_release
from engine.run.live import RunResult
from engine.run.runs import RunProgress, resend_async
from pqid_tui.context import AppContext
from pqid_tui.messages import RunEnded, RunLaunched
from pqid_tui.services.replay import ReplayService, default_replay_service
from pqid_tui.session import RunSession
from pqid_tui.settings import Settings
from pqid_tui.text import UNKNOWN_ERROR, describe_error

DARK, LIGHT = "textual-dark", "textual-light"


def default_runs_dir() -> Path:
    """Where runs live unless `--runs-dir` says otherwise: the user data directory."""
    import platformdirs

    return Path(platformdirs.user_data_dir("pqid-tui")) / "runs"


class PqidApp(App[int]):
    """Operate benchmark runs: new runs, the live grid, evidence, credentials, replay."""

    TITLE = "pqid-tui"
    CSS_PATH = "app.tcss"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("f1", "help", "Help", priority=True),
        Binding("ctrl+t", "toggle_theme", "Theme"),
        Binding("ctrl+q", "quit", "Quit", priority=True),
    ]

    def __init__(
        self,
        release_dir: Path,
        runs_dir: Path,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        replay_service: ReplayService | None = None,
        env: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.time,
        flush_interval: float = 0.1,
        base_image: str | None = None,
        wheelhouse: str | None = None,
        settings_path: Path | None = None,
    ) -> None:
        super().__init__()
        # Remembered choices: a file for the CLI's app, memory only for a test's.
        self.settings = Settings(settings_path)
        # The Replay screen's image inputs for this session: the command line's, else the
        # last ones used; the screen writes back what the user types.
        self.replay_image: dict[str, str] = {
            "base_image": base_image or self.settings.get("base_image") or "",
            "wheelhouse": wheelhouse or self.settings.get("wheelhouse") or "",
        }
        self.release_dir = Path(release_dir)
        self.runs_dir = Path(runs_dir)
        self.transport = transport
        self.replay_service = replay_service or default_replay_service()
        self.env = dict(env) if env is not None else None
        self.clock = clock
        self.flush_interval = flush_interval
        self.release: Release | None = None
        self.release_error: str | None = None
        # The live run started here: its progress, control, config and error.
        self.session = RunSession(clock)
        self._exit_after_run = False
        self.load_release()

    # -- engine objects --------------------------------------------------------------------------
    def load_release(self) -> None:
        try:
            self.release, self.release_error = load_release(self.release_dir), None
        except PqidError as exc:
            self.release, self.release_error = None, describe_error(exc)

    def start_run(self, config: LiveRunConfig, only: Iterable[str] | None = None) -> RunProgress:
        """Start (or resume) a live run in the run worker and show its monitor."""
        from pqid_tui.screens.monitor import MonitorScreen

        progress = self.session.begin(config)
        run_dir = str(config.output_dir)
        self.session.started(self.run_worker_task(config, None if only is None else tuple(only)))
        screen = self.screen
        if isinstance(screen, MonitorScreen) and screen.run_dir == Path(run_dir):
            screen.attach(progress, live=True)
        else:
            self.push_screen(MonitorScreen(Path(run_dir), progress, live=True))
        self.post_message(RunLaunched(run_dir))
        return progress

    @work(exclusive=True, group="run", exit_on_error=False)
    async def run_worker_task(
        self, config: LiveRunConfig, only: tuple[str, ...] | None
    ) -> RunResult:
        assert self.session.progress is not None
        return await resend_async(
            config,
            only,
            transport=self.transport,
            progress=self.run_events(self.session.progress),
            control=self.session.control,
            env=self.env,
        )

    @staticmethod
    def run_events(progress: RunProgress) -> ProgressCallback:
        """The engine's progress callback for a run shown in the app: fold into `progress`.

        Once the run has started, everything alive (the app, the release, the run's plan)
        lives until the run ends, so it is frozen out of the garbage collector: otherwise each
        full collection walks it all again, and on a 10,000-prompt run those pauses (up to a
        quarter of a second each, several seconds in all) are the stalls a user sees. The run
        worker's end unfreezes it.
        """

        def on_event(event: Event) -> None:
            progress.apply(event)
            if isinstance(event, RunStarted):
                gc.freeze()

        return on_event

    def report_worker_error(self, worker: Worker[Any]) -> str:
        """Show why a worker failed (every screen's failed workers come here); the message."""
        message = describe_error(worker.error) if worker.error else UNKNOWN_ERROR
        self.notify(
            message, title=f"{worker.group} failed", severity="error", markup=False, timeout=12
        )
        return message

    @on(Worker.StateChanged)
    def _worker_changed(self, event: Worker.StateChanged) -> None:
        worker = event.worker
        if event.state == WorkerState.ERROR:
            message = self.report_worker_error(worker)
            if worker.group == "run":
                self.session.failed(message)
        if worker.group == "run" and worker.is_finished:
            gc.unfreeze()  # the run's objects may now be garbage, cycles included
        config = self.session.config
        if worker.group == "run" and worker.is_finished and config is not None:
            result = worker.result if event.state == WorkerState.SUCCESS else None
            self.post_message(
                RunEnded(
                    str(config.output_dir), result.summary if result else None, self.session.error
                )
            )
            if self._exit_after_run:
                self.exit(0)

    def on_unmount(self) -> None:
        gc.unfreeze()  # an app that exits during a run leaves nothing frozen behind

    def on_run_ended(self, message: RunEnded) -> None:
        for screen in self.screen_stack:
            screen.post_message(RunEnded(message.run_dir, message.summary, message.error))

    def on_run_launched(self, message: RunLaunched) -> None:
        for screen in self.screen_stack:
            screen.post_message(RunLaunched(message.run_dir))

    # -- screens ---------------------------------------------------------------------------------
    def on_mount(self) -> None:
        from pqid_tui.screens.home import HomeScreen

        self.theme = LIGHT if self.settings.get("theme") == LIGHT else DARK
        self.push_screen(HomeScreen())

    def action_help(self) -> None:
        from pqid_tui.screens.help import HelpScreen

        if isinstance(self.screen, HelpScreen):
            self.screen.dismiss(None)
        else:
            self.push_screen(HelpScreen(self.screen))

    def action_toggle_theme(self) -> None:
        self.theme = LIGHT if self.theme == DARK else DARK
        self.settings.set("theme", self.theme)

    def open_screen(self, name: str, **kw: Any) -> None:
        """Push one of the main screens by name (the palette and the home screen use this)."""
        from pqid_tui.screens.credentials import CredentialsScreen
        from pqid_tui.screens.monitor import MonitorScreen
        from pqid_tui.screens.new_run import NewRunScreen
        from pqid_tui.screens.replay import ReplayScreen

        if name == "new":
            self.push_screen(NewRunScreen(**kw))
        elif name == "credentials":
            self.push_screen(CredentialsScreen())
        elif name == "replay":
            self.push_screen(ReplayScreen(**kw))
        elif name == "monitor":
            run_dir = Path(kw["run_dir"])
            resume = bool(kw.get("resume"))
            progress = self.session.progress
            if self.session.run_dir() == run_dir and progress is not None:
                self.push_screen(MonitorScreen(run_dir, progress, live=True, resume=resume))
            else:
                # Not running here (any more): what its directory says now, every prompt.
                try:
                    progress = RunProgress.from_run_dir(run_dir, clock=self.clock)
                except PqidError as exc:
                    self.notify(describe_error(exc), severity="error", markup=False)
                    return
                self.push_screen(MonitorScreen(run_dir, progress, live=False, resume=resume))

    def go_home(self) -> None:
        from pqid_tui.screens.home import HomeScreen

        while len(self.screen_stack) > 2 and not isinstance(self.screen, HomeScreen):
            self.pop_screen()
        if isinstance(self.screen, HomeScreen):
            self.screen.refresh_runs()

    def get_system_commands(self, screen: Screen[Any]) -> Iterable[SystemCommand]:
        # Textual's own "Theme" picker is left out: the app has two themes, one toggle.
        yield from (
            c for c in super().get_system_commands(screen) if c.callback != self.action_change_theme
        )
        yield SystemCommand(
            "home: go home", "Back to the release and the list of runs", self.go_home
        )
        yield SystemCommand("run: new", "Plan and start a new run", lambda: self.open_screen("new"))
        yield SystemCommand(
            "credentials: open",
            "Where each route's key comes from; set or delete keyring entries",
            lambda: self.open_screen("credentials"),
        )
        yield SystemCommand(
            "replay: open",
            "Docker status, image build, replay and compare",
            lambda: self.open_screen("replay"),
        )
        yield SystemCommand(
            "theme: toggle dark/light",
            "Switch between the dark and the light theme",
            self.action_toggle_theme,
        )
        yield SystemCommand("help: show", "Key bindings and help for this screen", self.action_help)
        commands = getattr(screen, "palette_commands", None)
        if commands is not None:
            yield from commands()

    # -- quitting --------------------------------------------------------------------------------
    async def action_quit(self) -> None:
        from pqid_tui.screens.dialogs import ConfirmScreen

        if not self.session.active:
            self.exit(0)
            return
        if self._exit_after_run:
            # A second quit while the stop waits for slow requests: leave now. Those requests
            # stay in flight on disk, so a resume reports them as uncertain.
            self.exit(0)
            return

        def answer(stop: bool | None) -> None:
            if stop:
                self._exit_after_run = True
                self.session.stop()
                self.notify(
                    "Stopping: waiting for the requests in flight, then quitting. "
                    "Quit again to leave now (those prompts then resume as uncertain).",
                    timeout=30,
                )

        await self.push_screen(
            ConfirmScreen(
                "A run is in progress. Stop it and quit?",
                "Stopping lets the requests in flight finish and sends no new ones. The run "
                "directory stays resumable: open it again, or use --resume in the batch mode.",
                yes="Stop the run and quit",
                no="Keep running",
            ),
            answer,
        )

    # -- for drivers that hold only the app (the benchmarks); screens use `session` ------------
    @property
    def run_active(self) -> bool:
        return self.session.active

    @property
    def run_progress(self) -> RunProgress | None:
        return self.session.progress

    @property
    def run_error(self) -> str | None:
        return self.session.error

    def stop_run(self) -> None:
        """Ask the run to stop cleanly: requests in flight finish, no new ones start."""
        self.session.stop()


def make_app(
    release_dir: Path | str | None = None,
    runs_dir: Path | str | None = None,
    *,
    transport: httpx.AsyncBaseTransport | None = None,
    replay_service: ReplayService | None = None,
    env: Mapping[str, str] | None = None,
    clock: Callable[[], float] = time.time,
    flush_interval: float = 0.1,
    base_image: str | None = None,
    wheelhouse: str | None = None,
    settings_path: Path | None = None,
) -> PqidApp:
    """The app over these engine objects; the CLI and the tests both build it here."""
    if release_dir is None:
        from engine.demo import DEMO_RELEASE_DIR

        release_dir = DEMO_RELEASE_DIR
    return PqidApp(
        Path(release_dir),
        Path(runs_dir) if runs_dir else default_runs_dir(),
        transport=transport,
        replay_service=replay_service,
        env=env,
        clock=clock,
        flush_interval=flush_interval,
        base_image=base_image,
        wheelhouse=wheelhouse,
        settings_path=settings_path,
    )


def run_app(ns: argparse.Namespace) -> int:
    """Run the app for `pqid-tui [--release-dir R] [--runs-dir D]`; the exit code."""
    from pqid_tui.settings import default_settings_path

    app = make_app(
        getattr(ns, "release_dir", None),
        getattr(ns, "runs_dir", None),
        base_image=getattr(ns, "base_image", None),
        wheelhouse=getattr(ns, "wheelhouse", None),
        settings_path=default_settings_path(),
    )
    result = app.run()
    return int(result or 0)


def _as_context(app: PqidApp) -> AppContext:
    """Never called: the type checker holds the app to what its screens expect of it."""
    return app


__all__ = ["PqidApp", "default_runs_dir", "make_app", "run_app"]
