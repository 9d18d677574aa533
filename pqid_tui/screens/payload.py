"""Payload inspector: one prompt's exact request, every attempt, raw bodies and its response."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from rich.syntax import Syntax
from rich.text import Text
from textual import work
from textual.app import ComposeResult, SystemCommand
from textual.binding import Binding, BindingType
from textual.containers import Vertical, VerticalScroll
from textual.message import Message
from textual.widgets import DataTable, Footer, Header, Static

from engine.errors import PqidError
from engine.run.runs import PromptDetail, RawBody, prompt_detail
from engine.rundir.storage import canonical_json
from pqid_tui.screens.base import AppScreen
from pqid_tui.textsafe import count_controls, escape_controls
from pqid_tui.widgets.plain import one_line, plain


def highlighted(code: str, lexer: str, theme: str) -> Syntax:
    """Syntax highlighting over text whose control characters are already escaped."""
    return Syntax(
        escape_controls(code), lexer, theme=theme, word_wrap=True, background_color="default"
    )


class PayloadScreen(AppScreen):
    """Everything the run directory holds about one prompt, untrusted parts shown escaped."""

    CSS_PATH = "payload.tcss"
    AUTO_FOCUS = "#attempts"
    HELP = """# Payload inspector

The exact request body that was hashed and sent (and whether its stored SHA-256 still
matches it), every attempt with its status, latency, error and retry decision, the raw
provider body of each attempt (JSON pretty-printed; anything else as text), the canonical
response and the Python code extracted from it.

Model output and provider bodies are untrusted: control characters and escape sequences
are shown as `\\x1b`-style escapes and never reach your terminal; `[markup]` is shown as
typed. **b** copies the request body exactly as it was hashed (its SHA-256 is the one
shown); **o**, **x** and **r** copy the response content, the extracted code and the raw
provider body of the attempt under the cursor (else the last one) with every control
character written as a `\x1b`-style escape, so pasting them into a terminal is harmless.
The palette's *payload: copy raw body exactly* copies a raw body's exact bytes, after a
confirmation. Copying uses OSC 52, where the terminal supports it.
"""
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("b", "copy('request')", "Copy request"),
        Binding("o", "copy('content')", "Copy output"),
        Binding("x", "copy('code')", "Copy code"),
        Binding("r", "copy('raw')", "Copy raw body"),
        Binding("escape", "back", "Back"),
    ]

    class Loaded(Message):
        """The prompt's evidence was read (or could not be)."""

        def __init__(self, detail: PromptDetail | None, error: str | None) -> None:
            super().__init__()
            self.detail = detail
            self.error = error

    def __init__(self, run_dir: Path, prompt_id: str) -> None:
        super().__init__()
        self.run_dir = Path(run_dir)
        self.prompt_id = prompt_id
        self.detail: PromptDetail | None = None

    def compose(self) -> ComposeResult:
        yield Header()
        with VerticalScroll(id="payload"):
            yield Static(id="summary")
            yield Static("Request body", classes="section-title")
            yield Static(id="request", classes="code")
            yield Static("Attempts", classes="section-title")
            yield DataTable(id="attempts", cursor_type="row", zebra_stripes=True)
            yield Static("Raw provider bodies", classes="section-title")
            yield Vertical(id="raw")
            yield Static("Canonical response", classes="section-title")
            yield Static(id="response", classes="code")
            yield Static("Extracted code", classes="section-title")
            yield Static(id="code", classes="code")
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one("#attempts", DataTable)
        for key in (
            "attempt",
            "status",
            "latency",
            "error class",
            "decision",
            "backoff",
            "raw",
            "error",
        ):
            table.add_column(key, key=key)
        self.query_one("#summary", Static).update(plain(f"Loading {self.prompt_id}…"))
        self.load()

    @work(thread=True, exclusive=True, group="payload", exit_on_error=False)
    def load(self) -> None:
        try:
            detail, error = prompt_detail(self.run_dir, self.prompt_id), None
        except PqidError as exc:
            detail, error = None, str(exc)
        self.post_message(self.Loaded(detail, error))

    def _syntax_theme(self) -> str:
        return "ansi_dark" if self.app.current_theme.dark else "ansi_light"

    def on_payload_screen_loaded(self, message: Loaded) -> None:
        if message.detail is None:
            self.query_one("#summary", Static).update(plain(message.error or "not found"))
            return
        self.detail = d = message.detail
        theme = self._syntax_theme()
        summary = Text()
        summary.append("Prompt ", style="bold")
        summary.append_text(plain(d.prompt_id))
        summary.append(f"   state {d.state}   attempts {d.attempts_count}\n")
        summary.append("request sha256 ", style="bold")
        summary.append_text(plain(d.request_sha256 or "—"))
        if d.request_sha256_ok is not None:
            summary.append(
                "  (matches the body)"
                if d.request_sha256_ok
                else "  (DOES NOT match the stored body)"
            )
        if d.last_error:
            summary.append("\nlast error ", style="bold")
            summary.append_text(plain(d.last_error))
        self.query_one("#summary", Static).update(summary)
        self.query_one("#request", Static).update(
            highlighted(d.request_text, "json", theme)
            if d.request_body is not None
            else plain("no request recorded")
        )
        table = self.query_one("#attempts", DataTable)
        table.clear()
        for a in d.attempts:
            table.add_row(
                a.get("attempt", ""),
                a.get("status") or "",
                f"{a['latency_ms']} ms" if a.get("latency_ms") is not None else "",
                plain(a.get("error_class") or ""),
                plain(a.get("decision") or ""),
                f"{a['backoff_s']} s" if a.get("backoff_s") is not None else "",
                plain(a.get("raw") or ""),
                one_line(a.get("error") or "", 160),
            )
        raw_box = self.query_one("#raw")
        raw_box.remove_children()
        widgets: list[Static] = []
        for body in d.raw_bodies:
            widgets.append(
                Static(
                    plain(
                        f"attempt {body.attempt}: {body.name} "
                        f"({len(body.data)} bytes, "
                        f"{'JSON' if body.is_json else 'not JSON'})"
                    ),
                    classes="raw-title",
                )
            )
            widgets.append(
                Static(
                    highlighted(body.pretty(), "json", theme)
                    if body.is_json
                    else plain(body.pretty()),
                    classes="code",
                )
            )
        if not widgets:
            widgets.append(Static("no raw body stored", classes="muted"))
        raw_box.mount_all(widgets)
        response = d.response
        if response is None:
            self.query_one("#response", Static).update(plain("no canonical response"))
            self.query_one("#code", Static).update(plain("—"))
            return
        head = Text()
        head.append_text(
            plain(
                f"returned model {response.get('returned_model')}   finish "
                f"{response.get('finish_reason')}   attempt {response.get('attempt')}   "
                f"usage {json.dumps(response.get('usage'), sort_keys=True)}\n"
            )
        )
        head.append_text(plain(response.get("content") or "(empty content)"))
        self.query_one("#response", Static).update(head)
        code = response.get("generated_code")
        extraction = response.get("extraction") or {}
        self.query_one("#code", Static).update(
            highlighted(code, "python", theme)
            if code
            else plain(f"no code extracted ({extraction.get('method', 'unknown')})")
        )

    def request_bytes(self) -> bytes | None:
        """The request body as the engine hashed it (canonical JSON), or None."""
        d = self.detail
        if d is None or d.request_body is None:
            return None
        return canonical_json(d.request_body)

    def chosen_raw(self) -> RawBody | None:
        """The raw body of the attempt under the attempts cursor, else the last one stored."""
        d = self.detail
        if d is None or not d.raw_bodies:
            return None
        table = self.query_one("#attempts", DataTable)
        if 0 <= table.cursor_row < len(d.attempts):
            attempt = d.attempts[table.cursor_row].get("attempt")
            for body in d.raw_bodies:
                if body.attempt == attempt:
                    return body
        return d.raw_bodies[-1]

    def action_copy(self, what: str) -> None:
        d = self.detail
        if d is None:
            return
        if what == "request":
            data = self.request_bytes()
            if data is None:
                self.notify("Nothing to copy (no request recorded).", severity="warning")
                return
            # The exact bytes that were hashed (the run's prompts come from the release).
            self.app.copy_to_clipboard(data.decode("utf-8"))
            self.notify(
                f"Copied the request body ({len(data)} bytes), exactly as hashed: "
                f"sha256 {escape_controls(d.request_sha256 or '')[:16]}….",
                markup=False,
            )
            return
        response: Mapping[str, Any] = d.response or {}
        raw = self.chosen_raw() if what == "raw" else None
        if what == "raw":
            text = raw.data.decode("utf-8", "replace") if raw is not None else ""
        else:
            text = {
                "content": response.get("content") or "",
                "code": response.get("generated_code") or "",
            }[what]
        name = {
            "content": "output",
            "code": "code",
            "raw": f"raw body of attempt {raw.attempt}" if raw else "raw body",
        }[what]
        if not text:
            self.notify(f"Nothing to copy (the {name} is empty).", severity="warning")
            return
        # Model output and provider bodies are untrusted: a control sequence pasted into a
        # terminal would be obeyed, so the clipboard gets the escaped text the screen shows.
        safe = escape_controls(text)
        self.app.copy_to_clipboard(safe)
        controls = count_controls(text)
        changed = (
            f"; its {controls} control characters are written as \\x1b-style escapes"
            if controls
            else "; it holds no control characters"
        )
        self.notify(f"Copied the {name} ({len(safe)} characters){changed}.", markup=False)

    def action_copy_raw_exactly(self) -> None:
        from pqid_tui.screens.dialogs import ConfirmScreen

        raw = self.chosen_raw()
        if raw is None:
            self.notify("Nothing to copy (no raw body stored).", severity="warning")
            return
        try:
            text = raw.data.decode("utf-8")
        except UnicodeDecodeError:
            self.notify(
                f"The raw body of attempt {raw.attempt} is not UTF-8 text; its exact "
                f"bytes are in {raw.name} in the run directory.",
                severity="warning",
                markup=False,
            )
            return
        controls = count_controls(text) > 0

        def answer(yes: bool | None) -> None:
            if yes:
                self.app.copy_to_clipboard(text)
                self.notify(
                    f"Copied the exact raw body of attempt {raw.attempt} ({len(raw.data)} bytes)."
                )

        self.app.push_screen(
            ConfirmScreen(
                f"Copy the exact raw body of attempt {raw.attempt}?",
                "It is the provider's reply, byte for byte, and untrusted"
                + (
                    ": it HOLDS CONTROL CHARACTERS, which a terminal obeys if you paste them into "
                    "it (a clipboard write, a screen clear, colours)."
                    if controls
                    else "; it holds no control characters."
                )
                + " r copies it with those characters escaped instead.",
                yes="Copy the exact bytes",
            ),
            answer,
        )

    def action_back(self) -> None:
        self.app.pop_screen()

    def palette_commands(self) -> list[SystemCommand]:
        return [
            SystemCommand(
                "payload: copy request body",
                "Copy the exact request body",
                lambda: self.action_copy("request"),
            ),
            SystemCommand(
                "payload: copy extracted code",
                "Copy the extracted Python (control characters escaped)",
                lambda: self.action_copy("code"),
            ),
            SystemCommand(
                "payload: copy output",
                "Copy the response content (control characters escaped)",
                lambda: self.action_copy("content"),
            ),
            SystemCommand(
                "payload: copy raw body",
                "Copy the selected attempt's raw provider body (control characters escaped)",
                lambda: self.action_copy("raw"),
            ),
            SystemCommand(
                "payload: copy raw body exactly",
                "Copy its exact bytes, after a confirmation",
                self.action_copy_raw_exactly,
            ),
        ]
