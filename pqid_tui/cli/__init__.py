"""The headless commands of `pqid-tui --batch`, one module each."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TypeAlias, TypeVar

if TYPE_CHECKING:
    from engine.release import Release

T = TypeVar("T")


class Parser(argparse.ArgumentParser):
    """An argument parser whose mistakes are one line on stderr and exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        from engine.providers.routes import SECRET_VALUE_RE

        # argparse echoes unexpected arguments; one of them may be a key pasted by mistake.
        message = SECRET_VALUE_RE.sub(
            "[REDACTED: keys are never read from the command line]", message
        )
        self.exit(2, f"{self.prog}: error: {message}\n")


# What each command module's `register` is given: `pqid-tui --batch`'s subcommands.
Subcommands: TypeAlias = "argparse._SubParsersAction[Parser]"


def default_release_dir() -> str:
    """The bundled demo release: every command's default --release-dir."""
    from engine.demo import DEMO_RELEASE_DIR

    return str(DEMO_RELEASE_DIR)


def add_evaluator_arguments(
    p: argparse.ArgumentParser, *, base_image_help: str, wheelhouse_help: str, results: str
) -> None:
    """The flags of every command that runs the evaluator container (replay, rescore):
    the image, the per-response time limit, the environment and release checks, progress,
    and the code-execution acknowledgement. `results` names what those commands write."""
    p.add_argument(
        "--build-image",
        action="store_true",
        help="build the evaluator image when it does not exist yet",
    )
    p.add_argument("--base-image", metavar="IMAGE", help=base_image_help)
    p.add_argument("--wheelhouse", type=Path, metavar="DIR", help=wheelhouse_help)
    p.add_argument(
        "--timeout-seconds",
        type=float,
        default=20.0,
        metavar="N",
        help="time limit for each response's execution (default 20)",
    )
    p.add_argument(
        "--allow-environment-mismatch",
        action="store_true",
        help="score even when the base image's Python is not the release's pinned "
        f"one (the {results} then says environment_matches_release: false)",
    )
    p.add_argument(
        "--allow-modified-release",
        action="store_true",
        help="use a release whose SHA-256 checks fail (stamped modified)",
    )
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.add_argument(
        "--acknowledge-code-execution",
        action="store_true",
        dest="acknowledge",
        help="required: the responses are untrusted code and will be executed "
        "(inside the container)",
    )


def run_evaluator(call: Callable[[], T]) -> T | int:
    """What `call` (a command's evaluator run) returns, or the exit status of a run that was
    interrupted (130) or whose evaluator failed (1), said in one line on stderr."""
    from engine.errors import EvaluatorFailed, Interrupted

    try:
        return call()
    except Interrupted as exc:
        # The container is already gone (or named, with the command that removes it).
        print(f"pqid-tui: {exc.message()}", file=sys.stderr)
        return 130
    except EvaluatorFailed as exc:
        # Not the user's mistake (exit 1, not 2), but still one message, not a traceback.
        print(f"pqid-tui: error: {exc}", file=sys.stderr)
        return 1


def add_table_arguments(p: argparse.ArgumentParser, formats: Sequence[str], *, what: str) -> None:
    """The flags of the commands that print a release's tables (compare, reproduce): where a
    .zip release goes, the format, and the file that takes the `what` instead of stdout."""
    p.add_argument(
        "--cache-dir",
        type=Path,
        metavar="DIR",
        help="where a .zip release is extracted (default: the user cache dir)",
    )
    p.add_argument("--format", choices=formats, default="text")
    p.add_argument(
        "--output",
        type=Path,
        metavar="FILE",
        help=f"write the {what} here instead of standard output",
    )


def load_table_release(args: argparse.Namespace) -> Release:
    """The release of a table command: --release-dir (default: the demo), --cache-dir, and
    --allow-modified-release."""
    from engine.release import load_release

    return load_release(
        Path(args.release_dir or default_release_dir()),
        allow_modified=args.allow_modified_release,
        cache_dir=args.cache_dir,
    )


def write_output(path: Path, text: str) -> None:
    """Write a command's --output file whole, or InputError saying why it cannot."""
    from engine.errors import InputError
    from engine.rundir.storage import atomic_write_bytes

    try:
        atomic_write_bytes(path, text.encode())
    except OSError as exc:
        raise InputError(f"--output {path}: cannot write ({exc.strerror})") from None
