"""The live per-prompt grid and the retry queue: line-rendered tables over `RunProgress` rows.

A run can have thousands of prompts changing many times a second. These tables keep the
prompt rows by reference and render only the lines on screen, so applying a flush costs
time in proportion to what changed plus one screenful, never to the size of the run.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import ClassVar

from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.binding import Binding, BindingType
from textual.geometry import Size
from textual.message import Message
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip

from engine.run.runs import PromptRow, in_retry_queue
from engine.states import PromptState
from pqid_tui.textsafe import escape_controls

# Theme variable behind each state's colour (resolved against the running theme).
STATE_VARIABLES: dict[str, str] = {
    PromptState.PENDING: "text-muted",
    PromptState.IN_FLIGHT: "accent",
    PromptState.SAVING: "accent",
    PromptState.RETRYING: "warning",
    PromptState.SUCCESS: "success",
    PromptState.ERROR: "error",
    PromptState.UNCERTAIN: "warning",
    PromptState.SKIPPED: "text-muted",
}
STATE_LABELS: dict[str, str] = {PromptState.IN_FLIGHT: "in flight"}
# The "state" sort: what needs attention first.
STATE_ORDER: dict[str, int] = {
    state: i
    for i, state in enumerate(
        (
            PromptState.ERROR,
            PromptState.UNCERTAIN,
            PromptState.RETRYING,
            PromptState.IN_FLIGHT,
            PromptState.SAVING,
            PromptState.PENDING,
            PromptState.SKIPPED,
            PromptState.SUCCESS,
        )
    )
}


def next_attempt_text(when: float | None) -> str:
    if when is None:
        return ""
    return time.strftime("%H:%M:%S", time.localtime(when))


def _fit(text: str, width: int) -> str:
    """`text` on one line, cut or padded to exactly `width` cells."""
    text = escape_controls(text).replace("\n", " ").replace("\t", " ")
    if len(text) > width:
        return text[: max(0, width - 1)] + "…" if width > 0 else ""
    return text.ljust(width)


class PromptTable(ScrollView, can_focus=True):
    """Prompt rows with a cursor and marks; the rows are the progress object's own rows."""

    DEFAULT_CSS = """
    PromptTable {
        height: 1fr;
        background: $surface;
        overflow-x: hidden;
    }
    PromptTable > .prompt-table--header {
        text-style: bold;
        background: $panel;
    }
    PromptTable > .prompt-table--cursor {
        background: $block-cursor-blurred-background;
    }
    PromptTable:focus > .prompt-table--cursor {
        background: $block-cursor-background;
        color: $block-cursor-foreground;
        text-style: bold;
    }
    PromptTable > .prompt-table--even {
        background: $surface-lighten-1;
    }
    """
    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "prompt-table--header",
        "prompt-table--cursor",
        "prompt-table--even",
    }
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("up", "cursor(-1)", "Up", show=False),
        Binding("down", "cursor(1)", "Down", show=False),
        Binding("pageup", "page(-1)", "Page up", show=False),
        Binding("pagedown", "page(1)", "Page down", show=False),
        Binding("home", "cursor_to(0)", "First", show=False),
        Binding("end", "cursor_to(-1)", "Last", show=False),
        Binding("enter", "select", "Inspect", show=False),
    ]
    # (key, label, width); the last column takes the remaining width.
    COLUMNS: ClassVar[tuple[tuple[str, str, int], ...]] = (
        ("mark", " ", 2),
        ("prompt", "prompt", 0),
        ("state", "state", 10),
        ("attempt", "attempt", 8),
        ("next", "next try", 10),
        ("error", "error / note", 0),
    )

    cursor_row: reactive[int] = reactive(0, always_update=True)

    class RowSelected(Message):
        """Enter (or a double click) on a row."""

        def __init__(self, table: PromptTable, prompt_id: str) -> None:
            super().__init__()
            self.table = table
            self.prompt_id = prompt_id

        @property
        def control(self) -> PromptTable:
            return self.table

    class CursorMoved(Message):
        """The cursor is on another row, or the rows under it changed."""

        def __init__(self, table: PromptTable) -> None:
            super().__init__()
            self.table = table

        @property
        def control(self) -> PromptTable:
            return self.table

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.ids: list[str] = []  # the rows shown, in display order
        self.order: list[str] = []  # every row, in arrival order
        self.rows: dict[str, PromptRow] = {}
        self._index: dict[str, int] = {}
        self.search = ""  # case-insensitive substring of the prompt ID or the error
        self.only: str | None = None  # one state ("error", "uncertain") or None for all
        self.sort_key: str | None = None  # None: arrival order; else a SORTS key
        self.marked: set[str] = set()
        self._id_width = 6
        self._state_styles: dict[str, Style] = {}

    def on_mount(self) -> None:
        self._resolve_styles()
        self.watch(self.app, "theme", lambda _: self._resolve_styles(), init=False)

    def _resolve_styles(self) -> None:
        variables = self.app.get_css_variables()
        # Muted theme colours are relative ("auto 60%"), which a rich style cannot hold.
        self._state_styles = {
            state: Style.parse(value) if value.startswith("#") else Style(dim=True)
            for state, var in STATE_VARIABLES.items()
            for value in [variables.get(var, "")]
        }
        self.refresh()

    # -- data --------------------------------------------------------------------------------
    @property
    def row_count(self) -> int:
        return len(self.ids)

    def has_row(self, prompt_id: str) -> bool:
        return prompt_id in self._index

    def _append(self, row: PromptRow) -> None:
        self.order.append(row.prompt_id)
        self._id_width = max(self._id_width, min(40, len(row.prompt_id)))
        if not self.view_active:
            self._index[row.prompt_id] = len(self.ids)
            self.ids.append(row.prompt_id)

    # -- filter, search, sort ------------------------------------------------------------------
    SORT_CYCLE: ClassVar[tuple[str | None, ...]] = (None, "state", "prompt", "attempts")
    ONLY_CYCLE: ClassVar[tuple[str | None, ...]] = (
        None,
        PromptState.ERROR,
        PromptState.UNCERTAIN,
        PromptState.RETRYING,
    )
    SORTS: ClassVar[dict[str, Callable[[PromptRow], tuple[object, ...]]]] = {
        "prompt": lambda r: (r.prompt_id,),
        "state": lambda r: (STATE_ORDER.get(r.state, 99), r.prompt_id),
        "attempts": lambda r: (-(r.attempt or 0), r.prompt_id),
    }

    @property
    def view_active(self) -> bool:
        return bool(self.search or self.only or self.sort_key)

    def matches(self, row: PromptRow) -> bool:
        if self.only is not None and row.state != self.only:
            return False
        if self.search:
            needle = self.search.lower()
            return needle in row.prompt_id.lower() or needle in (row.error or "").lower()
        return True

    def _rebuild_view(self) -> None:
        """Recompute the shown rows from every row (O(rows); only with a filter or a sort)."""
        current = self.cursor_prompt()
        if self.view_active:
            ids = [pid for pid in self.order if self.matches(self.rows[pid])]
            if self.sort_key is not None:
                key = self.SORTS[self.sort_key]
                ids.sort(key=lambda pid: key(self.rows[pid]))
        else:
            ids = list(self.order)
        self.ids = ids
        self._index = {pid: i for i, pid in enumerate(ids)}
        if current in self._index:
            self.cursor_row = self._index[current]

    def set_view(
        self,
        *,
        search: str | None = None,
        only: str | bool | None = False,
        sort_key: str | bool | None = False,
    ) -> None:
        """Change the filter (`search`, `only`) or the sort; False leaves a part as it is."""
        if search is not None:
            self.search = search
        if only is not False:
            self.only = only if isinstance(only, str) else None
        if sort_key is not False:
            self.sort_key = sort_key if isinstance(sort_key, str) else None
        self._rebuild_view()
        self._resize()

    def cycle_sort(self) -> None:
        """Arrival order, then by state (what needs attention first), ID, attempts."""
        cycle = self.SORT_CYCLE
        self.set_view(sort_key=cycle[(cycle.index(self.sort_key) + 1) % len(cycle)] or None)

    def cycle_only(self) -> None:
        """Every row, then only errors, only uncertain, only retrying."""
        cycle = self.ONLY_CYCLE
        self.set_view(only=cycle[(cycle.index(self.only) + 1) % len(cycle)] or None)

    def view_text(self) -> str:
        """The active filter and sort in words ("" when every row shows in arrival order)."""
        parts = []
        if self.only:
            parts.append(f"only {self.only}")
        if self.search:
            parts.append(f"matching {self.search!r}")
        if self.sort_key:
            parts.append(f"sorted by {self.sort_key}")
        if not parts:
            return ""
        return f"{len(self.ids)} of {len(self.order)} shown, " + ", ".join(parts)

    def _resize(self) -> None:
        self.virtual_size = Size(self.size.width, len(self.ids) + 1)
        if self.cursor_row >= len(self.ids):
            self.cursor_row = max(0, len(self.ids) - 1)
        self.refresh()

    def apply(self, rows: Iterable[PromptRow]) -> None:
        """Take the changed rows: new ones are appended; then repaint what is on screen."""
        for row in rows:
            known = row.prompt_id in self.rows
            self.rows[row.prompt_id] = row
            if not known:
                self._append(row)
        if self.view_active:
            self._rebuild_view()
        self._resize()

    def replace(self, rows: Iterable[PromptRow]) -> None:
        """Show exactly these rows, in this order (keeping the cursor on its prompt)."""
        current = self.cursor_prompt()
        self.ids, self.order, self._index, self.rows = [], [], {}, {}
        for row in rows:
            self.rows[row.prompt_id] = row
            self._append(row)
        self.marked &= set(self.order)
        if self.view_active:
            self._rebuild_view()
        if current in self._index:
            self.cursor_row = self._index[current]
        self._resize()

    def cells(self, row: PromptRow) -> dict[str, str]:
        """The text of each column of a row (plain strings; never markup)."""
        return {
            "mark": "•" if row.prompt_id in self.marked else "",
            "prompt": row.prompt_id,
            "state": STATE_LABELS.get(row.state, row.state),
            "attempt": str(row.attempt or ""),
            "next": next_attempt_text(
                row.next_attempt_at if row.state == PromptState.RETRYING else None
            ),
            "error": (row.error or "")
            if row.state != PromptState.SUCCESS
            else (f"⚠ {row.note}" if row.note else ""),
        }

    def cursor_prompt(self) -> str | None:
        if not self.ids:
            return None
        return self.ids[min(self.cursor_row, len(self.ids) - 1)]

    def cursor_row_data(self) -> PromptRow | None:
        pid = self.cursor_prompt()
        return None if pid is None else self.rows.get(pid)

    def move_to(self, prompt_id: str) -> None:
        self.cursor_row = self._index[prompt_id]

    def toggle_mark(self, prompt_id: str) -> None:
        self.marked ^= {prompt_id}
        self.refresh()

    def line_text(self, index: int) -> list[str]:
        """The cells of row `index` as shown (for tests and screen readers of the SVG)."""
        return [c.strip() for c in self._row_cells(self.rows[self.ids[index]])]

    # -- rendering ---------------------------------------------------------------------------
    # Dropped first when the table is narrow: the prompt ID and its state always stay.
    OPTIONAL: ClassVar[tuple[str, ...]] = ("attempt", "next")

    def _widths(self) -> list[int]:
        """Column widths. The prompt ID has priority: it is shown in full (up to 40 cells)
        whenever the table is wide enough for it and the state; the optional columns are
        dropped (width 0) before the ID is cut, and the error column takes what is left."""
        total = self.size.width
        fixed = {key: width for key, _, width in self.COLUMNS if key not in ("prompt", "error")}
        prompt = self._id_width + 1
        for key in self.OPTIONAL:
            if key in fixed and sum(fixed.values()) + prompt + 16 > total:
                fixed[key] = 0
        prompt = max(8, min(prompt, total - sum(fixed.values()) - 4))
        widths = [prompt if key == "prompt" else fixed.get(key, 0) for key, _, _ in self.COLUMNS]
        widths[-1] = max(4, total - sum(widths[:-1]))
        return widths

    def _row_cells(self, row: PromptRow) -> list[str]:
        cells = self.cells(row)
        return [
            _fit(cells[key], width)
            for (key, _, _), width in zip(self.COLUMNS, self._widths(), strict=True)
        ]

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        base = self.rich_style
        if y == 0:
            style = base + self.get_component_rich_style("prompt-table--header")
            text = "".join(
                _fit(label, w)
                for (_, label, _), w in zip(self.COLUMNS, self._widths(), strict=True)
            )
            return Strip([Segment(_fit(text, width), style)], width)
        index = self.scroll_offset.y + y - 1
        if index >= len(self.ids):
            return Strip.blank(width, base)
        row = self.rows[self.ids[index]]
        if index == self.cursor_row:
            row_style = base + self.get_component_rich_style("prompt-table--cursor")
        elif index % 2:
            row_style = base + self.get_component_rich_style("prompt-table--even")
        else:
            row_style = base
        segments = []
        for (key, _, _), cell in zip(self.COLUMNS, self._row_cells(row), strict=True):
            style = row_style
            if key == "state" and index != self.cursor_row:
                style = row_style + self._state_styles.get(row.state, Style())
            segments.append(Segment(cell, style))
        used = sum(len(s.text) for s in segments)
        if used < width:
            segments.append(Segment(" " * (width - used), row_style))
        return Strip(segments).crop(0, width)

    def on_resize(self) -> None:
        self._resize()

    # -- cursor and mouse --------------------------------------------------------------------
    def watch_cursor_row(self, row: int) -> None:
        self.post_message(self.CursorMoved(self))
        visible = max(1, self.size.height - 1)
        top = int(self.scroll_offset.y)
        if row < top:
            self.scroll_to(y=row, animate=False)
        elif row >= top + visible:
            self.scroll_to(y=row - visible + 1, animate=False)
        self.refresh()

    def action_cursor(self, delta: int) -> None:
        if self.ids:
            self.cursor_row = min(len(self.ids) - 1, max(0, self.cursor_row + delta))

    def action_page(self, direction: int) -> None:
        self.action_cursor(direction * max(1, self.size.height - 2))

    def action_cursor_to(self, index: int) -> None:
        if self.ids:
            self.cursor_row = index % len(self.ids)

    def action_select(self) -> None:
        pid = self.cursor_prompt()
        if pid is not None:
            self.post_message(self.RowSelected(self, pid))

    def on_click(self, event: events.Click) -> None:
        index = int(self.scroll_offset.y) + event.y - 1
        if event.y >= 1 and 0 <= index < len(self.ids):
            self.cursor_row = index
            if event.chain >= 2:
                self.action_select()


class RunGrid(PromptTable):
    """Every prompt of the run: state, attempt, next attempt time while retrying, last error."""

    HELP = """## Run grid

One row per prompt. **space** marks a row for *retry selected*; **enter** (or a double
click) opens the payload inspector for the row under the cursor."""


class RetryQueue(PromptTable):
    """Prompts being retried, ended in a terminal error, or uncertain, with their last error."""

    HELP = """## Retry queue

Prompts waiting for a backoff (*retrying*, then *in flight* again until they succeed),
ended in a terminal *error*, or *uncertain* (in flight when an earlier run stopped: the
provider may have answered and billed them). Each shows its last error."""
    COLUMNS: ClassVar[tuple[tuple[str, str, int], ...]] = (
        ("mark", " ", 2),
        ("prompt", "prompt", 0),
        ("state", "state", 10),
        ("next", "next try", 10),
        ("error", "last error", 0),
    )

    def apply(
        self, rows: Iterable[PromptRow], everything: Callable[[], list[PromptRow]] | None = None
    ) -> None:
        """Add or update the changed rows that belong in the queue, drop those that left."""
        rows = list(rows)
        leaving = {r.prompt_id for r in rows if not in_retry_queue(r) and self.has_row(r.prompt_id)}
        if leaving:
            kept = [self.rows[pid] for pid in self.ids if pid not in leaving]
            self.replace(kept)
        super().apply(r for r in rows if in_retry_queue(r))
