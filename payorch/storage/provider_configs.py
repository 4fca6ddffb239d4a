"""Provider configurations: which providers an application is linked to, with sealed credentials."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

import asyncpg

from payorch.engine.errors import NotFound, ProviderAlreadyLinked
from payorch.engine.pagination import PageRequest
from payorch.storage.database import Connection


@dataclass(frozen=True)
class ProviderConfig:
    application_id: uuid.UUID
    provider: str
    is_active: bool
    payment_methods: list[str]
    credentials: bytes  # sealed
    key_fingerprint: str
    webhook_reference: str | None
    webhook_secret: bytes | None  # sealed
    created_at: datetime
    updated_at: datetime


_COLUMNS = ", ".join(ProviderConfig.__dataclass_fields__)


def _config(row: asyncpg.Record) -> ProviderConfig:
    values = dict(row.items())
    values["credentials"] = bytes(values["credentials"])
    if values["webhook_secret"] is not None:
        values["webhook_secret"] = bytes(values["webhook_secret"])
    return ProviderConfig(**values)


async def link_provider(
    conn: Connection,
    *,
    application_id: uuid.UUID,
    provider: str,
    payment_methods: list[str],
    credentials: bytes,
    key_fingerprint: str,
    webhook_reference: str,
    webhook_secret: bytes,
) -> ProviderConfig:
    """`ProviderAlreadyLinked` when the application is linked to `provider` already."""
    try:
        row = await conn.fetchrow(
            f"""INSERT INTO provider_configs (application_id, provider, payment_methods, credentials,
                    key_fingerprint, webhook_reference, webhook_secret)
                VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING {_COLUMNS}""",
            application_id,
            provider,
            payment_methods,
            credentials,
            key_fingerprint,
            webhook_reference,
            webhook_secret,
        )
    except asyncpg.UniqueViolationError:
        raise ProviderAlreadyLinked(f"provider {provider!r} is already linked to this application") from None
    return _config(row)


async def get_provider_config(
    conn: Connection, application_id: uuid.UUID, provider: str
) -> ProviderConfig | None:
    row = await conn.fetchrow(
        f"SELECT {_COLUMNS} FROM provider_configs WHERE application_id = $1 AND provider = $2",
        application_id,
        provider,
    )
    return _config(row) if row else None


async def list_provider_configs(
    conn: Connection, application_id: uuid.UUID, page: PageRequest
) -> tuple[list[ProviderConfig], int]:
    total = await conn.fetchval(
        "SELECT count(*) FROM provider_configs WHERE application_id = $1", application_id
    )
    rows = await conn.fetch(
        f"""SELECT {_COLUMNS} FROM provider_configs WHERE application_id = $1
            ORDER BY created_at DESC, provider DESC LIMIT $2 OFFSET $3""",
        application_id,
        page.limit,
        page.offset,
    )
    return [_config(row) for row in rows], int(total)


async def active_provider_configs(conn: Connection, application_id: uuid.UUID) -> list[ProviderConfig]:
    rows = await conn.fetch(
        f"SELECT {_COLUMNS} FROM provider_configs WHERE application_id = $1 AND is_active ORDER BY provider",
        application_id,
    )
    return [_config(row) for row in rows]


async def replace_credentials(
    conn: Connection,
    *,
    application_id: uuid.UUID,
    provider: str,
    credentials: bytes,
    key_fingerprint: str,
    webhook_reference: str,
    webhook_secret: bytes,
) -> None:
    updated = await conn.fetchval(
        """UPDATE provider_configs SET credentials = $3, key_fingerprint = $4, webhook_reference = $5,
               webhook_secret = $6, updated_at = now()
           WHERE application_id = $1 AND provider = $2 RETURNING provider""",
        application_id,
        provider,
        credentials,
        key_fingerprint,
        webhook_reference,
        webhook_secret,
    )
    if updated is None:
        raise NotFound("provider configuration not found")


async def set_payment_methods(
    conn: Connection, application_id: uuid.UUID, provider: str, payment_methods: list[str]
) -> ProviderConfig:
    row = await conn.fetchrow(
        f"""UPDATE provider_configs SET payment_methods = $3, updated_at = now()
            WHERE application_id = $1 AND provider = $2 RETURNING {_COLUMNS}""",
        application_id,
        provider,
        payment_methods,
    )
    if row is None:
        raise NotFound("provider configuration not found")
    return _config(row)
