"""`pqid-tui --batch trace`: which frozen PQID-Bench row a run replicates, request for request."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pqid_tui.cli import Subcommands

# A copy of engine.release.trace.TRACE_FORMATS, so that building the parsers (--help) does not load
# the engine; tests/engine/test_study_requests.py checks that they agree.
FORMATS = ("json", "text")


def register(sub: Subcommands) -> None:
    p = sub.add_parser(
        "trace",
        help="which frozen PQID-Bench row a run replicates, and which prompts differ",
        description="Hold a run's recorded requests against the archived requests of every "
        "frozen model of PQID-Bench (the evidence repository): the row it "
        "replicates request for request, if any, and for the closest row which "
        "prompts differ and how (route, model, messages, generation settings).",
    )
    p.add_argument(
        "--release-dir",
        required=True,
        help="the PQID-Bench evidence repository (it holds the archived requests)",
    )
    p.add_argument("--run-dir", required=True, type=Path, help="the run directory to trace")
    p.add_argument("--format", choices=FORMATS, default="json")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from engine.release import load_release
    from engine.release.trace import trace_run

    release = load_release(Path(args.release_dir))
    trace = trace_run(release, args.run_dir)
    sys.stdout.write(trace.render(args.format))
    return 0
