"""The live per-prompt grid and the retry queue, redrawn from `RunProgress` as keyed diffs."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from rich.text import Text
from textual.widgets import DataTable
from textual.widgets.data_table import RowKey

from engine.runs import PromptRow, in_retry_queue
from pqid_tui.widgets.plain import one_line

# Theme variable behind each state's colour (resolved against the running theme).
STATE_VARIABLES = {
    "pending": "text-muted", "in_flight": "accent", "retrying": "warning",
    "success": "success", "error": "error", "uncertain": "warning", "skipped": "text-muted",
}
STATE_LABELS = {"in_flight": "in flight"}


def next_attempt_text(when: float | None) -> str:
    if when is None:
        return ""
    return time.strftime("%H:%M:%S", time.localtime(when))


class _PromptTable(DataTable[object]):
    """A DataTable keyed by prompt ID that applies row changes in place."""

    DEFAULT_CSS = """
    _PromptTable { height: 1fr; }
    """
    COLUMNS: tuple[tuple[str, str], ...] = ()

    def __init__(self, **kw: object) -> None:
        super().__init__(cursor_type="row", zebra_stripes=True, **kw)  # type: ignore[arg-type]
        self.marked: set[str] = set()
        self._styles: dict[str, str] = {}

    def on_mount(self) -> None:
        for key, label in self.COLUMNS:
            self.add_column(label, key=key)
        self._resolve_styles()
        self.watch(self.app, "theme", lambda _: self._resolve_styles(), init=False)

    def _resolve_styles(self) -> None:
        variables = self.app.get_css_variables()
        # Muted theme colours are relative ("auto 60%"), which a rich style cannot hold.
        self._styles = {state: value if value.startswith("#") else "dim"
                        for state, var in STATE_VARIABLES.items()
                        for value in [variables.get(var, "")]}

    def state_text(self, state: str) -> Text:
        return Text(STATE_LABELS.get(state, state), style=self._styles.get(state, ""), end="")

    def cells(self, row: PromptRow) -> dict[str, object]:
        return {"mark": "•" if row.prompt_id in self.marked else "",
                "prompt": one_line(row.prompt_id, 60), "state": self.state_text(row.state),
                "attempt": row.attempt or "",
                "next": next_attempt_text(row.next_attempt_at if row.state == "retrying"
                                          else None),
                "error": one_line(row.error, 200) if row.state != "success" else ""}

    def has_row(self, prompt_id: str) -> bool:
        return RowKey(prompt_id) in self._row_locations

    def put(self, row: PromptRow) -> None:
        cells = self.cells(row)
        if self.has_row(row.prompt_id):
            for key, value in cells.items():
                self.update_cell(row.prompt_id, key, value)
        else:
            self.add_row(*(cells[key] for key, _ in self.COLUMNS), key=row.prompt_id)

    def put_many(self, rows: Iterable[PromptRow]) -> None:
        """Apply many row changes with one repaint instead of one per cell.

        `update_cell` repaints on every call, which dominates when thousands of prompts change
        between two flushes; writing the row data and invalidating once is the same diff.
        """
        data = getattr(self, "_data", None)
        if not isinstance(data, dict) or not hasattr(self, "_update_count"):
            for row in rows:  # a DataTable without these internals: the public way
                self.put(row)
            return
        changed = False
        for row in rows:
            key = RowKey(row.prompt_id)
            cells = self.cells(row)
            stored = data.get(key) if key in self._row_locations else None
            if stored is None:
                self.add_row(*(cells[k] for k, _ in self.COLUMNS), key=row.prompt_id)
            else:
                stored.update(cells)
                changed = True
        if changed:
            self._update_count += 1
            self.refresh()

    def cursor_prompt(self) -> str | None:
        if self.row_count == 0:
            return None
        row_key, _ = self.coordinate_to_cell_key(self.cursor_coordinate)
        return str(row_key.value)

    def toggle_mark(self, prompt_id: str, row: PromptRow) -> None:
        if prompt_id in self.marked:
            self.marked.discard(prompt_id)
        else:
            self.marked.add(prompt_id)
        self.update_cell(prompt_id, "mark", self.cells(row)["mark"])


class RunGrid(_PromptTable):
    """Every prompt of the run: state, attempt, next attempt time while retrying, last error."""

    HELP = """## Run grid

One row per prompt. **space** marks a row for *retry selected*; **enter** opens the
payload inspector for the row under the cursor."""
    COLUMNS = (("mark", " "), ("prompt", "prompt"), ("state", "state"),
               ("attempt", "attempt"), ("next", "next attempt"), ("error", "last error"))

    def apply(self, rows: Iterable[PromptRow]) -> None:
        self.put_many(rows)


class RetryQueue(_PromptTable):
    """Prompts waiting for a backoff, ended in a terminal error, or uncertain."""

    HELP = """## Retry queue

Prompts waiting for a backoff (*retrying*, then *in flight* again until they succeed),
ended in a terminal *error*, or *uncertain* (in flight when an earlier run stopped: the
provider may have answered and billed them). Each shows its last error."""
    COLUMNS = (("mark", " "), ("prompt", "prompt"), ("state", "state"),
               ("next", "next attempt"), ("error", "last error"), ("attempt", "attempt"))

    REBUILD_AT = 32

    def apply(self, rows: Iterable[PromptRow],
              everything: Callable[[], list[PromptRow]] | None = None) -> None:
        """Add, update or drop the changed rows; rebuild when many leave at once.

        Removing a DataTable row costs time in proportion to the table, so when many rows
        leave the queue in one flush it is cheaper to lay the queue out again.
        """
        rows = list(rows)
        leaving = [r for r in rows if not in_retry_queue(r) and self.has_row(r.prompt_id)]
        if everything is not None and len(leaving) > self.REBUILD_AT:
            self.rebuild(everything())
            return
        self.put_many(r for r in rows if in_retry_queue(r))
        for row in leaving:
            self.remove_row(row.prompt_id)
            self.marked.discard(row.prompt_id)

    def rebuild(self, queued: list[PromptRow]) -> None:
        cursor = self.cursor_prompt()
        self.clear()
        present = {r.prompt_id for r in queued}
        self.marked &= present
        for row in queued:
            cells = self.cells(row)
            self.add_row(*(cells[k] for k, _ in self.COLUMNS), key=row.prompt_id)
        if cursor in present:
            self.move_cursor(row=self.get_row_index(cursor), animate=False)
