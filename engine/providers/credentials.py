"""Where a route's credential comes from: key file, environment variable, then the OS keyring.

A key is read only when a networked run begins, never written anywhere but the OS keyring,
and only its *source class* is ever recorded.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.errors import CredentialError
from engine.providers.routes import Route

KEYRING_SERVICE = "pqid-tui"


@dataclass(frozen=True, slots=True)
class Credential:
    """A secret and the class of place it came from (the only part that is recorded)."""

    secret: str | None
    source: str  # "key-file" | "env:NAME" | "keyring" | "none"

    def __repr__(self) -> str:  # never show the secret, even in a traceback
        return f"Credential(source={self.source!r})"


def _keyring() -> tuple[Any, Any]:
    # Imported on use: a dry run or a --no-auth run never loads a keyring backend.
    import keyring
    import keyring.errors

    return keyring, keyring.errors


def _clean(secret: str, where: str) -> str:
    secret = secret.strip()
    if not secret:
        raise CredentialError(f"{where} is empty")
    if any(c.isspace() for c in secret) or not secret.isprintable():
        raise CredentialError(
            f"{where} holds more than one line or unprintable characters; it must hold only the key"
        )
    return secret


def keyring_get(route_name: str, env_var: str | None = None) -> str | None:
    keyring, errors = _keyring()
    try:
        value = keyring.get_password(KEYRING_SERVICE, route_name)
        return value if isinstance(value, str) else None
    except errors.KeyringError as exc:
        other = f"${env_var}" if env_var else "the route's environment variable"
        raise CredentialError(
            f"the OS keyring could not be read ({exc.__class__.__name__}: {exc})"
            f"; unlock it, or set {other} or pass --api-key-file"
        ) from None


def keyring_set(route_name: str, secret: str) -> None:
    keyring, errors = _keyring()
    secret = _clean(secret, "the key you entered")
    try:
        keyring.set_password(KEYRING_SERVICE, route_name, secret)
    except errors.KeyringError as exc:
        raise CredentialError(
            f"the OS keyring refused the entry ({exc.__class__.__name__}: "
            f"{exc}); is a Secret Service (gnome-keyring, KWallet) running and "
            "unlocked?"
        ) from None


def keyring_delete(route_name: str) -> bool:
    """Delete the route's keyring entry; False when there was none."""
    keyring, errors = _keyring()
    try:
        keyring.delete_password(KEYRING_SERVICE, route_name)
    except errors.PasswordDeleteError:
        return False
    except errors.KeyringError as exc:
        raise CredentialError(f"the OS keyring could not be changed ({exc})") from None
    return True


def describe_source(
    route: Route,
    api_key_file: Path | None = None,
    *,
    no_auth: bool = False,
    env: Mapping[str, str] | None = None,
    check_keyring: bool = True,
) -> str:
    """Where the credential would come from now, without reading the secret itself."""
    env = os.environ if env is None else env
    if no_auth or not route.needs_credential:
        return "none"
    if api_key_file is not None:
        return "key-file" if api_key_file.is_file() else "key-file (missing)"
    if route.credential_env and env.get(route.credential_env, "").strip():
        return f"env:{route.credential_env}"
    if check_keyring:
        try:
            if keyring_get(route.name, route.credential_env):
                return "keyring"
        except CredentialError:
            return "keyring unavailable"
    return "missing"


def resolve_credential(
    route: Route,
    api_key_file: Path | None = None,
    *,
    no_auth: bool = False,
    env: Mapping[str, str] | None = None,
) -> Credential:
    """Read the credential: --api-key-file, then the route's variable, then the keyring."""
    env = os.environ if env is None else env
    if no_auth or not route.needs_credential:
        return Credential(None, "none")
    if api_key_file is not None:
        try:
            raw = api_key_file.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise CredentialError(f"--api-key-file {api_key_file}: no such file") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise CredentialError(f"--api-key-file {api_key_file}: cannot read ({exc})") from None
        return Credential(_clean(raw, f"--api-key-file {api_key_file}"), "key-file")
    if route.credential_env:
        value = env.get(route.credential_env, "")
        if value.strip():
            return Credential(
                _clean(value, f"${route.credential_env}"), f"env:{route.credential_env}"
            )
    secret = keyring_get(route.name, route.credential_env)
    if secret:
        return Credential(_clean(secret, f"the keyring entry for {route.name}"), "keyring")
    var = f"${route.credential_env}, " if route.credential_env else ""
    raise CredentialError(
        f"no credential for route {route.name}: set {var}pass --api-key-file FILE, or store one "
        f"with `pqid-tui --batch credentials set {route.name}`; for an endpoint without "
        "authentication pass --no-auth"
    )
