"""Provider routes: the presets users know, and the adapter that speaks each wire format."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from engine.errors import ConfigError

# Requests in flight at once on one route unless the user says otherwise. Here rather than in
# engine.config so that building the command line's parsers does not import pydantic.
DEFAULT_CONCURRENCY = 4


@dataclass(frozen=True, slots=True)
class Route:
    """Where requests go and how they are authenticated."""

    name: str
    adapter: str  # "openai-chat" | "anthropic-messages" | "gemini-generate" | "oracle"
    base_url: str
    credential_env: str | None
    auth: str  # "bearer" | "x-api-key" | "x-goog-api-key" | "none"
    headers: dict[str, str] = field(default_factory=dict)
    max_output_field: str = "max_tokens"
    notes: str = ""

    @property
    def needs_credential(self) -> bool:
        return self.auth != "none"


PRESETS: dict[str, Route] = {
    r.name: r
    for r in (
        Route(
            "openai",
            "openai-chat",
            "https://api.openai.com/v1",
            "OPENAI_API_KEY",
            "bearer",
            max_output_field="max_completion_tokens",
            notes="OpenAI chat completions; newer models accept only max_completion_tokens",
        ),
        Route(
            "groq",
            "openai-chat",
            "https://api.groq.com/openai/v1",
            "GROQ_API_KEY",
            "bearer",
            notes="Groq OpenAI-compatible route",
        ),
        Route(
            "github-models",
            "openai-chat",
            "https://models.github.ai/inference",
            "GITHUB_TOKEN",
            "bearer",
            headers={"Accept": "application/vnd.github+json", "X-GitHub-Api-Version": "2022-11-28"},
            notes="GitHub Models; publisher/model ids; token needs models access",
        ),
        Route(
            "openrouter",
            "openai-chat",
            "https://openrouter.ai/api/v1",
            "OPENROUTER_API_KEY",
            "bearer",
            notes="OpenRouter; the returned model can differ when routing falls back",
        ),
        Route(
            "hugging-face",
            "openai-chat",
            "https://router.huggingface.co/v1",
            "HF_TOKEN",
            "bearer",
            notes="Hugging Face Inference Providers; pin a provider as MODEL:provider",
        ),
        Route(
            "nvidia",
            "openai-chat",
            "https://integrate.api.nvidia.com/v1",
            "NVIDIA_API_KEY",
            "bearer",
            notes="NVIDIA API Catalog",
        ),
        Route(
            "deepinfra",
            "openai-chat",
            "https://api.deepinfra.com/v1/openai",
            "DEEPINFRA_TOKEN",
            "bearer",
            notes="DeepInfra OpenAI-compatible route",
        ),
        Route(
            "deepseek",
            "openai-chat",
            "https://api.deepseek.com",
            "DEEPSEEK_API_KEY",
            "bearer",
            notes="DeepSeek; may pad slow replies with blank lines",
        ),
        Route(
            "anthropic",
            "anthropic-messages",
            "https://api.anthropic.com",
            "ANTHROPIC_API_KEY",
            "x-api-key",
            headers={"anthropic-version": "2023-06-01"},
            max_output_field="max_tokens",
            notes="native Anthropic Messages API; newer Claude models reject temperature "
            "and top_p together: pass --omit-top-p",
        ),
        Route(
            "gemini",
            "gemini-generate",
            "https://generativelanguage.googleapis.com/v1beta",
            "GEMINI_API_KEY",
            "x-goog-api-key",
            max_output_field="maxOutputTokens",
            notes="native Gemini generateContent API",
        ),
        Route(
            "local",
            "openai-chat",
            "http://127.0.0.1:8000/v1",
            None,
            "none",
            notes="a loopback server (vLLM, llama.cpp, ...); no authentication",
        ),
        Route(
            "oracle",
            "oracle",
            "http://oracle.invalid/v1",
            None,
            "none",
            notes="answers with each prompt's reference code, in-process, no network",
        ),
    )
}
OPENAI_COMPATIBLE = tuple(n for n, r in PRESETS.items() if r.adapter == "openai-chat")
NATIVE = tuple(
    n for n, r in PRESETS.items() if r.adapter in ("anthropic-messages", "gemini-generate")
)
MAX_OUTPUT_FIELDS = ("max_tokens", "max_completion_tokens")

# Header names that carry a credential: never accepted from the command line.
_SECRET_HEADER_RE = re.compile(r"(auth|key|token|secret|cookie|session|password)", re.I)
_SECRET_FIELD_RE = re.compile(
    r"(api[-_]?key|apikey|token|secret|password|passwd|authorization|bearer|credential"
    r"|private[-_]?key|access[-_]?key|cookie|session)",
    re.I,
)
# Shapes of real provider keys; a value like this is refused wherever it is not expected.
SECRET_VALUE_RE = re.compile(
    r"(sk-[A-Za-z0-9_\-]{16,}|gsk_[A-Za-z0-9]{16,}|ghp_[A-Za-z0-9]{16,}|github_pat_[A-Za-z0-9_]{16,}"
    r"|hf_[A-Za-z0-9]{16,}|nvapi-[A-Za-z0-9_\-]{16,}|AIza[0-9A-Za-z_\-]{30,}"
    r"|sk-ant-[A-Za-z0-9_\-]{16,}|Bearer\s+\S{8,})"
)


def resolve_route(
    provider: str, base_url: str | None = None, extra_headers: dict[str, str] | None = None
) -> Route:
    """The route for a provider label, with an optional base URL override."""
    if provider not in PRESETS:
        known = ", ".join(PRESETS)
        raise ConfigError(
            f"unknown provider {provider!r}; choose one of: {known}"
            " (use --base-url with any of them for another compatible endpoint)",
            fields={"provider": f"unknown provider {provider!r}"},
        )
    route = PRESETS[provider]
    headers = dict(route.headers)
    for name, value in (extra_headers or {}).items():
        check_header(name, value)
        headers[name] = value
    if base_url is not None:
        if route.adapter == "oracle":
            raise ConfigError(
                "the oracle route runs in-process; it takes no --base-url",
                fields={"base_url": "the oracle route runs in-process; leave the base URL empty"},
            )
        check_base_url(base_url)
        return Route(
            route.name,
            route.adapter,
            base_url.rstrip("/"),
            route.credential_env,
            route.auth,
            headers,
            route.max_output_field,
            route.notes,
        )
    return Route(
        route.name,
        route.adapter,
        route.base_url,
        route.credential_env,
        route.auth,
        headers,
        route.max_output_field,
        route.notes,
    )


def check_base_url(url: str) -> None:
    """Refuse a base URL that is not http(s) or that carries a credential."""
    try:
        parts = urlsplit(url)
        _ = parts.port
    except ValueError as exc:
        raise ConfigError(
            f"--base-url is not a valid URL ({exc})",
            fields={"base_url": f"not a valid URL ({exc})"},
        ) from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(
            "--base-url must be an http:// or https:// URL with a host",
            fields={"base_url": "must be an http:// or https:// URL with a host"},
        )
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        raise ConfigError(
            "--base-url must not carry credentials (user:password@host); "
            "use --api-key-file, the route's environment variable or the keyring",
            fields={
                "base_url": "must not carry credentials (user:password@host); "
                "use an API key file, the route's environment variable or "
                "the keyring"
            },
        )
    if parts.query or parts.fragment:
        raise ConfigError(
            "--base-url must not have a query string or fragment (keys travel "
            "there on some providers); give only scheme, host and path",
            fields={
                "base_url": "must not have a query string or fragment (keys "
                "travel there on some providers); give only scheme, host "
                "and path"
            },
        )
    if SECRET_VALUE_RE.search(url):
        raise ConfigError(
            "--base-url contains something shaped like an API key; refused",
            fields={"base_url": "contains something shaped like an API key; refused"},
        )


def check_header(name: str, value: str) -> None:
    if not re.fullmatch(r"[A-Za-z0-9-]{1,64}", name):
        raise ConfigError(
            f"header name {name!r} is not a valid HTTP header name",
            fields={"headers": f"{name!r} is not a valid HTTP header name"},
        )
    if _SECRET_HEADER_RE.search(name) or SECRET_VALUE_RE.search(value):
        raise ConfigError(
            f"header {name!r} looks like a credential; credentials come only from "
            "--api-key-file, the route's environment variable or the keyring",
            fields={
                "headers": f"{name!r} looks like a credential; credentials "
                "come only from an API key file, the route's environment "
                "variable or the keyring"
            },
        )


def check_extra_body(body: Any, path: str = "") -> None:
    """Refuse credential-like fields or values anywhere in the extra request body."""
    if isinstance(body, dict):
        for key, value in body.items():
            where = f"{path}.{key}" if path else str(key)
            if _SECRET_FIELD_RE.search(str(key)):
                raise ConfigError(
                    f"--extra-body-json field {where!r} looks like a credential; "
                    "refused (credentials never go in the request body)",
                    fields={
                        "extra_body": f"field {where!r} looks like a "
                        "credential; refused (credentials never go in the "
                        "request body)"
                    },
                )
            check_extra_body(value, where)
    elif isinstance(body, list):
        for i, value in enumerate(body):
            check_extra_body(value, f"{path}[{i}]")
    elif isinstance(body, str) and SECRET_VALUE_RE.search(body):
        raise ConfigError(
            f"--extra-body-json value at {path!r} looks like an API key; refused",
            fields={"extra_body": f"the value at {path!r} looks like an API key; refused"},
        )
