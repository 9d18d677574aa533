"""Anthropic's native Messages wire format."""

from __future__ import annotations

from typing import Any, ClassVar

from engine.errors import ProviderError
from engine.providers.adapters.base import Reply, normalise_usage, system_and_turns
from engine.providers.adapters.errors import error_in_ok_body, parse_json_reply
from engine.providers.routes import Route


class AnthropicMessagesAdapter:
    """Anthropic's native Messages API (`POST {base}/v1/messages`)."""

    name = "anthropic-messages"
    _FINISH: ClassVar[dict[str, str]] = {
        "end_turn": "stop",
        "stop_sequence": "stop",
        "max_tokens": "length",
        "model_context_window_exceeded": "length",
        "refusal": "refusal",
        "tool_use": "other",
        "pause_turn": "other",
    }

    def url(self, route: Route, model: str) -> str:
        return f"{route.base_url}/v1/messages"

    def auth_headers(self, route: Route, secret: str | None) -> dict[str, str]:
        return {"x-api-key": secret} if secret else {}

    def build_body(
        self, model: str, messages: list[dict[str, str]], contract: dict[str, Any]
    ) -> dict[str, Any]:
        system, turns = system_and_turns(messages)
        body: dict[str, Any] = {
            "model": model,
            "max_tokens": contract["max_output_tokens"],
            "messages": turns,
        }
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
        payload = parse_json_reply(status, headers, body)
        if payload.get("type") == "error" or (
            payload.get("error") is not None and "content" not in payload
        ):
            raise error_in_ok_body(status, payload, body)
        blocks = payload.get("content")
        if not isinstance(blocks, list):
            raise ProviderError(
                "unexpected_body",
                f"HTTP {status} body has no content blocks",
                retryable=True,
                status=status,
            )
        content = "".join(
            str(b.get("text", ""))
            for b in blocks
            if isinstance(b, dict) and b.get("type") == "text"
        )
        stop = payload.get("stop_reason")
        stop = stop if isinstance(stop, str) else None
        usage_obj = payload.get("usage")
        raw_usage: dict[str, Any] = usage_obj if isinstance(usage_obj, dict) else {}
        usage = normalise_usage(
            raw_usage.get("input_tokens"), raw_usage.get("output_tokens"), None, raw_usage or None
        )
        model = payload.get("model")
        request_id = headers.get("request-id") or payload.get("id")
        return Reply(
            content,
            self._FINISH.get(stop or "", "other"),
            model if isinstance(model, str) else None,
            usage,
            str(request_id) if request_id is not None else None,
            stop,
        )
