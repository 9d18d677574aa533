"""Prices and cost estimates, the stability draw, the credential check, batch/live guard."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from engine import make_config, plan_live_model_run, run_live_model
from engine.errors import ConfigError, ResumeRefused
from engine.providers.check import check_provider
from engine.providers.credentials import Credential
from engine.providers.routes import resolve_route
from engine.release import load_release
from engine.release.prices import load_prices
from tests.conftest import cli
from tests.fakes.faults import FaultScript, FaultServer


def price_file(tmp_path: Path, body: dict[str, object]) -> Path:
    path = tmp_path / "prices.json"
    path.write_text(json.dumps(body))
    return path


def test_plan_shows_a_cost_range_or_no_price(release_dir: Path, tmp_path: Path) -> None:
    prices = price_file(tmp_path, {"_source": "test table", "m": {"input": 2.0, "output": 8.0}})
    plan = plan_live_model_run(
        make_config(
            release_dir=release_dir,
            provider="groq",
            model="m",
            prices_path=prices,
            max_output_tokens=100,
        )
    )
    cost = plan["cost_estimate"]
    tokens = cost["estimated_prompt_tokens"]
    assert cost["usd_low"] == pytest.approx(tokens * 2.0 / 1e6, abs=1e-6)
    assert cost["usd_high"] == pytest.approx(cost["usd_low"] + 6 * 100 * 8.0 / 1e6, abs=1e-6)
    other = plan_live_model_run(
        make_config(release_dir=release_dir, provider="groq", model="unpriced", prices_path=prices)
    )
    assert other["cost_estimate"]["usd_low"] is None
    assert other["cost_estimate"]["price"] == "no price for unpriced"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"m": {"input": 1, "output": 1}}, "_source"),
        ({"_source": "x", "m": {"input": -1, "output": 1}}, "non-negative"),
        ({"_source": "x", "m": {"input": 1, "output": 1, "batch_input": 0.5}}, "batch_output"),
    ],
)
def test_bad_price_tables_are_refused(
    tmp_path: Path, body: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        load_prices(price_file(tmp_path, body))


def test_summary_reports_spend_and_batch_prices(release_dir: Path, tmp_path: Path) -> None:
    prices = price_file(
        tmp_path,
        {
            "_source": "t",
            "reference": {"input": 1.0, "output": 2.0, "batch_input": 0.5, "batch_output": 1.0},
        },
    )
    summary = run_live_model(
        make_config(
            release_dir=release_dir,
            output_dir=tmp_path / "o",
            provider="oracle",
            model="reference",
            prices_path=prices,
        )
    ).to_dict()
    usage = summary["usage"]
    expected = (usage["prompt_tokens"] * 1.0 + usage["completion_tokens"] * 2.0) / 1e6
    assert summary["cost"]["usd"] == pytest.approx(expected, abs=1e-6)
    table = load_prices(prices)
    assert table is not None and table.lookup("reference", batch=True) == (0.5, 1.0)
    no_table = run_live_model(
        make_config(
            release_dir=release_dir,
            output_dir=tmp_path / "p",
            provider="oracle",
            model="reference",
            prices_path=None,
        ),
        env={},
    ).to_dict()
    assert no_table["cost"]["usd"] is None and no_table["cost"]["price"].startswith("no price")


def test_recast_reports_changed_responses(release_dir: Path, tmp_path: Path) -> None:
    release = load_release(release_dir)
    # The second draw of ghz_00 comes back different (fenced, with prose).
    script = FaultScript.for_release(release, {"ghz_00": ["ok", "fenced"]})
    with FaultServer(script) as server:
        summary = run_live_model(
            make_config(
                release_dir=release_dir,
                output_dir=tmp_path / "run",
                provider="local",
                base_url=server.base_url,
                model="m",
                no_auth=True,
                acknowledge_prompt_export=True,
                limit=3,
                recast=True,
            )
        ).to_dict()
    stability = summary["stability"]
    assert stability["compared"] == 3 and stability["changed"] == 1
    assert stability["changed_prompts"] == ["ghz_00"] and stability["code_changed"] == 0
    assert (tmp_path / "run" / "recast" / "responses.jsonl").exists()
    assert summary["recast"]["success"] == 3


def test_credentials_check_against_loopback(release_dir: Path) -> None:
    script = FaultScript.for_release(load_release(release_dir))
    with FaultServer(script) as server:
        route = resolve_route("groq", server.base_url)
        ok = asyncio.run(
            check_provider(route, Credential("gsk-good-key-0001", "env:GROQ_API_KEY"), "test-model")
        )
        bad = asyncio.run(
            check_provider(route, Credential("invalid-key", "env:GROQ_API_KEY"), "test-model")
        )
        missing = asyncio.run(check_provider(route, Credential("gsk-good", "env:X"), "nope"))
        gemini = asyncio.run(
            check_provider(
                resolve_route("gemini", server.base_url.removesuffix("/v1") + "/v1beta"),
                Credential("k", "env:GEMINI_API_KEY"),
                "test-model",
            )
        )
    assert ok["reachable"] and ok["authenticated"] and ok["model_listed"]
    assert bad["authenticated"] is False and "invalid-key" not in json.dumps(bad)
    assert missing["model_listed"] is False
    assert gemini["model_listed"] is True
    down = asyncio.run(
        check_provider(resolve_route("local", "http://127.0.0.1:9/v1"), Credential(None, "none"))
    )
    assert down["reachable"] is False


def test_credentials_check_needs_acknowledgement() -> None:
    result = cli("--batch", "credentials", "check", "local")
    assert result.returncode == 2 and "--acknowledge-provider-contact" in result.stderr


def test_live_resume_refuses_an_unfinished_batch(release_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    cfg = dict(release_dir=release_dir, output_dir=out, provider="oracle", model="r")
    run_live_model(make_config(**cfg, limit=2))
    (out / "batch-state.json").write_text(json.dumps({"phase": "created"}))
    with pytest.raises(ResumeRefused, match="resume it with --batch-api"):
        run_live_model(make_config(**cfg, limit=2, resume=True))
