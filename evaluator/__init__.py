"""Scores untrusted generated Qiskit code; runs alone inside the evaluator container."""

from __future__ import annotations

__version__ = "0.1.0"
