"""Home: the release, the runs under the runs directory, and the ways onward."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.widgets import Button, Collapsible, DataTable, Footer, Header, Static

from engine.release import (
    FORMAT_PQID_BENCH_CORE,
    FORMAT_PQID_BENCH_EVIDENCE,
    FORMAT_PQID_RELEASE,
    Release,
)
from engine.release.model import Verification
from engine.run.runs import RunInfo, list_runs
from engine.states import PromptState
from pqid_tui.context import app_context
from pqid_tui.messages import RunEnded
from pqid_tui.screens.base import AppScreen
from pqid_tui.text import UNKNOWN_ERROR
from pqid_tui.widgets.plain import one_line, plain


class HomeScreen(AppScreen):
    """The start: what release is loaded, what runs exist, where to go next."""

    CSS_PATH = "home.tcss"
    AUTO_FOCUS = "#runs"
    HELP = """# Home

The release the app works on: its name, version and layout (the project's own
`pqid-release/1`, or PQID-Bench's core distribution or evidence repository), the scoring
contract its frozen rows were scored under, prompts by split, the frozen matrix (models
and reference rows) and the verification (SHA-256 digests, or for PQID-Bench the files of
`ARTIFACT_MANIFEST.tsv` verified and those absent from this copy: **a** lists them, **v**
checks every listed file again). Below, every run directory under the runs directory with
its counts and whether it has been replayed.

Select a run and press **Enter** to open its monitor, **p** to resume it (send its
pending prompts), **r** to replay it. A run in progress in this session reads *running*.
**n** plans a new run; **c** manages the keys each route would use.
"""
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("n", "new_run", "New run"),
        Binding("enter", "open_run", "Open run", show=True),
        Binding("r", "replay", "Replay"),
        Binding("c", "credentials", "Credentials"),
        Binding("a", "absent", "Absent files"),
        Binding("v", "verify", "Verify files"),
        Binding("p", "resume_run", "Resume run"),
        Binding("f5", "refresh", "Refresh"),
        # The footer shows the app's ^q Quit already; q is the same key, not a second entry.
        Binding("q", "app.quit", "Quit", show=False),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.runs: list[RunInfo] = []
        self.verification: Verification | None = None

    def compose(self) -> ComposeResult:
        yield Header()
        with Vertical(id="home"):
            yield Static(id="release", classes="panel")
            with Collapsible(id="absent", title="Absent files"):
                yield Static(id="absent-list")
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
        for key, label in (
            ("name", "run"),
            ("provider", "provider"),
            ("model", "model"),
            ("selected", "selected"),
            (PromptState.SUCCESS, "success"),
            (PromptState.ERROR, "error"),
            (PromptState.PENDING, "pending"),
            (PromptState.UNCERTAIN, "uncertain"),
            ("complete", "complete"),
            ("replayed", "replayed"),
        ):
            table.add_column(label, key=key)
        self.show_release()
        self.verify_release()
        self.refresh_runs()

    def show_release(self) -> None:
        app = app_context(self.app)
        release = app.release
        text = Text()
        if release is None:
            text.append("Release ", style="bold")
            text.append_text(plain(str(app.release_dir)))
            text.append("\nnot usable: ", style="bold")
            text.append_text(plain(app.release_error or UNKNOWN_ERROR))
            text.append(
                "\nPass --release-dir with a pqid-release/1 directory, a PQID-Bench "
                "core distribution (or its .zip) or the PQID-Bench evidence repository."
            )
        else:
            text.append_text(release_text(release, self.verification))
        text.append("\nRuns directory ", style="bold")
        text.append_text(plain(str(app.runs_dir)))
        self.query_one("#release", Static).update(text)
        absent = absent_lines(release) if release is not None else []
        box = self.query_one("#absent", Collapsible)
        box.display = bool(absent)
        box.title = (
            f"{len(release.absent) if release else 0} absent files: listed in the "
            "manifest, not in this copy (a)"
        )
        self.query_one("#absent-list", Static).update(plain("\n".join(absent)))

    @work(thread=True, exclusive=True, group="home-verify", exit_on_error=False)
    def verify_release(self) -> None:
        """Check every present file the release's manifest lists (PQID-Bench: a second)."""
        app = app_context(self.app)
        release = app.release
        if release is None or getattr(release, "verifier", None) is None:
            return
        result = release.verify_all()
        self.app.call_from_thread(self._verified, result)

    def _verified(self, result: Verification) -> None:
        self.verification = result
        self.show_release()

    @work(thread=True, exclusive=True, group="home-runs", exit_on_error=False)
    def refresh_runs(self) -> None:
        app = app_context(self.app)
        runs = list_runs(app.runs_dir)
        self.app.call_from_thread(self._show_runs, runs)

    def _show_runs(self, runs: list[RunInfo]) -> None:
        self.runs = runs
        table = self.query_one("#runs", DataTable)
        table.clear()
        app = app_context(self.app)
        running = app.session.run_dir()
        for info in runs:
            if info.problem:
                table.add_row(
                    plain(info.name),
                    one_line(info.problem, 80),
                    "",
                    "",
                    "",
                    "",
                    "",
                    "",
                    "",
                    "yes" if info.evaluated else "no",
                    key=str(info.path),
                )
                continue
            table.add_row(
                plain(info.name),
                plain(info.provider),
                plain(info.model),
                info.selected,
                info.success,
                info.error,
                info.pending,
                info.uncertain,
                "running" if info.path == running else "yes" if info.complete else "no",
                "yes" if info.evaluated else "no",
                key=str(info.path),
            )
        hint = self.query_one("#runs-hint", Static)
        hint.display = not runs
        table.display = bool(runs)
        if not runs and app.release is not None and app.release.format != FORMAT_PQID_RELEASE:
            # PQID-Bench ships no reference code, so the oracle route has nothing to answer.
            hint.update(
                "No runs yet. Press n to plan a first run: choose a route and a model; "
                "the dry-run plan shows what would be sent, and which of the study's "
                "frozen rows it replicates request for request, before anything is."
            )
        elif not runs:
            hint.update(
                "No runs yet. Press n to plan a first run: the oracle route answers "
                "with the release's reference code, needs no key and sends nothing "
                "over the network, so it is a safe way to see the whole pipeline."
            )

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
        app_context(self.app).open_screen("new")

    def action_open_run(self) -> None:
        run = self.selected_run()
        if run is None:
            self.notify("No run to open yet: press n to start one.")
            return
        app_context(self.app).open_screen("monitor", run_dir=run)

    def action_resume_run(self) -> None:
        run = self.selected_run()
        if run is None:
            self.notify("No run to resume yet: press n to start one.")
            return
        app_context(self.app).open_screen("monitor", run_dir=run, resume=True)

    def action_replay(self) -> None:
        app_context(self.app).open_screen("replay", run_dir=self.selected_run())

    def action_credentials(self) -> None:
        app_context(self.app).open_screen("credentials")

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        app = app_context(self.app)
        release = app.release
        if action == "absent":  # in the footer only when the release lacks files
            return bool(release is not None and release.absent)
        if action == "verify":  # a pqid-release/1 verified every file as it loaded
            return bool(release is not None and release.format != FORMAT_PQID_RELEASE)
        return True

    def action_verify(self) -> None:
        app = app_context(self.app)
        if (
            app.release is None
            or getattr(app.release, "verifier", None) is None
            or app.release.format == FORMAT_PQID_RELEASE
        ):
            self.notify("Every file of this release was verified when it was loaded.")
            return
        self.verification = None
        self.show_release()
        self.verify_release()

    def action_absent(self) -> None:
        box = self.query_one("#absent", Collapsible)
        box.collapsed = not box.collapsed

    @on(DataTable.RowSelected, "#runs")
    def _row_selected(self) -> None:
        self.action_open_run()

    @on(Button.Pressed)
    def _button(self, event: Button.Pressed) -> None:
        {
            "new": self.action_new_run,
            "open": self.action_open_run,
            "replay": self.action_replay,
            "credentials": self.action_credentials,
        }[str(event.button.id)]()


FORMAT_NAMES = {
    FORMAT_PQID_BENCH_CORE: "PQID-Bench core distribution",
    FORMAT_PQID_BENCH_EVIDENCE: "PQID-Bench evidence repository",
}


def matrix_text(release: Release) -> str:
    """`21 models, 2 reference rows`; for a layout without a matrix, what has one."""
    rows = release.matrix_rows
    if not rows:
        if release.format == FORMAT_PQID_BENCH_CORE:
            return "none in the core profile (compare needs the PQID-Bench evidence repository)"
        return "none"
    models = sum(1 for r in rows if r.kind == "model")
    others = len(rows) - models
    parts = []
    if models:
        parts.append(f"{models} model{'s' if models != 1 else ''}")
    if others:
        parts.append(f"{others} reference row{'s' if others != 1 else ''}")
    return ", ".join(parts)


def release_text(release: Release, verification: Verification | None = None) -> Text:
    """The release panel: identity and layout, contract, prompts, matrix, verification."""
    text = Text()
    text.append("Release ", style="bold")
    text.append_text(plain(f"{release.name} {release.version}"))
    layout = FORMAT_NAMES.get(release.format, release.format)
    if release.profile:
        layout += f", profile {release.profile}"
    text.append("   ")
    text.append_text(plain(layout))
    text.append("\n")
    text.append(f"{len(release.prompts)} prompts: ")
    text.append_text(
        plain(", ".join(f"{split} {n}" for split, n in release.split_counts().items()))
    )
    text.append("   frozen matrix: ", style="bold")
    text.append_text(plain(matrix_text(release)))
    text.append("\nscoring ", style="bold")
    text.append_text(plain(release.contract))
    if release.predicate:
        text.append("   predicate ", style="bold")
        text.append_text(plain(release.predicate))
    if release.python_version:
        text.append("   Python ", style="bold")
        text.append_text(plain(release.python_version))
    text.append("\n")
    text.append_text(plain(str(release.root)))
    archive = getattr(release, "archive", None)
    if archive:
        text.append("  from ")
        text.append_text(plain(archive))
    text.append("\n")
    text.append_text(verification_text(release, verification))
    return text


def verification_text(release: Release, verification: Verification | None) -> Text:
    """One line: what was verified against the release's manifest, what is absent or differs."""
    text = Text()
    problems = verification.problems if verification is not None else release.problems
    if release.modified or problems:
        text.append("MODIFIED: not publishable; ", style="bold")
        text.append_text(plain("; ".join(problems)))
        return text
    if verification is not None:
        counts: tuple[int, int] | None = (verification.verified, verification.listed)
    elif getattr(release, "verifier", None) is None:
        counts = (
            (release.verified_files, release.manifest_files) if release.manifest_files else None
        )
    else:
        counts = None
        text.append("verifying ", style="bold")
        text.append(f"every present file of the {release.manifest_files} the manifest lists…")
    if counts is not None:
        text.append("verified ", style="bold")
        text.append(f"{counts[0]} of {counts[1]} listed files")
    elif verification is None and getattr(release, "verifier", None) is None:
        text.append("verified", style="bold")
    if release.absent:
        text.append(f"; {len(release.absent)} absent", style="bold")
        text.append(" (a lists them)")
    text.append(f"   digest {release.digest[:16]}…")
    return text


def absent_lines(release: Release) -> list[str]:
    """The absent files, a folder missing entirely named once with its count."""
    summary = getattr(release, "absent_summary", None)
    if callable(summary):
        return list(summary())
    return list(release.absent)
