"""The `pqid-tui` command: the app by default, `--batch COMMAND` for the headless commands."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from collections.abc import Sequence

from pqid_tui import __version__
from pqid_tui.cli import Parser

# Nothing of the engine is imported before `main` can catch a Ctrl-C: a user who presses it
# while the command starts gets one line, not a traceback of an import.


def batch_parser() -> argparse.ArgumentParser:
    from pqid_tui.cli import (
        compare,
        credentials,
        demo,
        download,
        replay,
        reproduce,
        rescore,
        run_model,
        trace,
        verify,
    )

    parser = Parser(
        prog="pqid-tui --batch",
        description="Headless commands. Each prints progress to stderr and its result to stdout.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    sub.required = True
    # One module per command, in the order `--help` lists them; each registers its subparser.
    for module in (
        run_model,
        credentials,
        replay,
        compare,
        demo,
        verify,
        download,
        trace,
        reproduce,
        rescore,
    ):
        module.register(sub)
    return parser


def app_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="pqid-tui",
        description=(
            "Operate benchmark runs of Qiskit-writing models: a terminal app, or headless commands "
            "with --batch (see `pqid-tui --batch --help`)."
        ),
    )
    parser.add_argument("--version", action="version", version=f"pqid-tui {__version__}")
    parser.add_argument("--release-dir", help="release directory (default: the bundled demo)")
    parser.add_argument("--runs-dir", help="where runs live (default: the user data directory)")
    parser.add_argument(
        "--base-image",
        metavar="IMAGE",
        help="the Replay screen's base image "
        "for the evaluator (default: the last one used, else python:3.11-slim)",
    )
    parser.add_argument(
        "--wheelhouse",
        metavar="DIR",
        help="the Replay screen's offline "
        "wheelhouse directory (default: the last one used, else none)",
    )
    return parser


def _terminate(signum: int, frame: object) -> None:
    # SIGTERM takes the same path as Ctrl-C: runs write their summary, replays remove
    # their container.
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _terminate)
    try:
        return _main(args)
    except KeyboardInterrupt:
        print("pqid-tui: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader of stdout left (`| head -1`): nothing more to say, and nowhere to say it.
        # Point stdout at /dev/null so the interpreter's last flush cannot fail again.
        _quiet_stdout()
        return 141  # what a shell reports for a process ended by SIGPIPE


def _main(args: list[str]) -> int:
    from engine.errors import UsageError

    try:
        if args and args[0] == "--batch":
            parser = batch_parser()
            ns = parser.parse_args(args[1:])
            return int(ns.handler(ns))
        ns = app_parser().parse_args(args)
        from pqid_tui.app import run_app

        return int(run_app(ns))
    except UsageError as exc:
        print(f"pqid-tui: error: {exc}", file=sys.stderr)
        return 2


def _quiet_stdout() -> None:
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


if __name__ == "__main__":
    sys.exit(main())
