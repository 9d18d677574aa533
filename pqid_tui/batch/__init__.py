"""The headless commands of `pqid-tui --batch`, one module each."""

from __future__ import annotations


def default_release_dir() -> str:
    """The bundled demo release: every command's default --release-dir."""
    from engine.demo import DEMO_RELEASE_DIR

    return str(DEMO_RELEASE_DIR)
