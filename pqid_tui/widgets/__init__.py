"""Reusable widgets: the run grid, the retry queue, the bar chart, plain-text helpers."""
