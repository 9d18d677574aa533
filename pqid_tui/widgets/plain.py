"""Untrusted text as plain rich Text: control characters escaped, markup never interpreted."""

from __future__ import annotations

from rich.text import Text

from pqid_tui.textsafe import escape_controls


def plain(value: object, style: str = "") -> Text:
    """A Text that shows `value` literally: `[bold]` stays brackets, ESC shows as `\\x1b`."""
    return Text(escape_controls("" if value is None else str(value)), style=style, end="")


def one_line(value: object, width: int = 120) -> Text:
    """Like `plain`, on one line and cut to `width` characters (for table cells)."""
    text = escape_controls("" if value is None else str(value)).replace("\n", " ")
    if len(text) > width:
        text = text[: width - 1] + "…"
    return Text(text, end="", no_wrap=True)
