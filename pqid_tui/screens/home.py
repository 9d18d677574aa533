"""Home: the release, the runs under the runs directory, and the ways onward."""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.widgets import Button, DataTable, Footer, Header, Static

from engine.runs import RunInfo, list_runs
from pqid_tui.messages import RunEnded
from pqid_tui.screens.base import AppScreen
from pqid_tui.widgets.plain import one_line, plain


class HomeScreen(AppScreen):
    """The start: what release is loaded, what runs exist, where to go next."""

    CSS_PATH = "home.tcss"
    HELP = """# Home

The release the app works on (its name, version, prompts by split and whether its
SHA-256 digests verified), and every run directory under the runs directory with its
counts and whether it has been replayed.

Select a run and press **Enter** to open its monitor, **r** to replay it. **n** plans a
new run; **c** manages the keys each route would use.
"""
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("n", "new_run", "New run"),
        Binding("enter", "open_run", "Open run", show=True),
        Binding("r", "replay", "Replay"),
        Binding("c", "credentials", "Credentials"),
        Binding("f5", "refresh", "Refresh"),
        Binding("q", "app.quit", "Quit"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.runs: list[RunInfo] = []

    def compose(self) -> ComposeResult:
        yield Header()
        with Vertical(id="home"):
            yield Static(id="release", classes="panel")
            yield Static("Runs", classes="section-title")
            yield Static(id="runs-hint")
            yield DataTable(id="runs", cursor_type="row", zebra_stripes=True)
            with Horizontal(id="home-actions"):
                yield Button("New run", id="new", variant="primary")
                yield Button("Open run", id="open")
                yield Button("Replay & compare", id="replay")
                yield Button("Credentials", id="credentials")
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one("#runs", DataTable)
        for key, label in (("name", "run"), ("provider", "provider"), ("model", "model"),
                           ("selected", "selected"), ("success", "success"),
                           ("error", "error"), ("pending", "pending"),
                           ("uncertain", "uncertain"), ("complete", "complete"),
                           ("replayed", "replayed")):
            table.add_column(label, key=key)
        self.show_release()
        self.refresh_runs()

    def show_release(self) -> None:
        app: Any = self.app
        release = app.release
        text = Text()
        if release is None:
            text.append("Release ", style="bold")
            text.append_text(plain(str(app.release_dir)))
            text.append("\nnot usable: ", style="bold")
            text.append_text(plain(app.release_error or "unknown error"))
            text.append("\nPass --release-dir with a pqid-release/1 directory.")
        else:
            text.append("Release ", style="bold")
            text.append_text(plain(f"{release.name} {release.version}"))
            text.append(f"   {len(release.prompts)} prompts: ")
            text.append(", ".join(f"{split} {n}" for split, n in release.split_counts().items()))
            text.append("\n")
            text.append_text(plain(str(release.root)))
            text.append("\n")
            if release.modified:
                text.append("MODIFIED: not publishable; ", style="bold")
                text.append_text(plain("; ".join(release.problems)))
            else:
                text.append("verified ", style="bold")
                text.append(f"digest {release.digest[:16]}…")
            rows = len(release.matrix_rows)
            text.append(f"   frozen matrix: {rows} row{'s' if rows != 1 else ''}")
        text.append("\nRuns directory ", style="bold")
        text.append_text(plain(str(app.runs_dir)))
        self.query_one("#release", Static).update(text)

    @work(thread=True, exclusive=True, group="home-runs", exit_on_error=False)
    def refresh_runs(self) -> None:
        app: Any = self.app
        runs = list_runs(app.runs_dir)
        self.app.call_from_thread(self._show_runs, runs)

    def _show_runs(self, runs: list[RunInfo]) -> None:
        self.runs = runs
        table = self.query_one("#runs", DataTable)
        table.clear()
        for info in runs:
            if info.problem:
                table.add_row(plain(info.name), one_line(info.problem, 80), "", "", "", "", "",
                              "", "", "yes" if info.evaluated else "no", key=str(info.path))
                continue
            table.add_row(plain(info.name), plain(info.provider), plain(info.model),
                          info.selected, info.success, info.error, info.pending,
                          info.uncertain, "yes" if info.complete else "no",
                          "yes" if info.evaluated else "no", key=str(info.path))
        hint = self.query_one("#runs-hint", Static)
        hint.display = not runs
        table.display = bool(runs)
        if not runs:
            hint.update("No runs yet. Press n to plan a first run: the oracle route answers "
                        "with the release's reference code, needs no key and sends nothing "
                        "over the network, so it is a safe way to see the whole pipeline.")

    def selected_run(self) -> Path | None:
        table = self.query_one("#runs", DataTable)
        if not self.runs or table.row_count == 0:
            return None
        row_key, _ = table.coordinate_to_cell_key(table.cursor_coordinate)
        return Path(str(row_key.value))

    def on_screen_resume(self) -> None:
        self.refresh_runs()

    def on_run_ended(self, message: RunEnded) -> None:
        # Listing reads every run back in full (a 10,000-prompt run: seconds and about 100 MiB);
        # under another screen nobody sees the list, and coming back here refreshes it anyway.
        if self.is_active:
            self.refresh_runs()

    def action_refresh(self) -> None:
        self.refresh_runs()

    def action_new_run(self) -> None:
        self.app_any.open_screen("new")

    def action_open_run(self) -> None:
        run = self.selected_run()
        if run is None:
            self.notify("No run to open yet: press n to start one.")
            return
        self.app_any.open_screen("monitor", run_dir=run)

    def action_replay(self) -> None:
        self.app_any.open_screen("replay", run_dir=self.selected_run())

    def action_credentials(self) -> None:
        self.app_any.open_screen("credentials")

    @property
    def app_any(self) -> Any:
        return self.app

    @on(DataTable.RowSelected, "#runs")
    def _row_selected(self) -> None:
        self.action_open_run()

    @on(Button.Pressed)
    def _button(self, event: Button.Pressed) -> None:
        {"new": self.action_new_run, "open": self.action_open_run,
         "replay": self.action_replay, "credentials": self.action_credentials}[
            str(event.button.id)]()
