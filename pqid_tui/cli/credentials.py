"""`pqid-tui --batch credentials set|delete|status ROUTE`: keyring entries, never via argv."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from engine.errors import CredentialError
from engine.providers.credentials import (
    KEYRING_SERVICE,
    describe_source,
    keyring_delete,
    keyring_set,
    resolve_credential,
)
from engine.providers.routes import PRESETS, Route, resolve_route
from pqid_tui.cli import Subcommands


def register(sub: Subcommands) -> None:
    p = sub.add_parser(
        "credentials",
        help="store, delete or locate a route's key in the OS keyring",
        description=f"Manage keys in the OS keyring (service {KEYRING_SERVICE!r}, user = route). "
        "`set` reads the key from a hidden prompt, or from stdin when stdin is not a "
        "terminal; never from the command line.",
    )
    p.add_argument("action", choices=["set", "delete", "status", "check"])
    p.add_argument("route", nargs="?", help="route name (status: all routes when omitted)")
    p.add_argument("--model", help="check: also report whether this model is listed")
    p.add_argument("--base-url", help="check: another endpoint for the route")
    p.add_argument("--api-key-file", type=Path, help="check: read the key from this file")
    p.add_argument(
        "--acknowledge-provider-contact",
        action="store_true",
        help="check: required; one authenticated request to the provider's model "
        "list (no prompt is sent)",
    )
    p.set_defaults(handler=run)


def _read_secret(route: str) -> str:
    if sys.stdin.isatty():
        import getpass

        secret = getpass.getpass(f"key for {route} (input hidden): ")
    else:
        secret = sys.stdin.read()
    if not secret.strip():
        raise CredentialError("no key was given (empty input); nothing stored")
    return secret


def run(args: argparse.Namespace) -> int:
    if args.action == "status":
        names = [args.route] if args.route else [n for n in PRESETS]
        out = {}
        for name in names:
            route = resolve_route(name)
            out[name] = {
                "credential_env": route.credential_env,
                "would_use": describe_source(route),
            }
        print(json.dumps(out, indent=2))
        return 0
    if not args.route:
        raise CredentialError(f"credentials {args.action} needs a ROUTE")
    route = resolve_route(args.route, getattr(args, "base_url", None))
    if args.action == "check":
        return _check(route, args)
    if not route.needs_credential:
        raise CredentialError(f"route {route.name} takes no credential")
    if args.action == "set":
        keyring_set(route.name, _read_secret(route.name))
        print(json.dumps({"route": route.name, "stored_in": "keyring", "service": KEYRING_SERVICE}))
        return 0
    deleted = keyring_delete(route.name)
    print(json.dumps({"route": route.name, "deleted": deleted}))
    return 0


def _check(route: Route, args: argparse.Namespace) -> int:
    import asyncio

    from engine.providers.check import check_provider

    if not args.acknowledge_provider_contact:
        raise CredentialError(
            "credentials check contacts the provider once (its model list); "
            "pass --acknowledge-provider-contact to allow it"
        )
    credential = resolve_credential(route, args.api_key_file)
    report = asyncio.run(check_provider(route, credential, args.model))
    print(json.dumps(report, indent=2))
    ok = report.get("reachable") and report.get("authenticated")
    return 0 if ok and report.get("model_listed", True) else 1
