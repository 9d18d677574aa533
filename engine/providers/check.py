"""One cheap authenticated call to a provider: reachable? key accepted? model listed?"""

from __future__ import annotations

from typing import Any

import httpx

from engine import __version__
from engine.providers.adapters import adapter_for
from engine.providers.credentials import Credential
from engine.providers.routes import Route

GITHUB_CATALOG = "https://models.github.ai/catalog/models"


def models_url(route: Route) -> str:
    if route.adapter == "anthropic-messages":
        return f"{route.base_url}/v1/models?limit=1000"
    if route.adapter == "gemini-generate":
        return f"{route.base_url}/models?pageSize=1000"
    if route.name == "github-models" and route.base_url.startswith("https://models.github.ai"):
        return GITHUB_CATALOG
    return f"{route.base_url}/models"


def _model_ids(payload: Any) -> list[str]:
    items: Any = payload
    if isinstance(payload, dict):
        items = payload.get("data", payload.get("models", []))
    ids = []
    for item in items if isinstance(items, list) else []:
        if isinstance(item, dict):
            name = item.get("id") or item.get("name")
            if isinstance(name, str):
                ids.append(name.removeprefix("models/"))
    return ids


async def check_provider(
    route: Route,
    credential: Credential,
    model: str | None = None,
    *,
    transport: httpx.AsyncBaseTransport | None = None,
    timeout: float = 20.0,
) -> dict[str, Any]:
    """Call the provider's model list once; the report never contains the key."""
    headers = {
        "User-Agent": f"pqid-tui/{__version__}",
        **route.headers,
        **adapter_for(route).auth_headers(route, credential.secret),
    }
    url = models_url(route)
    report: dict[str, Any] = {
        "route": route.name,
        "url": url.split("?", 1)[0],
        "credential_source": credential.source,
        "model": model,
    }
    try:
        async with httpx.AsyncClient(
            transport=transport, timeout=timeout, trust_env=False
        ) as client:
            response = await client.get(url, headers=headers)
    except httpx.HTTPError as exc:
        report.update(
            reachable=False,
            authenticated=None,
            model_listed=None,
            error=f"{exc.__class__.__name__}: cannot reach {report['url']}",
        )
        return report
    report.update(reachable=True, status=response.status_code)
    if response.status_code in (401, 403):
        report.update(
            authenticated=False,
            model_listed=None,
            error=f"HTTP {response.status_code}: the key was refused",
        )
        return report
    if response.status_code >= 400:
        report.update(
            authenticated=None,
            model_listed=None,
            error=f"HTTP {response.status_code} from the model list",
        )
        return report
    try:
        ids = _model_ids(response.json())
    except ValueError:
        ids = []
    report.update(authenticated=True, models_listed=len(ids))
    if model is not None:
        short = model.split(":", 1)[0] if route.name == "hugging-face" else model
        report["model_listed"] = short in ids or short.removeprefix("models/") in ids
    if credential.secret:
        # Providers sometimes echo a key in an error; nothing of it leaves this function.
        for key, value in list(report.items()):
            if isinstance(value, str) and credential.secret in value:
                report[key] = value.replace(credential.secret, "[REDACTED]")
    return report
