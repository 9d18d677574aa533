"""`pqid-tui --batch replay`: score a responses file in the evaluator container."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from pqid_tui.cli import Subcommands, add_evaluator_arguments, default_release_dir, run_evaluator


def register(sub: Subcommands) -> None:
    p = sub.add_parser(
        "replay",
        help="evaluate a responses file in a network-disabled Docker container",
        description="Execute and score every response of a responses.jsonl (any file whose "
        "lines carry prompt_id and content or generated_code) inside the evaluator "
        "container: no network, read-only, unprivileged. Writes "
        "pqid_bench_canonical_evaluations.jsonl and "
        "pqid_bench_candidate_summary.{json,txt,md,csv} into --output-dir. "
        "Exit status 1 when some response could not be evaluated.",
    )
    p.add_argument(
        "--release-dir", default=None, help="release directory (default: the bundled demo release)"
    )
    p.add_argument("--responses", required=True, type=Path, help="responses.jsonl to evaluate")
    p.add_argument(
        "--output-dir", required=True, type=Path, help="where the evaluations and summaries go"
    )
    add_evaluator_arguments(
        p,
        results="summary",
        base_image_help="base of the evaluator image: python3 with venv, the Python the "
        "release pins (default python:3.11-slim, or python:X.Y-slim for a "
        "release pinning X.Y; offline: .ci/base-image pqid-base:bookworm, "
        "or pqid-base:trixie trixie for PQID-Bench's 3.13)",
        wheelhouse_help="install the pinned requirements from these wheels, with no index "
        "(fill it with .ci/wheelhouse-fill DIR)",
    )
    p.add_argument(
        "--container-timeout-seconds",
        type=float,
        metavar="N",
        help="wall-clock limit of the whole evaluation (default: generous, from the "
        "number of responses); what is left is recorded as not evaluated",
    )
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="replace the results of an earlier replay in --output-dir",
    )
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from engine.replay.replay import replay
    from pqid_tui.cli.progress import replay_progress

    result = run_evaluator(
        lambda: replay(
            Path(args.release_dir or default_release_dir()),
            args.responses,
            args.output_dir,
            acknowledge_code_execution=args.acknowledge,
            build_image=args.build_image,
            base_image=args.base_image,
            wheelhouse=args.wheelhouse,
            progress=None if args.quiet else replay_progress(sys.stderr),
            timeout_seconds=args.timeout_seconds,
            allow_modified_release=args.allow_modified_release,
            overwrite=args.overwrite,
            wall_clock_seconds=args.container_timeout_seconds,
            allow_environment_mismatch=args.allow_environment_mismatch,
        )
    )
    if isinstance(result, int):
        return result
    print(json.dumps(result.to_dict(), indent=2, sort_keys=True))
    return 1 if result.summary["categories"].get("not_evaluated") else 0
