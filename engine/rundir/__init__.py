"""The run directory: its file names, the journal, the records and the durable writes.
The bottom layer: imports nothing of the engine but `engine.errors` and `engine.states`."""
