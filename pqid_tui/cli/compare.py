"""`pqid-tui --batch compare`: the candidate beside the frozen matrix, on the same prompts."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pqid_tui.cli import Subcommands, add_table_arguments, load_table_release, write_output

# Copies of engine.replay.compare's constants, so that building the parsers (--help) does not load
# the comparison code; tests/app/test_cli_imports.py checks that they agree.
DEFAULT_INFRA_THRESHOLD = 0.02
FORMATS = ("text", "markdown", "json", "csv")


def register(sub: Subcommands) -> None:
    p = sub.add_parser(
        "compare",
        help="compare evaluations with the frozen matrix on the same prompt IDs",
        description="Set a candidate's canonical evaluations beside every row of the "
        "release's frozen matrix, on exactly the candidate's prompt IDs, with "
        "counts, denominators, paired differences (exact McNemar p), the "
        "candidate's rank and a publishable verdict. On the PQID-Bench evidence "
        "repository: the 21 frozen models under the PQID-Bench contract "
        "(execution, assembly, signature, the Execution-Structure and "
        "Assembly-Structure gaps, the four signature components), and a second "
        "table on the 150-prompt identifiability subset.",
    )
    p.add_argument(
        "--release-dir",
        default=None,
        help="release directory: a pqid-release/1 directory or the PQID-Bench "
        "evidence repository (default: the bundled demo release)",
    )
    p.add_argument(
        "--evaluations",
        required=True,
        type=Path,
        help="pqid_bench_canonical_evaluations.jsonl written by replay (scored "
        "under the release's contract)",
    )
    p.add_argument(
        "--candidate-run-manifest",
        type=Path,
        metavar="M",
        help="the run's run-manifest.json: its selected prompts become the "
        "denominator (prompts without an evaluation count as missing)",
    )
    p.add_argument("--split", help="compare only the candidate's prompts of this split")
    p.add_argument(
        "--allow-partial",
        action="store_true",
        help="compare a candidate that lacks prompts of its splits; every frozen row "
        "is then restricted to the candidate's prompt IDs",
    )
    p.add_argument(
        "--allow-environment-mismatch",
        action="store_true",
        help="compare although the scoring contract or environment differs from "
        "the frozen rows' (evaluator and Qiskit versions; PQID-Bench: contract, "
        "predicate, Python, Qiskit, Qiskit Aer); marked not publishable",
    )
    p.add_argument(
        "--allow-modified-release",
        action="store_true",
        help="use a release whose SHA-256 checks fail (marked not publishable)",
    )
    p.add_argument(
        "--infra-threshold",
        type=float,
        default=DEFAULT_INFRA_THRESHOLD,
        metavar="FRACTION",
        help="most infrastructure failures a publishable comparison may have "
        f"(default {DEFAULT_INFRA_THRESHOLD})",
    )
    add_table_arguments(p, FORMATS, what="table")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from engine.replay.compare import compare

    comparison = compare(
        load_table_release(args),
        args.evaluations,
        candidate_manifest=args.candidate_run_manifest,
        allow_partial=args.allow_partial,
        allow_environment_mismatch=args.allow_environment_mismatch,
        infra_threshold=args.infra_threshold,
        split=args.split,
    )
    text = comparison.render(args.format)
    if args.output is None:
        sys.stdout.write(text)
        return 0
    write_output(args.output, text)
    print(
        f"wrote {args.output} (publishable: {'yes' if comparison.publishable else 'no'})",
        file=sys.stderr,
    )
    return 0
