"""Native adapters and the OpenAI-compatible one: recorded body shapes and loopback runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from engine import make_config, run_live_model
from engine.errors import ProviderError
from engine.providers.adapters import (
    AnthropicMessagesAdapter,
    GeminiGenerateAdapter,
    OpenAIChatAdapter,
    error_for_status,
)
from engine.release import load_release
from engine.run.plan import build_plan
from engine.rundir.records import RunDir
from tests.fakes.faults import FaultScript, FaultServer

H = {"content-type": "application/json"}


def test_openai_recorded_success() -> None:
    body = (
        b'{"id":"chatcmpl-A652Fhuqsr1kskKe5B63M0eiw3842","object":"chat.completion",'
        b'"created":1726012687,"model":"gpt-4-0613","choices":[{"index":0,"message":'
        b'{"role":"assistant","content":"This is a test!","refusal":null},"logprobs":null,'
        b'"finish_reason":"stop"}],"usage":{"prompt_tokens":13,"completion_tokens":5,'
        b'"total_tokens":18},"system_fingerprint":null}'
    )
    reply = OpenAIChatAdapter().parse(200, {"x-request-id": "req_1"}, body)
    assert (reply.content, reply.finish_reason, reply.returned_model) == (
        "This is a test!",
        "stop",
        "gpt-4-0613",
    )
    assert reply.usage == {"prompt_tokens": 13, "completion_tokens": 5, "total_tokens": 18}
    assert reply.request_id == "req_1"


@pytest.mark.parametrize(
    ("status", "body", "retryable", "klass"),
    [
        (
            400,
            b'{"error":{"message":"Unsupported parameter: \'max_tokens\' is not supported with '
            b'this model.","type":"invalid_request_error","param":"max_tokens","code":'
            b'"unsupported_parameter"}}',
            False,
            "bad_request",
        ),
        (
            429,
            b'{"error":{"message":"Rate limit reached for gpt-4o-mini","type":"requests",'
            b'"param":null,"code":"rate_limit_exceeded"}}',
            True,
            "rate_limit",
        ),
        (
            429,
            b'{"error":{"message":"You exceeded your current quota","type":"insufficient_quota",'
            b'"param":null,"code":"insufficient_quota"}}',
            False,
            "quota_exhausted",
        ),
        (
            502,
            b"<html><head><title>502 Bad Gateway</title></head><body><center><h1>502 Bad "
            b"Gateway</h1></center><hr><center>cloudflare</center>",
            True,
            "server_error",
        ),
        (
            529,
            b'{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"},'
            b'"request_id":"req_011"}',
            True,
            "overloaded",
        ),
        (
            429,
            b'{"type":"error","error":{"type":"rate_limit_error","message":"limit",'
            b'"details":{"error_code":"enforced_spend_limit_reached"}}}',
            False,
            "quota_exhausted",
        ),
        (
            402,
            b'{"error":{"code":402,"message":"Insufficient credits"}}',
            False,
            "payment_required",
        ),
        (
            503,
            b'[{"error":{"code":503,"message":"The model is overloaded. Please try again later.",'
            b'"status":"UNAVAILABLE"}}]',
            True,
            "overloaded",
        ),
    ],
)
def test_recorded_error_shapes(status: int, body: bytes, retryable: bool, klass: str) -> None:
    err = error_for_status(status, H, body)
    assert err.retryable is retryable and err.error_class == klass
    assert err.message.startswith(f"HTTP {status}: ")
    assert len(err.message) < 600


def test_gemini_retry_info_delay_and_header_forms() -> None:
    body = json.dumps(
        {
            "error": {
                "code": 429,
                "message": "You exceeded your current quota",
                "status": "RESOURCE_EXHAUSTED",
                "details": [
                    {
                        "@type": "type.googleapis.com/google.rpc.RetryInfo",
                        "retryDelay": "57.238747106s",
                    }
                ],
            }
        }
    ).encode()
    assert error_for_status(429, H, body).retry_after == pytest.approx(57.238747106)
    assert error_for_status(429, {"retry-after-ms": "1500"}, b"{}").retry_after == 1.5
    assert error_for_status(429, {"retry-after": "7"}, b"{}").retry_after == 7
    dated = error_for_status(429, {"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}, b"{}")
    assert dated.retry_after == 0.0
    assert error_for_status(500, {"x-should-retry": "false"}, b"{}").retryable is False


def test_anthropic_body_and_reply() -> None:
    adapter = AnthropicMessagesAdapter()
    body = adapter.build_body(
        "claude-x",
        [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}],
        {"max_output_tokens": 100, "temperature": 0.0, "top_p": None, "extra_body": {}},
    )
    assert body == {
        "model": "claude-x",
        "max_tokens": 100,
        "system": "S",
        "messages": [{"role": "user", "content": "U"}],
        "temperature": 0.0,
    }
    reply = adapter.parse(
        200,
        {"request-id": "req_9"},
        json.dumps(
            {
                "id": "msg_01",
                "type": "message",
                "role": "assistant",
                "model": "claude-x-20260101",
                "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
                "stop_reason": "max_tokens",
                "stop_sequence": None,
                "usage": {"input_tokens": 100, "output_tokens": 50},
            }
        ).encode(),
    )
    assert (reply.content, reply.finish_reason, reply.provider_finish_reason) == (
        "ab",
        "length",
        "max_tokens",
    )
    assert reply.usage is not None and reply.usage["total_tokens"] == 150
    empty = adapter.parse(200, {}, b'{"type":"message","content":[],"stop_reason":"end_turn"}')
    assert empty.content == "" and empty.finish_reason == "stop"
    with pytest.raises(ProviderError) as info:
        adapter.parse(
            400,
            {},
            b'{"type":"error","error":{"type":"invalid_request_error",'
            b'"message":"max_tokens: Field required"},"request_id":"req_0"}',
        )
    assert not info.value.retryable and "max_tokens: Field required" in info.value.message


def test_gemini_body_and_replies() -> None:
    adapter = GeminiGenerateAdapter()
    body = adapter.build_body(
        "gemini-x",
        [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "hi"}],
        {
            "max_output_tokens": 256,
            "temperature": 0.2,
            "top_p": 0.9,
            "seed": None,
            "extra_body": {},
        },
    )
    assert body == {
        "systemInstruction": {"parts": [{"text": "Be terse."}]},
        "contents": [{"role": "user", "parts": [{"text": "hi"}]}],
        "generationConfig": {"temperature": 0.2, "topP": 0.9, "maxOutputTokens": 256},
    }
    reply = adapter.parse(
        200,
        {},
        json.dumps(
            {
                "candidates": [
                    {
                        "content": {"parts": [{"text": "x"}], "role": "model"},
                        "finishReason": "STOP",
                        "index": 0,
                    }
                ],
                "usageMetadata": {
                    "promptTokenCount": 102,
                    "candidatesTokenCount": 160,
                    "totalTokenCount": 540,
                    "thoughtsTokenCount": 278,
                },
                "modelVersion": "gemini-2.5-flash",
                "responseId": "L7JLavbaFMP5xN8P2-fwwAE",
            }
        ).encode(),
    )
    assert reply.usage is not None
    assert (
        reply.usage["prompt_tokens"],
        reply.usage["completion_tokens"],
        reply.usage["total_tokens"],
    ) == (102, 438, 540)
    assert reply.request_id == "L7JLavbaFMP5xN8P2-fwwAE"
    no_content = adapter.parse(200, {}, b'{"candidates":[{"finishReason":"MAX_TOKENS","index":0}]}')
    assert no_content.content == "" and no_content.finish_reason == "length"
    blocked = adapter.parse(200, {}, b'{"promptFeedback":{"blockReason":"SAFETY"}}')
    assert blocked.finish_reason == "content_filter"
    safety = adapter.parse(200, {}, b'{"candidates":[{"finishReason":"RECITATION"}]}')
    assert (
        safety.finish_reason == "content_filter" and safety.provider_finish_reason == "RECITATION"
    )


def loopback(
    release_dir: Path, out: Path, provider: str, plan: dict[str, list[str]], **kw: Any
) -> tuple[dict[str, Any], FaultServer]:
    script = FaultScript.for_release(load_release(release_dir), plan)
    with FaultServer(script) as server:
        base = server.base_url.removesuffix("/v1")
        if provider == "gemini":
            base += "/v1beta"
        cfg = make_config(
            release_dir=release_dir,
            output_dir=out,
            provider=provider,
            base_url=base,
            model="test-model",
            acknowledge_prompt_export=True,
            retry_backoff_seconds=0.01,
            **kw,
        )
        env = {
            "ANTHROPIC_API_KEY": "ak-test-0000",
            "GEMINI_API_KEY": "gk-test-0000",
            "GROQ_API_KEY": "gsk-test-0000",
        }
        return run_live_model(cfg, env=env).to_dict(), server


@pytest.mark.parametrize("provider", ["anthropic", "gemini"])
def test_native_adapter_runs_with_overload_and_rate_limit(
    release_dir: Path, tmp_path: Path, provider: str
) -> None:
    summary, server = loopback(
        release_dir,
        tmp_path / "run",
        provider,
        {
            "ghz_00": ["overloaded", "429", "500-html"],
            "ghz_01": ["429-quota"],
            "ghz_02": ["length"],
        },
        limit=4,
    )
    assert summary["success"] == 3 and summary["error"] == 1, summary
    assert summary["errors"]["ghz_01"].startswith("quota_exhausted")
    assert len(server.requests_for("ghz_00")) == 4
    assert summary["finish_reasons"] == {"length": 1, "stop": 2}
    manifest = json.loads((tmp_path / "run" / "run-manifest.json").read_text())
    assert (
        manifest["route"]["adapter"]
        == {"anthropic": "anthropic-messages", "gemini": "gemini-generate"}[provider]
    )
    # The persisted body is the adapter's real body, byte for byte what the server got.
    requests = {
        json.loads(x)["prompt_id"]: json.loads(x)["body"]
        for x in (tmp_path / "run" / "requests.jsonl").read_text().splitlines()
    }
    seen = server.requests_for("ghz_03")[0]
    sent = dict(seen.body)
    sent.pop("model", None) if provider == "gemini" else None
    assert sent == requests["ghz_03"]
    header = {"anthropic": "x-api-key", "gemini": "x-goog-api-key"}[provider]
    assert seen.headers[header].endswith("-test-0000")
    if provider == "anthropic":
        assert seen.headers["anthropic-version"] == "2023-06-01"
        assert "system" in sent and all(m["role"] != "system" for m in sent["messages"])
    responses = {r["prompt_id"]: r for r in RunDir(tmp_path / "run").read_responses()}
    r = responses["ghz_03"]
    assert r["adapter"] == manifest["route"]["adapter"] and r["generated_code"]
    assert set(r) >= {"finish_reason", "provider_finish_reason", "usage", "returned_model"}


def test_gemini_blocked_prompt_is_a_visible_empty_response(
    release_dir: Path, tmp_path: Path
) -> None:
    summary, _ = loopback(release_dir, tmp_path / "run", "gemini", {"ghz_00": ["blocked"]}, limit=1)
    assert summary["success"] == 1 and summary["empty_prompts"] == ["ghz_00"]
    assert summary["finish_reasons"] == {"content_filter": 1}


def test_redirection_is_flagged_or_refused(release_dir: Path, tmp_path: Path) -> None:
    plan = {"ghz_00": ["substitute:other-model-9b"], "ghz_01": ["substitute:test-model-2026-01-01"]}
    summary, _ = loopback(release_dir, tmp_path / "a", "groq", plan, limit=3)
    assert summary["redirected_prompts"] == ["ghz_00"]
    assert summary["model_checks"] == {"alias": 1, "exact": 1, "redirected": 1}
    summary, _ = loopback(
        release_dir, tmp_path / "b", "groq", plan, limit=3, require_exact_model=True
    )
    assert summary["error"] == 1 and summary["errors"]["ghz_00"].startswith("model_redirected")


def test_max_output_field_is_openai_only(release_dir: Path) -> None:
    from engine.errors import ConfigError

    with pytest.raises(ConfigError, match="applies to OpenAI-compatible routes"):
        build_plan(
            make_config(
                release_dir=release_dir,
                provider="anthropic",
                model="c",
                max_output_field="max_completion_tokens",
            )
        )
