"""`pqid-tui --batch demo`: the whole pipeline on the bundled demo release, no credential.

run-model with the `oracle` route, replay in the evaluator container, then compare with the
frozen matrix. The only code executed is the release's own reference code, so running this
command is the code-execution acknowledgement.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path

from engine.rundir.layout import EVALUATION_DIR, EVALUATIONS_FILE, MANIFEST, RESPONSES
from pqid_tui.cli import Subcommands
from pqid_tui.cli.compare import FORMATS as COMPARE_FORMATS
from pqid_tui.cli.progress import replay_progress
from pqid_tui.cli.run_model import make_progress

LOCAL_BASE_IMAGE = "pqid-base:bookworm"
LOCAL_WHEELHOUSE = Path(".ci/wheelhouse")


def register(sub: Subcommands) -> None:
    p = sub.add_parser(
        "demo",
        help="oracle run, Docker replay and comparison on the bundled demo release",
        description="Run the whole pipeline on the bundled demo release (or --release-dir) "
        "with the oracle route: no credential, no provider. Resumes an existing "
        "--output-dir.",
    )
    p.add_argument(
        "--output-dir",
        type=Path,
        default=Path("runs/demo"),
        help="run directory (default runs/demo)",
    )
    p.add_argument(
        "--release-dir",
        type=Path,
        default=None,
        help="release directory (default: the bundled demo release)",
    )
    p.add_argument(
        "--base-image",
        default=None,
        help=f"evaluator base image (default: {LOCAL_BASE_IMAGE} when it exists "
        "locally, as made by .ci/base-image; else the Dockerfile's default)",
    )
    p.add_argument(
        "--wheelhouse",
        type=Path,
        default=None,
        help=f"offline wheels for the image (default: {LOCAL_WHEELHOUSE} when it holds wheels)",
    )
    p.add_argument(
        "--format",
        choices=COMPARE_FORMATS,
        default="text",
        help="comparison format on stdout (default text)",
    )
    p.add_argument(
        "--split",
        default="test",
        help="compare on this split (default test, the publishable denominator; "
        "'all' compares every prompt and is marked not publishable)",
    )
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.set_defaults(handler=run)


def _local_base_image() -> str | None:
    try:
        from engine.replay.docker import connect

        client = connect()
        client.images.get(LOCAL_BASE_IMAGE)
    except Exception:
        return None
    return LOCAL_BASE_IMAGE


def run(args: argparse.Namespace) -> int:
    from engine.config import make_config
    from engine.demo import DEMO_RELEASE_DIR
    from engine.release import load_release
    from engine.replay.compare import compare
    from engine.replay.replay import replay
    from engine.run.live import run_live_model

    release_dir = args.release_dir or DEMO_RELEASE_DIR
    out: Path = args.output_dir
    resume = (out / MANIFEST).exists()
    say: Callable[[str], None] = (
        (lambda text: None)
        if args.quiet
        else (lambda text: print(text, file=sys.stderr, flush=True))
    )
    say(f"1/3 oracle run -> {out}")
    summary = run_live_model(
        make_config(
            release_dir=release_dir,
            output_dir=out,
            provider="oracle",
            model="reference",
            resume=resume,
        ),
        progress=None if args.quiet else make_progress(sys.stderr),
    ).to_dict()
    if summary["success"] != summary["selected"]:
        print(json.dumps(summary, indent=2), file=sys.stderr)
        return 1
    base_image = args.base_image or _local_base_image()
    wheelhouse = args.wheelhouse
    if wheelhouse is None and LOCAL_WHEELHOUSE.is_dir() and any(LOCAL_WHEELHOUSE.glob("*.whl")):
        wheelhouse = LOCAL_WHEELHOUSE
    say(
        f"2/3 replay in Docker (base image {base_image or 'Dockerfile default'}, "
        f"wheelhouse {wheelhouse or 'none: package index'})"
    )
    result = replay(
        release_dir,
        out / RESPONSES,
        out / EVALUATION_DIR,
        acknowledge_code_execution=True,
        build_image=True,
        base_image=base_image,
        wheelhouse=wheelhouse,
        overwrite=True,
        progress=None if args.quiet else replay_progress(sys.stderr),
    )
    evaluations = out / EVALUATION_DIR / EVALUATIONS_FILE
    say("3/3 compare with the frozen matrix")
    comparison = compare(
        load_release(release_dir),
        evaluations,
        candidate_manifest=out / MANIFEST,
        split=None if args.split == "all" else args.split,
    )
    print(comparison.render(args.format))
    return 1 if result.summary["categories"].get("not_evaluated") else 0
