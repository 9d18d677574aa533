"""The headless commands of `pqid-tui --batch`, one module each."""
