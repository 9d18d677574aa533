"""A horizontal bar chart drawn with block characters (rates between 0 and 1)."""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget

from pqid_tui.textsafe import escape_controls

_EIGHTHS = " ▏▎▍▌▋▊▉"


def bar(fraction: float, width: int) -> str:
    """A bar `width` cells long at full scale, with eighth-cell resolution."""
    fraction = min(1.0, max(0.0, fraction))
    eighths = round(fraction * width * 8)
    full, part = divmod(eighths, 8)
    return "█" * full + (_EIGHTHS[part] if part else "")


class BarChart(Widget):
    """One labelled bar per row: `(label, rate, note)`; the note is shown after the value."""

    DEFAULT_CSS = """
    BarChart {
        height: auto;
        padding: 0 1;
    }
    BarChart > .bar-chart--bar {
        color: $primary;
    }
    """
    COMPONENT_CLASSES: ClassVar[set[str]] = {"bar-chart--bar"}

    title: reactive[str] = reactive("")
    rows: reactive[tuple[tuple[str, float, str], ...]] = reactive((), layout=True)

    def render(self) -> Text:
        text = Text(end="")
        if self.title:
            text.append(escape_controls(self.title) + "\n", style="bold")
        if not self.rows:
            text.append("no comparison yet: replay the run, then press m", style="dim")
            return text
        label_width = min(28, max(len(label) for label, _, _ in self.rows))
        bar_width = max(10, self.size.width - label_width - 24)
        style = self.get_component_rich_style("bar-chart--bar")
        for i, (label, rate, note) in enumerate(self.rows):
            name = escape_controls(label)[:label_width].ljust(label_width)
            text.append(f"{name} ")
            drawn = bar(rate, bar_width)
            text.append(drawn, style=style)
            text.append(" " * (bar_width - len(drawn)))
            text.append(f" {rate * 100:5.1f}% {escape_controls(note)}")
            if i < len(self.rows) - 1:
                text.append("\n")
        return text
