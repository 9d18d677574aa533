"""Command line of the evaluator: ``python -m evaluator serve [--container]``."""

from __future__ import annotations

import time

# Before the other imports: the start-up timing counts from here.
_STARTED_AT = time.time()

import argparse  # noqa: E402
import io  # noqa: E402
import sys  # noqa: E402

from evaluator.supervisor import serve  # noqa: E402

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """Parse the command line and run the chosen command."""
    parser = argparse.ArgumentParser(
        prog="python -m evaluator", description="Score generated Qiskit code."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    serve_cmd = commands.add_parser(
        "serve", help="read a job (JSON lines) on stdin, write evaluations on stdout"
    )
    serve_cmd.add_argument(
        "--container",
        action="store_true",
        help="running as the container's init: sweep every process that is not ours",
    )
    score_cmd = commands.add_parser("score", help="score a job file (local debugging)")
    score_cmd.add_argument("--input", required=True, help="a job file in the serve format")
    args = parser.parse_args(argv)
    if args.command == "serve":
        stdin = io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8", errors="strict")
        return serve(stdin, sys.stdout, container=args.container, started_at=_STARTED_AT)
    with open(args.input, encoding="utf-8") as job:
        return serve(job, sys.stdout, container=False, started_at=_STARTED_AT)


if __name__ == "__main__":
    sys.exit(main())
