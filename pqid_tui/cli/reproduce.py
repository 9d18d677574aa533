"""`pqid-tui --batch reproduce`: the published tables, recomputed from the frozen evaluations."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from engine.errors import InputError
from pqid_tui.cli import default_release_dir

# A copy of engine.replay.reproduce.FORMATS, so that --help does not load the engine's tables;
# tests/engine/test_pqid_bench_matrix.py checks that they agree.
FORMATS = ("text", "markdown", "json", "csv")


def register(sub: Any) -> None:
    p = sub.add_parser(
        "reproduce", help="recompute the frozen matrix's published tables (nothing executed)",
        description="Recompute the release's tables from its frozen evaluations without "
                    "executing anything: the pooled totals, one row per model ranked by the "
                    "structural metric, the identifiability subset, and a check of every "
                    "figure the release publishes against its recomputed value. Exit status 0 "
                    "when every published figure agrees, 1 when one differs, 2 on a usage "
                    "error (a release without a frozen matrix, such as a PQID-Bench core "
                    "distribution).")
    p.add_argument("--release-dir", default=None,
                   help="release directory: the PQID-Bench evidence repository, or any release "
                        "with a frozen matrix (default: the bundled demo release)")
    p.add_argument("--allow-modified-release", action="store_true",
                   help="use a release whose SHA-256 checks fail (the result says modified)")
    p.add_argument("--cache-dir", type=Path, metavar="DIR",
                   help="where a .zip release is extracted (default: the user cache dir)")
    p.add_argument("--format", choices=FORMATS, default="text")
    p.add_argument("--output", type=Path, metavar="FILE",
                   help="write the tables here instead of standard output")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from engine.release import load_release
    from engine.replay.reproduce import reproduce
    from engine.rundir.storage import atomic_write_bytes

    release = load_release(Path(args.release_dir or default_release_dir()),
                           allow_modified=args.allow_modified_release,
                           cache_dir=args.cache_dir)
    result = reproduce(release)
    text = result.render(args.format)
    if args.output is None:
        sys.stdout.write(text)
    else:
        try:
            atomic_write_bytes(args.output, text.encode())
        except OSError as exc:
            raise InputError(f"--output {args.output}: cannot write ({exc.strerror})") from None
        print(f"wrote {args.output}", file=sys.stderr)
    if not result.agrees:
        differ = sum(1 for c in result.data["checks"] if not c["agree"])
        print(f"pqid-tui: {differ} published figure(s) differ from the recomputed values",
              file=sys.stderr)
        return 1
    return 0
