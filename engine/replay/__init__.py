"""Replay and scoring: the evaluator container, replay, evaluations, comparison with the
frozen matrix, rescore, reproduction and the harness report. May import `engine.release`,
`engine.rundir`, `engine.errors`, `engine.events` and `engine.states`; never the run loop,
providers, transport, the configuration or the UI."""
