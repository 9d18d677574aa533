"""The engine's exception tree.

PqidError                    anything the engine raises on purpose
+-- UsageError               the user can fix it; the batch mode exits 2 with the message
|   +-- ReleaseError         a release that is missing, malformed or fails verification
|   +-- ConfigError          an invalid run configuration, route or setting
|   +-- CredentialError      no credential, or a credential where none may be
|   +-- ResumeRefused        an output directory that cannot be (re)used as asked
|   +-- InputError           a responses or evaluations file that cannot be read
|   +-- CompareRefused       a comparison that would not be on the same footing
|   +-- RunWriteError        the run's evidence could not be written (disk full, ...)
|   +-- BatchApiError        the Batch API's Files or Batches endpoint refused or was down
|   +-- ImageBuildError      the evaluator image could not be built
|   +-- EnvironmentMismatch  the image's Python is not the release's pinned one
+-- DockerUnavailable        no Docker Engine reachable (also a UsageError: start it)
+-- EvaluatorFailed          the evaluator could not evaluate anything (exit 1, not 2)
+-- ProviderError            one provider attempt failed (carried in attempt records)

Interrupted (a KeyboardInterrupt)   Ctrl-C stopped a replay after its containers were
                                    removed; says what, if anything, is left

SendTimeout, SendFailed      a transport's answer to one request (the runner turns them
                             into a ProviderError of that attempt; never shown as such)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence


class PqidError(Exception):
    """Base of every error the engine raises on purpose."""


class UsageError(PqidError):
    """An error the user can fix: shown as one message, exit code 2 in the batch mode."""


class ReleaseError(UsageError):
    """A release directory that is missing, malformed or fails verification."""


class ConfigError(UsageError):
    """An invalid run configuration, route or generation setting.

    The message is written for the command line (it names flags); `fields` maps each
    configuration field the error is about to a message for a form, which shows it beside
    that field: `{"base_url": "must be an http:// or https:// URL with a host"}`. An error
    about the whole run has no fields.
    """

    def __init__(self, message: str, *, fields: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.fields: dict[str, str] = dict(fields or {})


class CredentialError(UsageError):
    """A credential that is missing, or present where none may be."""


class ResumeRefused(UsageError):
    """An output directory that cannot be used or resumed as asked."""


class InputError(UsageError):
    """A responses, evaluations or manifest file that cannot be used."""


class CompareRefused(UsageError):
    """A comparison that would not put the candidate and the frozen rows on the same footing."""


class RunWriteError(UsageError):
    """The run directory stopped accepting writes; sending stopped, resume once it is fixed."""


class DockerUnavailable(UsageError):
    """No Docker Engine could be reached."""


class ProviderError(PqidError):
    """One provider attempt failed; `retryable` says whether another attempt may follow."""

    def __init__(
        self,
        error_class: str,
        message: str,
        *,
        retryable: bool,
        status: int | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.error_class = error_class
        self.message = message
        self.retryable = retryable
        self.status = status
        self.retry_after = retry_after


class BatchApiError(UsageError):
    """The Files or Batches endpoint refused a request, or stayed unreachable.

    The batch state in the run directory is kept: `--resume` continues where this stopped.
    `transient` marks a failure that waiting may cure (5xx, 429, connection, timeout).
    """

    def __init__(self, message: str, *, status: int | None = None, transient: bool = False) -> None:
        super().__init__(message)
        self.status = status
        self.transient = transient


class SendTimeout(Exception):
    """No complete answer within the timeout."""


class SendFailed(Exception):
    """The connection failed or the answer was not a complete HTTP response."""


class ImageBuildError(UsageError):
    """The evaluator image could not be built from the given base image and requirements."""


class EnvironmentMismatch(UsageError):
    """The base image's Python is not the one the release's frozen rows were scored with."""


class EvaluatorFailed(PqidError):
    """The evaluator could not evaluate anything (it would not start, or broke the protocol)."""


class Interrupted(KeyboardInterrupt):
    """Ctrl-C stopped the runner, which removed its containers; `left`: those it could not,
    found by the Docker label `label` set to `run_id`."""

    def __init__(
        self, run_id: str, left: Sequence[str] = (), *, label: str = "pqid-tui.run"
    ) -> None:
        super().__init__()
        self.run_id = run_id
        self.left = tuple(left)
        self.label = label

    def message(self) -> str:
        """One line for the user: that nothing is left, or what is and how to remove it."""
        if not self.left:
            return "interrupted; no evaluator container is left"
        return (
            f"interrupted; left behind: {', '.join(self.left)}; remove with "
            f"`docker rm -f $(docker ps -aq --filter label={self.label}={self.run_id})` "
            "(the next replay also removes it)"
        )
