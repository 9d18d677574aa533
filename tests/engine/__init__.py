"""Tests of the headless engine (no container)."""
