"""New run screen: the live dry-run plan, errors beside fields, acknowledgement, resume, start."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from textual.widgets import Button, Checkbox, Input, Select, Static

from engine.rundir.records import RunDir
from pqid_tui.app import PqidApp, make_app
from pqid_tui.screens.new_run import NewRunScreen
from tests.app.test_app_support import SIZE, FakeReplayService, uncertain_run_app
from tests.helpers import write_release


def text_of(screen: Any, selector: str) -> str:
    return str(screen.query_one(selector, Static).render())


async def open_form(app: PqidApp, pilot: Any) -> NewRunScreen:
    await pilot.pause()
    await pilot.press("n")
    await pilot.pause()
    screen = app.screen
    assert isinstance(screen, NewRunScreen)
    return screen


async def set_input(pilot: Any, screen: NewRunScreen, name: str, value: str) -> None:
    screen.query_one(f"#{name}", Input).value = value
    await pilot.pause()


async def test_plan_follows_the_form_and_errors_sit_beside_fields(tmp_path: Path) -> None:
    release = write_release(tmp_path / "release", count=6)
    app = make_app(release, tmp_path / "runs", replay_service=FakeReplayService())
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_form(app, pilot)
        assert screen.plan is not None and len(screen.plan.prompts) == 6
        assert "contacts provider" in text_of(screen, "#plan")
        assert "no (in-process oracle)" in text_of(screen, "#plan")

        await set_input(pilot, screen, "limit", "2")
        assert screen.plan is not None and screen.plan.prompt_ids == ("ghz_00", "ghz_01")
        screen.query_one("#split", Select).value = "dev"
        await pilot.pause()
        assert screen.plan is not None and screen.plan.prompt_ids == ("ghz_00", "ghz_03")

        await set_input(pilot, screen, "temperature", "5")
        assert screen.plan is None
        assert text_of(screen, "#err-temperature") == "must be at most 2"
        await set_input(pilot, screen, "max_output_tokens", "0")
        assert text_of(screen, "#err-max_output_tokens") == "must be at least 1"
        assert text_of(screen, "#err-temperature") == "must be at most 2"
        await set_input(pilot, screen, "max_output_tokens", "2048")
        assert screen.query_one("#start", Button).disabled
        await set_input(pilot, screen, "temperature", "warm")
        assert text_of(screen, "#err-temperature") == "must be a number"
        await set_input(pilot, screen, "temperature", "0.2")
        assert text_of(screen, "#err-temperature") == ""

        await set_input(pilot, screen, "extra_body", '{"api_key": "x"}')
        assert "looks like a credential" in text_of(screen, "#err-extra_body")
        await set_input(pilot, screen, "extra_body", '{"model": "x"}')
        assert "may not set model" in text_of(screen, "#err-extra_body")
        await set_input(pilot, screen, "extra_body", '{"reasoning_effort": "low"}')
        assert text_of(screen, "#err-extra_body") == ""
        assert '"reasoning_effort": "low"' in text_of(screen, "#plan")

        await set_input(pilot, screen, "prompt_ids", "ghz_00, nope")
        assert "no prompt 'nope'" in text_of(screen, "#err-prompt_ids")
        await set_input(pilot, screen, "prompt_ids", "")

        screen.query_one("#provider", Select).value = "groq"
        await pilot.pause()
        await set_input(pilot, screen, "base_url", "https://user:pw@example.com/v1")
        assert text_of(screen, "#err-base_url").startswith("must not carry credentials")
        assert "--" not in text_of(screen, "#err-base_url")  # no command-line flag in a form
        await set_input(pilot, screen, "base_url", "")
        await set_input(pilot, screen, "model", "llama")
        assert screen.plan is not None
        assert "yes: https://api.groq.com/openai/v1" in text_of(screen, "#plan")


async def test_a_provider_route_needs_the_acknowledgement(tmp_path: Path) -> None:
    release = write_release(tmp_path / "release", count=6)
    app = make_app(
        release,
        tmp_path / "runs",
        replay_service=FakeReplayService(),
        env={"GROQ_API_KEY": "gsk_test_key_value_0123456789"},
    )
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_form(app, pilot)
        screen.query_one("#provider", Select).value = "groq"
        await pilot.pause()
        assert screen.query_one("#model", Input).value == ""
        assert text_of(screen, "#err-model") == "required"
        await set_input(pilot, screen, "model", "llama")
        assert screen.plan is not None and not screen.errors
        ack = screen.query_one("#acknowledge", Checkbox)
        assert not ack.disabled and "third party" in str(ack.label)
        assert screen.query_one("#start", Button).disabled
        await pilot.press("ctrl+s")
        assert isinstance(app.screen, NewRunScreen)  # refused: nothing started
        assert not app.session.active and not (tmp_path / "runs").exists()
        ack.value = True
        await pilot.pause()
        assert not screen.query_one("#start", Button).disabled
        assert screen.plan.config.output_dir == tmp_path / "runs" / "groq-llama"


async def test_an_existing_run_offers_resume_and_explains_uncertain(tmp_path: Path) -> None:
    app, out = await uncertain_run_app(tmp_path, "oracle-oracle")
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_form(app, pilot)
        await set_input(pilot, screen, "output_dir", str(out))
        box = screen.query_one("#resume-box")
        assert box.display
        info = text_of(screen, "#resume-info")
        assert "1 uncertain" in info and "possible extra paid draw" in info
        assert "tick resume" in text_of(screen, "#err-output_dir")
        screen.query_one("#resume", Checkbox).value = True
        await pilot.pause()
        assert "retry uncertain" in text_of(screen, "#err-output_dir")
        screen.query_one("#retry_uncertain", Checkbox).value = True
        await pilot.pause()
        assert text_of(screen, "#err-output_dir") == ""
        await pilot.press("ctrl+s")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert app.session.progress is not None
        assert app.session.progress.counts["success"] == 6
        attempts = RunDir(out).read_attempts()
        assert [a["decision"] for a in attempts if a["prompt_id"] == "ghz_02"][-2:] == [
            "uncertain",
            "success",
        ]


async def test_a_non_run_directory_is_refused(tmp_path: Path) -> None:
    release = write_release(tmp_path / "release", count=6)
    app = make_app(release, tmp_path / "runs", replay_service=FakeReplayService())
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_form(app, pilot)
        await set_input(pilot, screen, "output_dir", str(tmp_path / "busy"))
        assert "not a run directory" in text_of(screen, "#err-output_dir")
        assert screen.query_one("#start", Button).disabled


@pytest.mark.parametrize("size", [(80, 40), (160, 48)])
async def test_the_acknowledgement_is_readable_in_full(
    tmp_path: Path, size: tuple[int, int]
) -> None:
    """Issue 13: the third-party acknowledgement ended mid-sentence; it must wrap, not cut."""
    app = make_app(
        write_release(tmp_path / "release", count=6),
        tmp_path / "runs",
        replay_service=FakeReplayService(),
    )
    async with app.run_test(size=size) as pilot:
        screen = await open_form(app, pilot)
        screen.query_one("#provider", Select).value = "groq"
        await pilot.pause()
        box = screen.query_one("#acknowledge", Checkbox)
        label = str(box.label)
        assert label.startswith("I acknowledge")
        drawn = " ".join(
            "".join(s.text for s in box.render_line(y)).strip() for y in range(box.region.height)
        )
        # Drawn whole and inside the screen (a one-line label wider than the form is cut
        # off by the pane even though the widget itself renders every word).
        assert "…" not in drawn and box.region.right <= size[0]
        assert " ".join(drawn.split()).endswith(label.split()[-1])


async def test_advanced_settings_are_validated_and_reach_the_config(tmp_path: Path) -> None:
    """Issue 13: backoff, timeouts, pacing, --max-new, headers and the key file in the form."""
    release = write_release(tmp_path / "release", count=6)
    key = tmp_path / "key.txt"
    key.write_text("sk-secret-value-never-shown-0123456789")
    app = make_app(release, tmp_path / "runs", replay_service=FakeReplayService())
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_form(app, pilot)
        from textual.widgets import Collapsible

        assert screen.query_one("#advanced", Collapsible).collapsed
        await set_input(pilot, screen, "request_timeout_seconds", "0")
        assert screen.plan is None
        assert text_of(screen, "#err-request_timeout_seconds") == "must be more than 0"
        assert not screen.query_one("#advanced", Collapsible).collapsed  # the error shows
        await set_input(pilot, screen, "request_timeout_seconds", "30")
        await set_input(pilot, screen, "sleep_seconds", "-1")
        assert text_of(screen, "#err-sleep_seconds") == "must be at least 0"
        await set_input(pilot, screen, "sleep_seconds", "slow")
        assert text_of(screen, "#err-sleep_seconds") == "must be a number"
        await set_input(pilot, screen, "sleep_seconds", "1.5")
        await set_input(pilot, screen, "max_new", "-2")
        assert text_of(screen, "#err-max_new") == "must be at least 0"
        await set_input(pilot, screen, "max_new", "4")
        await set_input(pilot, screen, "retry_backoff_seconds", "700")
        assert text_of(screen, "#err-retry_backoff_seconds") == "must be at most 600"
        await set_input(pilot, screen, "retry_backoff_seconds", "3")
        await set_input(pilot, screen, "max_backoff_seconds", "30")
        await set_input(pilot, screen, "max_retry_after_seconds", "90")

        await set_input(pilot, screen, "headers", "no colon")
        assert "expected Name: value" in text_of(screen, "#err-headers")
        await set_input(pilot, screen, "headers", "Authorization: Bearer x")
        assert "looks like a credential" in text_of(screen, "#err-headers")
        await set_input(pilot, screen, "headers", "X-Title: pqid; HTTP-Referer: https://x.org")

        await set_input(pilot, screen, "api_key_file", str(tmp_path / "absent.txt"))
        assert "no such file" in text_of(screen, "#err-api_key_file")
        await set_input(pilot, screen, "api_key_file", str(key))
        assert not screen.errors, screen.errors
        assert screen.plan is not None
        config = screen.plan.config
        assert (config.request_timeout_seconds, config.sleep_seconds, config.max_new) == (
            30.0,
            1.5,
            4,
        )
        assert (
            config.retry_backoff_seconds,
            config.max_backoff_seconds,
            config.max_retry_after_seconds,
        ) == (3.0, 30.0, 90.0)
        assert config.headers == {"X-Title": "pqid", "HTTP-Referer": "https://x.org"}
        assert config.api_key_file == key
        plan = text_of(screen, "#plan")
        assert "1.5 s between request starts" in plan and "30.0 s" in plan
        assert "HTTP-Referer, X-Title" in plan
        # Only the path: the key's text is on no widget and in no config field.
        assert "sk-secret" not in plan and "sk-secret" not in config.model_dump_json()
        assert all("sk-secret" not in str(w.render()) for w in screen.query(Static))
        assert all("sk-secret" not in w.value for w in screen.query(Input))


async def test_the_plan_shows_the_cost_range_or_no_price(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 13: the app's plan had no cost estimate; it shows the batch plan's range."""
    from engine.run.plan import build_plan

    prices = tmp_path / "prices.json"
    prices.write_text('{"_source": "test table", "llama": {"input": 1.0, "output": 2.0}}')
    monkeypatch.setenv("PQID_TUI_PRICES", str(prices))
    release = write_release(tmp_path / "release", count=6)
    app = make_app(release, tmp_path / "runs", replay_service=FakeReplayService())
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_form(app, pilot)
        assert "estimated cost" in text_of(screen, "#plan")
        assert "oracle: no provider" in text_of(screen, "#plan")
        screen.query_one("#provider", Select).value = "groq"
        await pilot.pause()
        await set_input(pilot, screen, "model", "llama")
        assert screen.plan is not None
        cost = build_plan(screen.plan.config).cost_estimate()
        assert cost["usd_high"] > cost["usd_low"] > 0
        assert f"${cost['usd_low']:.4f} to ${cost['usd_high']:.4f} USD" in text_of(screen, "#plan")
        await set_input(pilot, screen, "model", "unpriced-model")
        assert "no price for unpriced-model" in text_of(screen, "#plan")
