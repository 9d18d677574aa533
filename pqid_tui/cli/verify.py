"""`pqid-tui --batch verify`: check every file of a release against its manifest."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pqid_tui.cli import Subcommands, default_release_dir
from pqid_tui.textsafe import escape_controls

if TYPE_CHECKING:
    from engine.release import Release, Verification

FORMATS = ("json", "text")
LAYOUTS = {
    "pqid-release/1": "pqid-release/1 directory",
    "pqid-bench-core": "PQID-Bench core distribution",
    "pqid-bench-evidence": "PQID-Bench evidence repository",
}


def register(sub: Subcommands) -> None:
    p = sub.add_parser(
        "verify",
        help="verify a release's files against its manifest",
        description="Detect the release's layout (pqid-release/1, PQID-Bench core distribution "
        "or its .zip, PQID-Bench evidence repository), check the size and SHA-256 "
        "of every present file its manifest lists, and print what it is and what "
        "was found: verified, absent (named) and mismatched (named) files. Exit "
        "status 0 when nothing mismatches, 2 otherwise.",
    )
    p.add_argument(
        "--release-dir",
        default=None,
        help="release directory or core .zip (default: the bundled demo release)",
    )
    p.add_argument("--format", choices=FORMATS, default="json", help="output (default json)")
    p.add_argument(
        "--cache-dir",
        type=Path,
        metavar="DIR",
        help="where a .zip is extracted (default: the user cache dir)",
    )
    p.set_defaults(handler=run)


def verification_dict(release: Release, check: Verification) -> dict[str, Any]:
    """The verify result as printed by `--format json`."""
    return {
        "release_dir": str(release.root),
        "archive": release.archive,
        "archive_sha256": release.archive_sha256,
        "format": release.format,
        "profile": release.profile,
        "name": release.name,
        "version": release.version,
        "digest": release.digest,
        "manifest_sha256": release.manifest_sha256,
        "contract": release.contract,
        "predicate": release.predicate,
        "environment": {
            "python": release.python_version,
            "requirements": list(release.evaluator_requirements or ()),
            "evaluator_version": release.evaluator_version,
        },
        "prompts": {
            "count": len(release.prompts),
            "by_split": release.split_counts(),
            "sha256": release.prompts_sha256,
        },
        "files": {
            "manifest": check.manifest,
            "listed": check.listed,
            "verified": check.verified,
            "absent": len(check.absent),
            "absent_files": list(check.absent),
            "absent_summary": list(release.absent_summary()),
            "mismatched": len(check.mismatched),
            "mismatched_files": list(check.mismatched),
            "problems": list(check.problems),
        },
        "frozen_rows": len(release.matrix_rows),
        "verified": check.ok,
        "seconds": round(check.seconds, 3),
    }


def render_text(data: dict[str, Any]) -> str:
    files = data["files"]
    env = data["environment"]
    pins = ", ".join(env["requirements"]) or "not pinned by the release"
    python = f"Python {env['python']}; " if env["python"] else ""
    splits = ", ".join(f"{k} {v}" for k, v in data["prompts"]["by_split"].items())
    verdict = (
        "verified: every present file matches"
        if data["verified"]
        else f"MODIFIED: {files['mismatched']} file(s) do not match"
    )
    lines = [
        f"{data['name']} {data['version']}: {verdict}",
        f"  release      {data['release_dir']}",
        *(
            [f"  archive      {data['archive']} (SHA-256 {data['archive_sha256']})"]
            if data["archive"]
            else []
        ),
        f"  layout       {LAYOUTS.get(data['format'], data['format'])}"
        + (f" (profile {data['profile']})" if data["profile"] else ""),
        f"  digest       {data['digest']}",
        f"  contract     {data['contract']}",
        *([f"  predicate    {data['predicate']}"] if data["predicate"] else []),
        f"  environment  {python}{pins}",
        f"  prompts      {data['prompts']['count']} ({splits})",
        f"  files        {files['listed']} listed in {files['manifest']}: "
        f"{files['verified']} verified, {files['absent']} absent, "
        f"{files['mismatched']} mismatched",
    ]
    for label, names in (("absent", files["absent_summary"]), ("mismatched", files["problems"])):
        for i, name in enumerate(names):
            lines.append(f"  {label if i == 0 else '':<12} {name}")
    lines.append(f"  frozen rows  {data['frozen_rows']}")
    return "\n".join(escape_controls(line) for line in lines) + "\n"


def run(args: argparse.Namespace) -> int:
    from engine.release import load_release
    from engine.release.manifest import modified_error

    # Loaded as "allow modified" so that every mismatch is found and listed; the verdict
    # (and the exit status) is this command's.
    release = load_release(
        Path(args.release_dir or default_release_dir()),
        allow_modified=True,
        cache_dir=args.cache_dir,
    )
    check = release.verify_all()
    data = verification_dict(release, check)
    if args.format == "json":
        sys.stdout.write(json.dumps(data, indent=2, sort_keys=True) + "\n")
    else:
        sys.stdout.write(render_text(data))
    sys.stdout.flush()
    if check.problems:
        raise modified_error(check.problems)
    return 0
