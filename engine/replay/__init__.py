"""Replay and scoring: the evaluator container, replay, evaluations, comparison with the
frozen matrix, rescore, reproduction and the harness report. May import `engine.release`,
`engine.rundir` and the engine's top-level modules; never the run loop, providers or the UI."""
