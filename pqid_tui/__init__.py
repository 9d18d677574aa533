"""pqid-tui: the terminal app and the command line over the headless engine."""

from __future__ import annotations

__version__ = "0.1.0"
