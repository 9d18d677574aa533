"""The run: the session (resume policy, selection), the recorder (reply to evidence), the live
sender, the Batch API as a strategy over the same session and recorder, recasts, summaries,
plans and the runs on disk. May import providers, transport, release and rundir; never replay
or the UI."""
