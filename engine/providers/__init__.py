"""Providers: model routes, wire adapters, credentials, the returned-model identity, the
provider check and the oracle route. May import `engine.release`, `engine.rundir` and the
engine's top-level modules (config, errors, events); never the run loop, transport or replay."""
