"""Credentials: where each route's key would come from now; set or delete keyring entries."""

from __future__ import annotations

from typing import ClassVar

from textual import on, work
from textual.app import ComposeResult, SystemCommand
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.widgets import Button, DataTable, Footer, Header, Static

from engine.errors import PqidError
from engine.providers.credentials import describe_source, keyring_delete, keyring_set
from engine.providers.routes import PRESETS
from pqid_tui.context import app_context
from pqid_tui.screens.base import AppScreen
from pqid_tui.textsafe import escape_controls
from pqid_tui.widgets.plain import plain


def describe_where(source: str) -> str:
    """A credential source as words: `env:GROQ_API_KEY` is "the environment variable …"."""
    if source.startswith("env:"):
        return f"the environment variable {source[4:]}"
    return {"keyring": "the OS keyring", "key-file": "the key file"}.get(source, source)


CHECK_NOTE = (
    "k checks the selected route's key with one call to the provider's model list, "
    "after you confirm. Nothing else ever contacts a provider from this screen."
)


class CredentialsScreen(AppScreen):
    """Every route with its credential source; keys go only to the OS keyring."""

    CSS_PATH = "credentials.tcss"
    HELP = """# Credentials

For every route: its adapter, the environment variable it reads, and where its key would
come from if a run started now (key file, environment variable, OS keyring, none, or
missing). Resolution order: `--api-key-file`, then the variable, then the keyring.

**s** stores or replaces the selected route's keyring entry through a masked input;
**d** deletes it. A key is never displayed, logged or written anywhere but the keyring.
"""
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("s", "set_key", "Set key"),
        Binding("d", "delete_key", "Delete key"),
        Binding("k", "check_key", "Check key"),
        Binding("f5", "refresh", "Refresh"),
        Binding("escape", "back", "Back"),
    ]

    class Sources(Message):
        """Credential sources were looked up (in a thread: the keyring may block)."""

        def __init__(self, sources: dict[str, str]) -> None:
            super().__init__()
            self.sources = sources

    def __init__(self) -> None:
        super().__init__()
        self.sources: dict[str, str] = {}

    def compose(self) -> ComposeResult:
        yield Header()
        with Vertical(id="credentials"):
            yield Static("Where each route's key would come from now", classes="section-title")
            yield DataTable(id="routes", cursor_type="row", zebra_stripes=True)
            with Horizontal(id="credential-actions"):
                yield Button("Set key", id="set", variant="primary")
                yield Button("Delete key", id="delete", variant="error")
                yield Button("Check key", id="check")
            yield Static(CHECK_NOTE, id="check-note", classes="muted")
            yield Static("", id="check-result")
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one("#routes", DataTable)
        for key in ("route", "adapter", "variable", "source", "endpoint"):
            table.add_column(key, key=key)
        for name, route in PRESETS.items():
            table.add_row(
                name,
                route.adapter,
                route.credential_env or "—",
                "…",
                plain(route.base_url),
                key=name,
            )
        table.focus()
        self.action_refresh()

    @work(thread=True, exclusive=True, group="credentials", exit_on_error=False)
    def action_refresh(self) -> None:
        app = app_context(self.app)
        sources = {name: describe_source(route, env=app.env) for name, route in PRESETS.items()}
        self.post_message(self.Sources(sources))

    def on_credentials_screen_sources(self, message: Sources) -> None:
        self.sources = message.sources
        table = self.query_one("#routes", DataTable)
        for name, source in message.sources.items():
            # The column widens to the longest source: `keyring unavailable` read in full.
            table.update_cell(name, "source", plain(source), update_width=True)

    def selected_route(self) -> str | None:
        table = self.query_one("#routes", DataTable)
        row_key, _ = table.coordinate_to_cell_key(table.cursor_coordinate)
        return str(row_key.value)

    def _route_with_key(self) -> str | None:
        """The selected route, or None (with a warning) when it takes no key."""
        name = self.selected_route()
        if name is not None and not PRESETS[name].needs_credential:
            self.notify(f"The {name} route uses no key.", severity="warning")
            return None
        return name

    def action_set_key(self) -> None:
        from pqid_tui.screens.dialogs import SecretScreen

        name = self._route_with_key()
        if name is None:
            return
        if self.sources.get(name) == "keyring unavailable":
            # Asking for a key that cannot be stored would only fail after it was typed.
            self.notify(
                "The OS keyring is not available, so no key can be stored in it. "
                "Unlock it (or start a Secret Service such as gnome-keyring or "
                f"KWallet) and press F5, or set {self._variable(name)} instead.",
                title="Keyring unavailable",
                severity="error",
                timeout=12,
            )
            return

        def store(secret: str | None) -> None:
            if secret:
                self.store_key(name, secret)

        self.app.push_screen(SecretScreen(name), store)

    @work(thread=True, group="credentials-write", exit_on_error=False)
    def store_key(self, name: str, secret: str) -> None:
        try:
            keyring_set(name, secret)
        except PqidError as exc:
            self.app.call_from_thread(
                self.notify, escape_controls(str(exc)), severity="error", markup=False
            )
            return
        self.app.call_from_thread(self.notify, f"Stored the {name} key in the OS keyring.")
        self.app.call_from_thread(self.action_refresh)

    def action_delete_key(self) -> None:
        from pqid_tui.screens.dialogs import ConfirmScreen

        name = self._route_with_key()
        if name is None:
            return

        def answer(yes: bool | None) -> None:
            if yes:
                self.delete_key(name)

        self.app.push_screen(
            ConfirmScreen(
                f"Delete the keyring entry for {name}?",
                "Runs on this route will then need the environment variable or --api-key-file. "
                "The environment and key files are not touched.",
                yes="Delete",
            ),
            answer,
        )

    @work(thread=True, group="credentials-write", exit_on_error=False)
    def delete_key(self, name: str) -> None:
        try:
            existed = keyring_delete(name)
        except PqidError as exc:
            self.app.call_from_thread(
                self.notify, escape_controls(str(exc)), severity="error", markup=False
            )
            return
        self.app.call_from_thread(
            self.notify,
            f"Deleted the {name} keyring entry."
            if existed
            else f"There was no {name} keyring entry.",
        )
        self.app.call_from_thread(self.action_refresh)

    def action_check_key(self) -> None:
        from pqid_tui.screens.dialogs import ConfirmScreen

        name = self.selected_route()
        if name is None:
            return
        route = PRESETS[name]
        if route.adapter == "oracle":
            self.notify(
                "The oracle route runs in-process; there is nothing to check.", severity="warning"
            )
            return

        source = self.sources.get(name)
        if source in (None, "missing", "keyring unavailable"):
            why = (
                "the OS keyring is not available"
                if source == "keyring unavailable"
                else "no key was found"
                if source == "missing"
                else "its key source is still being looked up"
            )
            self.notify(
                f"Nothing to check for {name}: {why}. Set {self._variable(name)} or "
                "store a key with s, then check again.",
                title="No key",
                severity="warning",
                timeout=12,
            )
            return

        def answer(yes: bool | None) -> None:
            if yes:
                self.check_key(name)

        self.app.push_screen(
            ConfirmScreen(
                f"Contact {name} to check its key?",
                f"One GET of the model list at {route.base_url}, with the key from "
                f"{describe_where(source)}. No prompt is sent.",
                yes="Contact the provider",
            ),
            answer,
        )

    @work(exclusive=True, group="credentials-check", exit_on_error=False)
    async def check_key(self, name: str) -> None:
        import asyncio

        from engine.providers.check import check_provider
        from engine.providers.credentials import resolve_credential

        app = app_context(self.app)
        route = PRESETS[name]
        result = self.query_one("#check-result", Static)
        result.update(plain(f"checking {name}…"))
        try:
            # The keyring may block on D-Bus: read it off the event loop.
            credential = await asyncio.to_thread(resolve_credential, route, env=app.env)
        except PqidError as exc:
            result.update(plain(f"{name}: {exc}"))
            return
        report = await check_provider(route, credential, transport=app.transport)
        verdict = (
            "key accepted"
            if report.get("authenticated")
            else "key refused"
            if report.get("authenticated") is False
            else "not confirmed"
        )
        detail = report.get("error") or f"{report.get('models_listed', 0)} models listed"
        result.update(plain(f"{name}: {verdict} ({report.get('credential_source')}); {detail}"))

    @on(Button.Pressed, "#check")
    def _check(self) -> None:
        self.action_check_key()

    @on(Button.Pressed, "#set")
    def _set(self) -> None:
        self.action_set_key()

    @on(Button.Pressed, "#delete")
    def _delete(self) -> None:
        self.action_delete_key()

    @staticmethod
    def _variable(name: str) -> str:
        variable = PRESETS[name].credential_env
        return f"${variable}" if variable else "--api-key-file"

    def action_back(self) -> None:
        self.app.pop_screen()

    def palette_commands(self) -> list[SystemCommand]:
        return [
            SystemCommand(
                "credentials: set key",
                "Store the selected route's key in the OS keyring",
                self.action_set_key,
            ),
            SystemCommand(
                "credentials: delete key",
                "Delete the selected route's keyring entry",
                self.action_delete_key,
            ),
            SystemCommand(
                "credentials: check key",
                "Contact the provider once to check the key (asks first)",
                self.action_check_key,
            ),
        ]
