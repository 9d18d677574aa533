"""`pqid-tui --batch reproduce`: the published tables, recomputed from the frozen evaluations."""

from __future__ import annotations

import argparse
import sys

from pqid_tui.cli import Subcommands, add_table_arguments, load_table_release, write_output

# A copy of engine.replay.reproduce.FORMATS, so that --help does not load the engine's tables;
# tests/engine/test_pqid_bench_matrix.py checks that they agree.
FORMATS = ("text", "markdown", "json", "csv")


def register(sub: Subcommands) -> None:
    p = sub.add_parser(
        "reproduce",
        help="recompute the frozen matrix's published tables (nothing executed)",
        description="Recompute the release's tables from its frozen evaluations without "
        "executing anything: the pooled totals, one row per model ranked by the "
        "structural metric, the identifiability subset, and a check of every "
        "figure the release publishes against its recomputed value. Exit status 0 "
        "when every published figure agrees, 1 when one differs, 2 on a usage "
        "error (a release without a frozen matrix, such as a PQID-Bench core "
        "distribution).",
    )
    p.add_argument(
        "--release-dir",
        default=None,
        help="release directory: the PQID-Bench evidence repository, or any release "
        "with a frozen matrix (default: the bundled demo release)",
    )
    p.add_argument(
        "--allow-modified-release",
        action="store_true",
        help="use a release whose SHA-256 checks fail (the result says modified)",
    )
    add_table_arguments(p, FORMATS, what="tables")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from engine.replay.reproduce import reproduce

    result = reproduce(load_table_release(args))
    text = result.render(args.format)
    if args.output is None:
        sys.stdout.write(text)
    else:
        write_output(args.output, text)
        print(f"wrote {args.output}", file=sys.stderr)
    if not result.agrees:
        differ = sum(1 for c in result.data["checks"] if not c["agree"])
        print(
            f"pqid-tui: {differ} published figure(s) differ from the recomputed values",
            file=sys.stderr,
        )
        return 1
    return 0
