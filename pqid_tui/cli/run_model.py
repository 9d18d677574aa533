"""`pqid-tui --batch run-model`: plan (--dry-run) or run one model route over the release."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from engine.errors import ConfigError
from engine.providers.routes import DEFAULT_CONCURRENCY
from engine.states import PromptState
from pqid_tui.cli import Subcommands, default_release_dir
from pqid_tui.cli.progress import batch_polled_line, run_finished_line, run_started_line
from pqid_tui.textsafe import escape_controls

if TYPE_CHECKING:
    from engine.config import LiveRunConfig
    from engine.events import Event, ProgressCallback


def add_selection_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--split", help="only prompts of this split (default: every prompt)")
    p.add_argument("--limit", type=int, metavar="N", help="only the first N selected prompts")
    p.add_argument(
        "--prompt-ids",
        metavar="ID[,ID...]",
        action="append",
        help="only these prompt IDs (comma-separated; repeatable)",
    )


def register(sub: Subcommands) -> None:
    p = sub.add_parser(
        "run-model",
        help="send the frozen prompts to one model route (or --dry-run to plan)",
        description="Send the release's prompts to one model route and keep every byte of "
        "evidence in --output-dir. Start with --dry-run: it reads no credential, "
        "writes no file and opens no connection.",
    )
    g = p.add_argument_group("release and output")
    g.add_argument(
        "--release-dir", default=None, help="release directory (default: the bundled demo release)"
    )
    g.add_argument("--output-dir", help="run directory: empty or new, or existing with --resume")
    g.add_argument(
        "--allow-modified-release",
        action="store_true",
        help="run on a release whose SHA-256 check fails (stamped not publishable)",
    )
    g = p.add_argument_group("route")
    g.add_argument(
        "--provider",
        required=True,
        help="openai, groq, github-models, openrouter, hugging-face, nvidia, "
        "deepinfra, deepseek, local; anthropic or gemini (native adapters); or "
        "oracle (reference answers, no network)",
    )
    g.add_argument("--model", help="model ID as the provider names it (oracle: any label)")
    g.add_argument("--base-url", help="another OpenAI-compatible endpoint for this provider label")
    g.add_argument(
        "--header",
        action="append",
        default=[],
        metavar="NAME:VALUE",
        help="extra non-secret request header (repeatable)",
    )
    g.add_argument("--api-key-file", type=Path, help="read the key from this file")
    g.add_argument("--no-auth", action="store_true", help="endpoint without authentication")
    g.add_argument(
        "--acknowledge-third-party-prompt-export",
        action="store_true",
        dest="acknowledge",
        help="required to send prompts: the provider's retention, policy, quota and "
        "billing terms apply",
    )
    g = p.add_argument_group("generation contract")
    g.add_argument(
        "--generation-contract",
        choices=["pqid-bench"],
        metavar="NAME",
        help="a named set of the settings below; explicit flags override it. "
        "pqid-bench: what the frozen PQID-Bench study sent (temperature 0, "
        "top_p 1, 2048 output tokens as max_tokens; on anthropic no top_p)",
    )
    g.add_argument("--temperature", type=float, help="sampling temperature (default 0)")
    g.add_argument("--top-p", type=float, help="nucleus sampling (default 1)")
    g.add_argument("--max-output-tokens", type=int, help="output limit (default 2048)")
    g.add_argument(
        "--omit-temperature",
        action="store_true",
        help="do not send temperature (routes that reject it)",
    )
    g.add_argument("--omit-top-p", action="store_true", help="do not send top_p")
    g.add_argument(
        "--max-output-field",
        choices=["max_tokens", "max_completion_tokens"],
        help="spelling of the output limit (default: the route's)",
    )
    g.add_argument("--seed", type=int, help="best-effort seed, where the provider accepts one")
    g.add_argument(
        "--extra-body-json",
        metavar="FILE",
        help="JSON object file of non-secret provider settings merged into each body",
    )
    g = p.add_argument_group("selection")
    add_selection_args(p)
    g = p.add_argument_group("pacing, retries and resume")
    g.add_argument(
        "--concurrency",
        type=int,
        default=DEFAULT_CONCURRENCY,
        help=f"requests in flight at once (default {DEFAULT_CONCURRENCY})",
    )
    g.add_argument("--max-retries", type=int, default=3, help="retries per prompt (default 3)")
    g.add_argument(
        "--retry-backoff-seconds",
        type=float,
        default=2.0,
        help="first backoff, doubled each retry, with jitter (default 2)",
    )
    g.add_argument("--max-backoff-seconds", type=float, default=60.0)
    g.add_argument(
        "--max-retry-after-seconds",
        type=float,
        default=120.0,
        help="a Retry-After longer than this ends the prompt as an error",
    )
    g.add_argument("--request-timeout-seconds", type=float, default=120.0)
    g.add_argument(
        "--sleep-seconds",
        type=float,
        default=0.0,
        help="at least this long between request starts (strict free tiers)",
    )
    g.add_argument(
        "--stop-on-error",
        action="store_true",
        help="start no new prompt after one ends in a terminal error",
    )
    g.add_argument("--resume", action="store_true", help="continue the run in --output-dir")
    g.add_argument(
        "--retry-errors",
        action="store_true",
        help="on resume, send prompts that ended in a terminal error again",
    )
    g.add_argument(
        "--retry-uncertain",
        action="store_true",
        help="on resume, resend prompts that were in flight when a run died "
        "(a possible extra paid draw)",
    )
    g.add_argument(
        "--max-new",
        type=int,
        metavar="N",
        help="send at most N prompts in this invocation (quota-aware chunks)",
    )
    g.add_argument(
        "--require-exact-model",
        action="store_true",
        help="a reply from a different model family (not a dated alias) is a "
        "terminal error instead of a flagged success",
    )
    g.add_argument(
        "--prices",
        type=Path,
        metavar="FILE",
        help="price table JSON (default: $PQID_TUI_PRICES, else prices.json in the "
        "user config directory)",
    )
    g.add_argument(
        "--recast",
        action="store_true",
        help="then send every selected prompt again as an independent draw into "
        "OUTPUT/recast/ and report how many responses changed",
    )
    g.add_argument(
        "--batch-api",
        action="store_true",
        help="openai only: send the requests through the OpenAI Batch API (upload, "
        "create, poll, download); resumable, never creates a second batch",
    )
    g.add_argument(
        "--batch-poll-seconds",
        type=float,
        default=30.0,
        help="how often to poll a batch (default 30)",
    )
    p.add_argument("--dry-run", action="store_true", help="print the plan as JSON and stop")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.set_defaults(handler=run)


def _headers(values: list[str]) -> dict[str, str]:
    out = {}
    for item in values:
        name, sep, value = item.partition(":")
        if not sep:
            raise ConfigError(f"--header {item!r}: expected NAME:VALUE")
        out[name.strip()] = value.strip()
    return out


def _extra_body(value: str | None) -> dict[str, Any]:
    if value is None:
        return {}
    try:
        text = Path(value).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"--extra-body-json {value}: cannot read ({exc.strerror})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"--extra-body-json {value}: not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"--extra-body-json {value}: must hold a JSON object")
    return data


def _ids(values: list[str] | None) -> tuple[str, ...] | None:
    if not values:
        return None
    return tuple(i.strip() for v in values for i in v.split(",") if i.strip())


def _generation_args(args: argparse.Namespace) -> dict[str, Any]:
    """The generation settings given on the command line, and only those: a named contract
    fills the others, and an explicit flag overrides it."""
    given = {
        "generation_contract": args.generation_contract,
        "temperature": args.temperature,
        "top_p": args.top_p,
        "max_output_tokens": args.max_output_tokens,
        "max_output_field": args.max_output_field,
        "seed": args.seed,
        "omit_temperature": args.omit_temperature or None,
        "omit_top_p": args.omit_top_p or None,
    }
    return {k: v for k, v in given.items() if v is not None}


def config_from_args(args: argparse.Namespace) -> LiveRunConfig:
    from engine.config import make_config

    model = args.model
    if model is None:
        if args.provider != "oracle":
            raise ConfigError("--model is required (the model ID as the provider names it)")
        model = "reference"
    return make_config(
        release_dir=Path(args.release_dir or default_release_dir()),
        output_dir=Path(args.output_dir) if args.output_dir else None,
        provider=args.provider,
        model=model,
        base_url=args.base_url,
        headers=_headers(args.header),
        api_key_file=args.api_key_file,
        no_auth=args.no_auth,
        acknowledge_prompt_export=args.acknowledge,
        **_generation_args(args),
        extra_body=_extra_body(args.extra_body_json),
        split=args.split,
        limit=args.limit,
        prompt_ids=_ids(args.prompt_ids),
        concurrency=args.concurrency,
        max_retries=args.max_retries,
        retry_backoff_seconds=args.retry_backoff_seconds,
        max_backoff_seconds=args.max_backoff_seconds,
        max_retry_after_seconds=args.max_retry_after_seconds,
        request_timeout_seconds=args.request_timeout_seconds,
        sleep_seconds=args.sleep_seconds,
        stop_on_error=args.stop_on_error,
        resume=args.resume,
        retry_errors=args.retry_errors,
        retry_uncertain=args.retry_uncertain,
        max_new=args.max_new,
        allow_modified_release=args.allow_modified_release,
        require_exact_model=args.require_exact_model,
        prices_path=args.prices,
        recast=args.recast,
        batch_api=args.batch_api,
        batch_poll_seconds=args.batch_poll_seconds,
    )


class ProgressPrinter:
    """One stderr line per request start and end, and a last line with the counts.

    A prompt's outcome is printed when its answer is in ("saving": its evidence is being
    written; a write that fails stops the run with an error), so the lines follow the
    requests actually outstanding. Prompts this invocation does not send (a resume's
    successes) get no line: the first line counts them.
    """

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        self.total = 0
        self.done = 0
        self.t0 = time.monotonic()
        self.sent: set[str] = set()  # prompts this invocation sent
        self.answered: set[str] = set()  # ... whose outcome line is printed

    def __call__(self, event: Event) -> None:
        # Here, not at the top: building the parsers (--help) need not load the event types.
        from engine.events import BatchPolled, PromptStateChanged, RunFinished, RunStarted

        if isinstance(event, RunStarted):
            self.total = event.to_send
            self._line(run_started_line(event))
        elif isinstance(event, PromptStateChanged):
            pid = event.prompt_id
            if event.state == PromptState.IN_FLIGHT:
                self.sent.add(pid)
                self.answered.discard(pid)
                self._line(f"[{self.done}/{self.total}] {pid}: sending (attempt {event.attempt})")
            elif event.state == PromptState.RETRYING and event.next_attempt_at:
                wait = max(0.0, event.next_attempt_at - time.time())
                self._line(
                    f"[{self.done}/{self.total}] {pid}: "
                    f"{escape_controls(event.error or '')}; retry in {wait:.1f}s"
                )
            elif event.state == PromptState.SAVING and pid in self.sent:
                self.answered.add(pid)
                self._outcome(pid, "success" if event.error is None else "error", event.error)
            elif (
                event.state in (PromptState.SUCCESS, PromptState.ERROR)
                and pid in self.sent
                and pid not in self.answered
            ):
                self.answered.add(pid)  # the batch path: no "saving" step
                self._outcome(pid, event.state, event.error)
        elif isinstance(event, BatchPolled):
            self._line(batch_polled_line(event))
        elif isinstance(event, RunFinished):
            self._line(run_finished_line(event.summary, time.monotonic() - self.t0))

    def _outcome(self, pid: str, state: str, error: str | None) -> None:
        self.done += 1
        detail = "" if state == PromptState.SUCCESS else f": {escape_controls(error or '')}"
        self._line(f"[{self.done}/{self.total}] {pid}: {state}{detail}")

    def _line(self, text: str) -> None:
        print(text, file=self.stream, flush=True)


def make_progress(stream: TextIO) -> ProgressCallback:
    """One updating line on a terminal; one line per request start and end elsewhere."""
    from pqid_tui.cli.progress import LiveProgress, wants_live_line

    return LiveProgress(stream) if wants_live_line(stream) else ProgressPrinter(stream)


def run(args: argparse.Namespace) -> int:
    config = config_from_args(args)
    if args.dry_run:
        from engine.run.plan import plan_live_model_run

        plan = plan_live_model_run(config)
        print(json.dumps(plan, indent=2, sort_keys=True), flush=True)
        if plan["output"]["action"] == "refused":
            # The plan is what the run would do: this run would stop here.
            print(f"pqid-tui: error: {escape_controls(plan['output']['reason'])}", file=sys.stderr)
            return 2
        return 0
    progress = None if args.quiet else make_progress(sys.stderr)
    if config.batch_api:
        from engine.run.batch import run_batch_api

        result = run_batch_api(config, progress=progress)
    else:
        from engine.run.live import run_live_model

        result = run_live_model(config, progress=progress)
    print(json.dumps(result.to_dict(), indent=2, sort_keys=True))
    summary = result.to_dict()
    return 0 if summary.get("error", 0) == 0 and summary.get("uncertain", 0) == 0 else 1
