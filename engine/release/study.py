"""The frozen PQID-Bench study's request identities, and the requests it archived.

The study named every request three ways (its exporter is the specification):

    prompt_record_sha256   the prompt's whole line in the prompts file, target metadata included
    model_input_sha256     what the model was given: prompt_id, row_id, prompt and messages
    request_sha256         provider, API model id, request family and the request body, as the
                           study's request records spell the body

each the SHA-256 of the value's canonical JSON (sorted keys, ASCII escapes, no spaces). These
are hashed here, on the machine; nothing of them, and nothing of the target metadata, is sent.

The study's record of a body is not always the JSON it sent: its OpenAI-compatible runner
passed the record to the OpenAI Python SDK, which merges an `extra_body` argument into the top
level of the JSON; its Anthropic runner dropped `top_p` (and `temperature` for two models);
its Gemini runner renamed fields into the REST spelling. `recorded_body` maps a body the
project sends to the study's spelling, `sent_body` maps an archived record to what was sent.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.errors import ReleaseError
from engine.release.model import FORMAT_PQID_BENCH_CORE, FORMAT_PQID_BENCH_EVIDENCE, Prompt, Release
from engine.rundir.storage import read_jsonl_objects

if TYPE_CHECKING:
    pass

# The study's request families, by the project's adapter that speaks the same wire format.
FAMILY_BY_ADAPTER = {
    "openai-chat": "openai_compatible_chat",
    "anthropic-messages": "anthropic_messages",
    "gemini-generate": "gemini_generate_content",
}
# The study's provider names, by the project's route preset. A route label keeps its study
# name under --base-url: the body, not the host, is the request's identity.
STUDY_PROVIDER = {
    "groq": "groq",
    "deepseek": "deepseek",
    "github-models": "github_models",
    "hugging-face": "huggingface_router",
    "openrouter": "openrouter",
    "nvidia": "nvidia_nim",
    "deepinfra": "deepinfra",
    "openai": "openai",
    "anthropic": "anthropic",
    "gemini": "google",
    "local": "huggingface_or_local",
}
# Named parameters of the OpenAI Python SDK's `chat.completions.create`: the study's records
# keep these at the top of the body; any other field went in the SDK's `extra_body` argument.
SDK_CHAT_PARAMETERS = frozenset(
    {
        "audio",
        "frequency_penalty",
        "function_call",
        "functions",
        "logit_bias",
        "logprobs",
        "max_completion_tokens",
        "max_tokens",
        "messages",
        "metadata",
        "modalities",
        "model",
        "n",
        "parallel_tool_calls",
        "prediction",
        "presence_penalty",
        "prompt_cache_key",
        "reasoning_effort",
        "response_format",
        "safety_identifier",
        "seed",
        "service_tier",
        "stop",
        "store",
        "stream",
        "stream_options",
        "temperature",
        "tool_choice",
        "tools",
        "top_logprobs",
        "top_p",
        "user",
        "verbosity",
        "web_search_options",
    }
)
# The study's Anthropic runner sent no temperature to these models (and never a top_p).
_ANTHROPIC_NO_TEMPERATURE = ("claude-opus-4-8", "claude-fable-5")
_GEMINI_CONFIG_NAMES = {
    "temperature": "temperature",
    "top_p": "topP",
    "max_output_tokens": "maxOutputTokens",
}

# Where the evidence repository keeps the frozen rows' requests (one file per model).
ARCHIVE_ROOT = "artifacts/external_model_batches_154"
_ARCHIVE_FILE_RE = re.compile(
    rf"^{re.escape(ARCHIVE_ROOT)}/(?:[^/]+/)?requests/([^/]+)_requests\.jsonl$"
)


def is_pqid_bench(release: Release) -> bool:
    return release.format in (FORMAT_PQID_BENCH_CORE, FORMAT_PQID_BENCH_EVIDENCE)


def stable_json(value: Any) -> str:
    """The study's canonical JSON: sorted keys, ASCII escapes, no spaces."""
    return json.dumps(value, ensure_ascii=True, sort_keys=True, separators=(",", ":"))


def study_sha256(value: Any) -> str:
    return hashlib.sha256(stable_json(value).encode("utf-8")).hexdigest()


def model_input(record: Mapping[str, Any]) -> dict[str, Any]:
    """What the study says the model was given for one prompt line."""
    return {
        "prompt_id": record["prompt_id"],
        "row_id": record["row_id"],
        "prompt": record["prompt"],
        "messages": record["messages"],
    }


def recorded_body(adapter: str, model: str, body: Mapping[str, Any]) -> dict[str, Any]:
    """A body the project sends, spelled as the study's request records spell bodies."""
    if adapter == "openai-chat":
        out = {k: v for k, v in body.items() if k in SDK_CHAT_PARAMETERS}
        extra = {k: v for k, v in body.items() if k not in SDK_CHAT_PARAMETERS}
        if extra:
            out["extra_body"] = extra
        return out
    if adapter == "gemini-generate":
        back = {v: k for k, v in _GEMINI_CONFIG_NAMES.items()}
        out = {"model": model}
        for key, value in body.items():
            if key == "generationConfig" and isinstance(value, Mapping):
                out["generation_config"] = {back.get(k, k): v for k, v in value.items()}
            else:
                out["system_instruction" if key == "systemInstruction" else key] = value
        return out
    return dict(body)


def sent_body(row: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON the study's runner sent for one archived request record."""
    body = dict(row.get("request_body") or {})
    family = row.get("request_family")
    if family in ("openai_compatible_chat", "openai_compatible_completion"):
        extra = body.pop("extra_body", None)
        if isinstance(extra, Mapping):
            body.update(extra)
        return body
    if family == "anthropic_messages":
        body.pop("top_p", None)
        if str(body.get("model", "")).startswith(_ANTHROPIC_NO_TEMPERATURE):
            body.pop("temperature", None)
        return body
    if family == "gemini_generate_content":
        body.pop("model", None)
        if "system_instruction" in body:
            body["systemInstruction"] = body.pop("system_instruction")
        if "generation_config" in body:
            config = body.pop("generation_config") or {}
            body["generationConfig"] = {
                _GEMINI_CONFIG_NAMES[k]: v for k, v in config.items() if k in _GEMINI_CONFIG_NAMES
            }
        return body
    return body  # openai_responses: the Batch API line's body, sent as recorded


@dataclass(frozen=True, slots=True)
class StudyIdentity:
    """One request's identities under the study's definitions."""

    provider: str
    api_model_id: str
    request_family: str
    model_input_sha256: str
    prompt_record_sha256: str
    request_sha256: str

    def to_dict(self) -> dict[str, str]:
        return {
            "provider": self.provider,
            "api_model_id": self.api_model_id,
            "request_family": self.request_family,
            "model_input_sha256": self.model_input_sha256,
            "prompt_record_sha256": self.prompt_record_sha256,
            "request_sha256": self.request_sha256,
        }


def identity(
    prompt: Prompt, route_name: str, adapter: str, model: str, body: Mapping[str, Any]
) -> StudyIdentity | None:
    """The study's identities of one request; None when the prompt has no study line (not a
    PQID-Bench prompt) or the route has no study counterpart (the oracle)."""
    record = prompt.source_record
    family = FAMILY_BY_ADAPTER.get(adapter)
    if (
        record is None
        or family is None
        or not all(k in record for k in ("prompt_id", "row_id", "prompt", "messages"))
    ):
        return None
    provider = STUDY_PROVIDER.get(route_name, route_name.replace("-", "_"))
    record_body = recorded_body(adapter, model, body)
    return StudyIdentity(
        provider=provider,
        api_model_id=model,
        request_family=family,
        model_input_sha256=study_sha256(model_input(record)),
        prompt_record_sha256=study_sha256(dict(record)),
        request_sha256=study_sha256(
            {
                "provider": provider,
                "api_model_id": model,
                "request_family": family,
                "body": record_body,
            }
        ),
    )


# -- the archived requests of the frozen rows ---------------------------------------------------


@dataclass(frozen=True, slots=True)
class ArchivedRow:
    """One frozen model's archived request file: its identity and its records by prompt."""

    slug: str
    path: str  # relative to the release root
    model_label: str
    provider: str
    api_model_id: str
    request_family: str
    records: Mapping[str, Mapping[str, Any]]

    def to_dict(self) -> dict[str, Any]:
        return {
            "slug": self.slug,
            "model_label": self.model_label,
            "provider": self.provider,
            "api_model_id": self.api_model_id,
            "request_family": self.request_family,
            "prompts": len(self.records),
            "requests_file": self.path,
        }


def archive_paths(release: Release) -> list[str]:
    """Every archived request file of the release: present ones and absent listed ones."""
    root = Path(release.root)
    base = root / ARCHIVE_ROOT
    found = {p.relative_to(root).as_posix() for p in base.glob("requests/*_requests.jsonl")}
    found |= {p.relative_to(root).as_posix() for p in base.glob("*/requests/*_requests.jsonl")}
    found |= {rel for rel in release.absent if _ARCHIVE_FILE_RE.match(rel)}
    return sorted(rel for rel in found if _ARCHIVE_FILE_RE.match(rel))


def read_archived_rows(release: Release, purpose: str = "trace") -> list[ArchivedRow]:
    """The frozen rows' archived requests, each file verified before it is read."""
    if release.format != FORMAT_PQID_BENCH_EVIDENCE:
        where = (
            "the core distribution"
            if release.format == FORMAT_PQID_BENCH_CORE
            else f"a {release.format} release"
        )
        raise ReleaseError(
            f"{release.root}: {purpose} compares requests with the frozen study's archived "
            f"requests, which {where} does not hold; give --release-dir the PQID-Bench "
            "evidence repository (a clone of its GitHub repository)"
        )
    rels = archive_paths(release)
    if not rels:
        raise ReleaseError(
            f"{release.root / ARCHIVE_ROOT}: no archived request files "
            "(requests/<slug>_requests.jsonl) found"
        )
    rows = []
    for rel in rels:
        path = release.require(rel, purpose)
        rows.append(_read_archived_file(path, rel))
    return sorted(rows, key=lambda r: (r.provider, r.api_model_id))


def _read_archived_file(path: Path, rel: str) -> ArchivedRow:
    match = _ARCHIVE_FILE_RE.match(rel)
    assert match is not None
    records: dict[str, Mapping[str, Any]] = {}
    first: Mapping[str, Any] | None = None
    for number, obj in read_jsonl_objects(path, ReleaseError):
        if not isinstance(obj.get("prompt_id"), str) or not isinstance(
            obj.get("request_body"), dict
        ):
            raise ReleaseError(f"{path}:{number}: not a request record (prompt_id, request_body)")
        first = first or obj
        records[obj["prompt_id"]] = obj
    if first is None:
        raise ReleaseError(f"{path}: holds no request records")
    return ArchivedRow(
        slug=match.group(1),
        path=rel,
        model_label=str(first.get("model_label") or match.group(1)),
        provider=str(first.get("provider") or ""),
        api_model_id=str(first.get("api_model_id") or first.get("model") or ""),
        request_family=str(first.get("request_family") or ""),
        records=records,
    )
