"""The client address behind reverse proxies (`server.trusted_proxy_hops`), seen through the
per-address login limit: the app is served over ASGI as hypercorn serves it, from a proxy at
10.0.0.1 that appends the client's address to `X-Forwarded-For`."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import httpx
import pytest

from payorch.config import LimitSettings, Settings
from payorch.runtime import open_runtime
from payorch.service import client_address_from_proxies
from payorch.storage.database import Database
from tests.helpers import PASSWORD, Client, new_merchant

LOGINS = 2
PROXY = ("10.0.0.1", 44321)


@asynccontextmanager
async def _served(settings: Settings, db: Database, hops: int) -> AsyncIterator[httpx.AsyncClient]:
    limits = LimitSettings(login_per_minute=LOGINS, login_refusal_hold_s=0)  # refused at once, not held
    small = settings.model_copy(update={"limits": limits})
    async with open_runtime(small, db) as runtime:
        app = client_address_from_proxies(runtime.app, hops)  # type: ignore[arg-type]  # ASGI typing differs
        transport = httpx.ASGITransport(app=app, client=PROXY)  # type: ignore[arg-type]
        async with httpx.AsyncClient(transport=transport, base_url="http://payorch.test") as http:
            yield http


def _login(http: httpx.AsyncClient, email: str) -> Callable[[str], Awaitable[int]]:
    async def attempt(forwarded_for: str) -> int:
        response = await http.post(
            "/api/v1/auth/login",
            json={"email": email, "password": PASSWORD + "x"},
            headers={"X-Forwarded-For": forwarded_for} if forwarded_for else {},
        )
        return response.status_code

    return attempt


async def test_behind_one_trusted_proxy_each_forwarded_client_has_its_own_login_bucket(
    client: Client, db: Database, settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    merchant = await new_merchant(client, db, settings)
    caplog.set_level(logging.INFO, logger="payorch.access")
    async with _served(settings, db, hops=1) as http:
        attempt = _login(http, merchant.email)
        assert [await attempt("192.0.2.1") for _ in range(LOGINS + 1)] == [401] * LOGINS + [429]
        assert await attempt("192.0.2.2") == 401
    logged = [getattr(r, "remoteAddr", None) for r in caplog.records if r.name == "payorch.access"]
    assert logged[-(LOGINS + 2) :] == ["192.0.2.1"] * (LOGINS + 1) + ["192.0.2.2"]


async def test_what_a_client_forges_in_front_of_the_proxys_entry_is_ignored(
    client: Client, db: Database, settings: Settings
) -> None:
    merchant = await new_merchant(client, db, settings)
    async with _served(settings, db, hops=1) as http:
        attempt = _login(http, merchant.email)
        statuses = [await attempt(f"198.51.100.{n}, 192.0.2.7") for n in range(LOGINS + 1)]
        assert statuses == [401] * LOGINS + [429]


async def test_without_trusted_proxies_forwarded_headers_change_nothing(
    client: Client, db: Database, settings: Settings
) -> None:
    merchant = await new_merchant(client, db, settings)
    async with _served(settings, db, hops=0) as http:
        attempt = _login(http, merchant.email)
        statuses = [await attempt(f"192.0.2.{n}") for n in range(LOGINS + 1)]
        assert statuses == [401] * LOGINS + [429]  # every attempt came from the peer, 10.0.0.1
