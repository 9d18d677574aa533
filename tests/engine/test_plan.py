"""The dry-run plan: validated, deterministic, and free of credentials, files and sockets."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from engine import make_config, plan_live_model_run
from engine.errors import ConfigError
from tests.conftest import ROOT, cli
from tests.helpers import tree_bytes


def test_dry_run_prints_plan_and_touches_nothing(release_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "runs" / "groq-x"
    before = tree_bytes(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.endswith(("_API_KEY", "_TOKEN"))}
    # A keyring backend that fails loudly if anything reads it in the subprocess.
    env["PYTHON_KEYRING_BACKEND"] = "keyring.backends.fail.Keyring"
    result = cli(
        "--batch",
        "run-model",
        "--release-dir",
        str(release_dir),
        "--output-dir",
        str(out),
        "--provider",
        "groq",
        "--model",
        "llama-x",
        "--limit",
        "3",
        "--dry-run",
        env=env,
    )
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    assert plan["contacts_provider"] is False
    assert plan["target_metadata_exported"] is False
    assert plan["route"]["provider"] == "groq"
    assert plan["route"]["base_url"] == "https://api.groq.com/openai/v1"
    assert plan["model"] == "llama-x"
    assert plan["selected_prompt_count"] == 3
    assert len(plan["prompt_ids_sha256"]) == 64 and len(plan["request_set_sha256"]) == 64
    assert plan["generation_contract"] == {
        "temperature": 0.0,
        "top_p": 1.0,
        "max_output_tokens": 2048,
        "max_output_field": "max_tokens",
        "seed": None,
        "extra_body": {},
        "samples_per_prompt": 1,
    }
    assert not out.exists()
    assert tree_bytes(tmp_path) == before


def test_plan_opens_no_socket(
    release_dir: Path, no_credentials: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_socket(*_a: object, **_k: object) -> None:
        raise AssertionError("a socket was opened")

    monkeypatch.setattr(socket, "socket", no_socket)
    monkeypatch.setattr(socket, "create_connection", no_socket)
    plan = plan_live_model_run(
        make_config(release_dir=release_dir, provider="openai", model="gpt-x")
    )
    assert plan["generation_contract"]["max_output_field"] == "max_completion_tokens"


def test_request_set_digest_tracks_every_setting(release_dir: Path) -> None:
    base = dict(release_dir=release_dir, provider="groq", model="m")
    digests = {
        plan_live_model_run(make_config(**base, **extra))["request_set_sha256"]
        for extra in (
            {},
            {"temperature": 0.5},
            {"omit_top_p": True},
            {"seed": 7},
            {"max_output_field": "max_completion_tokens"},
            {"extra_body": {"reasoning_effort": "low"}},
        )
    }
    assert len(digests) == 6
    again = plan_live_model_run(make_config(**base))["request_set_sha256"]
    assert again in digests


def test_selection_by_split_ids_and_limit(release_dir: Path) -> None:
    plan = plan_live_model_run(
        make_config(release_dir=release_dir, provider="oracle", model="r", split="dev")
    )
    assert plan["selected_prompt_count"] == 2
    plan = plan_live_model_run(
        make_config(
            release_dir=release_dir, provider="oracle", model="r", prompt_ids=("ghz_04", "ghz_01")
        )
    )
    assert plan["first_prompt_ids"] == ["ghz_01", "ghz_04"]  # release order, not argv order
    with pytest.raises(ConfigError, match="no prompt 'nope'"):
        plan_live_model_run(
            make_config(release_dir=release_dir, provider="oracle", model="r", prompt_ids=("nope",))
        )
    with pytest.raises(ConfigError, match="has splits dev, test"):
        plan_live_model_run(
            make_config(release_dir=release_dir, provider="oracle", model="r", split="train")
        )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--base-url", "https://user:pw@example.com/v1"], "must not carry credentials"),
        (["--base-url", "https://example.com/v1?key=abc"], "must not have a query string"),
        (["--base-url", "ftp://example.com"], "must be an http"),
        (["--header", "Authorization:Bearer x"], "looks like a credential"),
        (["--provider", "nosuch"], "unknown provider 'nosuch'"),
        (["--temperature", "9"], "temperature: must be at most 2"),
        (["--limit", "0"], "limit: must be at least 1"),
    ],
)
def test_bad_settings_are_one_clear_error(release_dir: Path, args: list[str], message: str) -> None:
    base = ["--batch", "run-model", "--release-dir", str(release_dir), "--model", "m", "--dry-run"]
    if "--provider" not in args:
        base += ["--provider", "groq"]
    result = cli(*base, *args)
    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""


def test_key_in_extra_body_is_refused(release_dir: Path, tmp_path: Path) -> None:
    for body in (
        {"api_key": "x"},
        {"provider": {"headers": {"token": "y"}}},
        {"note": "sk-abcdefghijklmnopqrstuvwxyz"},
    ):
        path = tmp_path / "extra.json"
        path.write_text(json.dumps(body))
        result = cli(
            "--batch",
            "run-model",
            "--release-dir",
            str(release_dir),
            "--provider",
            "groq",
            "--model",
            "m",
            "--extra-body-json",
            str(path),
            "--dry-run",
        )
        assert result.returncode == 2 and "refused" in result.stderr, body


def test_request_bodies_carry_messages_only(release_dir: Path) -> None:
    from engine.run.plan import build_plan

    plan = build_plan(
        make_config(release_dir=release_dir, provider="github-models", model="openai/gpt-x", seed=3)
    )
    for req in plan.requests:
        assert set(req.body) == {"model", "messages", "temperature", "top_p", "max_tokens", "seed"}
        text = req.body_bytes.decode()
        assert "target_metadata" not in text and "SECRET-REFERENCE-MARKER" not in text
        assert "reference_code" not in text
    assert plan.route.headers["X-GitHub-Api-Version"] == "2022-11-28"


def test_omit_flags_drop_fields(release_dir: Path) -> None:
    from engine.run.plan import build_plan

    plan = build_plan(
        make_config(
            release_dir=release_dir,
            provider="deepseek",
            model="m",
            omit_temperature=True,
            omit_top_p=True,
            max_output_field="max_completion_tokens",
        )
    )
    body = plan.requests[0].body
    assert "temperature" not in body and "top_p" not in body
    assert body["max_completion_tokens"] == 2048 and "max_tokens" not in body


def _dry(release_dir: Path, out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return cli(
        "--batch",
        "run-model",
        "--release-dir",
        str(release_dir),
        "--output-dir",
        str(out),
        "--provider",
        "oracle",
        "--limit",
        "3",
        "--dry-run",
        *extra,
    )


def test_dry_run_says_what_the_run_would_do_with_its_directory(
    release_dir: Path, tmp_path: Path
) -> None:
    from engine.run.live import run_live_model

    out = tmp_path / "runs" / "r"
    result = _dry(release_dir, out)
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    assert plan["output"] == {"action": "create", "would_send": 3}
    # No --no-auth was given: the oracle needs no key because it answers in-process.
    assert plan["credential"] == "none (in-process oracle)"
    assert not out.exists()

    run_live_model(
        make_config(
            release_dir=release_dir, output_dir=out, provider="oracle", model="reference", limit=3
        )
    )
    before = tree_bytes(out)
    # Without --resume the real run refuses a non-empty directory: so does its plan.
    result = _dry(release_dir, out)
    assert result.returncode == 2, result.stdout
    assert "is not empty: pass --resume" in result.stderr and "Traceback" not in result.stderr
    assert json.loads(result.stdout)["output"]["action"] == "refused"
    # With --resume: nothing left to send.
    result = _dry(release_dir, out, "--resume")
    assert result.returncode == 0, result.stderr
    output = json.loads(result.stdout)["output"]
    assert output["action"] == "resume" and output["would_send"] == 0
    assert output["states"] == {"success": 3, "error": 0, "pending": 0, "uncertain": 0}
    # --resume with another model: refused, as the real run refuses it.
    result = _dry(release_dir, out, "--resume", "--model", "another")
    assert result.returncode == 2
    assert "the model differs" in result.stderr
    assert tree_bytes(out) == before


def test_dry_run_into_a_closed_pipe_ends_quietly(release_dir: Path) -> None:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pqid_tui",
            "--batch",
            "run-model",
            "--release-dir",
            str(release_dir),
            "--provider",
            "oracle",
            "--dry-run",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # `| head -0`: the reader is gone before the plan is printed
    with proc.stderr:
        err = proc.stderr.read().decode()
    proc.wait(timeout=60)
    assert "Traceback" not in err and "BrokenPipe" not in err, err
    assert proc.returncode == 141


def test_a_config_error_carries_its_fields_in_plain_words(release_dir: Path) -> None:
    from engine.errors import ConfigError

    with pytest.raises(ConfigError) as caught:
        make_config(
            release_dir=release_dir,
            provider="groq",
            model="",
            limit=0,
            temperature=5,
            concurrency="many",
        )
    fields = caught.value.fields
    assert fields == {
        "model": "required",
        "limit": "must be at least 1",
        "temperature": "must be at most 2",
        "concurrency": "must be a whole number",
    }, fields
    assert "Input should" not in str(caught.value) and "String should" not in str(caught.value)
    from engine.providers.routes import check_base_url

    with pytest.raises(ConfigError) as caught:
        check_base_url("https://user:pw@example.com/v1")
    assert str(caught.value).startswith("--base-url must not carry credentials")
    assert list(caught.value.fields) == ["base_url"]
    assert "--" not in caught.value.fields["base_url"]
