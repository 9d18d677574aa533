"""The run directory's file names: the one place they are spelled.

run-manifest.json         what was asked: release, route, model, settings, selection
requests.jsonl            every request body as sent, with its SHA-256
responses.jsonl           one canonical response per successful prompt
provider-attempts.jsonl   every attempt: status, latency, error, retry decision
records/                  one record per prompt: its state (in_flight, retry_wait, ...)
raw/                      each provider body exactly as received
run-summary.json          the last invocation's totals
batch-state.json          the Batch API's files and batch IDs (batch runs only)
evaluation/               the replay's outputs: canonical evaluations and summaries
"""

from __future__ import annotations

MANIFEST = "run-manifest.json"
REQUESTS = "requests.jsonl"
RESPONSES = "responses.jsonl"
ATTEMPTS = "provider-attempts.jsonl"
RECORDS = "records"
RAW = "raw"
SUMMARY = "run-summary.json"
BATCH_STATE = "batch-state.json"
EVALUATION_DIR = "evaluation"
# The replay's canonical evaluations, in the evaluation folder (the benchmark's file name).
EVALUATIONS_FILE = "pqid_bench_canonical_evaluations.jsonl"

__all__ = [
    "ATTEMPTS",
    "BATCH_STATE",
    "EVALUATIONS_FILE",
    "EVALUATION_DIR",
    "MANIFEST",
    "RAW",
    "RECORDS",
    "REQUESTS",
    "RESPONSES",
    "SUMMARY",
]
