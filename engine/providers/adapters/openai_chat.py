"""The OpenAI-compatible chat completions wire format."""

from __future__ import annotations

import json
from typing import Any

from engine.errors import ProviderError
from engine.providers.adapters.base import Reply, normalise_usage
from engine.providers.adapters.errors import error_in_ok_body, parse_json_reply
from engine.providers.routes import Route


class OpenAIChatAdapter:
    """OpenAI-compatible chat completions (`POST {base}/chat/completions`)."""

    name = "openai-chat"

    def url(self, route: Route, model: str) -> str:
        return f"{route.base_url}/chat/completions"

    def auth_headers(self, route: Route, secret: str | None) -> dict[str, str]:
        return {"Authorization": f"Bearer {secret}"} if secret else {}

    def build_body(
        self, model: str, messages: list[dict[str, str]], contract: dict[str, Any]
    ) -> dict[str, Any]:
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
        payload = parse_json_reply(status, headers, body)
        choices = payload.get("choices")
        if not choices and payload.get("error") is not None:
            raise error_in_ok_body(status, payload, body)
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise ProviderError(
                "unexpected_body",
                f"HTTP {status} body has no choices",
                retryable=True,
                status=status,
            )
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
            raise ProviderError(
                "error_in_body",
                f"HTTP {status}: generation ended in an error",
                retryable=True,
                status=status,
            )
        finish = finish if isinstance(finish, str) else None
        normalised = {
            "stop": "stop",
            "length": "length",
            "content_filter": "content_filter",
            None: "other",
        }.get(finish, "other")
        if message_obj.get("refusal"):
            normalised = "refusal"
        raw_usage = payload.get("usage") if isinstance(payload.get("usage"), dict) else None
        usage = None
        if raw_usage is not None:
            usage = normalise_usage(
                raw_usage.get("prompt_tokens"),
                raw_usage.get("completion_tokens"),
                raw_usage.get("total_tokens"),
            )
            extra = {
                k: v
                for k, v in raw_usage.items()
                if k not in ("prompt_tokens", "completion_tokens", "total_tokens")
            }
            if usage is not None and extra:
                usage["provider_usage"] = extra
        request_id = (
            headers.get("x-request-id")
            or headers.get("request-id")
            or headers.get("x-generation-id")
            or payload.get("id")
        )
        model = payload.get("model")
        return Reply(
            content,
            normalised,
            model if isinstance(model, str) else None,
            usage,
            str(request_id) if request_id is not None else None,
            finish,
        )
