"""Fake servers for the tests and benchmarks: a loopback provider with rate-limit shapes,
a fault-injecting provider and a Batch API server, over what they share in `base`. Never
imported by the product."""
