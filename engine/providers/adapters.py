"""Wire formats: building a provider request body and reading its reply into canonical fields."""

from __future__ import annotations

import email.utils
import json
import time
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

from engine.errors import ProviderError
from engine.providers.routes import Route

RETRYABLE_STATUSES = frozenset({408, 409, 425, 429})
# A 429 with one of these codes is a billing state, not a burst: waiting does not help.
NON_TRANSIENT_CODES = frozenset({"insufficient_quota", "billing_hard_limit_reached",
                                 "enforced_spend_limit_reached"})


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
    return ProviderError(error_class, f"HTTP {status}: {message}", retryable=retryable,
                         status=status, retry_after=retry_after)


def _parse_json_reply(status: int, headers: dict[str, str], body: bytes) -> dict[str, Any]:
    """A 2xx body as a JSON object, or the retryable error a malformed body deserves."""
    if not 200 <= status < 300:
        raise error_for_status(status, headers, body)
    try:
        payload = _decode_json(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        kind = headers.get("content-type", "unknown content type")
        raise ProviderError("invalid_json", f"HTTP {status} body is not JSON ({kind}: {exc})",
                            retryable=True, status=status) from None
    if isinstance(payload, list) and len(payload) == 1 and isinstance(payload[0], dict):
        payload = payload[0]  # some front ends wrap the object in an array
    if not isinstance(payload, dict):
        raise ProviderError("unexpected_body", f"HTTP {status} body is not a JSON object",
                            retryable=True, status=status)
    return payload


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def normalise_usage(prompt: Any, completion: Any, total: Any = None,
                    raw: dict[str, Any] | None = None) -> dict[str, Any] | None:
    p, c, t = _int(prompt), _int(completion), _int(total)
    if p is None and c is None and t is None:
        return raw or None
    if t is None and p is not None and c is not None:
        t = p + c
    out: dict[str, Any] = {"prompt_tokens": p, "completion_tokens": c, "total_tokens": t}
    if raw:
        out["provider_usage"] = raw
    return out


def _error_in_ok_body(status: int, payload: dict[str, Any], body: bytes) -> ProviderError:
    # An error delivered with status 200 (routers do this once generation started).
    message, code = _error_message(payload, body)
    retryable = not (code in NON_TRANSIENT_CODES or (code is not None and code.isdigit()
                     and 400 <= int(code) < 500 and int(code) not in RETRYABLE_STATUSES))
    return ProviderError("error_in_body", f"HTTP {status} with an error body: {message}",
                         retryable=retryable, status=status)


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
        payload = _parse_json_reply(status, headers, body)
        choices = payload.get("choices")
        if not choices and payload.get("error") is not None:
            raise _error_in_ok_body(status, payload, body)
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
        finish = finish if isinstance(finish, str) else None
        normalised = {"stop": "stop", "length": "length", "content_filter": "content_filter",
                      None: "other"}.get(finish, "other")
        if message_obj.get("refusal"):
            normalised = "refusal"
        raw_usage = payload.get("usage") if isinstance(payload.get("usage"), dict) else None
        usage = None
        if raw_usage is not None:
            usage = normalise_usage(raw_usage.get("prompt_tokens"),
                                    raw_usage.get("completion_tokens"),
                                    raw_usage.get("total_tokens"))
            extra = {k: v for k, v in raw_usage.items()
                     if k not in ("prompt_tokens", "completion_tokens", "total_tokens")}
            if usage is not None and extra:
                usage["provider_usage"] = extra
        request_id = (headers.get("x-request-id") or headers.get("request-id")
                      or headers.get("x-generation-id") or payload.get("id"))
        model = payload.get("model")
        return Reply(content, normalised, model if isinstance(model, str) else None, usage,
                     str(request_id) if request_id is not None else None, finish)


def _system_and_turns(messages: list[dict[str, str]]) -> tuple[str | None,
                                                               list[dict[str, str]]]:
    system = "\n\n".join(m["content"] for m in messages if m["role"] == "system")
    return system or None, [m for m in messages if m["role"] != "system"]


class AnthropicMessagesAdapter:
    """Anthropic's native Messages API (`POST {base}/v1/messages`)."""

    name = "anthropic-messages"
    _FINISH: ClassVar[dict[str, str]] = {
        "end_turn": "stop", "stop_sequence": "stop", "max_tokens": "length",
        "model_context_window_exceeded": "length", "refusal": "refusal",
        "tool_use": "other", "pause_turn": "other"}

    def url(self, route: Route, model: str) -> str:
        return f"{route.base_url}/v1/messages"

    def auth_headers(self, route: Route, secret: str | None) -> dict[str, str]:
        return {"x-api-key": secret} if secret else {}

    def build_body(self, model: str, messages: list[dict[str, str]],
                   contract: dict[str, Any]) -> dict[str, Any]:
        system, turns = _system_and_turns(messages)
        body: dict[str, Any] = {"model": model, "max_tokens": contract["max_output_tokens"],
                                "messages": turns}
        if system is not None:
            body["system"] = system
        if contract.get("temperature") is not None:
            body["temperature"] = contract["temperature"]
        if contract.get("top_p") is not None:
            body["top_p"] = contract["top_p"]
        for key, value in contract.get("extra_body", {}).items():
            body.setdefault(key, value)
        return body

    def parse(self, status: int, headers: dict[str, str], body: bytes) -> Reply:
        payload = _parse_json_reply(status, headers, body)
        if payload.get("type") == "error" or (payload.get("error") is not None
                                              and "content" not in payload):
            raise _error_in_ok_body(status, payload, body)
        blocks = payload.get("content")
        if not isinstance(blocks, list):
            raise ProviderError("unexpected_body", f"HTTP {status} body has no content blocks",
                                retryable=True, status=status)
        content = "".join(str(b.get("text", "")) for b in blocks
                          if isinstance(b, dict) and b.get("type") == "text")
        stop = payload.get("stop_reason")
        stop = stop if isinstance(stop, str) else None
        usage_obj = payload.get("usage")
        raw_usage: dict[str, Any] = usage_obj if isinstance(usage_obj, dict) else {}
        usage = normalise_usage(raw_usage.get("input_tokens"), raw_usage.get("output_tokens"),
                                None, raw_usage or None)
        model = payload.get("model")
        request_id = headers.get("request-id") or payload.get("id")
        return Reply(content, self._FINISH.get(stop or "", "other"),
                     model if isinstance(model, str) else None, usage,
                     str(request_id) if request_id is not None else None, stop)


class GeminiGenerateAdapter:
    """Google's native Gemini API (`POST {base}/models/{model}:generateContent`)."""

    name = "gemini-generate"
    _FILTERED: ClassVar[frozenset[str]] = frozenset({
        "SAFETY", "RECITATION", "BLOCKLIST", "PROHIBITED_CONTENT", "SPII", "IMAGE_SAFETY",
        "LANGUAGE"})

    def url(self, route: Route, model: str) -> str:
        name = model if model.startswith("models/") else f"models/{model}"
        return f"{route.base_url}/{name}:generateContent"

    def auth_headers(self, route: Route, secret: str | None) -> dict[str, str]:
        return {"x-goog-api-key": secret} if secret else {}

    def build_body(self, model: str, messages: list[dict[str, str]],
                   contract: dict[str, Any]) -> dict[str, Any]:
        system, turns = _system_and_turns(messages)
        body: dict[str, Any] = {"contents": [
            {"role": "model" if m["role"] == "assistant" else "user",
             "parts": [{"text": m["content"]}]} for m in turns]}
        if system is not None:
            body["systemInstruction"] = {"parts": [{"text": system}]}
        config: dict[str, Any] = {"maxOutputTokens": contract["max_output_tokens"]}
        if contract.get("temperature") is not None:
            config["temperature"] = contract["temperature"]
        if contract.get("top_p") is not None:
            config["topP"] = contract["top_p"]
        if contract.get("seed") is not None:
            config["seed"] = contract["seed"]
        body["generationConfig"] = config
        for key, value in contract.get("extra_body", {}).items():
            if key == "generationConfig" and isinstance(value, dict):
                body["generationConfig"] = {**value, **config}
            else:
                body.setdefault(key, value)
        return body

    def parse(self, status: int, headers: dict[str, str], body: bytes) -> Reply:
        payload = _parse_json_reply(status, headers, body)
        if payload.get("error") is not None and "candidates" not in payload:
            raise _error_in_ok_body(status, payload, body)
        meta_obj = payload.get("usageMetadata")
        meta: dict[str, Any] = meta_obj if isinstance(meta_obj, dict) else {}
        completion = meta.get("candidatesTokenCount")
        thoughts = meta.get("thoughtsTokenCount")
        if isinstance(completion, int) and isinstance(thoughts, int):
            completion += thoughts  # billed as output; total = prompt + candidates + thoughts
        usage = normalise_usage(meta.get("promptTokenCount"), completion,
                                meta.get("totalTokenCount"), meta or None)
        model = payload.get("modelVersion")
        request_id = payload.get("responseId")
        candidates = payload.get("candidates")
        if not candidates:
            feedback = payload.get("promptFeedback") or {}
            reason = feedback.get("blockReason") if isinstance(feedback, dict) else None
            if reason:
                return Reply("", "content_filter", model if isinstance(model, str) else None,
                             usage, request_id, f"promptFeedback.blockReason={reason}")
            raise ProviderError("unexpected_body", f"HTTP {status} body has no candidates",
                                retryable=True, status=status)
        first = candidates[0] if isinstance(candidates[0], dict) else {}
        parts = (first.get("content") or {}).get("parts") or []
        content = "".join(str(p.get("text", "")) for p in parts
                          if isinstance(p, dict) and not p.get("thought"))
        finish = first.get("finishReason")
        finish = finish if isinstance(finish, str) else None
        if finish == "STOP":
            normalised = "stop"
        elif finish == "MAX_TOKENS":
            normalised = "length"
        elif finish in self._FILTERED:
            normalised = "content_filter"
        else:
            normalised = "other"
        return Reply(content, normalised, model if isinstance(model, str) else None, usage,
                     str(request_id) if request_id is not None else None, finish)


ADAPTERS: dict[str, Adapter] = {"openai-chat": OpenAIChatAdapter(),
                                "anthropic-messages": AnthropicMessagesAdapter(),
                                "gemini-generate": GeminiGenerateAdapter(),
                                "oracle": OpenAIChatAdapter()}


def adapter_for(route: Route) -> Adapter:
    return ADAPTERS[route.adapter]
