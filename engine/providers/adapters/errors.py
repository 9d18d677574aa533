"""Reading a provider's reply body: the JSON object it holds, or the ProviderError it deserves,
with the retry decision and the wait the provider asked for."""

from __future__ import annotations

import email.utils
import json
import time
from typing import Any

from engine.errors import ProviderError

RETRYABLE_STATUSES = frozenset({408, 409, 425, 429})
# A 429 with one of these codes is a billing state, not a burst: waiting does not help.
NON_TRANSIENT_CODES = frozenset(
    {"insufficient_quota", "billing_hard_limit_reached", "enforced_spend_limit_reached"}
)


def status_error_class(status: int) -> str:
    return {
        400: "bad_request",
        401: "auth_error",
        402: "payment_required",
        403: "forbidden",
        404: "not_found",
        408: "timeout",
        409: "conflict",
        413: "too_large",
        422: "bad_request",
        425: "too_early",
        429: "rate_limit",
        503: "overloaded",
        529: "overloaded",
    }.get(status, "server_error" if status >= 500 else "client_error")


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


def _retry_info_delay(payload: Any) -> float | None:
    """Gemini's RetryInfo.retryDelay ("47s", "57.2s") from an error's details."""
    if isinstance(payload, list) and payload:
        payload = payload[0]
    err = payload.get("error") if isinstance(payload, dict) else None
    details = err.get("details") if isinstance(err, dict) else None
    for item in details if isinstance(details, list) else []:
        if isinstance(item, dict) and str(item.get("@type", "")).endswith("RetryInfo"):
            delay = str(item.get("retryDelay", ""))
            try:
                return float(delay.rstrip("s"))
            except ValueError:
                return None
    return None


def _mentions_non_transient(payload: Any) -> bool:
    text = json.dumps(payload) if payload is not None else ""
    return any(code in text for code in NON_TRANSIENT_CODES)


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
    exhausted = code in NON_TRANSIENT_CODES or _mentions_non_transient(payload)
    if exhausted:
        retryable = False
    should = headers.get("x-should-retry", "").lower()
    if should in ("true", "false"):
        retryable = should == "true"
    error_class = "quota_exhausted" if exhausted else status_error_class(status)
    retry_after = parse_retry_after(headers)
    if retry_after is None:
        retry_after = _retry_info_delay(payload)
    return ProviderError(
        error_class,
        f"HTTP {status}: {message}",
        retryable=retryable,
        status=status,
        retry_after=retry_after,
    )


def parse_json_reply(status: int, headers: dict[str, str], body: bytes) -> dict[str, Any]:
    """A 2xx body as a JSON object, or the retryable error a malformed body deserves."""
    if not 200 <= status < 300:
        raise error_for_status(status, headers, body)
    try:
        payload = _decode_json(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        kind = headers.get("content-type", "unknown content type")
        raise ProviderError(
            "invalid_json",
            f"HTTP {status} body is not JSON ({kind}: {exc})",
            retryable=True,
            status=status,
        ) from None
    if isinstance(payload, list) and len(payload) == 1 and isinstance(payload[0], dict):
        payload = payload[0]  # some front ends wrap the object in an array
    if not isinstance(payload, dict):
        raise ProviderError(
            "unexpected_body",
            f"HTTP {status} body is not a JSON object",
            retryable=True,
            status=status,
        )
    return payload


def error_in_ok_body(status: int, payload: dict[str, Any], body: bytes) -> ProviderError:
    # An error delivered with status 200 (routers do this once generation started).
    message, code = _error_message(payload, body)
    retryable = not (
        code in NON_TRANSIENT_CODES
        or (
            code is not None
            and code.isdigit()
            and 400 <= int(code) < 500
            and int(code) not in RETRYABLE_STATUSES
        )
    )
    return ProviderError(
        "error_in_body",
        f"HTTP {status} with an error body: {message}",
        retryable=retryable,
        status=status,
    )
