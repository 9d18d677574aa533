"""Run monitor: the live grid of every prompt, totals and rates, the retry queue, run control."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import ClassVar

from rich.text import Text
from textual import events, on
from textual.app import ComposeResult, SystemCommand
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.widgets import Footer, Header, Input, Static

from engine.config import LiveRunConfig
from engine.errors import PqidError
from engine.run.runs import RunProgress, resume_config
from engine.states import PromptState
from pqid_tui.context import app_context
from pqid_tui.messages import RunEnded
from pqid_tui.screens.base import AppScreen
from pqid_tui.text import PROVIDER_TERMS, UNCERTAIN_EXPLANATION, describe_error
from pqid_tui.widgets.plain import plain
from pqid_tui.widgets.run_grid import PromptTable, RetryQueue, RunGrid


def clock_text(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    whole = round(seconds)
    return f"{whole // 3600}:{whole % 3600 // 60:02d}:{whole % 60:02d}"


# Below this width the retry queue goes under the grid, so prompt IDs keep their width.
NARROW_COLUMNS = 120


class FilterInput(Input):
    """The grid's search field: Enter keeps the filter, Escape clears it."""

    class Closed(Message):
        def __init__(self, keep: bool) -> None:
            super().__init__()
            self.keep = keep

    async def _on_key(self, event: events.Key) -> None:
        if event.key in ("escape", "enter", "down"):
            event.stop()
            event.prevent_default()
            self.post_message(self.Closed(keep=event.key != "escape"))
            return
        await super()._on_key(event)


class MonitorScreen(AppScreen):
    """One run's prompts, live while it runs, final when it does not."""

    CSS_PATH = "monitor.tcss"
    HELP = """# Run monitor

Every prompt of the run with its state: *pending*, *in flight*, *retrying* (with the time
of its next attempt), *success*, *error* (terminal) or *uncertain* (in flight when an
earlier run stopped). The retry queue on the right (under the grid in a terminal narrower
than 120 columns) lists the prompts that are waiting for a
backoff, ended in an error, or are uncertain, each with its last error.

* **p** pauses or resumes sending (requests in flight finish); **s** stops the run cleanly:
  it stays resumable. On a run that is not running, **p** resumes it: it sends the pending
  prompts (with the settings of this session's run, else the run's manifest); **n** opens
  the New run form filled from the run's manifest, to resume with other pacing.
* **/** filters the grid: rows whose prompt ID or error contains the text (Enter keeps
  the filter, Escape clears it); **f** shows every row, then only errors, only uncertain,
  only retrying; **o** sorts by arrival, state (what needs attention first), prompt ID,
  attempts. The line under the grid shows the whole last error of the row under the cursor.
* **space** marks prompts; **r** retries the marked ones (or the one under the cursor),
  **e** retries every terminal error, **u** the uncertain ones after a confirmation.
  Each is a resume of this run directory that sends only those prompts.
* **enter** (or **i**) opens the payload inspector of the prompt under the cursor.
"""
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("p", "toggle_pause", "Pause"),
        Binding("s", "stop", "Stop"),
        Binding("space", "mark", "Mark"),
        Binding("slash", "filter", "Filter"),
        Binding("f", "only", "Only"),
        Binding("o", "sort", "Sort"),
        Binding("r", "retry_selected", "Retry"),
        Binding("e", "retry_errors", "Retry errors"),
        Binding("u", "retry_uncertain", "Retry uncertain"),
        # Shown on the help screen; the footer is full (enter also inspects).
        Binding("i", "inspect", "Inspect", show=False),
        Binding("n", "edit_resume", "Resume in form", show=False),  # the footer is full
        Binding("tab", "focus_next", "Grid/queue", show=False),
        Binding("escape", "back", "Back"),
    ]

    def __init__(
        self, run_dir: Path, progress: RunProgress, *, live: bool, resume: bool = False
    ) -> None:
        super().__init__()
        self.run_dir = Path(run_dir)
        self.progress = progress
        self.live = live
        self.ended: str | None = None
        self._resume_on_open = resume
        # What earlier invocations shown in this monitor did (a retry or resume adds to them).
        self._base_requests = 0
        self._base_tokens = 0
        self._base_elapsed = 0.0

    def compose(self) -> ComposeResult:
        yield Header()
        with Vertical(id="monitor"):
            yield Static(id="run-title")
            yield Static(id="run-stats")
            with Horizontal(id="tables"):
                with Vertical(id="grid-pane"):
                    yield Static("Prompts", id="grid-title", classes="section-title")
                    yield RunGrid(id="grid")
                    yield FilterInput(
                        placeholder="filter: part of a prompt ID or an error", id="grid-filter"
                    )
                    yield Static(id="row-detail")
                with Vertical(id="queue-pane"):
                    yield Static("Retry queue", classes="section-title")
                    yield RetryQueue(id="queue")
        yield Footer()

    def on_mount(self) -> None:
        app = app_context(self.app)
        self._rows_seen = False
        self.flush(full=True)
        self.set_interval(app.flush_interval, self._flush_tick)
        self.query_one(RunGrid).focus()
        if self._resume_on_open:
            self.call_after_refresh(self.action_resume_run)

    def attach(self, progress: RunProgress, *, live: bool) -> None:
        """Follow a new run of this directory (a retry or a resume) in the same grid."""
        if progress is not self.progress:
            self._base_requests += self.progress.requests
            self._base_tokens += self.progress.tokens
            self._base_elapsed += self.progress.elapsed
        self.progress, self.live, self.ended = progress, live, None
        for row in list(self.progress.rows.values()):
            self.progress.set_state(
                row.prompt_id, row.state, row.attempt, row.error, row.next_attempt_at, row.note
            )
        self.refresh_bindings()

    # -- redraw ----------------------------------------------------------------------------------
    def _flush_tick(self) -> None:
        self.flush()

    def flush(self, *, full: bool = False) -> None:
        """Apply what changed since the last flush: a keyed diff, in one batch. `full`: every
        row (a monitor opened on a progress that another monitor has been following)."""
        rows = self.progress.take_dirty()
        if full:
            rows = list(self.progress.rows.values())
        if rows:
            with self.app.batch_update():
                self.query_one(RunGrid).apply(rows)
                self.query_one(RetryQueue).apply(rows, self.progress.queue)
        self.show_stats()
        if rows:
            self.show_detail()

    def on_resize(self, event: events.Resize) -> None:
        self.query_one("#tables").set_class(event.size.width < NARROW_COLUMNS, "narrow")

    def show_view(self) -> None:
        grid = self.query_one(RunGrid)
        view = grid.view_text()
        self.query_one("#grid-title", Static).update(
            Text("Prompts") + (plain(f"  ({view})") if view else Text())
        )

    def show_detail(self) -> None:
        """The whole state and last error of the row under the focused table's cursor."""
        row = self._focused_table().cursor_row_data()
        text = Text()
        if row is not None:
            text.append_text(plain(row.prompt_id))
            text.append(f"  {row.state.replace('_', ' ')}")
            if row.attempt:
                text.append(f"  attempt {row.attempt}")
            message = row.error if row.state != PromptState.SUCCESS else row.note
            if message:
                text.append("\n")
                text.append_text(plain(message))
        self.query_one("#row-detail", Static).update(text)

    @on(PromptTable.CursorMoved)
    def _cursor_moved(self, event: PromptTable.CursorMoved) -> None:
        if event.table is self._focused_table():
            self.show_detail()

    def on_descendant_focus(self, event: events.DescendantFocus) -> None:
        if isinstance(event.widget, PromptTable):
            self.show_detail()

    def status_word(self) -> str:
        app = app_context(self.app)
        if self.live and app.session.runs(self.progress):
            control = app.session.control
            if control is not None and control.stopped:
                return "stopping"
            if control is not None and control.paused:
                return "paused"
            return "running" if self.progress.started_at is not None else "starting"
        if self.ended:
            return "failed"
        summary = self.progress.summary
        if summary is not None and summary.get("stopped"):
            return "stopped (resumable)"
        counts = self.progress.counts
        done = counts[PromptState.SUCCESS] + counts[PromptState.ERROR]
        return (
            "complete"
            if self.progress.rows and done == len(self.progress.rows)
            else ("not running")
        )

    def show_stats(self) -> None:
        p = self.progress
        c = p.counts
        title = Text()
        title.append("Run ", style="bold")
        title.append_text(plain(self.run_dir.name))
        title.append("  ")
        title.append_text(plain(f"{p.provider or '?'} / {p.model or '?'}"))
        title.append(f"  [{self.status_word()}]", style="bold")
        if self.ended:
            title.append("\n")
            title.append_text(plain(self.ended))
        self.query_one("#run-title", Static).update(title)
        stats = Text()
        stats.append(f"{len(p.rows)} prompts  ")
        for state in (
            PromptState.SUCCESS,
            PromptState.ERROR,
            PromptState.IN_FLIGHT,
            PromptState.SAVING,
            PromptState.RETRYING,
            PromptState.PENDING,
            PromptState.UNCERTAIN,
        ):
            if state == PromptState.SAVING and not c[state]:
                continue  # answered, evidence being written: a moment, shown only then
            stats.append(f"{state.replace('_', ' ')} {c[state]}  ")
        stats.append("\n")
        requests = self._base_requests + p.requests
        stats.append(f"requests {requests}")
        if self._base_requests:
            stats.append(f" ({p.requests} in this resume)")
        stats.append(
            f"  {p.requests_per_second:.1f} req/s  tokens {self._base_tokens + p.tokens:,}  "
        )
        if p.started_at is not None:
            stats.append(f"elapsed {clock_text(self._base_elapsed + p.elapsed)}")
            if self._base_elapsed:
                stats.append(f" ({clock_text(p.elapsed)} in this resume)")
            if p.paused_since is not None:
                stats.append(f"  ETA {clock_text(p.eta_seconds)} after resuming (paused)")
            else:
                stats.append(f"  ETA {clock_text(p.eta_seconds)}")
        elif p.recorded_elapsed is not None:
            stats.append(f"elapsed {clock_text(p.recorded_elapsed)} (its last invocation)")
        else:
            stats.append("elapsed —  ETA —")
        self.query_one("#run-stats", Static).update(stats)

    def on_run_ended(self, message: RunEnded) -> None:
        if Path(message.run_dir) == self.run_dir:
            self.ended = message.error
            self.live = False
            self.flush()
            self.refresh_bindings()

    # -- actions ---------------------------------------------------------------------------------
    def _running_here(self) -> bool:
        app = app_context(self.app)
        return app.session.runs(self.progress)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        running = self._running_here()
        if action == "stop":
            return True if running else None
        if action in ("retry_selected", "retry_errors", "retry_uncertain", "edit_resume"):
            return None if running else True
        return True

    def action_toggle_pause(self) -> None:
        app = app_context(self.app)
        control = app.session.control
        if not self._running_here() or control is None:
            self.action_resume_run()
            return
        if control.paused:
            control.resume()
            self.progress.resumed()
            self.notify("Resumed: sending again.")
        else:
            control.pause()
            self.progress.paused()
            self.notify("Paused: requests in flight finish; no new ones start.")
        self.show_stats()

    def action_stop(self) -> None:
        app = app_context(self.app)
        if self._running_here() and app.session.control is not None:
            app.session.control.stop()
            self.notify("Stopping: requests in flight finish; the run stays resumable.")
            self.show_stats()
        else:
            self.notify("The run is not running: nothing to stop.", severity="warning")

    def action_resume_run(self) -> None:
        """Resume this run directory: send its pending prompts."""
        if self._running_here():
            return
        counts = self.progress.counts
        if counts[PromptState.UNCERTAIN]:
            self.notify(
                f"{counts[PromptState.UNCERTAIN]} prompt(s) are uncertain: resolve them first "
                "with u (retry uncertain), which explains the possible extra paid draw.",
                severity="warning",
            )
            return
        pending = [
            pid for pid, row in self.progress.rows.items() if row.state == PromptState.PENDING
        ]
        if not pending:
            errors = counts[PromptState.ERROR]
            self.notify(
                "Nothing to resume: every prompt has an outcome"
                + (f"; e retries the {errors} error(s)." if errors else "."),
                severity="warning",
            )
            return
        self._retry(pending, errors=False, uncertain=False, resume=True)

    def action_edit_resume(self) -> None:
        """The New run form filled from this run's manifest (other pacing, limits, flags)."""
        app = app_context(self.app)
        app.open_screen("new", run_dir=self.run_dir)

    def _focused_table(self) -> RunGrid | RetryQueue:
        focused = self.focused
        if isinstance(focused, RunGrid | RetryQueue):
            return focused
        return self.query_one(RunGrid)

    def action_filter(self) -> None:
        field = self.query_one(FilterInput)
        field.value = self.query_one(RunGrid).search
        field.add_class("open")
        field.focus()

    @on(Input.Changed, "#grid-filter")
    def _filter_changed(self, event: Input.Changed) -> None:
        self.query_one(RunGrid).set_view(search=event.value)
        self.show_view()
        self.show_detail()

    @on(FilterInput.Closed)
    def _filter_closed(self, event: FilterInput.Closed) -> None:
        field = self.query_one(FilterInput)
        if not event.keep:
            field.value = ""
            self.query_one(RunGrid).set_view(search="")
            self.show_view()
        field.remove_class("open")
        self.query_one(RunGrid).focus()
        self.show_detail()

    def action_only(self) -> None:
        grid = self.query_one(RunGrid)
        grid.cycle_only()
        grid.focus()
        self.show_view()
        self.show_detail()

    def action_sort(self) -> None:
        grid = self.query_one(RunGrid)
        grid.cycle_sort()
        grid.focus()
        self.show_view()
        self.show_detail()

    def action_mark(self) -> None:
        table = self._focused_table()
        pid = table.cursor_prompt()
        if pid is not None and pid in self.progress.rows:
            table.toggle_mark(pid)

    def selected_prompts(self) -> list[str]:
        """The marked prompts of both tables, or else the one under the cursor."""
        marked = self.query_one(RunGrid).marked | self.query_one(RetryQueue).marked
        if marked:
            return [pid for pid in self.progress.rows if pid in marked]
        pid = self._focused_table().cursor_prompt()
        return [pid] if pid is not None else []

    def action_inspect(self) -> None:
        from pqid_tui.screens.payload import PayloadScreen

        pid = self._focused_table().cursor_prompt()
        if pid is not None:
            self.app.push_screen(PayloadScreen(self.run_dir, pid))

    @on(PromptTable.RowSelected)
    def _row_selected(self, event: PromptTable.RowSelected) -> None:
        event.stop()
        from pqid_tui.screens.payload import PayloadScreen

        self.app.push_screen(PayloadScreen(self.run_dir, event.prompt_id))

    def action_back(self) -> None:
        self.app.pop_screen()

    def action_retry_selected(self) -> None:
        ids = self.selected_prompts()
        states = {pid: self.progress.rows[pid].state for pid in ids if pid in self.progress.rows}
        done = [pid for pid, st in states.items() if st == PromptState.SUCCESS]
        ids = [pid for pid in states if states[pid] != PromptState.SUCCESS]
        if not ids:
            self.notify(
                "Nothing to retry: "
                + (
                    "a success is never sent again."
                    if done
                    else "select a prompt (space marks several)."
                ),
                severity="warning",
            )
            return
        self._retry(
            ids,
            errors=any(states[p] == PromptState.ERROR for p in ids),
            uncertain=any(states[p] == PromptState.UNCERTAIN for p in ids),
        )

    def action_retry_errors(self) -> None:
        ids = [pid for pid, row in self.progress.rows.items() if row.state == PromptState.ERROR]
        if not ids:
            self.notify("No prompt ended in a terminal error.", severity="warning")
            return
        self._retry(ids, errors=True, uncertain=False)

    def action_retry_uncertain(self) -> None:
        ids = [pid for pid, row in self.progress.rows.items() if row.state == PromptState.UNCERTAIN]
        if not ids:
            self.notify("No prompt is uncertain.", severity="warning")
            return
        self._retry(ids, errors=False, uncertain=True)

    def retry_config(self, *, errors: bool, uncertain: bool) -> LiveRunConfig:
        """The resume config of this run with the retry flags."""
        app = app_context(self.app)
        flags = {
            "resume": True,
            "retry_errors": errors,
            "retry_uncertain": uncertain,
            "max_new": None,
        }
        current = app.session.config
        if current is not None and Path(str(current.output_dir)) == self.run_dir:
            return current.model_copy(update=flags)
        return resume_config(self.run_dir, app.release_dir, acknowledge_prompt_export=True, **flags)

    def _retry(
        self, ids: list[str], *, errors: bool, uncertain: bool, resume: bool = False
    ) -> None:
        from pqid_tui.screens.dialogs import ConfirmScreen

        app = app_context(self.app)
        if app.session.active:
            self.notify("A run is in progress: wait for it, or stop it first.", severity="warning")
            return
        try:
            config = self.retry_config(errors=errors, uncertain=uncertain)
        except PqidError as exc:
            self.notify(describe_error(exc), severity="error", markup=False)
            return
        contacts = config.provider != "oracle"
        only = None if resume else ids  # a resume sends every pending prompt
        if not (contacts or uncertain):
            self._launch(config, only)
            return
        parts = []
        if contacts:
            parts.append(
                f"This sends {len(ids)} prompt(s) to the {config.provider} route "
                f"({config.base_url or 'its preset endpoint'})"
                f"{'' if resume else ' again'}: the provider's "
                f"{PROVIDER_TERMS}."
            )
        if uncertain:
            parts.append(UNCERTAIN_EXPLANATION)

        def answer(yes: bool | None) -> None:
            if yes:
                self._launch(config, only)
            else:
                self.notify(("Resume" if resume else "Retry") + " cancelled: nothing was sent.")

        if resume:
            title = f"Resume the run: send its {len(ids)} pending prompt(s)?"
        else:
            title = f"Retry {len(ids)} prompt(s)" + (
                " including uncertain ones?" if uncertain else "?"
            )
        self.app.push_screen(
            ConfirmScreen(title, "\n\n".join(parts), yes="Resume" if resume else "Send again"),
            answer,
        )

    def _launch(self, config: LiveRunConfig, ids: Iterable[str] | None) -> None:
        app = app_context(self.app)
        self.query_one(RunGrid).marked.clear()
        self.query_one(RetryQueue).marked.clear()
        app.start_run(config, None if ids is None else list(ids))

    def palette_commands(self) -> Iterable[SystemCommand]:
        yield SystemCommand(
            "run: pause or resume",
            "Pause or resume sending; on a run that is not running, resume it",
            self.action_toggle_pause,
        )
        yield SystemCommand(
            "run: resume in the New run form",
            "The form filled from this run's manifest",
            self.action_edit_resume,
        )
        yield SystemCommand("run: stop", "Stop the run cleanly (resumable)", self.action_stop)
        yield SystemCommand(
            "run: retry selected", "Resend the marked prompts", self.action_retry_selected
        )
        yield SystemCommand(
            "run: retry all errors", "Resend every terminal error", self.action_retry_errors
        )
        yield SystemCommand(
            "run: retry uncertain",
            "Resend the uncertain prompts (a possible extra paid draw)",
            self.action_retry_uncertain,
        )
        yield SystemCommand(
            "grid: filter",
            "Show the rows whose prompt ID or error contains a text",
            self.action_filter,
        )
        yield SystemCommand(
            "grid: only errors, uncertain, retrying", "Cycle which rows show", self.action_only
        )
        yield SystemCommand(
            "grid: sort", "Cycle the order: arrival, state, prompt ID, attempts", self.action_sort
        )
        yield SystemCommand(
            "run: inspect payload", "Open the payload inspector", self.action_inspect
        )
