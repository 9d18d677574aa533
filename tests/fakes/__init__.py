"""Fake servers for the tests and benchmarks: a loopback provider with rate-limit shapes,
a fault-injecting provider and a Batch API server. Never imported by the product."""
