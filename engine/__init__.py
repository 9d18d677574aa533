"""pqid-tui's headless engine: releases, plans, live runs, replay and comparison."""

from __future__ import annotations

__version__ = "0.1.0"
