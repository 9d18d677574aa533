"""Credentials: resolution order, a real Secret Service keyring, and a canary key that must
never appear in any file, stdout or stderr."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from engine.errors import CredentialError
from engine.providers.credentials import (
    describe_source,
    keyring_delete,
    keyring_set,
    resolve_credential,
)
from engine.providers.routes import resolve_route
from engine.release import load_release
from tests.conftest import cli
from tests.fakes.faults import FaultScript, FaultServer

CANARY = "sk-canary-9f3b2c7d1e8a4f6b0c2d5e7a9b1c3d5f"


def test_resolution_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import keyring

    monkeypatch.setattr(keyring, "get_password", lambda s, u: "from-keyring-value")
    route = resolve_route("groq")
    key_file = tmp_path / "key.txt"
    key_file.write_text("from-file-value\n")
    env = {"GROQ_API_KEY": "from-env-value"}
    assert resolve_credential(route, key_file, env=env).source == "key-file"
    assert resolve_credential(route, key_file, env=env).secret == "from-file-value"
    assert resolve_credential(route, None, env=env).source == "env:GROQ_API_KEY"
    assert resolve_credential(route, None, env={}).source == "keyring"
    assert resolve_credential(route, None, env={}, no_auth=True).source == "none"
    assert resolve_credential(resolve_route("local"), None, env={}).source == "none"
    assert "from-file-value" not in repr(resolve_credential(route, key_file, env=env))


def test_bad_key_files(tmp_path: Path) -> None:
    route = resolve_route("groq")
    with pytest.raises(CredentialError, match="no such file"):
        resolve_credential(route, tmp_path / "missing", env={})
    two = tmp_path / "two"
    two.write_text("a b\n")
    with pytest.raises(CredentialError, match="more than one line"):
        resolve_credential(route, two, env={})


@pytest.mark.keyring
def test_real_keyring_set_status_delete(real_keyring: dict[str, str]) -> None:
    route = resolve_route("openrouter")
    keyring_set("openrouter", "  sk-or-real-keyring-test-value\n")
    cred = resolve_credential(route, None, env={})
    assert cred.source == "keyring" and cred.secret == "sk-or-real-keyring-test-value"
    assert describe_source(route, env={}) == "keyring"
    assert keyring_delete("openrouter") is True
    assert keyring_delete("openrouter") is False
    assert describe_source(route, env={}) == "missing"


@pytest.mark.keyring
def test_batch_credentials_reads_stdin_never_argv(real_keyring: dict[str, str]) -> None:
    env = {**os.environ, **real_keyring}
    result = cli("--batch", "credentials", "set", "deepseek", env=env, input=CANARY + "\n")
    assert result.returncode == 0, result.stderr
    assert CANARY not in result.stdout + result.stderr
    status = json.loads(cli("--batch", "credentials", "status", "deepseek", env=env).stdout)
    assert status["deepseek"]["would_use"] == "keyring"
    # A key given on the command line is not an accepted form at all.
    bad = cli("--batch", "credentials", "set", "deepseek", CANARY, env=env)
    assert bad.returncode == 2 and CANARY not in bad.stderr
    gone = cli("--batch", "credentials", "delete", "deepseek", env=env)
    assert json.loads(gone.stdout) == {"route": "deepseek", "deleted": True}


def _scan(paths: list[Path], *texts: str) -> list[str]:
    hits = [f"text #{i}" for i, t in enumerate(texts) if CANARY in t]
    for root in paths:
        for path in root.rglob("*") if root.is_dir() else [root]:
            if path.is_file() and CANARY.encode() in path.read_bytes():
                hits.append(str(path))
    return hits


@pytest.mark.keyring
@pytest.mark.parametrize("source", ["keyring", "env", "key-file"])
def test_canary_key_never_leaves_memory(
    real_keyring: dict[str, str], release_dir: Path, tmp_path: Path, source: str
) -> None:
    """The key reaches the server's Authorization header and nowhere else: not the run
    directory (even when the provider echoes it back in an error), stdout or stderr."""
    release = load_release(release_dir)
    env = {k: v for k, v in os.environ.items() if k != "DEEPSEEK_API_KEY"}
    env.update(real_keyring)
    # Private config, data, cache and state directories: scanned afterwards.
    xdg = tmp_path / "xdg"
    for name in ("CONFIG", "DATA", "CACHE", "STATE"):
        env[f"XDG_{name}_HOME"] = str(xdg / name.lower())
    extra: list[str] = []
    if source == "keyring":
        assert (
            cli("--batch", "credentials", "set", "deepseek", env=env, input=CANARY).returncode == 0
        )
    elif source == "env":
        env["DEEPSEEK_API_KEY"] = CANARY
    else:
        key_file = tmp_path / "secrets" / "deepseek.txt"
        key_file.parent.mkdir()
        key_file.write_text(CANARY + "\n")
        extra = ["--api-key-file", str(key_file)]
    script = FaultScript.for_release(release, {"ghz_00": ["401-echo"], "ghz_01": ["500-html"]})
    out = tmp_path / "run"
    try:
        with FaultServer(script) as server:
            result = cli(
                "--batch",
                "run-model",
                "--release-dir",
                str(release_dir),
                "--output-dir",
                str(out),
                "--provider",
                "deepseek",
                "--base-url",
                server.base_url,
                "--model",
                "m",
                "--retry-backoff-seconds",
                "0",
                "--acknowledge-third-party-prompt-export",
                *extra,
                env=env,
            )
            seen = list(server.seen)
    finally:
        cli("--batch", "credentials", "delete", "deepseek", env=env)
    assert result.returncode == 1, result.stderr  # ghz_00 ends in a terminal 401
    assert all(s.headers["authorization"] == f"Bearer {CANARY}" for s in seen)
    manifest = json.loads((out / "run-manifest.json").read_text())
    assert (
        manifest["credential_source"]
        == {"keyring": "keyring", "env": "env:DEEPSEEK_API_KEY", "key-file": "key-file"}[source]
    )
    assert str(tmp_path / "secrets") not in (out / "run-manifest.json").read_text()
    echoed = next(out.glob("raw/ghz_00.attempt-1.*")).read_text()
    assert "[REDACTED]" in echoed
    assert (
        _scan([out, xdg, Path(real_keyring["HOME"]) / "config"], result.stdout, result.stderr) == []
    )


def test_canary_through_the_library(release_dir: Path, tmp_path: Path) -> None:
    """The library path with the key in the environment mapping it is given."""
    from engine import make_config, run_live_model

    release = load_release(release_dir)
    events: list[object] = []
    script = FaultScript.for_release(release, {"ghz_00": ["401-echo"]})
    with FaultServer(script) as server:
        summary = run_live_model(
            make_config(
                release_dir=release_dir,
                output_dir=tmp_path / "run",
                provider="openrouter",
                base_url=server.base_url,
                model="m",
                acknowledge_prompt_export=True,
                limit=3,
            ),
            env={"OPENROUTER_API_KEY": CANARY},
            progress=lambda event: events.append(event),
        )
        seen = list(server.seen)
    assert all(s.headers["authorization"] == f"Bearer {CANARY}" for s in seen)
    assert summary.to_dict()["error"] == 1
    assert _scan([tmp_path / "run"], json.dumps(summary.to_dict()), repr(events)) == []


def test_an_unreadable_keyring_names_the_routes_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 13: the message said "use the environment variable" without naming it."""
    import keyring
    from keyring.errors import KeyringLocked

    from engine.errors import CredentialError
    from engine.providers.credentials import resolve_credential
    from engine.providers.routes import resolve_route

    def locked(*_a: object, **_k: object) -> None:
        raise KeyringLocked("the collection is locked")

    monkeypatch.setattr(keyring, "get_password", locked)
    with pytest.raises(CredentialError, match=r"set \$GROQ_API_KEY or pass --api-key-file"):
        resolve_credential(resolve_route("groq", None, ()), env={})
