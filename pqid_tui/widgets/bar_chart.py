"""A horizontal bar chart drawn with block characters: one line per row, rates from 0 to 1."""

from __future__ import annotations

from typing import ClassVar, NamedTuple

from rich.cells import cell_len
from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget

from pqid_tui.textsafe import escape_controls

_EIGHTHS = " ▏▎▍▌▋▊▉"
_VALUE_WIDTH = 7  # " 100.0%"
_MARKER = "▶ "


def bar(fraction: float, width: int) -> str:
    """A bar `width` cells long at full scale, with eighth-cell resolution."""
    fraction = min(1.0, max(0.0, fraction))
    eighths = round(fraction * width * 8)
    full, part = divmod(eighths, 8)
    return "█" * full + (_EIGHTHS[part] if part else "")


def fit(label: str, width: int) -> str:
    """`label` padded to `width` cells, or cut with an ellipsis when it is longer."""
    if cell_len(label) <= width:
        return label + " " * (width - cell_len(label))
    out = ""
    for ch in label:
        if cell_len(out + ch) > width - 1:
            break
        out += ch
    return out + "…" + " " * (width - 1 - cell_len(out))


class BarRow(NamedTuple):
    """One bar: its label, rate (None: no value), the note after the value, and whether it is
    the row to find (drawn in the accent colour with a marker)."""

    label: str
    rate: float | None
    note: str = ""
    highlight: bool = False


class BarChart(Widget):
    """One labelled bar per row, in the order given; the highlighted row stands out."""

    DEFAULT_CSS = """
    BarChart {
        height: auto;
        padding: 0 1;
    }
    BarChart > .bar-chart--bar {
        color: $primary;
    }
    BarChart > .bar-chart--highlight {
        color: $accent;
        text-style: bold;
    }
    """
    COMPONENT_CLASSES: ClassVar[set[str]] = {"bar-chart--bar", "bar-chart--highlight"}

    title: reactive[str] = reactive("")
    rows: reactive[tuple[BarRow, ...]] = reactive((), layout=True)
    empty_text: reactive[str] = reactive("no comparison yet: replay the run, then press m")

    def render(self) -> Text:
        text = Text(end="")
        if self.title:
            text.append(escape_controls(self.title) + "\n", style="bold")
        if not self.rows:
            text.append(escape_controls(self.empty_text), style="dim")
            return text
        rows = [BarRow(*r) for r in self.rows]
        labels = [escape_controls(r.label) for r in rows]
        notes = [escape_controls(r.note) for r in rows]
        marker = len(_MARKER) if any(r.highlight for r in rows) else 0
        note_width = max(cell_len(n) for n in notes)
        width = max(self.size.width, 40)
        # The label gets what it needs up to a third of the width; the bar at least 10 cells.
        label_width = min(max(cell_len(label) for label in labels), max(12, width // 3))
        bar_width = max(10, width - marker - label_width - 1 - _VALUE_WIDTH - 1 - note_width)
        plain_style = self.get_component_rich_style("bar-chart--bar")
        strong = self.get_component_rich_style("bar-chart--highlight")
        for i, (row, label, note) in enumerate(zip(rows, labels, notes, strict=True)):
            if marker:
                text.append(_MARKER if row.highlight else " " * marker, style=strong)
            text.append(fit(label, label_width) + " ", style=strong if row.highlight else "")
            if row.rate is None:
                text.append(" " * bar_width + "     n/a")
            else:
                drawn = bar(row.rate, bar_width)
                text.append(drawn, style=strong if row.highlight else plain_style)
                text.append(" " * (bar_width - len(drawn)))
                text.append(f" {row.rate * 100:5.1f}%", style=strong if row.highlight else "")
            if note:
                text.append(f" {note}")
            if i < len(rows) - 1:
                text.append("\n")
        return text
