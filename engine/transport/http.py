"""How the live runner puts a request on the wire and gets the whole answer back.

Measured against a loopback provider (`python -m tests.bench.live`), the client shape decides
the runner's speed. One `httpx.AsyncClient` holding 64 connections spent 7-15 ms of CPU per
request, most of it in its pool's bookkeeping (every request scans every connection) and in
the anyio socket layer below it; a pool per worker over plain asyncio streams still spent
0.75-0.9 ms in Python HTTP parsing. aiohttp, whose HTTP parser is compiled, spent about
0.3 ms. So requests to a real endpoint go through one aiohttp session per run. Anything that
stands in for the network in tests and in the oracle route stays an
`httpx.AsyncBaseTransport` (`MockTransport`, `OracleTransport`): `TransportSender` drives it
with the same request and hands back the same `WireResponse`.

Either sender raises `SendTimeout` when no complete answer arrives in time and `SendFailed`
for every other failure to get one (refused, reset, truncated, not HTTP).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import httpx

from engine.errors import SendFailed, SendTimeout

if TYPE_CHECKING:
    import aiohttp


@dataclass(frozen=True, slots=True)
class WireResponse:
    status: int
    headers: dict[str, str]  # names in lower case
    body: bytes


class Sender(Protocol):
    async def post(self, url: str, body: bytes, headers: dict[str, str]) -> WireResponse: ...

    async def aclose(self) -> None: ...


def _lower(items: Any) -> dict[str, str]:
    headers: dict[str, str] = {}
    for key, value in items:
        key = key.lower()
        headers[key] = f"{headers[key]}, {value}" if key in headers else value
    return headers


class NetworkSender:
    """Real endpoints: one aiohttp session, at most `connections` open connections, no
    redirects followed, no cookies kept, no proxy or credentials taken from the environment."""

    def __init__(
        self, *, connections: int, timeout_seconds: float, connect_timeout_seconds: float
    ) -> None:
        import aiohttp  # noqa: F401 - now, not on the first request (it takes ~0.2 s)

        self._connections = connections
        self._timeout_seconds = timeout_seconds
        self._connect_timeout = connect_timeout_seconds
        self._session: aiohttp.ClientSession | None = None

    def _open(self) -> aiohttp.ClientSession:
        import aiohttp

        connector = aiohttp.TCPConnector(
            limit=self._connections, limit_per_host=0, keepalive_timeout=30.0
        )
        timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=self._connect_timeout, sock_read=self._timeout_seconds
        )
        return aiohttp.ClientSession(
            connector=connector,
            timeout=timeout,
            trust_env=False,
            cookie_jar=aiohttp.DummyCookieJar(),
            auto_decompress=True,
        )

    async def post(self, url: str, body: bytes, headers: dict[str, str]) -> WireResponse:
        import aiohttp

        if self._session is None:
            self._session = self._open()
        try:
            async with self._session.post(
                url, data=body, headers=headers, allow_redirects=False
            ) as response:
                data = await response.read()
                return WireResponse(response.status, _lower(response.headers.items()), data)
        except (asyncio.TimeoutError, aiohttp.ServerTimeoutError) as exc:
            raise SendTimeout(exc.__class__.__name__) from exc
        except (aiohttp.ClientError, OSError, ValueError) as exc:
            detail = str(exc) or exc.__class__.__name__
            raise SendFailed(f"{exc.__class__.__name__}: {detail}") from exc

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


class TransportSender:
    """An `httpx.AsyncBaseTransport` in place of the network (tests, the oracle route)."""

    def __init__(
        self,
        transport: httpx.AsyncBaseTransport,
        *,
        timeout_seconds: float,
        connect_timeout_seconds: float,
    ) -> None:
        self._transport = transport
        self._timeout = httpx.Timeout(timeout_seconds, connect=connect_timeout_seconds).as_dict()

    async def post(self, url: str, body: bytes, headers: dict[str, str]) -> WireResponse:
        request = httpx.Request(
            "POST", url, content=body, headers=headers, extensions={"timeout": self._timeout}
        )
        try:
            response = await self._transport.handle_async_request(request)
            try:
                data = await response.aread()
            finally:
                await response.aclose()
        except httpx.TimeoutException as exc:
            raise SendTimeout(exc.__class__.__name__) from exc
        except httpx.HTTPError as exc:
            raise SendFailed(f"{exc.__class__.__name__}: {exc or 'connection failed'}") from exc
        return WireResponse(response.status_code, _lower(response.headers.items()), data)

    async def aclose(self) -> None:
        return None


__all__ = [
    "NetworkSender",
    "SendFailed",
    "SendTimeout",
    "Sender",
    "TransportSender",
    "WireResponse",
]
