"""Wire formats: building a provider request body and reading its reply into canonical fields."""

from __future__ import annotations

import email.utils
import json
import time
from dataclasses import dataclass
from typing import Any, Protocol

from engine.errors import ProviderError
from engine.routes import Route

RETRYABLE_STATUSES = frozenset({408, 409, 425, 429})
# A 429 with one of these codes is a billing state, not a burst: waiting does not help.
NON_TRANSIENT_CODES = frozenset({"insufficient_quota", "billing_hard_limit_reached",
                                 "enforced_spend_limit_reached"})


@dataclass(frozen=True, slots=True)
class Reply:
    """The parts of a successful provider reply that go into the canonical response."""

    content: str | None
    finish_reason: str | None
    returned_model: str | None
    usage: dict[str, Any] | None
    request_id: str | None


class Adapter(Protocol):
    """One wire format: where to send, what to send, how to read the answer."""

    name: str

    def url(self, route: Route, model: str) -> str: ...

    def auth_headers(self, route: Route, secret: str | None) -> dict[str, str]: ...

    def build_body(self, model: str, messages: list[dict[str, str]],
                   contract: dict[str, Any]) -> dict[str, Any]: ...

    def parse(self, status: int, headers: dict[str, str], body: bytes) -> Reply: ...


def status_error_class(status: int) -> str:
    return {400: "bad_request", 401: "auth_error", 402: "payment_required", 403: "forbidden",
            404: "not_found", 408: "timeout", 409: "conflict", 413: "too_large",
            422: "bad_request", 425: "too_early", 429: "rate_limit", 503: "overloaded",
            529: "overloaded"}.get(status, "server_error" if status >= 500 else "client_error")


def parse_retry_after(headers: dict[str, str], now: float | None = None) -> float | None:
    """Seconds the provider asks us to wait, from retry-after-ms or retry-after (secs or date)."""
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            return max(0.0, float(ms) / 1000.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def _decode_json(body: bytes) -> Any:
    # Some providers pad a slow reply with blank lines or keep-alive comments before the JSON.
    text = body.decode("utf-8")
    lines = [ln for ln in text.splitlines() if not ln.startswith(":")]
    return json.loads("\n".join(lines))


def _error_message(payload: Any, body: bytes) -> tuple[str, str | None]:
    """(message, code) from the error shapes seen in the wild; the raw text otherwise."""
    if isinstance(payload, list) and payload and isinstance(payload[0], dict):
        payload = payload[0]
    if isinstance(payload, dict):
        err = payload.get("error", payload)
        if isinstance(err, dict):
            msg = err.get("message") or err.get("type") or json.dumps(err)[:300]
            code = err.get("code") if err.get("code") is not None else err.get("type")
            return str(msg)[:500], None if code is None else str(code)
        if isinstance(err, str):
            return err[:500], None
    text = body.decode("utf-8", "replace").strip()
    return (text[:200] + ("..." if len(text) > 200 else "")) or "(empty body)", None


def error_for_status(status: int, headers: dict[str, str], body: bytes) -> ProviderError:
    """The ProviderError for a non-2xx reply, with the retry decision the rules give."""
    try:
        payload: Any = _decode_json(body)
    except (UnicodeDecodeError, json.JSONDecodeError):
        payload = None
    message, code = _error_message(payload, body)
    retryable = status in RETRYABLE_STATUSES or status >= 500
    if code in NON_TRANSIENT_CODES:
        retryable = False
    should = headers.get("x-should-retry", "").lower()
    if should in ("true", "false"):
        retryable = should == "true"
    error_class = status_error_class(status)
    if code in NON_TRANSIENT_CODES:
        error_class = "quota_exhausted"
    return ProviderError(error_class, f"HTTP {status}: {message}", retryable=retryable,
                         status=status, retry_after=parse_retry_after(headers))


class OpenAIChatAdapter:
    """OpenAI-compatible chat completions (`POST {base}/chat/completions`)."""

    name = "openai-chat"

    def url(self, route: Route, model: str) -> str:
        return f"{route.base_url}/chat/completions"

    def auth_headers(self, route: Route, secret: str | None) -> dict[str, str]:
        return {"Authorization": f"Bearer {secret}"} if secret else {}

    def build_body(self, model: str, messages: list[dict[str, str]],
                   contract: dict[str, Any]) -> dict[str, Any]:
        body: dict[str, Any] = {"model": model, "messages": messages}
        if contract.get("temperature") is not None:
            body["temperature"] = contract["temperature"]
        if contract.get("top_p") is not None:
            body["top_p"] = contract["top_p"]
        body[contract["max_output_field"]] = contract["max_output_tokens"]
        if contract.get("seed") is not None:
            body["seed"] = contract["seed"]
        for key, value in contract.get("extra_body", {}).items():
            body.setdefault(key, value)
        return body

    def parse(self, status: int, headers: dict[str, str], body: bytes) -> Reply:
        if not 200 <= status < 300:
            raise error_for_status(status, headers, body)
        try:
            payload = _decode_json(body)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            kind = headers.get("content-type", "unknown content type")
            raise ProviderError("invalid_json", f"HTTP {status} body is not JSON ({kind}: {exc})",
                                retryable=True, status=status) from None
        if not isinstance(payload, dict):
            raise ProviderError("unexpected_body", f"HTTP {status} body is not a JSON object",
                                retryable=True, status=status)
        choices = payload.get("choices")
        if not choices and payload.get("error") is not None:
            # An error delivered with status 200 (routers do this once generation started).
            message, code = _error_message(payload, body)
            retryable = not (code in NON_TRANSIENT_CODES or (code is not None and code.isdigit()
                             and 400 <= int(code) < 500 and int(code) not in RETRYABLE_STATUSES))
            raise ProviderError("error_in_body", f"HTTP {status} with an error body: {message}",
                                retryable=retryable, status=status)
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise ProviderError("unexpected_body", f"HTTP {status} body has no choices",
                                retryable=True, status=status)
        choice = choices[0]
        message_obj = choice.get("message")
        if not isinstance(message_obj, dict):
            message_obj = {}
        content = message_obj.get("content")
        if isinstance(content, list):  # content parts
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        if content is not None and not isinstance(content, str):
            content = json.dumps(content)
        finish = choice.get("finish_reason")
        if finish == "error":
            raise ProviderError("error_in_body", f"HTTP {status}: generation ended in an error",
                                retryable=True, status=status)
        usage = payload.get("usage") if isinstance(payload.get("usage"), dict) else None
        request_id = (headers.get("x-request-id") or headers.get("request-id")
                      or headers.get("x-generation-id") or payload.get("id"))
        model = payload.get("model")
        return Reply(content, finish if isinstance(finish, str) else None,
                     model if isinstance(model, str) else None, usage,
                     str(request_id) if request_id is not None else None)


ADAPTERS: dict[str, Adapter] = {"openai-chat": OpenAIChatAdapter(),
                                "oracle": OpenAIChatAdapter()}


def adapter_for(route: Route) -> Adapter:
    return ADAPTERS[route.adapter]
