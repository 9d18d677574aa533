"""Replay and compare: Docker status, image build, replay of a run, then the comparison."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import ClassVar

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult, SystemCommand
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.widget import Widget
from textual.widgets import (
    Button,
    Checkbox,
    Footer,
    Header,
    Input,
    ProgressBar,
    Select,
    Static,
)
from textual.worker import Worker, WorkerState

from engine.events import (
    EvaluationFinished,
    EvaluationStarted,
    Event,
    ImageBuildLog,
    ImageReady,
    ReplayFinished,
)
from engine.run.runs import is_evaluated, list_runs
from pqid_tui.context import app_context
from pqid_tui.screens.base import AppScreen
from pqid_tui.services.replay import (
    Comparison,
    DockerStatus,
    ImageOptions,
    ReplayService,
    SubTable,
)
from pqid_tui.text import describe_error
from pqid_tui.textsafe import escape_controls
from pqid_tui.widgets.bar_chart import BarChart, BarRow
from pqid_tui.widgets.plain import plain
from pqid_tui.widgets.sort_table import Cell, Column, Row, SortableTable
from pqid_tui.widgets.wrapping import WrappingCheckbox, WrappingLog

EXECUTION_NOTE = (
    "I understand that replay executes the model's generated code. It runs only "
    "inside a network-disabled, read-only Docker container with no host mounts "
    "and tight limits."
)
# The actions bound to single letters: hidden from the footer (and refused) while the user
# types in a text field, where those letters are text.
LETTER_ACTIONS = frozenset({"build", "compare", "export"})
# What the user's mistakes and the engine's refusals are called here (never a worker's name).
FAILED = {
    "build_image": "Image build",
    "replay_run": "Replay",
    "compare_run": "Compare",
    "export_files": "Export",
    "load_taxonomy": "Failure taxonomy",
    "action_docker_status": "Docker status",
}


class ReplayScreen(AppScreen):
    """Evaluate a run in Docker and compare it with the frozen matrix on the same prompts."""

    CSS_PATH = "replay.tcss"
    AUTO_FOCUS = "#run"
    HELP = """# Replay and compare

**Docker**: whether a Docker Engine is reachable, its version, and whether the evaluator
image for the chosen base image (and optional offline wheelhouse) exists or needs a build
(**Build image**, or **b** outside a text field; the log follows below). Enter in either
field checks the image again. Both fields are remembered (`pqid-tui --base-image IMAGE
--wheelhouse DIR` sets them at start).

**Replay** (**ctrl+r**) executes the run's generated code in a network-disabled container:
it needs the acknowledgement box ticked. Progress shows prompt by prompt.

**Compare** (**m**) puts the run beside every frozen row on exactly the same prompt IDs;
the denominator of every rate is shown, the run's row is highlighted (▶ in the chart), and
`vs …` columns give the paired difference against each row: `+b` prompts only the run gets
right, `−c` only the row, with the exact McNemar p. A partial run is refused unless *allow
partial* is ticked, and then every row is restricted to the run's prompts and marked partial.
In the table, **left**/**right** choose a column and **s** sorts by it (again: reversed); a
header click does the same. The chart shows one bar per row for the rate sorted by (else
the first rate), highest first. A release that defines a prompt subset (PQID-Bench's
150 identifiable prompts) gets a second table below. **x** exports the comparison to the
same files as the batch mode.
"""
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("f5", "docker_status", "Docker status"),
        Binding("b", "build", "Build image"),
        Binding("ctrl+r", "replay", "Start replay"),
        Binding("m", "compare", "Compare"),
        Binding("x", "export", "Export"),
        Binding("escape", "back", "Back"),
    ]

    class EngineEvent(Message):
        """An engine event from a replay thread worker."""

        def __init__(self, event: Event) -> None:
            super().__init__()
            self.event = event

    class StatusReady(Message):
        def __init__(self, status: DockerStatus) -> None:
            super().__init__()
            self.status = status

    class ComparisonReady(Message):
        def __init__(self, comparison: Comparison, taxonomy: dict[str, int]) -> None:
            super().__init__()
            self.comparison = comparison
            self.taxonomy = taxonomy

    def __init__(self, run_dir: Path | None = None) -> None:
        super().__init__()
        self.initial_run = Path(run_dir) if run_dir else None
        self.status: DockerStatus | None = None
        self.comparison: Comparison | None = None
        self.chart_key: str | None = None

    def compose(self) -> ComposeResult:
        yield Header()
        with VerticalScroll(id="replay"):
            with Horizontal(classes="row"):
                with Vertical(id="docker-box", classes="panel"):
                    yield Static("Docker", classes="section-title")
                    yield Static("checking…", id="docker-status")
                    remembered = app_context(self.app).replay_image
                    yield Input(
                        remembered.get("base_image", ""),
                        id="base_image",
                        placeholder="base image (default python:3.11-slim)",
                    )
                    yield Input(
                        remembered.get("wheelhouse", ""),
                        id="wheelhouse",
                        placeholder="wheelhouse directory (offline, optional)",
                    )
                    yield Button("Build image", id="build")
                with Vertical(id="run-box", classes="panel"):
                    yield Static("Run", classes="section-title")
                    yield Select([], id="run", prompt="choose a run")
                    yield WrappingCheckbox(EXECUTION_NOTE, id="acknowledge_execution", compact=True)
                    with Horizontal(classes="buttons"):
                        yield Button("Start replay", id="start", variant="warning")
                    yield WrappingCheckbox(
                        "allow a partial run (restrict every row to its prompts)",
                        id="allow_partial",
                        compact=True,
                    )
                    with Horizontal(classes="buttons"):
                        yield Button("Compare", id="compare")
                        yield Button("Export", id="export")
            yield ProgressBar(id="progress", show_eta=False)
            yield Static("", id="progress-text")
            yield WrappingLog(id="log")
            yield Static("Comparison", classes="section-title")
            yield Static("", id="compare-note")
            yield SortableTable(id="comparison")
            yield BarChart(id="chart")
            yield Vertical(id="subtables")
            yield Static("Failure taxonomy of the run", classes="section-title")
            yield SortableTable(id="taxonomy")
        yield Footer()

    def on_mount(self) -> None:
        app = app_context(self.app)
        runs = [info for info in list_runs(app.runs_dir) if not info.problem]
        select = self.query_one("#run", Select)
        select.set_options([(plain(info.name), str(info.path)) for info in runs])
        if self.initial_run is not None and any(info.path == self.initial_run for info in runs):
            select.value = str(self.initial_run)
        elif runs:
            select.value = str(runs[0].path)
        # Hidden until a replay starts: an idle indeterminate bar would animate forever.
        self.query_one("#progress", ProgressBar).display = False
        self.query_one("#comparison", SortableTable).display = False
        self.action_docker_status()
        if self.run_dir is not None:
            self.load_taxonomy()

    # -- inputs ----------------------------------------------------------------------------------
    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in LETTER_ACTIONS and isinstance(self.focused, Input):
            return False
        return True

    def on_descendant_focus(self) -> None:
        self.refresh_bindings()

    def on_descendant_blur(self) -> None:
        self.refresh_bindings()

    @on(Input.Changed, "#base_image, #wheelhouse")
    def _image_input_changed(self, event: Input.Changed) -> None:
        remembered = app_context(self.app).replay_image
        if event.input.id:
            remembered[event.input.id] = event.value.strip()

    @on(Input.Submitted, "#base_image, #wheelhouse")
    def _image_input_submitted(self) -> None:
        self.remember_image()
        self.action_docker_status()

    def remember_image(self) -> None:
        """Keep the image inputs for the next session (the settings file of the CLI's app)."""
        app = app_context(self.app)
        for key in ("base_image", "wheelhouse"):
            app.settings.set(key, app.replay_image.get(key))

    def on_unmount(self) -> None:
        self.remember_image()

    @property
    def run_dir(self) -> Path | None:
        value = self.query_one("#run", Select).value
        return Path(str(value)) if isinstance(value, str) else None

    def options(self) -> ImageOptions:
        base = self.query_one("#base_image", Input).value.strip() or None
        wheels = self.query_one("#wheelhouse", Input).value.strip()
        app = app_context(self.app)
        pins = app.release.evaluator_requirements if app.release is not None else None
        return ImageOptions(base, Path(wheels).expanduser() if wheels else None, pins)

    @property
    def service(self) -> ReplayService:
        app = app_context(self.app)
        return app.replay_service

    # -- Docker ----------------------------------------------------------------------------------
    @work(thread=True, exclusive=True, group="replay-status", exit_on_error=False)
    def action_docker_status(self) -> None:
        options = self.app.call_from_thread(self.options)
        with self.failure("Docker status"):
            self.post_message(self.StatusReady(self.service.docker_status(options)))

    @contextmanager
    def failure(self, what: str) -> Iterator[None]:
        """In a thread worker: an error becomes one message named for the user's action."""
        try:
            yield
        except Exception as exc:  # every failure is shown; a worker's name never is
            self.app.call_from_thread(self.show_failure, what, exc)

    def show_failure(self, what: str, exc: BaseException) -> None:
        message = describe_error(exc)
        self.notify(message, title=f"{what} failed", severity="error", markup=False, timeout=12)
        self.query_one("#log", WrappingLog).write_line(f"{what} failed: {message}")
        self.query_one("#progress", ProgressBar).display = False

    def on_replay_screen_status_ready(self, message: StatusReady) -> None:
        self.status = s = message.status
        text = Text()
        if not s.reachable:
            text.append("not reachable\n", style="bold")
            text.append_text(plain(s.detail))
        else:
            text.append("Engine ", style="bold")
            text.append_text(plain(f"{s.version}  reachable\n"))
            text.append("Image ", style="bold")
            text.append_text(plain(s.image or "unknown"))
            text.append(
                "  present" if s.image_present else "  needs a build (Build image)", style="bold"
            )
            if s.detail:
                text.append("\n")
                text.append_text(plain(s.detail))
        self.query_one("#docker-status", Static).update(text)

    def action_build(self) -> None:
        log = self.query_one("#log", WrappingLog)
        log.write_line("building the evaluator image…")
        self.remember_image()
        self.build_image(self.options())

    @work(thread=True, exclusive=True, group="replay-docker", exit_on_error=False)
    def build_image(self, options: ImageOptions) -> str | None:
        with self.failure("Image build"):
            tag = str(self.service.build_image(options, self._post_event))
            self.call_later_from_thread(self.action_docker_status)
            return tag
        return None

    def _post_event(self, event: Event) -> None:
        self.post_message(self.EngineEvent(event))

    def call_later_from_thread(self, callback: Callable[[], object]) -> None:
        self.app.call_from_thread(callback)

    # -- replay ----------------------------------------------------------------------------------
    def action_replay(self) -> None:
        run_dir = self.run_dir
        if run_dir is None:
            self.notify("Choose a run to replay.", severity="warning")
            return
        if not self.query_one("#acknowledge_execution", Checkbox).value:
            self.notify(
                "Replay executes generated code: tick the acknowledgement first.",
                severity="warning",
            )
            return
        if is_evaluated(run_dir):
            from pqid_tui.screens.dialogs import ConfirmScreen

            def answer(yes: bool | None) -> None:
                if yes:
                    self._start_replay(run_dir, overwrite=True)

            self.app.push_screen(
                ConfirmScreen(
                    f"Replace the earlier replay of {run_dir.name}?",
                    "Its evaluations and summaries under evaluation/ are replaced by this "
                    "replay's.",
                    yes="Replay again",
                ),
                answer,
            )
            return
        self._start_replay(run_dir, overwrite=False)

    def _start_replay(self, run_dir: Path, *, overwrite: bool) -> None:
        app = app_context(self.app)
        progress = self.query_one("#progress", ProgressBar)
        progress.display = True
        progress.update(total=None, progress=0)
        self.query_one("#progress-text", Static).update("")
        self.query_one("#log", WrappingLog).write_line(
            f"replaying {escape_controls(run_dir.name)}…"
        )
        self.remember_image()
        self.replay_run(run_dir, app.release_dir, self.options(), overwrite)

    @work(thread=True, exclusive=True, group="replay-docker", exit_on_error=False)
    def replay_run(
        self, run_dir: Path, release_dir: Path, options: ImageOptions, overwrite: bool
    ) -> dict[str, int] | None:
        acknowledged = self.app.call_from_thread(
            lambda: self.query_one("#acknowledge_execution", Checkbox).value
        )
        with self.failure("Replay"):
            return dict(
                self.service.replay(
                    run_dir,
                    release_dir,
                    options,
                    self._post_event,
                    acknowledge_code_execution=acknowledged,
                    overwrite=overwrite,
                )
            )
        return None

    def on_replay_screen_engine_event(self, message: EngineEvent) -> None:
        event = message.event
        log = self.query_one("#log", WrappingLog)
        bar = self.query_one("#progress", ProgressBar)
        if isinstance(event, ImageBuildLog):
            log.write_line(escape_controls(event.line))
        elif isinstance(event, ImageReady):
            log.write_line(
                escape_controls(
                    f"image ready: {event.tag}" + (" (built)" if event.built else " (reused)")
                )
            )
        elif isinstance(event, EvaluationStarted):
            bar.update(total=event.total)
            self.query_one("#progress-text", Static).update(
                plain(f"evaluating {event.index + 1}/{event.total}: {event.prompt_id}")
            )
        elif isinstance(event, EvaluationFinished):
            bar.update(total=event.total, progress=event.index + 1)
            self.query_one("#progress-text", Static).update(
                plain(f"{event.index + 1}/{event.total}: {event.prompt_id} → {event.category}")
            )
        elif isinstance(event, ReplayFinished):
            counts = ", ".join(f"{k} {v}" for k, v in sorted(event.counts.items()))
            log.write_line(escape_controls(f"replay finished: {counts}"))
            if self.run_dir is not None and Path(event.output_dir).parent == self.run_dir:
                self.query_one("#progress-text", Static).update(
                    plain(f"replay of {self.run_dir.name} finished; outputs in {event.output_dir}")
                )

    @on(Worker.StateChanged)
    def _worker_changed(self, event: Worker.StateChanged) -> None:
        # A failure inside a worker is shown by `failure`; one outside it (a bug) by
        # AppScreen, and here in the log too, under the name of what the user asked for.
        worker = event.worker
        if event.state == WorkerState.ERROR and worker.error is not None:
            message = describe_error(worker.error)
            what = FAILED.get(worker.name, "The last action")
            self.query_one("#log", WrappingLog).write_line(f"{what} failed: {message}")
        elif (
            event.state == WorkerState.SUCCESS
            and worker.name == "replay_run"
            and worker.result is not None
        ):
            self.load_taxonomy()
            self.action_compare()

    # -- compare ---------------------------------------------------------------------------------
    def action_compare(self) -> None:
        if self.run_dir is None:
            self.notify("Choose a run to compare.", severity="warning")
            return
        app = app_context(self.app)
        self.compare_run(
            self.run_dir, app.release_dir, self.query_one("#allow_partial", Checkbox).value
        )

    @work(thread=True, exclusive=True, group="replay-compare", exit_on_error=False)
    def compare_run(self, run_dir: Path, release_dir: Path, allow_partial: bool) -> None:
        with self.failure("Compare"):
            comparison = self.service.compare(run_dir, release_dir, allow_partial=allow_partial)
            self.post_message(self.ComparisonReady(comparison, self.service.taxonomy(run_dir)))

    @work(thread=True, exclusive=True, group="replay-taxonomy", exit_on_error=False)
    def load_taxonomy(self) -> None:
        run_dir = self.app.call_from_thread(lambda: self.run_dir)
        if run_dir is not None:
            with self.failure("Failure taxonomy"):
                taxonomy = self.service.taxonomy(run_dir)
                self.app.call_from_thread(self.show_taxonomy, taxonomy)

    def on_replay_screen_comparison_ready(self, message: ComparisonReady) -> None:
        self.comparison = message.comparison
        self.show_comparison()
        self.show_taxonomy(message.taxonomy)

    def show_comparison(self) -> None:
        c = self.comparison
        if c is None:
            return
        note = Text()
        note.append(f"{c.prompt_count} prompts; rates over every selected prompt", style="bold")
        if c.partial:
            note.append("  PARTIAL: every row is restricted to the run's prompts", style="bold")
        if c.note:
            note.append("  ")
            note.append_text(plain(c.note))
        self.query_one("#compare-note", Static).update(note)
        table = self.query_one("#comparison", SortableTable)
        table.display = True
        # A new comparison keeps the order the user chose, if the column still exists.
        columns = c.columns()
        keys = [col.key for col in columns]
        default = "rank" if "rank" in keys else c.primary or (c.metrics[0] if c.metrics else None)
        key = table.sort_key if table.sort_key in keys else default
        table.show(
            columns,
            c.table_rows(),
            sort_key=key,
            reverse=table.sort_reverse if key == table.sort_key else None,
            fixed=keys.index("row") + 1,
        )
        self.show_chart()
        self.show_subtables(c.tables)
        # Into the table, unless the user is typing or choosing something elsewhere.
        focused = self.focused
        if not (
            isinstance(focused, Input | SortableTable)
            or (isinstance(focused, Select) and focused.expanded)
        ):
            table.focus()

    def chart_metric(self) -> str | None:
        """The rate the chart shows: the one the table is sorted by, else the primary one."""
        c = self.comparison
        if c is None or not c.metrics:
            return None
        key = self.query_one("#comparison", SortableTable).sort_key
        if key in c.metrics:
            self.chart_key = key
        elif self.chart_key not in c.metrics:
            self.chart_key = c.primary if c.primary in c.metrics else c.metrics[0]
        return self.chart_key

    def show_chart(self) -> None:
        c = self.comparison
        chart = self.query_one("#chart", BarChart)
        metric = self.chart_metric()
        if c is None or metric is None:
            chart.rows = ()
            return
        # Highest first (ties in file order): the chart reads as a ranking whatever the table.
        rows = sorted(c.rows, key=lambda r: -r.rate(metric) if metric in r.counts else 1.0)
        chart.title = f"{c.label_of(metric)}, highest first"
        chart.rows = tuple(
            BarRow(
                r.name,
                r.rate(metric) if metric in r.counts else None,
                f"({r.counts.get(metric, 0)}/{r.denominator_of(metric)})"
                + (" partial" if r.partial else ""),
                r.is_candidate,
            )
            for r in rows
        )

    def show_subtables(self, tables: tuple[SubTable, ...]) -> None:
        box = self.query_one("#subtables", Vertical)
        box.remove_children()
        for i, sub in enumerate(tables):
            widgets: list[Widget] = [Static(plain(sub.title), classes="section-title")]
            if sub.note:
                widgets.append(Static(plain(sub.note), classes="subtable-note"))
            table = SortableTable(id=f"subtable-{i}", classes="subtable")
            widgets.append(table)
            box.mount_all(widgets)
            keys = [col.key for col in sub.columns]
            table.show(
                sub.columns,
                sub.rows,
                sort_key=sub.sort_key,
                fixed=keys.index("row") + 1 if "row" in keys else 0,
            )

    @on(SortableTable.Sorted, "#comparison")
    def _sorted(self) -> None:
        self.show_chart()

    def show_taxonomy(self, taxonomy: dict[str, int]) -> None:
        table = self.query_one("#taxonomy", SortableTable)
        total = sum(taxonomy.values())
        rows = [
            Row(
                category,
                {
                    "category": Cell(category, category),
                    "count": Cell(str(count), count),
                    "share": Cell(f"{count / total * 100:.1f}%" if total else "", count),
                },
            )
            for category, count in taxonomy.items()
        ]
        table.show(
            (
                Column("category", "category"),
                Column("count", "count", numeric=True),
                Column("share", "share", numeric=True),
            ),
            rows,
            sort_key=table.sort_key,
            reverse=table.sort_reverse if table.sort_key else None,
        )

    @on(Select.Changed, "#run")
    def _run_changed(self) -> None:
        self.comparison = None
        table = self.query_one("#comparison", SortableTable)
        table.show((), ())
        table.display = False
        self.query_one("#chart", BarChart).rows = ()
        self.query_one("#subtables", Vertical).remove_children()
        self.query_one("#compare-note", Static).update("")
        # What the progress line said was about the run chosen before.
        self.query_one("#progress-text", Static).update("")
        self.query_one("#progress", ProgressBar).display = False
        if self.run_dir is not None:
            self.load_taxonomy()

    # -- export ----------------------------------------------------------------------------------
    def action_export(self) -> None:
        if self.run_dir is None:
            self.notify("Choose a run to export.", severity="warning")
            return
        app = app_context(self.app)
        self.export_files(
            self.run_dir, app.release_dir, self.query_one("#allow_partial", Checkbox).value
        )

    @work(thread=True, exclusive=True, group="replay-export", exit_on_error=False)
    def export_files(self, run_dir: Path, release_dir: Path, allow_partial: bool) -> None:
        with self.failure("Export"):
            paths = self.service.export(run_dir, release_dir, allow_partial=allow_partial)
            names = ", ".join(escape_controls(p.name) for p in paths)
            where = escape_controls(str(paths[0].parent)) if paths else str(run_dir)
            self.app.call_from_thread(
                self.notify,
                f"Exported {names} to {where}",
                title="Export",
                markup=False,
                timeout=12,
            )
            self.app.call_from_thread(
                self.query_one("#log", WrappingLog).write_line, f"exported to {where}: {names}"
            )

    # -- buttons and navigation ------------------------------------------------------------------
    @on(Button.Pressed)
    def _button(self, event: Button.Pressed) -> None:
        {
            "build": self.action_build,
            "start": self.action_replay,
            "compare": self.action_compare,
            "export": self.action_export,
        }[str(event.button.id)]()

    def action_back(self) -> None:
        self.app.pop_screen()

    def palette_commands(self) -> list[SystemCommand]:
        return [
            SystemCommand("replay: start", "Replay the chosen run in Docker", self.action_replay),
            SystemCommand("replay: build image", "Build the evaluator image", self.action_build),
            SystemCommand("replay: compare", "Compare with the frozen matrix", self.action_compare),
            SystemCommand("replay: export", "Write the comparison files", self.action_export),
            SystemCommand(
                "replay: docker status", "Check the Docker Engine again", self.action_docker_status
            ),
        ]
