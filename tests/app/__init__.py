"""Tests of the Textual app and the batch command line."""
