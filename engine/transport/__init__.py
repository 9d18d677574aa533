"""Transport: the HTTP client and the route governor (rate limits, backoff, 429 judgement).
Imports nothing of the engine but `engine.errors`."""
