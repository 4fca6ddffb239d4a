"""Provider configurations: which providers an application is linked to, with sealed credentials."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

import asyncpg

from payorch.storage.database import Connection
from payorch.storage.database_thread import on_database_thread
from payorch.storage.nodes import LIVE_NODES
from payorch.storage.pages import read_page
from payorch.values.errors import ChangeInProgress, NotFound, ProviderAlreadyLinked
from payorch.values.pagination import PageRequest


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


# A link or key change claims its configuration while it talks to the provider. Another may start
# as soon as the node that claimed it is gone (`storage.nodes`), or, as the last resort for a node
# alive but wedged, after this long: more than a link's provider calls take (each bounded by its
# provider's timeout), so a live change's claim is never taken.
BUSY_S = 60
# `{now}`: the statement's parameter holding the time.
_ABANDONED = "(busy_until < {now} OR coalesce(busy_owner <> ALL(" + LIVE_NODES + "), false))"


@on_database_thread
async def begin_link(
    conn: Connection,
    *,
    application_id: uuid.UUID,
    provider: str,
    payment_methods: list[str],
    credentials: bytes,
    key_fingerprint: str,
    owner: int | None,
    now: datetime,
) -> None:
    """Claim the link for the node `owner` before talking to the provider, so two concurrent links
    cannot both register an endpoint. `ProviderAlreadyLinked` when the application is linked (or
    being linked) already. The configuration takes no part in routing until `finish_change` stores
    its event secret."""
    # A link whose process died while talking to the provider is abandoned.
    await conn.execute(
        f"""DELETE FROM provider_configs WHERE application_id = $1 AND provider = $2
            AND webhook_secret IS NULL AND {_ABANDONED.format(now="$3")}""",
        application_id,
        provider,
        now,
    )
    try:
        await conn.execute(
            """INSERT INTO provider_configs (application_id, provider, payment_methods, credentials,
                   key_fingerprint, busy_until, busy_owner, created_at, updated_at)
               VALUES ($1, $2, $3, $4, $5, $8::timestamptz + make_interval(secs => $6), $7, $8, $8)""",
            application_id,
            provider,
            payment_methods,
            credentials,
            key_fingerprint,
            float(BUSY_S),
            owner,
            now,
        )
    except asyncpg.UniqueViolationError:
        raise ProviderAlreadyLinked(f"provider {provider!r} is already linked to this application") from None


@on_database_thread
async def abandon_link(conn: Connection, application_id: uuid.UUID, provider: str) -> None:
    """Undo `begin_link` after the provider refused or failed."""
    await conn.execute(
        "DELETE FROM provider_configs WHERE application_id = $1 AND provider = $2 AND webhook_secret IS NULL",
        application_id,
        provider,
    )


@on_database_thread
async def begin_key_change(
    conn: Connection, application_id: uuid.UUID, provider: str, owner: int | None, *, now: datetime
) -> None:
    """Claim the configuration for a key change by the node `owner`; `ChangeInProgress` while
    another change runs."""
    claimed = await conn.fetchval(
        f"""UPDATE provider_configs
            SET busy_until = $5::timestamptz + make_interval(secs => $3), busy_owner = $4
            WHERE application_id = $1 AND provider = $2 AND webhook_secret IS NOT NULL
              AND (busy_until IS NULL OR {_ABANDONED.format(now="$5")})
            RETURNING provider""",
        application_id,
        provider,
        float(BUSY_S),
        owner,
        now,
    )
    if claimed is None:
        if await get_provider_config(conn, application_id, provider) is None:
            raise NotFound("provider configuration not found", missing="provider configuration")
        raise ChangeInProgress("another change of this provider configuration is in progress: retry shortly")


@on_database_thread
async def end_key_change(conn: Connection, application_id: uuid.UUID, provider: str) -> None:
    """Release the claim of a key change that did not happen."""
    await conn.execute(
        """UPDATE provider_configs SET busy_until = NULL, busy_owner = NULL
           WHERE application_id = $1 AND provider = $2""",
        application_id,
        provider,
    )


@on_database_thread
async def get_provider_config(
    conn: Connection, application_id: uuid.UUID, provider: str
) -> ProviderConfig | None:
    row = await conn.fetchrow(
        f"SELECT {_COLUMNS} FROM provider_configs WHERE application_id = $1 AND provider = $2",
        application_id,
        provider,
    )
    return _config(row) if row else None


@on_database_thread
async def list_provider_configs(
    conn: Connection, application_id: uuid.UUID, page: PageRequest
) -> tuple[list[ProviderConfig], int]:
    return await read_page(
        conn,
        page,
        columns=_COLUMNS,
        rows_from="provider_configs WHERE application_id = $1",
        args=[application_id],
        order_by="created_at DESC, provider DESC",
        item=_config,
    )


@on_database_thread
async def active_provider_configs(conn: Connection, application_id: uuid.UUID) -> list[ProviderConfig]:
    rows = await conn.fetch(
        f"""SELECT {_COLUMNS} FROM provider_configs
            WHERE application_id = $1 AND is_active AND webhook_secret IS NOT NULL ORDER BY provider""",
        application_id,
    )
    return [_config(row) for row in rows]


@on_database_thread
async def finish_change(
    conn: Connection,
    *,
    application_id: uuid.UUID,
    provider: str,
    credentials: bytes,
    key_fingerprint: str,
    webhook_reference: str,
    webhook_secret: bytes,
    now: datetime,
) -> ProviderConfig:
    """Store what the provider answered (credentials, event endpoint and its secret) and release."""
    row = await conn.fetchrow(
        f"""UPDATE provider_configs SET credentials = $3, key_fingerprint = $4, webhook_reference = $5,
               webhook_secret = $6, busy_until = NULL, busy_owner = NULL, updated_at = $7
           WHERE application_id = $1 AND provider = $2 RETURNING {_COLUMNS}""",
        application_id,
        provider,
        credentials,
        key_fingerprint,
        webhook_reference,
        webhook_secret,
        now,
    )
    if row is None:
        raise NotFound("provider configuration not found", missing="provider configuration")
    return _config(row)


@on_database_thread
async def set_payment_methods(
    conn: Connection, application_id: uuid.UUID, provider: str, payment_methods: list[str], *, now: datetime
) -> ProviderConfig:
    row = await conn.fetchrow(
        f"""UPDATE provider_configs SET payment_methods = $3, updated_at = $4
            WHERE application_id = $1 AND provider = $2 RETURNING {_COLUMNS}""",
        application_id,
        provider,
        payment_methods,
        now,
    )
    if row is None:
        raise NotFound("provider configuration not found", missing="provider configuration")
    return _config(row)
