"""Providers: model routes, wire adapters, credentials, the returned-model identity, the
provider check and the oracle route. May import `engine.release`, `engine.rundir`,
`engine.errors` and `engine.states`; never the configuration (which reads the routes), the
events, transport, the run loop or replay."""
