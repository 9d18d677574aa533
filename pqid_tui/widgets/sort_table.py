"""A data table sortable by any column, from the keyboard and the mouse, that never truncates.

Every column gets an explicit width measured from its header and all its cells. DataTable's
automatic widths are computed on idle, after the first render, and its line caches are not
invalidated when they grow: a table rebuilt by a sort could stay drawn at header width (`n`
reading `7` for `70`, names cut to three letters). Explicit widths leave nothing to catch up.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from rich.cells import cell_len
from rich.style import Style
from rich.text import Text
from textual import on
from textual.binding import Binding, BindingType
from textual.message import Message
from textual.widgets import DataTable

from pqid_tui.textsafe import escape_controls

SortValue = float | int | str | None
_MARKS = {False: " ▲", True: " ▼"}  # ascending, descending
_MARK_WIDTH = 2


@dataclass(frozen=True, slots=True)
class Column:
    """One column: `numeric` columns are right-aligned and sort highest first, unless
    `descending` says otherwise (a rank sorts 1 first)."""

    key: str
    label: str
    numeric: bool = False
    descending: bool | None = None

    @property
    def first_reverse(self) -> bool:
        return self.numeric if self.descending is None else self.descending


@dataclass(frozen=True, slots=True)
class Cell:
    """What a cell shows and what it sorts by (None: no value, always sorted last)."""

    text: str
    value: SortValue = None


@dataclass(frozen=True, slots=True)
class Row:
    """One row: cells by column key (a missing one is empty); `highlight` marks it out."""

    key: str
    cells: Mapping[str, Cell] = field(default_factory=dict)
    highlight: bool = False


def sort_rows(rows: Sequence[Row], key: str, reverse: bool) -> list[Row]:
    """Rows ordered by one column's values; rows without a value last in both directions.

    The sort is stable, so rows with equal values keep their order.
    """

    def value(row: Row) -> SortValue:
        cell = row.cells.get(key)
        return None if cell is None else cell.value

    present = [r for r in rows if value(r) is not None]
    absent = [r for r in rows if value(r) is None]
    numbers = [r for r in present if isinstance(value(r), int | float)]
    words = [r for r in present if not isinstance(value(r), int | float)]
    numbers.sort(key=lambda r: float(value(r) or 0), reverse=reverse)
    words.sort(key=lambda r: str(value(r)).casefold(), reverse=reverse)
    return numbers + words + absent


class SortableTable(DataTable[Text]):
    """Rows of labelled cells; `s` (or a header click) sorts by the column under the cursor."""

    HELP = """## Sortable table

**left**/**right** choose a column, **s** sorts the rows by it (highest first for numbers,
A to Z for text); **s** again reverses the order. Clicking a column header does the same.
The sorted column's header shows ▼ (descending) or ▲ (ascending). Rows without a value
stay at the bottom in both directions.
"""
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("s", "sort", "Sort by column"),
    ]
    DEFAULT_CSS = """
    SortableTable > .sortable-table--highlight {
        text-style: bold;
        color: $accent;
    }
    """
    COMPONENT_CLASSES: ClassVar[set[str]] = {"sortable-table--highlight"}

    class Sorted(Message):
        """The rows were sorted (by the user or the program)."""

        def __init__(self, table: SortableTable, key: str, reverse: bool) -> None:
            super().__init__()
            self.table = table
            self.key = key
            self.reverse = reverse

        @property
        def control(self) -> SortableTable:
            return self.table

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(
            id=id, classes=classes, cursor_type="column", zebra_stripes=True, show_cursor=False
        )
        self.table_columns: tuple[Column, ...] = ()
        self.table_rows: tuple[Row, ...] = ()
        self.sort_key: str | None = None
        self.sort_reverse = False

    # The column cursor says which column `s` sorts by: shown only while keys reach the table.
    def on_focus(self) -> None:
        self.show_cursor = True

    def on_blur(self) -> None:
        self.show_cursor = False

    # -- content ---------------------------------------------------------------------------------
    def show(
        self,
        columns: Sequence[Column],
        rows: Sequence[Row],
        *,
        sort_key: str | None = None,
        reverse: bool | None = None,
        fixed: int = 0,
    ) -> None:
        """Replace the content; sorted by `sort_key` (default direction per column) if given.

        The first `fixed` columns stay in view when the table scrolls sideways, unless they
        would take more than two thirds of the screen's width.
        """
        self.table_columns = tuple(columns)
        self.table_rows = tuple(rows)
        pinned = sum(
            self.column_width(c) + 2 * self.cell_padding for c in self.table_columns[:fixed]
        )
        self.fixed_columns = fixed if pinned <= self.app.size.width * 2 // 3 else 0
        keys = {c.key for c in self.table_columns}
        self.sort_key = sort_key if sort_key in keys else None
        if self.sort_key is not None:
            self.sort_reverse = self._default_reverse(self.sort_key) if reverse is None else reverse
        self._rebuild(scroll=False)
        if self.sort_key is not None:  # the cursor starts on the sorted column: `s` reverses
            self.move_cursor(
                column=[c.key for c in self.table_columns].index(self.sort_key), scroll=False
            )
        # New content starts at the left edge, scrolled only as far as the cursor needs; a
        # table shown for the first time has no size until it is laid out, so after that.
        self.call_after_refresh(self._scroll_home_to_cursor)

    def _scroll_home_to_cursor(self) -> None:
        self.scroll_to(x=0, animate=False, immediate=True)
        self.move_cursor(column=self.cursor_column)

    @property
    def ordered(self) -> list[Row]:
        """The rows in the order shown."""
        if self.sort_key is None:
            return list(self.table_rows)
        return sort_rows(self.table_rows, self.sort_key, self.sort_reverse)

    def column_width(self, column: Column) -> int:
        """The width that shows the header (with a sort mark) and every cell in full."""
        cells = [
            cell_len(escape_controls(r.cells[column.key].text))
            for r in self.table_rows
            if column.key in r.cells
        ]
        return max([cell_len(escape_controls(column.label)) + _MARK_WIDTH, *cells])

    # -- sorting ---------------------------------------------------------------------------------
    def _default_reverse(self, key: str) -> bool:
        column = next((c for c in self.table_columns if c.key == key), None)
        return bool(column and column.first_reverse)

    def sort_by(self, key: str, reverse: bool | None = None) -> None:
        """Sort by `key`; the same column again (without `reverse`) flips the direction."""
        if key not in {c.key for c in self.table_columns}:
            return
        if reverse is None:
            reverse = not self.sort_reverse if key == self.sort_key else self._default_reverse(key)
        self.sort_key, self.sort_reverse = key, reverse
        self._rebuild()
        self.post_message(self.Sorted(self, key, reverse))

    def action_sort(self) -> None:
        if not self.table_columns:
            return
        column = min(max(self.cursor_column, 0), len(self.table_columns) - 1)
        self.sort_by(self.table_columns[column].key)

    @on(DataTable.HeaderSelected)
    def _header_clicked(self, event: DataTable.HeaderSelected) -> None:
        if event.data_table is self:
            event.stop()
            self.move_cursor(column=event.column_index)
            self.sort_by(str(event.column_key.value))

    # -- drawing ---------------------------------------------------------------------------------
    def _header(self, column: Column) -> Text:
        mark = _MARKS[self.sort_reverse] if column.key == self.sort_key else ""
        return Text(
            escape_controls(column.label) + mark,
            end="",
            justify="right" if column.numeric else "left",
        )

    def _rebuild(self, *, scroll: bool = True) -> None:
        cursor_column = self.cursor_column
        # clear() scrolls home; a re-sort keeps the view where the user had it (the widths,
        # hence the scrollable size, are unchanged, so the offsets stay valid).
        offsets = (self.scroll_x, self.scroll_y)
        highlight = (
            self.get_component_rich_style("sortable-table--highlight", partial=True)
            if self.is_mounted
            else Style(bold=True)
        )
        self.clear(columns=True)
        for column in self.table_columns:
            self.add_column(self._header(column), width=self.column_width(column), key=column.key)
        for row in self.ordered:
            cells = []
            for column in self.table_columns:
                cell = row.cells.get(column.key)
                cells.append(
                    Text(
                        escape_controls(cell.text if cell else ""),
                        end="",
                        no_wrap=True,
                        style=highlight if row.highlight else "",
                        justify="right" if column.numeric else "left",
                    )
                )
            self.add_row(*cells, key=row.key)
        self.scroll_x = self.scroll_target_x = offsets[0]
        self.scroll_y = self.scroll_target_y = offsets[1]
        if self.table_columns:
            self.move_cursor(column=min(cursor_column, len(self.table_columns) - 1), scroll=scroll)
