"""User-facing wording that more than one screen (or the app and a screen) shows.

Kept in one place so that a consequence the user confirms reads the same wherever it is
asked. Wording used by one screen only stays in that screen.
"""

from __future__ import annotations

from engine.errors import PqidError
from pqid_tui.textsafe import escape_controls

# Why an uncertain prompt is worth a confirmation (the monitor's retry, the New run form's
# resume of a directory that holds uncertain prompts).
UNCERTAIN_EXPLANATION = (
    "An uncertain prompt was in flight when an earlier run stopped: the request may have "
    "reached the provider, been answered and been billed, but no reply was recorded. "
    "Sending it again is a possible extra paid draw, and the new answer, not the lost one, "
    "becomes the prompt's response. The uncertain attempt stays in the attempt history."
)

# What sending prompts to a provider's route agrees to (the form's acknowledgement, the
# monitor's confirmation of a retry or resume).
PROVIDER_TERMS = "retention, policy, quota and billing terms apply"

# The one run of an app session that is already running: why another cannot start.
RUN_IN_PROGRESS = "a run is already in progress"

# A failure that says nothing about itself (a worker error without an exception, a release
# error without a message).
UNKNOWN_ERROR = "unknown error"


def describe_error(exc: BaseException) -> str:
    """One line for the user; an engine error's message is already written for them."""
    text = str(exc) if isinstance(exc, PqidError) else f"{exc.__class__.__name__}: {exc}"
    return escape_controls(text)


__all__ = [
    "PROVIDER_TERMS",
    "RUN_IN_PROGRESS",
    "UNCERTAIN_EXPLANATION",
    "UNKNOWN_ERROR",
    "describe_error",
]
