"""What every wire format shares: the reply it reads, the adapter protocol, usage counts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from engine.providers.routes import Route

FINISH_REASONS = ("stop", "length", "content_filter", "refusal", "error", "other")


@dataclass(frozen=True, slots=True)
class Reply:
    """The parts of a successful provider reply that go into the canonical response.

    `finish_reason` is normalised (one of FINISH_REASONS); `provider_finish_reason` is the
    provider's own word. `usage` always has prompt_tokens, completion_tokens and
    total_tokens when the provider reported them, whatever the wire format.
    """

    content: str | None
    finish_reason: str | None
    returned_model: str | None
    usage: dict[str, Any] | None
    request_id: str | None
    provider_finish_reason: str | None = None


class Adapter(Protocol):
    """One wire format: where to send, what to send, how to read the answer."""

    name: str

    def url(self, route: Route, model: str) -> str: ...

    def auth_headers(self, route: Route, secret: str | None) -> dict[str, str]: ...

    def build_body(
        self, model: str, messages: list[dict[str, str]], contract: dict[str, Any]
    ) -> dict[str, Any]: ...

    def parse(self, status: int, headers: dict[str, str], body: bytes) -> Reply: ...


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def normalise_usage(
    prompt: Any, completion: Any, total: Any = None, raw: dict[str, Any] | None = None
) -> dict[str, Any] | None:
    p, c, t = _int(prompt), _int(completion), _int(total)
    if p is None and c is None and t is None:
        return raw or None
    if t is None and p is not None and c is not None:
        t = p + c
    out: dict[str, Any] = {"prompt_tokens": p, "completion_tokens": c, "total_tokens": t}
    if raw:
        out["provider_usage"] = raw
    return out


def system_and_turns(messages: list[dict[str, str]]) -> tuple[str | None, list[dict[str, str]]]:
    system = "\n\n".join(m["content"] for m in messages if m["role"] == "system")
    return system or None, [m for m in messages if m["role"] != "system"]
