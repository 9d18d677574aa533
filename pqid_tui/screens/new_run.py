"""New run: the run's settings, with the dry-run plan recomputed live as the form changes."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, ClassVar

from rich.text import Text
from textual import events, on
from textual.app import ComposeResult, SystemCommand
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widget import Widget
from textual.widgets import (
    Button,
    Checkbox,
    Collapsible,
    Footer,
    Header,
    Input,
    Label,
    Select,
    Static,
)

from engine.config import DEFAULT_CONCURRENCY, LiveRunConfig, make_config
from engine.errors import ConfigError, PqidError
from engine.providers.routes import PRESETS, check_extra_body, resolve_route
from engine.run.plan import Plan, build_plan
from engine.run.runs import RunInfo, read_run_info, resume_config
from engine.rundir.layout import MANIFEST
from engine.rundir.records import RunDir, check_same_contract
from pqid_tui.context import app_context
from pqid_tui.screens.base import AppScreen
from pqid_tui.text import PROVIDER_TERMS, RUN_IN_PROGRESS, UNCERTAIN_EXPLANATION, describe_error
from pqid_tui.widgets.plain import plain
from pqid_tui.widgets.wrapping import WrappingCheckbox

INPUT_FIELDS = (
    "model",
    "base_url",
    "temperature",
    "top_p",
    "max_output_tokens",
    "seed",
    "extra_body",
    "limit",
    "prompt_ids",
    "concurrency",
    "max_retries",
    "output_dir",
    "retry_backoff_seconds",
    "max_backoff_seconds",
    "max_retry_after_seconds",
    "request_timeout_seconds",
    "sleep_seconds",
    "max_new",
    "headers",
    "api_key_file",
)
# The advanced pacing fields: (field, label, default); each is a LiveRunConfig field.
ADVANCED_NUMBERS = (
    ("retry_backoff_seconds", "first backoff (s, doubles)", "2.0"),
    ("max_backoff_seconds", "max backoff (s)", "60.0"),
    ("max_retry_after_seconds", "max Retry-After (s)", "120.0"),
    ("request_timeout_seconds", "request timeout (s)", "120.0"),
    ("sleep_seconds", "pacing: s between starts", "0.0"),
    ("max_new", "max new prompts (optional)", ""),
)


# Engine messages that name a setting by its flag rather than by its field.
def parse_headers(text: str) -> tuple[dict[str, str], str]:
    """`Name: value; Other: value` as a header dict, and an error ("" when well-formed)."""
    out: dict[str, str] = {}
    for item in (x.strip() for x in text.split(";")):
        if not item:
            continue
        name, sep, value = item.partition(":")
        if not sep or not name.strip():
            return {}, f"{item!r}: expected Name: value (separate headers with ;)"
        out[name.strip()] = value.strip()
    return out, ""


class FormInput(Input):
    """An input whose keys go where the focus is, however fast they come.

    Textual hands each key to the widget focused when the key arrives; keys that arrive
    together (a paste through the terminal, a fast typist: `aaa`, Tab, `bbb`) all queue at
    the first field, and its Tab moves the focus only after the keys behind it were typed.
    So Tab moves the focus here at once, and a key that reaches this input once it has lost
    the focus goes on, in order, to the widget that has it now.
    """

    async def _on_key(self, event: events.Key) -> None:
        if not self.is_attached:
            return
        screen = self.screen
        focused = screen.focused
        if focused is not None and focused is not self:
            event.stop()
            event.prevent_default()  # not typed here
            focused.post_message(events.Key(event.key, event.character))
        elif event.key in ("tab", "shift+tab"):
            event.stop()
            event.prevent_default()
            if event.key == "tab":
                screen.focus_next()
            else:
                screen.focus_previous()


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-.")[:60] or "run"


class NewRunScreen(AppScreen):
    """Plan a run field by field; start it once the plan is valid and acknowledged."""

    CSS_PATH = "new_run.tcss"
    HELP = """# New run

Choose a route and model, the generation settings, which prompts, and where the run
directory goes. The plan on the right is the dry run: it is recomputed on every change,
reads no key, writes no file and opens no connection. Errors appear under their field.

Sending prompts to a provider needs the acknowledgement that they go to a third party
(its retention, policy, quota and billing terms apply). The `oracle` route answers with
the release's reference code in-process and sends nothing.

If the output directory already holds a run, tick **resume** to continue it; *retry
errors* resends prompts that ended in a terminal error and *retry uncertain* resends
prompts that were in flight when a run died (a possible extra paid draw).

**ctrl+s** starts the run.
"""
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("ctrl+s", "start", "Start run", priority=True),
        Binding("escape", "back", "Back"),
    ]

    def __init__(self, run_dir: Path | None = None) -> None:
        super().__init__()
        self.resume_dir = Path(run_dir) if run_dir is not None else None
        self.plan: Plan | None = None
        self.errors: dict[str, str] = {}
        self.run_info: RunInfo | None = None
        self._auto_output = ""
        self._shown: dict[str, str] = {}

    # -- layout ----------------------------------------------------------------------------------
    def _field(self, label: str, widget: Widget, name: str) -> ComposeResult:
        with Vertical(classes="field", id=f"field-{name}"):
            yield Label(label)
            yield widget
            yield Static("", id=f"err-{name}", classes="field-error")

    def compose(self) -> ComposeResult:
        app = app_context(self.app)
        release = app.release
        splits = list(release.split_counts()) if release is not None else []
        yield Header()
        with Horizontal(id="new-run"):
            with VerticalScroll(id="form"):
                yield Static("Route", classes="section-title")
                yield from self._field(
                    "route",
                    Select(
                        [(name, name) for name in PRESETS],
                        value="oracle",
                        allow_blank=False,
                        id="provider",
                    ),
                    "provider",
                )
                yield from self._field(
                    "model", FormInput("oracle", id="model", placeholder="model ID"), "model"
                )
                yield from self._field(
                    "base URL (optional)",
                    FormInput(id="base_url", placeholder="the route's preset endpoint"),
                    "base_url",
                )
                yield Checkbox("endpoint without authentication (--no-auth)", id="no_auth")
                yield Static("Generation", classes="section-title")
                with Horizontal(classes="row"):
                    yield from self._field(
                        "temperature", FormInput("0.0", id="temperature"), "temperature"
                    )
                    yield from self._field("top-p", FormInput("1.0", id="top_p"), "top_p")
                    yield from self._field(
                        "max output tokens",
                        FormInput("2048", id="max_output_tokens"),
                        "max_output_tokens",
                    )
                with Horizontal(classes="row"):
                    yield Checkbox("omit temperature", id="omit_temperature")
                    yield Checkbox("omit top-p", id="omit_top_p")
                with Horizontal(classes="row"):
                    yield from self._field(
                        "output-limit field",
                        Select(
                            [
                                ("route default", "default"),
                                ("max_tokens", "max_tokens"),
                                ("max_completion_tokens", "max_completion_tokens"),
                            ],
                            value="default",
                            allow_blank=False,
                            id="max_output_field",
                        ),
                        "max_output_field",
                    )
                    yield from self._field("seed (optional)", FormInput(id="seed"), "seed")
                yield from self._field(
                    "extra body JSON (optional, non-secret settings)",
                    FormInput(id="extra_body", placeholder='{"key": "value"}'),
                    "extra_body",
                )
                yield Static("Prompts", classes="section-title")
                with Horizontal(classes="row"):
                    yield from self._field(
                        "split",
                        Select(
                            [("every split", "*")] + [(s, s) for s in splits],
                            value="*",
                            allow_blank=False,
                            id="split",
                        ),
                        "split",
                    )
                    yield from self._field("limit (optional)", FormInput(id="limit"), "limit")
                yield from self._field(
                    "prompt IDs (optional, comma-separated)",
                    FormInput(id="prompt_ids"),
                    "prompt_ids",
                )
                yield Static("Pacing and output", classes="section-title")
                with Horizontal(classes="row"):
                    yield from self._field(
                        "concurrency",
                        FormInput(str(DEFAULT_CONCURRENCY), id="concurrency"),
                        "concurrency",
                    )
                    yield from self._field(
                        "max retries", FormInput("3", id="max_retries"), "max_retries"
                    )
                yield from self._field("output directory", FormInput(id="output_dir"), "output_dir")
                with Collapsible(
                    id="advanced",
                    title="Advanced: backoff, timeouts, pacing, headers, key file",
                    collapsed=True,
                ):
                    for i in range(0, len(ADVANCED_NUMBERS), 3):
                        with Horizontal(classes="row"):
                            for name, label, default in ADVANCED_NUMBERS[i : i + 3]:
                                yield from self._field(label, FormInput(default, id=name), name)
                    yield from self._field(
                        "extra headers (optional, non-secret; Name: value; Other: value)",
                        FormInput(id="headers", placeholder="X-Title: my-run"),
                        "headers",
                    )
                    yield from self._field(
                        "API key file (optional; only the path is kept, the key is read when "
                        "the run starts)",
                        FormInput(id="api_key_file", placeholder="~/.keys/x"),
                        "api_key_file",
                    )
                with Vertical(id="resume-box"):
                    yield Static(id="resume-info")
                    yield Checkbox("resume the run in this directory", id="resume")
                    yield Checkbox(
                        "retry errors: resend prompts that ended in a terminal error",
                        id="retry_errors",
                    )
                    yield Checkbox(
                        "retry uncertain: resend prompts that were in flight when "
                        "a run died (a possible extra paid draw)",
                        id="retry_uncertain",
                    )
                yield WrappingCheckbox(id="acknowledge", compact=True)
                yield Static("", id="err-general", classes="field-error")
                yield Button("Start run", id="start", variant="primary", disabled=True)
            with VerticalScroll(id="plan-pane"):
                yield Static("Dry-run plan", classes="section-title")
                yield Static(id="plan")
        yield Footer()

    def on_mount(self) -> None:
        if self.resume_dir is not None:
            self.fill_from_run(self.resume_dir)
        self._suggest_output_dir()
        self.recompute()
        self.query_one("#provider", Select).focus()

    def fill_from_run(self, run_dir: Path) -> None:
        """The form as the run in `run_dir` was made (its manifest), set to resume it; the
        pacing this session last used on it, else the defaults."""
        app = app_context(self.app)
        try:
            config = resume_config(run_dir, app.release_dir)
        except PqidError as exc:
            self.notify(describe_error(exc), severity="error", markup=False)
            return
        current = app.session.config
        if current is not None and Path(str(current.output_dir)) == Path(run_dir):
            config = config.model_copy(
                update={
                    "concurrency": current.concurrency,
                    "max_retries": current.max_retries,
                    **{name: getattr(current, name) for name, _, _ in ADVANCED_NUMBERS},
                    "headers": current.headers,
                    "api_key_file": current.api_key_file,
                }
            )

        def text(value: object) -> str:
            return "" if value is None else str(value)

        self.query_one("#provider", Select).value = config.provider
        values = {
            "model": config.model,
            "base_url": text(config.base_url),
            "temperature": text(config.temperature),
            "top_p": text(config.top_p),
            "max_output_tokens": text(config.max_output_tokens),
            "seed": text(config.seed),
            "extra_body": json.dumps(config.extra_body) if config.extra_body else "",
            "limit": text(config.limit),
            "prompt_ids": ", ".join(config.prompt_ids) if config.prompt_ids else "",
            "concurrency": text(config.concurrency),
            "max_retries": text(config.max_retries),
            "output_dir": str(run_dir),
            "headers": "; ".join(f"{k}: {v}" for k, v in config.headers.items()),
            "api_key_file": text(config.api_key_file),
            **{name: text(getattr(config, name)) for name, _, _ in ADVANCED_NUMBERS},
        }
        for name, value in values.items():
            self.query_one(f"#{name}", Input).value = value
        for name in ("no_auth", "omit_temperature", "omit_top_p"):
            self.query_one(f"#{name}", Checkbox).value = bool(getattr(config, name))
        self.query_one("#max_output_field", Select).value = config.max_output_field or "default"
        self.query_one("#split", Select).value = config.split or "*"
        self.query_one("#resume", Checkbox).value = True

    # -- form to config --------------------------------------------------------------------------
    def _value(self, name: str) -> str:
        return self.query_one(f"#{name}", Input).value.strip()

    def _checked(self, name: str) -> bool:
        return self.query_one(f"#{name}", Checkbox).value

    def _select(self, name: str) -> str:
        return str(self.query_one(f"#{name}", Select).value)

    def output_path(self) -> Path | None:
        text = self._value("output_dir")
        if not text:
            return None
        path = Path(text).expanduser()
        app = app_context(self.app)
        return path if path.is_absolute() else app.runs_dir / path

    def _suggest_output_dir(self) -> None:
        current = self._value("output_dir")
        if current and current != self._auto_output:
            return  # the user chose a directory: leave it alone
        app = app_context(self.app)
        base = f"{self._select('provider')}-{slug(self._value('model') or 'model')}"
        name, n = base, 1
        while (app.runs_dir / name).exists():
            n += 1
            name = f"{base}-{n}"
        self._auto_output = str(app.runs_dir / name)
        self.query_one("#output_dir", Input).value = self._auto_output

    def read_fields(self) -> tuple[dict[str, Any], dict[str, str]]:
        """The form as LiveRunConfig fields, and the fields that are not even well-formed."""
        app = app_context(self.app)
        errors: dict[str, str] = {}

        def number(name: str, kind: type, default: Any = None) -> Any:
            text = self._value(name)
            if not text:
                return default
            try:
                return kind(text)
            except ValueError:
                errors[name] = "must be a whole number" if kind is int else "must be a number"
                return default

        extra: dict[str, Any] = {}
        if self._value("extra_body"):
            try:
                extra = json.loads(self._value("extra_body"))
            except json.JSONDecodeError as exc:
                errors["extra_body"] = f"not valid JSON ({exc.msg})"
                extra = {}
            if not isinstance(extra, dict):
                errors["extra_body"] = "must be a JSON object"
                extra = {}
            try:
                # Checked here too: the config raises on it before reporting other fields.
                check_extra_body(extra)
            except ConfigError as exc:
                errors["extra_body"] = exc.fields.get("extra_body", str(exc))
                extra = {}
        ids = tuple(x for x in re.split(r"[,\s]+", self._value("prompt_ids")) if x) or None
        headers, problem = parse_headers(self._value("headers"))
        if problem:
            errors["headers"] = problem
        key_file: Path | None = None
        if self._value("api_key_file"):
            # Only the path: the key is read when the run starts, never shown or kept here.
            key_file = Path(self._value("api_key_file")).expanduser()
            if not key_file.is_file():
                errors["api_key_file"] = f"{key_file}: no such file"
        field = self._select("max_output_field")
        fields = dict(
            release_dir=app.release_dir,
            output_dir=self.output_path(),
            provider=self._select("provider"),
            model=self._value("model"),
            base_url=self._value("base_url") or None,
            no_auth=self._checked("no_auth"),
            temperature=number("temperature", float, 0.0),
            top_p=number("top_p", float, 1.0),
            max_output_tokens=number("max_output_tokens", int, 2048),
            omit_temperature=self._checked("omit_temperature"),
            omit_top_p=self._checked("omit_top_p"),
            max_output_field=None if field == "default" else field,
            seed=number("seed", int),
            extra_body=extra,
            split=None if self._select("split") == "*" else self._select("split"),
            limit=number("limit", int),
            prompt_ids=ids,
            concurrency=number("concurrency", int, DEFAULT_CONCURRENCY),
            max_retries=number("max_retries", int, 3),
            retry_backoff_seconds=number("retry_backoff_seconds", float, 2.0),
            max_backoff_seconds=number("max_backoff_seconds", float, 60.0),
            max_retry_after_seconds=number("max_retry_after_seconds", float, 120.0),
            request_timeout_seconds=number("request_timeout_seconds", float, 120.0),
            sleep_seconds=number("sleep_seconds", float, 0.0),
            max_new=number("max_new", int),
            headers=headers,
            api_key_file=key_file,
            acknowledge_prompt_export=self._checked("acknowledge"),
            resume=self._checked("resume"),
            retry_errors=self._checked("retry_errors"),
            retry_uncertain=self._checked("retry_uncertain"),
        )
        return fields, errors

    def recompute(self) -> None:
        """Validate the form, rebuild the dry-run plan and show both."""
        app = app_context(self.app)
        fields, errors = self.read_fields()
        self.plan = None
        config: LiveRunConfig | None = None
        if app.release is None:
            errors[""] = f"the release cannot be used: {app.release_error}"
        elif not errors:
            try:
                config = make_config(**fields)
                plan = build_plan(config, app.release)
                plan.cost_estimate()  # a price table that cannot be read: say so here
                self.plan = plan
            except PqidError as exc:
                self._place(exc, errors)
            if config is None:
                # The route is checked only when planning; check it now so its error shows
                # beside the base URL even while another field is wrong.
                try:
                    resolve_route(fields["provider"], fields["base_url"])
                except PqidError as exc:
                    self._place(exc, errors)
        self._check_output_dir(fields, errors)
        self.errors = errors
        advanced = {"headers", "api_key_file", *(n for n, _, _ in ADVANCED_NUMBERS)}
        if advanced & set(errors):
            self.query_one("#advanced", Collapsible).collapsed = False  # show the error
        for name in (*INPUT_FIELDS, "provider", "split", "max_output_field", ""):
            self._set_text(f"err-{name or 'general'}", errors.get(name, ""))
        self._show_acknowledgement()
        plan_text = self._plan_text()
        if self._shown.get("plan") != plan_text.plain:
            self._shown["plan"] = plan_text.plain
            self.query_one("#plan", Static).update(plan_text)
        self.query_one("#start", Button).disabled = not self.can_start()

    @staticmethod
    def _place(exc: PqidError, errors: dict[str, str]) -> None:
        """An engine error beside the fields it names (a ConfigError's `fields`), else as an
        error of the whole form."""
        fields = exc.fields if isinstance(exc, ConfigError) else {}
        known = {*INPUT_FIELDS, "provider", "split", "max_output_field"}
        for name, message in fields.items():
            if name in known:
                errors.setdefault(name, message)
            else:
                errors.setdefault("", f"{name.replace('_', ' ')}: {message}" if name else message)
        if not fields:
            errors.setdefault("", str(exc))

    def _set_text(self, widget_id: str, text: str) -> None:
        # Updating an unchanged Static still costs a layout pass; skip it.
        if self._shown.get(widget_id) != text:
            self._shown[widget_id] = text
            self.query_one(f"#{widget_id}", Static).update(plain(text))

    def _check_output_dir(self, fields: dict[str, Any], errors: dict[str, str]) -> None:
        path = fields["output_dir"]
        box = self.query_one("#resume-box")
        self.run_info = None
        if path is None:
            errors.setdefault("output_dir", "choose where the run directory goes")
            box.display = False
            return
        nonempty = path.is_dir() and any(path.iterdir())
        if nonempty and (path / MANIFEST).exists():
            self.run_info = info = read_run_info(path)
            box.display = True
            text = Text()
            text.append("This directory holds a run: ", style="bold")
            text.append_text(
                plain(
                    f"{info.provider} / {info.model}, {info.selected} selected: "
                    f"{info.success} success, {info.error} error, {info.pending} pending, "
                    f"{info.uncertain} uncertain."
                )
            )
            text.append(
                "\nResume sends the pending prompts and skips the successes; "
                "errors are skipped unless you tick retry errors."
            )
            if info.uncertain:
                text.append(f"\n{info.uncertain} uncertain: ", style="bold")
                text.append(UNCERTAIN_EXPLANATION)
                text.append(" Resume is refused until you tick retry uncertain.")
            self.query_one("#resume-info", Static).update(text)
            if not fields["resume"]:
                errors.setdefault(
                    "output_dir",
                    "holds a run: tick resume to continue it, or choose a new directory",
                )
            elif info.uncertain and not fields["retry_uncertain"]:
                errors.setdefault(
                    "output_dir",
                    f"{info.uncertain} uncertain prompt(s): tick "
                    "retry uncertain to resume (see above)",
                )
            if fields["resume"] and self.plan is not None:
                # What the run would refuse, refused here: one directory is one contract.
                try:
                    check_same_contract(RunDir(path).read_manifest(), self.plan.identity())
                except PqidError as exc:
                    errors.setdefault("output_dir", str(exc))
        else:
            box.display = False
            if nonempty:
                errors.setdefault(
                    "output_dir",
                    "not empty and not a run directory; choose an empty or new directory",
                )
            elif fields["resume"]:
                self.query_one("#resume", Checkbox).value = False

    def contacts_provider(self) -> bool:
        return PRESETS[self._select("provider")].adapter != "oracle"

    def _show_acknowledgement(self) -> None:
        box = self.query_one("#acknowledge", Checkbox)
        provider = self._select("provider")
        if self.contacts_provider():
            label = (
                f"I acknowledge that the selected prompts go to a third party (the "
                f"{provider} route): its {PROVIDER_TERMS}."
            )
        else:
            label = "No acknowledgement needed: the oracle route sends nothing anywhere."
        if self._shown.get("acknowledge") != label:
            self._shown["acknowledge"] = label
            box.label = label
            box.disabled = not self.contacts_provider()

    def can_start(self) -> bool:
        app = app_context(self.app)
        if self.plan is None or self.errors or app.session.active:
            return False
        return not self.contacts_provider() or self._checked("acknowledge")

    def _plan_text(self) -> Text:
        text = Text()
        if self.plan is None:
            text.append("No plan: fix the fields marked in the form.\n", style="bold")
            for name, message in self.errors.items():
                label = name.replace("_", " ") if name else "run"
                text.append_text(plain(f"• {label}: {message}\n"))
            return text
        d = self.plan.to_dict()
        route, sel, contract = d["route"], d["selection"], d["generation_contract"]

        def line(key: str, value: object) -> None:
            text.append(f"{key:<22}", style="bold")
            text.append_text(plain(value))
            text.append("\n")

        line(
            "contacts provider",
            "no (in-process oracle)"
            if route["adapter"] == "oracle"
            else f"yes: {route['base_url']}",
        )
        line(
            "release",
            f"{d['release']['name']} {d['release']['version']} "
            f"({d['release']['prompt_count']} prompts)",
        )
        line("route", f"{route['provider']} ({route['adapter']}, auth {route['auth']})")
        line("model", d["model"])
        line("selected prompts", d["selected_prompt_count"])
        line(
            "selection",
            f"split {sel['split'] or 'every'}, limit {sel['limit'] or 'none'}, "
            f"IDs {len(sel['prompt_ids_filter']) if sel['prompt_ids_filter'] else 'all'}",
        )
        line("first prompts", ", ".join(d["first_prompt_ids"]))
        line("prompt IDs sha256", d["prompt_ids_sha256"][:32] + "…")
        line("request set sha256", d["request_set_sha256"][:32] + "…")
        study = d.get("study")
        if isinstance(study, dict) and isinstance(study.get("trace"), dict):
            line("frozen study row", study_text(study["trace"]))
        line(
            "temperature",
            contract["temperature"] if contract["temperature"] is not None else "omitted",
        )
        line("top_p", contract["top_p"] if contract["top_p"] is not None else "omitted")
        line("output limit", f"{contract['max_output_field']} = {contract['max_output_tokens']}")
        line("seed", contract["seed"] if contract["seed"] is not None else "none")
        line("extra body", json.dumps(contract["extra_body"], sort_keys=True))
        line("credential", d["credential"])
        line("estimated cost", cost_text(d["cost_estimate"]))
        line("output dir", d["output_dir"])
        line("concurrency", d["concurrency"])
        policy = d["retry_policy"]
        line(
            "retries",
            f"{policy['max_retries']}, backoff {policy['retry_backoff_seconds']} s "
            f"doubling to {policy['max_backoff_seconds']} s, Retry-After up to "
            f"{policy['max_retry_after_seconds']} s",
        )
        line("request timeout", f"{policy['request_timeout_seconds']} s")
        line("pacing", f"{self.plan.config.sleep_seconds} s between request starts")
        line(
            "max new prompts",
            self.plan.config.max_new if self.plan.config.max_new is not None else "no limit",
        )
        line("extra headers", ", ".join(d["route"]["headers"]) or "none")
        line("target metadata sent", "no (evaluator only)")
        return text

    # -- events ----------------------------------------------------------------------------------
    @on(Input.Changed)
    @on(Checkbox.Changed)
    @on(Select.Changed)
    def _changed(self, event: Input.Changed | Checkbox.Changed | Select.Changed) -> None:
        control_id = getattr(event.control, "id", "")
        if control_id == "provider":
            model = self.query_one("#model", Input)
            oracle = self._select("provider") == "oracle"
            if oracle and not model.value.strip():
                model.value = "oracle"
            elif not oracle and model.value.strip() == "oracle":
                model.value = ""  # the oracle's label is no model ID for a provider
        if control_id in ("provider", "model"):
            self._suggest_output_dir()
        self.recompute()

    @on(Button.Pressed, "#start")
    def _start_pressed(self) -> None:
        self.action_start()

    def action_start(self) -> None:
        app = app_context(self.app)
        self.recompute()
        if not self.can_start() or self.plan is None:
            reason = (
                "acknowledge that the prompts go to a third party"
                if self.plan is not None and not self.errors and self.contacts_provider()
                else RUN_IN_PROGRESS
                if app.session.active
                else "fix the fields marked in the form"
            )
            self.notify(f"Cannot start: {reason}.", severity="warning")
            return
        config = self.plan.config
        self.app.pop_screen()
        app.start_run(config)

    def action_back(self) -> None:
        self.app.pop_screen()

    def palette_commands(self) -> list[SystemCommand]:
        return [SystemCommand("run: start", "Start the planned run", self.action_start)]


def cost_text(cost: dict[str, Any]) -> str:
    """The plan's cost range as the batch plan has it, or why there is none."""
    price = cost.get("price")
    if cost.get("usd_low") is None or cost.get("usd_high") is None:
        return f"{price} (no estimate)" if isinstance(price, str) else "no price"
    where = f" ({price})" if isinstance(price, str) else ""
    return f"${cost['usd_low']:.4f} to ${cost['usd_high']:.4f} USD{where}"


def study_text(trace: dict[str, Any]) -> str:
    """Which frozen row of a PQID-Bench release these requests replicate, if any."""
    rep = trace.get("replicates")
    if isinstance(rep, dict):
        scope = (
            ""
            if rep.get("scope") == "full"
            else f" on {rep.get('prompts')} of its {rep.get('of')} prompts"
        )
        return f"replicates {rep.get('model_label')} request for request{scope}"
    closest = trace.get("closest")
    if closest:
        return (
            f"replicates none; closest {closest}, {trace.get('differing_prompts')} prompt(s) differ"
        )
    return "replicates none"
