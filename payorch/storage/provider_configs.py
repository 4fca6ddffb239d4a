"""Provider configurations: which providers an application is linked to, with sealed credentials."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

import asyncpg

from payorch.engine.errors import ChangeInProgress, NotFound, ProviderAlreadyLinked
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


BUSY_S = 60  # longest a link or key change may talk to the provider before another may start


async def begin_link(
    conn: Connection,
    *,
    application_id: uuid.UUID,
    provider: str,
    payment_methods: list[str],
    credentials: bytes,
    key_fingerprint: str,
) -> None:
    """Claim the link before talking to the provider, so two concurrent links cannot both register
    an endpoint. `ProviderAlreadyLinked` when the application is linked (or being linked) already.
    The configuration takes no part in routing until `finish_change` stores its event secret."""
    # A link whose process died while talking to the provider is abandoned once its claim ran out.
    await conn.execute(
        """DELETE FROM provider_configs WHERE application_id = $1 AND provider = $2
           AND webhook_secret IS NULL AND busy_until < now()""",
        application_id,
        provider,
    )
    try:
        await conn.execute(
            """INSERT INTO provider_configs (application_id, provider, payment_methods, credentials,
                   key_fingerprint, busy_until)
               VALUES ($1, $2, $3, $4, $5, now() + make_interval(secs => $6))""",
            application_id,
            provider,
            payment_methods,
            credentials,
            key_fingerprint,
            float(BUSY_S),
        )
    except asyncpg.UniqueViolationError:
        raise ProviderAlreadyLinked(f"provider {provider!r} is already linked to this application") from None


async def abandon_link(conn: Connection, application_id: uuid.UUID, provider: str) -> None:
    """Undo `begin_link` after the provider refused or failed."""
    await conn.execute(
        "DELETE FROM provider_configs WHERE application_id = $1 AND provider = $2 AND webhook_secret IS NULL",
        application_id,
        provider,
    )


async def begin_key_change(conn: Connection, application_id: uuid.UUID, provider: str) -> None:
    """Claim the configuration for a key change; `ChangeInProgress` while another change runs."""
    claimed = await conn.fetchval(
        """UPDATE provider_configs SET busy_until = now() + make_interval(secs => $3)
           WHERE application_id = $1 AND provider = $2 AND webhook_secret IS NOT NULL
             AND (busy_until IS NULL OR busy_until < now())
           RETURNING provider""",
        application_id,
        provider,
        float(BUSY_S),
    )
    if claimed is None:
        if await get_provider_config(conn, application_id, provider) is None:
            raise NotFound("provider configuration not found")
        raise ChangeInProgress("another change of this provider configuration is in progress: retry shortly")


async def end_key_change(conn: Connection, application_id: uuid.UUID, provider: str) -> None:
    """Release the claim of a key change that did not happen."""
    await conn.execute(
        "UPDATE provider_configs SET busy_until = NULL WHERE application_id = $1 AND provider = $2",
        application_id,
        provider,
    )


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
        f"""SELECT {_COLUMNS} FROM provider_configs
            WHERE application_id = $1 AND is_active AND webhook_secret IS NOT NULL ORDER BY provider""",
        application_id,
    )
    return [_config(row) for row in rows]


async def finish_change(
    conn: Connection,
    *,
    application_id: uuid.UUID,
    provider: str,
    credentials: bytes,
    key_fingerprint: str,
    webhook_reference: str,
    webhook_secret: bytes,
) -> ProviderConfig:
    """Store what the provider answered (credentials, event endpoint and its secret) and release."""
    row = await conn.fetchrow(
        f"""UPDATE provider_configs SET credentials = $3, key_fingerprint = $4, webhook_reference = $5,
               webhook_secret = $6, busy_until = NULL, updated_at = now()
           WHERE application_id = $1 AND provider = $2 RETURNING {_COLUMNS}""",
        application_id,
        provider,
        credentials,
        key_fingerprint,
        webhook_reference,
        webhook_secret,
    )
    if row is None:
        raise NotFound("provider configuration not found")
    return _config(row)


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
