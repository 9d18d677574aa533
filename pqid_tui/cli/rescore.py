"""`pqid-tui --batch rescore`: score a frozen study's archived responses again, and compare."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pqid_tui.cli import Subcommands, add_evaluator_arguments, run_evaluator
from pqid_tui.cli.progress import rescore_progress
from pqid_tui.textsafe import escape_controls


def register(sub: Subcommands) -> None:
    p = sub.add_parser(
        "rescore",
        help="score the frozen study's archived responses again and compare",
        description="Score every archived response set of a PQID-Bench evidence repository "
        "(or the chosen models', or one responses file in the study's format) in "
        "the evaluator container, under the release's contract and pinned "
        "environment, and report the agreement with the frozen cells on "
        "execution, assembly, signature and each component check, with every "
        "disagreeing cell. Exit status 1 when a cell disagrees or could not be "
        "scored.",
    )
    p.add_argument(
        "--release-dir",
        required=True,
        type=Path,
        help="the PQID-Bench evidence repository (its frozen matrix and responses)",
    )
    p.add_argument(
        "--model",
        action="append",
        metavar="LABEL",
        dest="models",
        help="rescore only this frozen model (its row label, e.g. "
        "groq_llama-3_1-8b-instant, its model or its name); repeatable",
    )
    p.add_argument(
        "--responses",
        type=Path,
        metavar="FILE",
        help="score this responses file (the study's format) instead",
    )
    p.add_argument(
        "--frozen-report",
        type=Path,
        metavar="FILE",
        help="with --responses: the harness report whose records it is held "
        "against (default: the frozen row whose archived file it is, if any)",
    )
    p.add_argument(
        "--output-dir",
        type=Path,
        metavar="DIR",
        help="also write rescore.{json,txt,md} and evaluations/<model>.jsonl here",
    )
    p.add_argument(
        "--format",
        choices=("text", "json", "markdown"),
        default="text",
        help="what is printed on stdout (default text)",
    )
    add_evaluator_arguments(
        p,
        results="report",
        base_image_help="base of the evaluator image, with the release's Python (PQID-Bench: "
        "3.13; default python:3.13-slim; offline: .ci/base-image "
        "pqid-base:trixie trixie)",
        wheelhouse_help="install the pinned environment from these wheels, with no index "
        "(.ci/wheelhouse-fill --python-version 3.13 DIR "
        "evaluator/environments/pqid-bench-1.0.0.txt)",
    )
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from engine.replay.rescore import render, rescore

    result = run_evaluator(
        lambda: rescore(
            args.release_dir,
            acknowledge_code_execution=args.acknowledge,
            models=args.models,
            responses=args.responses,
            frozen_report=args.frozen_report,
            output_dir=args.output_dir,
            build_image=args.build_image,
            base_image=args.base_image,
            wheelhouse=args.wheelhouse,
            timeout_seconds=args.timeout_seconds,
            allow_environment_mismatch=args.allow_environment_mismatch,
            allow_modified_release=args.allow_modified_release,
            progress=None if args.quiet else rescore_progress(sys.stderr),
        )
    )
    if isinstance(result, int):
        return result
    text = render(result.report, args.format)
    print(text if args.format == "json" else escape_controls(text), end="")
    report = result.report
    totals = report.get("totals")
    disagree = bool(report["disagreements"]) or report["not_evaluated"] > 0
    return 1 if disagree or (totals is not None and not totals["full_agreement"]) else 0
