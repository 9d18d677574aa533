"""The run: plans, the live sender, the Batch API, recasts and the runs on disk.
May import providers, transport, release and rundir; never replay or the UI."""
