"""Google's native Gemini generateContent wire format."""

from __future__ import annotations

from typing import Any, ClassVar

from engine.errors import ProviderError
from engine.providers.adapters.base import Reply, normalise_usage, system_and_turns
from engine.providers.adapters.errors import error_in_ok_body, parse_json_reply
from engine.providers.routes import Route


class GeminiGenerateAdapter:
    """Google's native Gemini API (`POST {base}/models/{model}:generateContent`)."""

    name = "gemini-generate"
    _FILTERED: ClassVar[frozenset[str]] = frozenset(
        {
            "SAFETY",
            "RECITATION",
            "BLOCKLIST",
            "PROHIBITED_CONTENT",
            "SPII",
            "IMAGE_SAFETY",
            "LANGUAGE",
        }
    )

    def url(self, route: Route, model: str) -> str:
        name = model if model.startswith("models/") else f"models/{model}"
        return f"{route.base_url}/{name}:generateContent"

    def auth_headers(self, route: Route, secret: str | None) -> dict[str, str]:
        return {"x-goog-api-key": secret} if secret else {}

    def build_body(
        self, model: str, messages: list[dict[str, str]], contract: dict[str, Any]
    ) -> dict[str, Any]:
        system, turns = system_and_turns(messages)
        body: dict[str, Any] = {
            "contents": [
                {
                    "role": "model" if m["role"] == "assistant" else "user",
                    "parts": [{"text": m["content"]}],
                }
                for m in turns
            ]
        }
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
        payload = parse_json_reply(status, headers, body)
        if payload.get("error") is not None and "candidates" not in payload:
            raise error_in_ok_body(status, payload, body)
        meta_obj = payload.get("usageMetadata")
        meta: dict[str, Any] = meta_obj if isinstance(meta_obj, dict) else {}
        completion = meta.get("candidatesTokenCount")
        thoughts = meta.get("thoughtsTokenCount")
        if isinstance(completion, int) and isinstance(thoughts, int):
            completion += thoughts  # billed as output; total = prompt + candidates + thoughts
        usage = normalise_usage(
            meta.get("promptTokenCount"), completion, meta.get("totalTokenCount"), meta or None
        )
        model = payload.get("modelVersion")
        request_id = payload.get("responseId")
        candidates = payload.get("candidates")
        if not candidates:
            feedback = payload.get("promptFeedback") or {}
            reason = feedback.get("blockReason") if isinstance(feedback, dict) else None
            if reason:
                return Reply(
                    "",
                    "content_filter",
                    model if isinstance(model, str) else None,
                    usage,
                    request_id,
                    f"promptFeedback.blockReason={reason}",
                )
            raise ProviderError(
                "unexpected_body",
                f"HTTP {status} body has no candidates",
                retryable=True,
                status=status,
            )
        first = candidates[0] if isinstance(candidates[0], dict) else {}
        parts = (first.get("content") or {}).get("parts") or []
        content = "".join(
            str(p.get("text", "")) for p in parts if isinstance(p, dict) and not p.get("thought")
        )
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
        return Reply(
            content,
            normalised,
            model if isinstance(model, str) else None,
            usage,
            str(request_id) if request_id is not None else None,
            finish,
        )
