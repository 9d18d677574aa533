"""The configuration of one live run: a pydantic model shared by the library, batch mode and app."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from engine.errors import ConfigError
from engine.providers.routes import DEFAULT_CONCURRENCY as DEFAULT_CONCURRENCY
from engine.providers.routes import MAX_OUTPUT_FIELDS, PRESETS, check_extra_body

# Named generation contracts: a preset of the generation settings, by adapter. Settings given
# explicitly override the preset's. "pqid-bench" is what the frozen PQID-Bench study's runners
# put on the wire: temperature 0, top_p 1, 2,048 output tokens (`max_tokens` on
# OpenAI-compatible routes), no seed; its Anthropic runner never sent top_p.
GENERATION_CONTRACTS: dict[str, dict[str, dict[str, Any]]] = {
    "pqid-bench": {
        "openai-chat": {
            "temperature": 0.0,
            "top_p": 1.0,
            "max_output_tokens": 2048,
            "max_output_field": "max_tokens",
            "seed": None,
        },
        "anthropic-messages": {
            "temperature": 0.0,
            "omit_top_p": True,
            "max_output_tokens": 2048,
            "seed": None,
        },
        "gemini-generate": {
            "temperature": 0.0,
            "top_p": 1.0,
            "max_output_tokens": 2048,
            "seed": None,
        },
    },
}


class LiveRunConfig(BaseModel):
    """Everything that decides what a live run sends and where it keeps the evidence."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    release_dir: Path
    output_dir: Path | None = None
    provider: str
    model: str = Field(min_length=1)
    base_url: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)

    api_key_file: Path | None = None
    no_auth: bool = False
    acknowledge_prompt_export: bool = False

    generation_contract: Literal["pqid-bench"] | None = None
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    max_output_tokens: int = Field(default=2048, ge=1, le=1_000_000)
    omit_temperature: bool = False
    omit_top_p: bool = False
    max_output_field: Literal["max_tokens", "max_completion_tokens"] | None = None
    seed: int | None = None
    extra_body: dict[str, Any] = Field(default_factory=dict)

    split: str | None = None
    limit: int | None = Field(default=None, ge=1)
    prompt_ids: tuple[str, ...] | None = None

    concurrency: int = Field(default=DEFAULT_CONCURRENCY, ge=1, le=256)
    max_retries: int = Field(default=3, ge=0, le=50)
    retry_backoff_seconds: float = Field(default=2.0, ge=0.0, le=600.0)
    max_backoff_seconds: float = Field(default=60.0, ge=0.0, le=3600.0)
    max_retry_after_seconds: float = Field(default=120.0, ge=0.0, le=86400.0)
    request_timeout_seconds: float = Field(default=120.0, gt=0.0, le=3600.0)
    sleep_seconds: float = Field(default=0.0, ge=0.0, le=3600.0)
    stop_on_error: bool = False

    require_exact_model: bool = False
    prices_path: Path | None = None
    recast: bool = False
    batch_api: bool = False
    batch_poll_seconds: float = Field(default=30.0, gt=0.0, le=3600.0)

    resume: bool = False
    retry_errors: bool = False
    retry_uncertain: bool = False
    max_new: int | None = Field(default=None, ge=0)
    allow_modified_release: bool = False

    @model_validator(mode="before")
    @classmethod
    def _apply_generation_contract(cls, data: Any) -> Any:
        if not isinstance(data, dict) or data.get("generation_contract") is None:
            return data
        by_adapter = GENERATION_CONTRACTS.get(str(data["generation_contract"]))
        route = PRESETS.get(str(data.get("provider")))
        if by_adapter is None or route is None:
            return data  # the field's own validation, or the route's, says what is wrong
        adapter = "openai-chat" if route.adapter == "oracle" else route.adapter
        preset = by_adapter.get(adapter, {})
        out = dict(data)
        for key, value in preset.items():
            # An explicit value wins; so does an explicit top_p or temperature over the
            # preset's omitting it.
            explicit = key in data or (
                key.startswith("omit_") and key.removeprefix("omit_") in data
            )
            if not explicit:
                out[key] = value
        return out

    @field_validator("extra_body")
    @classmethod
    def _extra_body_has_no_secret(cls, value: dict[str, Any]) -> dict[str, Any]:
        try:
            check_extra_body(value)
        except ConfigError as exc:
            # A ValueError lets pydantic report this beside every other field's error.
            raise ValueError(exc.fields.get("extra_body", str(exc))) from None
        reserved = {"model", "messages"} & set(value)
        if reserved:
            raise ValueError(f"extra body may not set {', '.join(sorted(reserved))}")
        return value

    @field_validator("max_output_field")
    @classmethod
    def _known_field(cls, value: str | None) -> str | None:
        if value is not None and value not in MAX_OUTPUT_FIELDS:
            raise ValueError(f"must be one of {', '.join(MAX_OUTPUT_FIELDS)}")
        return value


def make_config(**fields: Any) -> LiveRunConfig:
    """Build a config, turning validation failures into one ConfigError a user can read,
    with each field's message in `fields`."""
    try:
        return LiveRunConfig(**fields)
    except ValidationError as exc:
        raise validation_config_error(exc) from None


def validation_config_error(exc: ValidationError) -> ConfigError:
    parts: list[str] = []
    by_field: dict[str, str] = {}
    for err in exc.errors():
        loc = ".".join(str(x) for x in err["loc"]) or "config"
        msg = plain_validation_message(err)
        parts.append(f"{loc.replace('_', '-')}: {msg}")
        by_field.setdefault(str(err["loc"][0]) if err["loc"] else "", msg)
    return ConfigError("; ".join(parts), fields=by_field)


def _number(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def plain_validation_message(err: Mapping[str, Any]) -> str:
    """A validation error in the project's words, not the validation library's."""
    kind, ctx = err.get("type", ""), err.get("ctx") or {}
    if kind == "string_too_short" and ctx.get("min_length") == 1:
        return "required"
    if kind == "missing":
        return "required"
    if kind == "greater_than_equal":
        return f"must be at least {_number(ctx.get('ge'))}"
    if kind == "greater_than":
        return f"must be more than {_number(ctx.get('gt'))}"
    if kind == "less_than_equal":
        return f"must be at most {_number(ctx.get('le'))}"
    if kind == "less_than":
        return f"must be less than {_number(ctx.get('lt'))}"
    if kind in ("int_parsing", "int_from_float", "int_type"):
        return "must be a whole number"
    if kind in ("float_parsing", "float_type"):
        return "must be a number"
    if kind in ("bool_parsing", "bool_type"):
        return "must be true or false"
    return str(err.get("msg", "is not valid")).removeprefix("Value error, ")
