"""Benchmarks that print ratios measured in one run, never a pass/fail on absolute time."""
