"""A single updating progress line for the batch commands when stderr is a terminal.

Logs and pipes keep one line per event (a request's start and end, a prompt replayed, every
50th cell rescored); a person at a terminal gets one line that is redrawn in place: a bar,
the counts, the rate and the time left at that rate. `run-model` uses LiveProgress;
`replay`, `demo` and `rescore` use a CountLine.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, TextIO

from engine.states import PromptState
from pqid_tui.textsafe import escape_controls

if TYPE_CHECKING:
    from engine.events import BatchPolled, Event, ProgressCallback, ReplayFinished, RunStarted
    from engine.rundir.shapes import RunSummary

# A monotonic clock in seconds (time.monotonic; a test's fake).
Clock = Callable[[], float]

# The states shown on the line, in this order (prompts this invocation sends).
SHOWN = (
    PromptState.IN_FLIGHT,
    PromptState.RETRYING,
    PromptState.SAVING,
    PromptState.SUCCESS,
    PromptState.ERROR,
    PromptState.UNCERTAIN,
)
LABELS = {
    "in_flight": "sending",
    "retrying": "retrying",
    "saving": "saving",
    "success": "ok",
    "error": "error",
    "uncertain": "uncertain",
}
BAR_WIDTH = 20
REDRAW_SECONDS = 0.1


def image_line(event: object) -> str | None:
    """The line of an image event (a build log line, the image ready), else None."""
    from engine.events import ImageBuildLog, ImageReady

    if isinstance(event, ImageBuildLog):
        return f"image: {escape_controls(event.line)}"
    if isinstance(event, ImageReady):
        return f"image {event.tag} {'built' if event.built else 'reused'}"
    return None


def run_started_line(event: RunStarted) -> str:
    """The first line of a model run: what it selected and sends, and where."""
    return (
        f"run {event.provider}/{escape_controls(event.model)}: "
        f"{event.selected} selected, {event.to_send} to send, "
        f"{event.skipped} skipped -> {event.run_dir}"
    )


def batch_polled_line(event: BatchPolled) -> str:
    """A line per poll of a provider batch."""
    return (
        f"batch {escape_controls(event.batch_id)}: {escape_controls(event.status)}"
        f", {event.completed}/{event.total} done, {event.failed} failed"
    )


def run_finished_line(summary: RunSummary, seconds: float) -> str:
    """The last line of a model run: its counts from run-summary.json."""
    return (
        f"done in {seconds:.1f}s: {summary.get('success')} success, "
        f"{summary.get('error')} error, {summary.get('pending')} pending, "
        f"{summary.get('uncertain')} uncertain"
    )


def replay_finished_line(event: ReplayFinished, seconds: float) -> str:
    """The last line of a replay: the count per category and where the results went."""
    counts = ", ".join(f"{v} {k}" for k, v in event.counts.items() if v)
    return f"done in {seconds:.1f}s: {counts} -> {event.output_dir}"


def wants_live_line(stream: object) -> bool:
    """True when `stream` is a terminal (a pipe, a file or a test's buffer is not)."""
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except (OSError, ValueError):
        return False


class RedrawnLine:
    """One stderr line redrawn in place, at most every REDRAW_SECONDS unless forced, with
    permanent lines printed above it; `render` gives its text."""

    def __init__(self, stream: TextIO | None = None, clock: Clock = time.monotonic) -> None:
        self.stream = stream or sys.stderr
        self.clock = clock
        self.t0 = clock()
        self._drawn_at = 0.0
        self._drawn = False

    def render(self) -> str:
        raise NotImplementedError

    def draw(self, force: bool = False) -> None:
        now = self.clock()
        if not force and self._drawn and now - self._drawn_at < REDRAW_SECONDS:
            return
        self._drawn_at = now
        self._drawn = True
        # Carriage return and erase-line: the line is redrawn in place.
        self.stream.write("\r\x1b[K" + self.render())
        self.stream.flush()

    def line(self, text: str) -> None:
        """A permanent line; the progress line is drawn again under it on the next draw."""
        if self._drawn:
            self.stream.write("\r\x1b[K")  # the bar's line becomes this line
            self._drawn = False
        self.stream.write(text + "\n")
        self.stream.flush()


def _bar(done: int, total: int) -> str:
    filled = BAR_WIDTH * done // total if total else BAR_WIDTH
    return "#" * filled + "-" * (BAR_WIDTH - filled)


def _eta(done: int, total: int, rate: float) -> str:
    return "ETA --" if rate <= 0 or done >= total else f"ETA {duration((total - done) / rate)}"


class LiveProgress(RedrawnLine):
    """Redraws one stderr line as prompts change state; prints the start and end lines."""

    def __init__(self, stream: TextIO | None = None, clock: Clock = time.monotonic) -> None:
        super().__init__(stream, clock)
        self.total = 0
        self.states: dict[str, str] = {}  # prompt -> state, prompts this invocation sent
        self.finished = 0  # prompts whose request has ended (answered or failed for good)

    def __call__(self, event: Event) -> None:
        from engine.events import BatchPolled, PromptStateChanged, RunFinished, RunStarted

        if isinstance(event, RunStarted):
            self.total = event.to_send
            self.line(run_started_line(event))
        elif isinstance(event, PromptStateChanged):
            pid = event.prompt_id
            if event.state == PromptState.IN_FLIGHT or pid in self.states:
                before = self.states.get(pid)
                self.states[pid] = event.state
                ended = ("saving", "success", "error")
                if event.state in ended and before not in ended:
                    self.finished += 1
                elif event.state not in ended and before in ended:
                    self.finished -= 1  # sent again (a retry after saving failed)
                self.draw(force=event.state in (PromptState.SUCCESS, PromptState.ERROR))
        elif isinstance(event, BatchPolled):
            self.line(batch_polled_line(event))
        elif isinstance(event, RunFinished):
            self.draw(force=True)
            self.line(run_finished_line(event.summary, self.clock() - self.t0))

    def render(self) -> str:
        """The progress line's text (no control sequences)."""
        total = max(self.total, len(self.states))
        done = min(self.finished, total)
        counts: dict[str, int] = {state: 0 for state in SHOWN}
        for state in self.states.values():
            if state in counts:
                counts[state] += 1
        queued = max(0, total - len(self.states))
        parts = [f"queued {queued}"] + [f"{LABELS[s]} {n}" for s, n in counts.items() if n]
        elapsed = max(self.clock() - self.t0, 1e-9)
        rate = done / elapsed
        return (
            f"[{_bar(done, total)}] {done}/{total}  "
            + "  ".join(parts)
            + f"  {rate:.2f} req/s  {_eta(done, total, rate)}"
        )


def duration(seconds: float) -> str:
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


class ReplayProgress:
    """One stderr line per evaluated prompt, plus the image build and a last line of counts."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        self.done = 0
        self.t0 = time.monotonic()

    def __call__(self, event: Event) -> None:
        # Here, not at the top: building the parsers (--help) need not load the event types.
        from engine.events import EvaluationFinished, ReplayFinished

        image = image_line(event)
        if image is not None:
            self._line(image)
        elif isinstance(event, EvaluationFinished):
            self.done += 1
            self._line(f"[{self.done}/{event.total}] {event.prompt_id}: {event.category}")
        elif isinstance(event, ReplayFinished):
            self._line(replay_finished_line(event, time.monotonic() - self.t0))

    def _line(self, text: str) -> None:
        print(text, file=self.stream, flush=True)


class RescoreProgressPrinter:
    """Progress on stderr: the image, then cells done / total with the model's own count."""

    def __init__(self, stream: TextIO | None = None, every: int = 50) -> None:
        self.stream = stream or sys.stderr
        self.every = every
        self.t0 = time.monotonic()

    def __call__(self, event: object) -> None:
        from engine.replay.rescore import RescoreProgress

        image = image_line(event)
        if image is not None:
            self._line(image)
        elif isinstance(event, RescoreProgress):
            model_done = event.model_done == event.model_total
            if model_done or event.done % self.every == 0 or event.done == event.total:
                self._line(
                    f"[{event.done}/{event.total}] {event.label}: "
                    f"{event.model_done}/{event.model_total}"
                    f"{' done' if model_done else ''} "
                    f"({time.monotonic() - self.t0:.1f}s)"
                )

    def _line(self, text: str) -> None:
        print(text, file=self.stream, flush=True)


class CountLine(RedrawnLine):
    """One redrawn line for work counted in items (replayed prompts, rescored cells): a bar,
    done/total, the count per outcome, the rate and the time left; permanent lines above it."""

    def __init__(
        self, stream: TextIO | None = None, clock: Clock = time.monotonic, unit: str = "items"
    ) -> None:
        super().__init__(stream, clock)
        self.unit = unit
        self.done = 0
        self.total = 0
        self.counts: dict[str, int] = {}
        self.detail = ""

    def count(self, outcome: str | None, total: int, detail: str = "") -> None:
        """One item ended (with `outcome`, if it has one worth counting)."""
        self.done += 1
        self.total = total
        if outcome:
            self.counts[outcome] = self.counts.get(outcome, 0) + 1
        self.detail = detail
        self.draw(force=self.done >= total)

    def render(self) -> str:
        total = max(self.total, self.done)
        elapsed = max(self.clock() - self.t0, 1e-9)
        rate = self.done / elapsed
        counts = "  ".join(
            f"{k} {v}" for k, v in sorted(self.counts.items(), key=lambda kv: -kv[1])
        )
        text = f"[{_bar(self.done, total)}] {self.done}/{total} {self.unit}"
        if counts:
            text += f"  {counts}"
        text += f"  {rate:.1f}/s  {_eta(self.done, total, rate)}"
        if self.detail:
            text += f"  {escape_controls(self.detail)}"
        return text


class LiveReplayProgress(CountLine):
    """`replay` and `demo` on a terminal: image lines, then one line of counts."""

    def __init__(self, stream: TextIO | None = None, clock: Clock = time.monotonic) -> None:
        super().__init__(stream, clock, unit="prompts")

    def __call__(self, event: Event) -> None:
        from engine.events import EvaluationFinished, ReplayFinished

        image = image_line(event)
        if image is not None:
            self.line(image)
        elif isinstance(event, EvaluationFinished):
            self.count(event.category, event.total)
        elif isinstance(event, ReplayFinished):
            self.line(replay_finished_line(event, self.clock() - self.t0))


class LiveRescoreProgress(CountLine):
    """`rescore` on a terminal: image lines, then one line of cells with the current model."""

    def __init__(self, stream: TextIO | None = None, clock: Clock = time.monotonic) -> None:
        super().__init__(stream, clock, unit="cells")

    def __call__(self, event: object) -> None:
        from engine.replay.rescore import RescoreProgress

        image = image_line(event)
        if image is not None:
            self.line(image)
        elif isinstance(event, RescoreProgress):
            self.count(None, event.total, f"{event.label} {event.model_done}/{event.model_total}")
            if event.model_done == event.model_total:
                self.line(
                    f"{escape_controls(event.label)}: {event.model_total} cells scored "
                    f"({self.clock() - self.t0:.1f}s)"
                )


def replay_progress(stream: TextIO) -> ProgressCallback:
    """One updating line on a terminal; one line per replayed prompt elsewhere."""
    return LiveReplayProgress(stream) if wants_live_line(stream) else ReplayProgress(stream)


def rescore_progress(stream: TextIO) -> Callable[[object], None]:
    """One updating line on a terminal; a line every 50 cells and per model elsewhere."""
    return (
        LiveRescoreProgress(stream) if wants_live_line(stream) else RescoreProgressPrinter(stream)
    )
