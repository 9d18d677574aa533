"""Tests of the evaluator on the host."""
