"""F1: what the screen beneath is for, its keys, and help for the focused widget."""

from __future__ import annotations

from typing import Any, ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen, Screen
from textual.widgets import DataTable, Markdown, Static


class HelpScreen(ModalScreen[None]):
    """The help of one screen: its HELP text, the focused widget's, and every active key."""

    CSS_PATH = "help.tcss"
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape,f1,q", "dismiss", "Close help")]

    def __init__(self, target: Screen[Any]) -> None:
        super().__init__()
        self.target = target

    def compose(self) -> ComposeResult:
        text = getattr(self.target, "HELP", None) or "No help for this screen."
        focused = self.target.focused
        widget_help = getattr(focused, "HELP", None) if focused is not None else None
        with VerticalScroll(id="help-body"):
            yield Markdown(text, id="help-screen")
            if widget_help:
                yield Markdown(widget_help, id="help-widget")
            yield Static("Keys", classes="help-heading")
            yield DataTable(id="help-keys", cursor_type="none", zebra_stripes=True)
            yield Static(
                "Press Escape or F1 to close. Ctrl+P opens the command palette.",
                classes="help-foot",
            )

    def on_mount(self) -> None:
        table = self.query_one("#help-keys", DataTable)
        table.add_columns("key", "action")
        seen: set[str] = set()
        for key, active in sorted(self.target.active_bindings.items()):
            binding = active.binding
            label = binding.description or binding.action
            if key in seen or not label:
                continue
            seen.add(key)
            table.add_row(binding.key_display or key, label)

    async def action_dismiss(self, result: Any = None) -> None:
        self.dismiss(None)
