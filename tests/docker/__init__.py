"""Tests that run the evaluator in a real Docker container."""
