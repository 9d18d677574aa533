"""`pqid-tui --batch download`: the PQID-Bench core distribution, verified, in the cache."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from pqid_tui.cli import Subcommands
from pqid_tui.textsafe import escape_controls

DEFAULT_VERSION = "1.0.0"


def register(sub: Subcommands) -> None:
    p = sub.add_parser(
        "download",
        help="get the PQID-Bench core distribution (HTTPS, SHA-256 pinned)",
        description="Download the PQID-Bench core distribution over HTTPS (or import a copy "
        "already on disk with --from), check the archive against the SHA-256 "
        "pinned in this program, extract it safely into the user cache dir and "
        "print its path (use it as --release-dir). A verified extraction is "
        "reused: nothing is downloaded twice.",
    )
    p.add_argument(
        "--version", default=DEFAULT_VERSION, help=f"benchmark release (default {DEFAULT_VERSION})"
    )
    p.add_argument(
        "--from",
        dest="from_file",
        type=Path,
        metavar="FILE.zip",
        help="import this core .zip instead of downloading (same pinned SHA-256)",
    )
    p.add_argument(
        "--url",
        metavar="URL",
        help="download from this HTTPS mirror instead of the official URL (the "
        "archive must still have the pinned SHA-256)",
    )
    p.add_argument(
        "--cache-dir",
        type=Path,
        metavar="DIR",
        help="cache folder (default: the user cache dir); the release goes to "
        "DIR/releases/<archive SHA-256>/",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=120.0,
        metavar="SECONDS",
        help="network timeout (default 120)",
    )
    p.add_argument(
        "--format",
        choices=("text", "json"),
        default="text",
        help="text: the release path on stdout (default); json: the full record",
    )
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from engine.errors import ReleaseError
    from engine.release.download import get_core_distribution

    if args.timeout <= 0:
        raise ReleaseError("--timeout must be a positive number of seconds")
    got = get_core_distribution(
        args.version,
        from_file=args.from_file,
        url=args.url,
        cache_dir=args.cache_dir,
        timeout=args.timeout,
    )
    how = {
        "cache": "reused the verified extraction already in the cache (nothing downloaded)",
        "file": f"imported {got.from_file}",
        "download": f"downloaded {got.url}",
    }[got.source]
    print(
        escape_controls(
            f"PQID-Bench {got.version} core distribution: {how}; archive SHA-256 "
            f"{got.sha256} matches the pin; "
            f"{got.files_verified} files verified against its ARTIFACT_MANIFEST.tsv"
        ),
        file=sys.stderr,
    )
    if args.format == "json":
        sys.stdout.write(json.dumps(got.to_dict(), indent=2, sort_keys=True) + "\n")
    else:
        sys.stdout.write(f"{got.release_dir}\n")
    return 0
