"""Showing untrusted text (model output, provider bodies) without letting a terminal obey it."""

from __future__ import annotations

import re

# C0 controls except tab and newline, DEL, and the C1 range (which includes the 8-bit CSI/OSC).
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def escape_controls(text: str) -> str:
    """Replace every control character with a visible escape such as `\\x1b`."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def count_controls(text: str) -> int:
    """How many characters `escape_controls` would replace."""
    return len(_CONTROL.findall(text))
