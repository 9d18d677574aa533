"""Widgets whose text wraps instead of being cut: what the user agrees to, and logs they read."""

from __future__ import annotations

from typing import cast

from textual.css.styles import RulesMap
from textual.events import Resize
from textual.geometry import Size
from textual.widgets import Checkbox, RichLog

from pqid_tui.widgets.plain import plain


class WrappingCheckbox(Checkbox):
    """A checkbox whose label wraps over as many lines as it needs.

    Textual's checkbox shows one line and cuts the rest with an ellipsis; an acknowledgement
    must be readable in full at any width, so every screen that asks the user to agree to
    something uses this one (the label is still plain text: no markup is interpreted).
    """

    DEFAULT_CSS = """
    WrappingCheckbox {
        width: 1fr;
        height: auto;
        text-wrap: wrap;
        text-overflow: fold;
    }
    """

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        # The widget's styles as the rules to measure by, as Textual's own Widget passes them.
        return max(1, self.render().get_height(cast(RulesMap, self.styles), width))


class WrappingLog(RichLog):
    """A log of plain lines that wrap at the widget's width (no line is cut off).

    Every line is shown literally (control characters escaped, no markup); `texts` keeps
    the lines as written, for tests and for copying.
    """

    # The scrollbar's room is kept from the start: lines wrapped before it appeared would
    # otherwise be two cells too wide once it does.
    DEFAULT_CSS = """
    WrappingLog {
        scrollbar-gutter: stable;
    }
    """

    def __init__(
        self, *, max_lines: int | None = 2000, id: str | None = None, classes: str | None = None
    ) -> None:
        super().__init__(
            max_lines=max_lines,
            min_width=20,
            wrap=True,
            highlight=False,
            markup=False,
            id=id,
            classes=classes,
        )
        self.texts: list[str] = []
        self._wrapped_at = 0

    def write_line(self, line: str) -> None:
        self.texts.append(line)
        if self.max_lines is not None and len(self.texts) > self.max_lines:
            del self.texts[: len(self.texts) - self.max_lines]
        width = self.scrollable_content_region.width
        known = self._size_known and width > 0
        self._wrapped_at = width if known else 0
        self.write(plain(line), width=width if known else None)

    def on_resize(self, event: Resize) -> None:
        super().on_resize(event)
        width = self.scrollable_content_region.width
        if self.texts and width > 0 and width != self._wrapped_at:
            # Wrapped again at the new width (an outer scrollbar appearing narrows the log).
            texts = self.texts
            super().clear()
            self.texts = []
            for line in texts:
                self.write_line(line)

    def clear(self) -> WrappingLog:
        self.texts = []
        super().clear()
        return self
