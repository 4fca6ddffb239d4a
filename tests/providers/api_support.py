"""Building blocks for the provider tests, through payorch's own API whatever the provider: sessions,
refunds, and reading back what payorch recorded."""

from __future__ import annotations

import uuid
from typing import Any

from payorch.engine.context import account_of
from payorch.engine.provider_health import ProviderAccount
from payorch.jsonexact import loads_exact
from payorch.storage import outbox, provider_configs
from payorch.storage.database import Connection, Database
from tests.helpers import Client, Shop, create_session, eventually, post_json, session_body


async def health_account(db: Database, shop: Shop, provider: str) -> ProviderAccount:
    """The account routing health keeps for `shop`'s link to `provider`."""
    config = await db.autocommit(
        provider_configs.get_provider_config, uuid.UUID(shop.application_id), provider
    )
    assert config is not None
    return account_of(config)


async def created(client: Client, shop: Shop, key: str = "k1", **change: Any) -> dict[str, Any]:
    response = await create_session(client, shop, key, session_body(**change))
    assert response.status_code == 201, await response.get_data(as_text=True)
    body: dict[str, Any] = await response.get_json()
    return body


async def record(client: Client, shop: Shop, session_id: str) -> dict[str, Any]:
    response = await client.get(f"/api/v1/sessions/{session_id}", headers=shop.headers)
    body: dict[str, Any] = loads_exact(await response.get_data())
    return body


async def refund(client: Client, shop: Shop, session_id: str, key: str, **body: Any) -> Any:
    return await post_json(
        client, f"/api/v1/sessions/{session_id}/refunds", body, {**shop.headers, "Idempotency-Key": key}
    )


async def events(db: Database, session_id: str) -> list[dict[str, Any]]:
    return await db.autocommit(outbox.events_of_session, uuid.UUID(session_id))


async def events_seen(db: Database) -> int:
    async def count(conn: Connection) -> int:
        return int(await conn.fetchval("SELECT count(*) FROM provider_events_seen"))

    return await db.autocommit(count)


async def settled(client: Client, shop: Shop, session_id: str) -> dict[str, Any]:
    """The session once it is no longer PENDING."""

    async def done() -> dict[str, Any] | None:
        found = await record(client, shop, session_id)
        return found if found["status"] != "PENDING" else None

    return await eventually(done)
