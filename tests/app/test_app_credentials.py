"""Credentials screen: every route's source, keyring set through a masked input, delete."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from textual.widgets import DataTable, Input, Static

from pqid_tui.app import PqidApp, make_app
from pqid_tui.screens.credentials import CredentialsScreen
from pqid_tui.screens.dialogs import ConfirmScreen, SecretScreen
from tests.app.test_app_support import (  # noqa: F401
    SIZE,
    FakeReplayService,
    MemoryKeyring,
    memory_keyring,
)
from tests.helpers import write_release

KEY = "sk-test-0123456789abcdefghijklmnop"


def source_of(screen: CredentialsScreen, route: str) -> str:
    return str(screen.query_one("#routes", DataTable).get_cell(route, "source"))


def credentials_app(tmp_path: Path, env: dict[str, str], **options: Any) -> PqidApp:
    return make_app(
        write_release(tmp_path / "release", count=6),
        tmp_path / "runs",
        env=env,
        replay_service=FakeReplayService(),
        **options,
    )


async def open_credentials(app: PqidApp, pilot: Any, key: str | None = None) -> CredentialsScreen:
    """The credentials screen once its sources are read, opened by `key` or else directly."""
    await pilot.pause()
    if key is None:
        app.open_screen("credentials")
    else:
        await pilot.press(key)
    await app.workers.wait_for_complete()
    await pilot.pause()
    screen = app.screen
    assert isinstance(screen, CredentialsScreen)
    return screen


def select_route(screen: CredentialsScreen, route: str) -> DataTable[Any]:
    table = screen.query_one("#routes", DataTable)
    table.move_cursor(row=table.get_row_index(route))
    return table


async def test_set_and_delete_a_keyring_entry(
    tmp_path: Path,
    memory_keyring: Any,  # noqa: F811
) -> None:
    app = credentials_app(tmp_path, {"GROQ_API_KEY": "gsk_from_env_0123456789"})
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_credentials(app, pilot, "c")
        assert source_of(screen, "openai") == "missing"
        assert source_of(screen, "groq") == "env:GROQ_API_KEY"
        assert source_of(screen, "local") == "none" and source_of(screen, "oracle") == "none"

        await pilot.press("s")  # the cursor is on openai, the first route
        await pilot.pause()
        dialog = app.screen
        assert isinstance(dialog, SecretScreen)
        field = dialog.query_one("#secret", Input)
        assert field.password
        field.value = KEY
        assert KEY not in app.export_screenshot()  # masked on screen
        await pilot.press("enter")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert memory_keyring.entries == {("pqid-tui", "openai"): KEY}
        assert source_of(screen, "openai") == "keyring"
        assert KEY not in app.export_screenshot()

        await pilot.press("d")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("y")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert memory_keyring.entries == {}
        assert source_of(screen, "openai") == "missing"


async def test_routes_without_a_key_refuse_set(
    tmp_path: Path,
    memory_keyring: Any,  # noqa: F811
) -> None:
    app = credentials_app(tmp_path, {})
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_credentials(app, pilot)
        select_route(screen, "oracle")
        await pilot.press("s")
        await pilot.pause()
        assert isinstance(app.screen, CredentialsScreen)
        assert memory_keyring.entries == {}
        select_route(screen, "groq")
        await pilot.press("s")
        await pilot.pause()
        await pilot.press("escape")  # cancel the masked input
        await pilot.pause()
        assert isinstance(app.screen, CredentialsScreen) and memory_keyring.entries == {}


async def test_checking_a_key_contacts_the_provider_only_after_confirming(
    tmp_path: Path,
    memory_keyring: Any,  # noqa: F811
) -> None:
    import httpx

    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"data": [{"id": "llama"}, {"id": "qwen"}]})

    app = credentials_app(
        tmp_path,
        {"GROQ_API_KEY": "gsk_from_env_0123456789"},
        transport=httpx.MockTransport(handler),
    )
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_credentials(app, pilot)
        select_route(screen, "groq")
        await pilot.press("k")
        await pilot.pause()
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("escape")
        await pilot.pause()
        assert seen == []
        await pilot.press("k")
        await pilot.pause()
        await pilot.press("y")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert [str(r.url) for r in seen] == ["https://api.groq.com/openai/v1/models"]
        assert seen[0].headers["authorization"] == "Bearer gsk_from_env_0123456789"
        result = str(screen.query_one("#check-result", Static).render())
        assert "key accepted (env:GROQ_API_KEY)" in result and "2 models listed" in result
        assert "gsk_from_env" not in app.export_screenshot()


async def test_app_stores_a_canary_in_the_real_keyring_and_nowhere_else(
    tmp_path: Path, real_keyring: dict[str, str]
) -> None:
    """Set through the app into a real Secret Service, used by a run from the keyring: the key
    is in no screenshot, no file under the runs directory, and no output."""
    import json
    import os

    from engine.release import load_release
    from tests.conftest import cli
    from tests.fakes.faults import FaultScript, FaultServer

    canary = "sk-canary-app-5c1d9e2f7a3b4c6d8e0f1a2b"
    release = write_release(tmp_path / "release", count=3)
    runs = tmp_path / "runs"
    app = make_app(release, runs, env={}, replay_service=FakeReplayService())
    shots = []
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("c")
        await app.workers.wait_for_complete()
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, CredentialsScreen)
        select_route(screen, "openrouter")
        await pilot.press("s")
        await pilot.pause()
        dialog = app.screen
        assert isinstance(dialog, SecretScreen)
        dialog.query_one("#secret", Input).value = canary
        shots.append(app.export_screenshot())
        await pilot.press("enter")
        await app.workers.wait_for_complete()
        await pilot.pause()
        shots.append(app.export_screenshot())
        assert source_of(screen, "openrouter") == "keyring"
    env = {k: v for k, v in os.environ.items() if k != "OPENROUTER_API_KEY"}
    env.update(real_keyring)
    script = FaultScript.for_release(load_release(release), {"ghz_00": ["401-echo"]})
    try:
        with FaultServer(script) as server:
            result = cli(
                "--batch",
                "run-model",
                "--release-dir",
                str(release),
                "--output-dir",
                str(runs / "r1"),
                "--provider",
                "openrouter",
                "--base-url",
                server.base_url,
                "--model",
                "m",
                "--max-retries",
                "0",
                "--acknowledge-third-party-prompt-export",
                env=env,
            )
            seen = list(server.seen)
    finally:
        cli("--batch", "credentials", "delete", "openrouter", env=env)
    assert all(s.headers["authorization"] == f"Bearer {canary}" for s in seen)
    assert (
        json.loads((runs / "r1" / "run-manifest.json").read_text())["credential_source"]
        == "keyring"
    )
    leaks = [p for p in runs.rglob("*") if p.is_file() and canary.encode() in p.read_bytes()]
    assert leaks == []
    assert all(canary not in text for text in [*shots, result.stdout, result.stderr])


class LockedKeyring(MemoryKeyring):
    """A keyring whose every use fails, as a locked or absent Secret Service does."""

    def get_password(self, service: str, username: str) -> str | None:
        import keyring.errors

        raise keyring.errors.KeyringLocked("the collection is locked")

    def set_password(self, service: str, username: str, password: str) -> None:
        import keyring.errors

        raise keyring.errors.PasswordSetError("the collection is locked")


async def test_an_unavailable_keyring_is_said_before_asking_for_a_key(tmp_path: Path) -> None:
    """Issue 13: with the keyring unavailable, Set key opened the masked input, took the key,
    then failed in a toast; Check said "with the key from keyring unavailable" and still
    offered to contact the provider. The source column read `keyrin`."""
    import keyring

    previous = keyring.get_keyring()
    keyring.set_keyring(LockedKeyring())
    seen: list[Any] = []
    try:
        import httpx

        app = credentials_app(
            tmp_path,
            {},
            transport=httpx.MockTransport(
                lambda r: seen.append(r) or httpx.Response(200, json={"data": []})
            ),
        )
        async with app.run_test(size=SIZE) as pilot:
            screen = await open_credentials(app, pilot)
            assert source_of(screen, "groq") == "keyring unavailable"
            # Drawn in full: the column is as wide as its longest source.
            table = screen.query_one("#routes", DataTable)
            assert table.columns["source"].get_render_width(table) >= len("keyring unavailable")
            assert "keyring unavailable" in app.export_screenshot().replace("&#160;", " ")

            select_route(screen, "groq")
            await pilot.press("s")
            await pilot.pause()
            assert isinstance(app.screen, CredentialsScreen)  # no masked input opened
            messages = [n.message for n in app._notifications]
            assert any("keyring is not available" in m and "$GROQ_API_KEY" in m for m in messages)

            await pilot.press("k")
            await pilot.pause()
            assert isinstance(app.screen, CredentialsScreen)  # nothing offered to contact
            messages = [n.message for n in app._notifications]
            assert any(m.startswith("Nothing to check for groq") for m in messages)
            assert not any("key from keyring unavailable" in m for m in messages)
            assert seen == []
    finally:
        keyring.set_keyring(previous)


async def test_the_check_names_the_source_in_words(tmp_path: Path, memory_keyring: Any) -> None:  # noqa: F811
    app = credentials_app(tmp_path, {"GROQ_API_KEY": "gsk_from_env_0123456789"})
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_credentials(app, pilot)
        table = screen.query_one("#routes", DataTable)
        assert table.columns["source"].get_render_width(table) >= len("env:GROQ_API_KEY")
        select_route(screen, "groq")
        await pilot.press("k")
        await pilot.pause()
        dialog = app.screen
        assert isinstance(dialog, ConfirmScreen)
        assert "the environment variable GROQ_API_KEY" in dialog.explanation
