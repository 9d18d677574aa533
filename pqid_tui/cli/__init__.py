"""The headless commands of `pqid-tui --batch`, one module each."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def default_release_dir() -> str:
    """The bundled demo release: every command's default --release-dir."""
    from engine.demo import DEMO_RELEASE_DIR

    return str(DEMO_RELEASE_DIR)


def add_evaluator_arguments(p: Any, *, base_image_help: str, wheelhouse_help: str,
                            results: str) -> None:
    """The flags of every command that runs the evaluator container (replay, rescore):
    the image, the per-response time limit, the environment and release checks, progress,
    and the code-execution acknowledgement. `results` names what those commands write."""
    p.add_argument("--build-image", action="store_true",
                   help="build the evaluator image when it does not exist yet")
    p.add_argument("--base-image", metavar="IMAGE", help=base_image_help)
    p.add_argument("--wheelhouse", type=Path, metavar="DIR", help=wheelhouse_help)
    p.add_argument("--timeout-seconds", type=float, default=20.0, metavar="N",
                   help="time limit for each response's execution (default 20)")
    p.add_argument("--allow-environment-mismatch", action="store_true",
                   help="score even when the base image's Python is not the release's pinned "
                        f"one (the {results} then says environment_matches_release: false)")
    p.add_argument("--allow-modified-release", action="store_true",
                   help="use a release whose SHA-256 checks fail (stamped modified)")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.add_argument("--acknowledge-code-execution", action="store_true", dest="acknowledge",
                   help="required: the responses are untrusted code and will be executed "
                        "(inside the container)")
