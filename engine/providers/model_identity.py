"""Is the model that answered the model that was asked for?

Providers expand aliases (`gpt-4` answers as `gpt-4-0613`), prefix publishers
(`openai/gpt-oss-20b`) or pin serving providers (`Qwen/...:novita`); that is the same model.
A different family (a router's silent fallback, a retired model redirected to its successor)
is not, and the study this tool serves had to report rows by the returned model.
"""

from __future__ import annotations

import re
from typing import Literal

ModelCheck = Literal["exact", "alias", "redirected", "not_reported"]

# What may follow the requested name in a dated or versioned alias of the same model.
_ALIAS_SUFFIX = re.compile(
    r"^[-@_.:]?(?:\d{4}-\d{2}-\d{2}|\d{8}|\d{6}|\d{4}|v\d+(?:\.\d+)*|latest|preview"
    r"|exp|stable|\d{3})(?:[-@_.:](?:\d{4}-\d{2}-\d{2}|\d{8}|\d{6}|\d{4}|\d{2}-\d{2}|v\d+"
    r"|latest|preview|exp|\d{3}|\d{2}))*$"
)
_VOLATILE_TAIL = re.compile(r"[-@_.:](?:latest|preview|exp|stable)$")


def _core(name: str) -> str:
    name = name.strip().lower()
    name = name.removeprefix("models/")
    name = name.split(":", 1)[0] if ":" in name and "/" in name else name  # HF :provider pin
    if "/" in name:
        name = name.rsplit("/", 1)[1]  # publisher/model
    return _VOLATILE_TAIL.sub("", name)


def check_model(requested: str, returned: str | None) -> ModelCheck:
    """How the returned model relates to the requested one."""
    if not returned:
        return "not_reported"
    if returned == requested:
        return "exact"
    want, got = _core(requested), _core(returned)
    if want == got:
        return "alias"
    for a, b in ((want, got), (got, want)):
        if a.startswith(b) and _ALIAS_SUFFIX.match(a[len(b) :]):
            return "alias"
    return "redirected"
