"""`python -m pqid_tui` is the `pqid-tui` command."""

from __future__ import annotations

import sys

from pqid_tui.cli.main import main

sys.exit(main())
