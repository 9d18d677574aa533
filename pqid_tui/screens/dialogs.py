"""Small modal dialogs: a confirmation that explains its consequences, a masked key entry."""

from __future__ import annotations

from typing import ClassVar

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Static

from pqid_tui.widgets.plain import plain


class ConfirmScreen(ModalScreen[bool]):
    """Ask yes or no, saying what yes will do."""

    CSS_PATH = "dialogs.tcss"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "answer(False)", "Cancel"),
        Binding("y", "answer(True)", "Yes", show=False),
    ]

    def __init__(
        self, question: str, explanation: str = "", *, yes: str = "Yes", no: str = "Cancel"
    ) -> None:
        super().__init__()
        self.question = question
        self.explanation = explanation
        self.yes_label = yes
        self.no_label = no

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(plain(self.question), classes="dialog-title")
            if self.explanation:
                yield Static(plain(self.explanation), classes="dialog-body")
            with Horizontal(classes="dialog-buttons"):
                yield Button(self.yes_label, id="yes", variant="warning")
                yield Button(self.no_label, id="no")

    def on_mount(self) -> None:
        self.query_one("#no", Button).focus()

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")

    def action_answer(self, value: bool) -> None:
        self.dismiss(value)


class SecretScreen(ModalScreen[str | None]):
    """A masked input for one route's key; the key goes only to the OS keyring."""

    CSS_PATH = "dialogs.tcss"
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, route_name: str) -> None:
        super().__init__()
        self.route_name = route_name

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(f"Key for route {self.route_name}", classes="dialog-title")
            yield Static(
                "Stored in the OS keyring (service pqid-tui, user "
                f"{self.route_name}); never shown, logged or written to a file.",
                classes="dialog-body",
            )
            yield Input(password=True, placeholder="paste the key", id="secret")
            with Horizontal(classes="dialog-buttons"):
                yield Button("Store in keyring", id="store", variant="primary")
                yield Button("Cancel", id="cancel")

    def on_mount(self) -> None:
        self.query_one("#secret", Input).focus()

    @on(Input.Submitted)
    @on(Button.Pressed, "#store")
    def _store(self) -> None:
        value = self.query_one("#secret", Input).value
        self.dismiss(value if value.strip() else None)

    @on(Button.Pressed, "#cancel")
    def action_cancel(self) -> None:
        self.dismiss(None)
