"""Applications and their API keys."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import asyncpg

from payorch.storage.application_changes import notify_application_changed
from payorch.storage.database import Connection
from payorch.storage.database_thread import on_database_thread
from payorch.storage.pages import items_of, read_page
from payorch.values.errors import LimitReached, NotFound, StatusUnchanged
from payorch.values.pagination import PageRequest

# Whether an API key still authenticates: the interface's `status` of a key, which storage derives
# from `revoked_at`.
ApiKeyStatus = Literal["active", "revoked"]


@dataclass(frozen=True)
class Application:
    id: uuid.UUID
    merchant_id: uuid.UUID
    name: str
    description: dict[str, Any] | None
    is_enabled: bool
    created_at: datetime


@dataclass(frozen=True)
class ApiKey:
    id: uuid.UUID
    application_id: uuid.UUID
    key_prefix: str
    description: str
    created_at: datetime
    revoked_at: datetime | None

    @property
    def status(self) -> ApiKeyStatus:
        return "revoked" if self.revoked_at else "active"


@dataclass(frozen=True)
class ApiKeyOwner:
    """What an API key authenticates as: one application of one merchant."""

    key_id: uuid.UUID
    application_id: uuid.UUID
    merchant_id: uuid.UUID
    application_enabled: bool


_APPLICATION_COLUMNS = "id, merchant_id, name, description, is_enabled, created_at"
_API_KEY_COLUMNS = "id, application_id, key_prefix, description, created_at, revoked_at"


def _application(row: asyncpg.Record) -> Application:
    return Application(**dict(row.items()))


def _api_key(row: asyncpg.Record) -> ApiKey:
    return ApiKey(**dict(row.items()))


@on_database_thread
async def create_application(
    conn: Connection,
    *,
    merchant_id: uuid.UUID,
    name: str,
    description: dict[str, Any] | None,
    most: int,
) -> Application:
    """A new application of the merchant; `LimitReached` when it already has `most` (counted under
    a lock of the merchant's row, so two creates at once cannot both pass). Run in a transaction."""
    await conn.execute("SELECT 1 FROM merchants WHERE id = $1 FOR NO KEY UPDATE", merchant_id)
    held = await conn.fetchval("SELECT count(*) FROM applications WHERE merchant_id = $1", merchant_id)
    if held >= most:
        raise LimitReached(
            f"this merchant has {held} applications, the most it may have ({most}); "
            "ask the operator to raise the limit"
        )
    row = await conn.fetchrow(
        f"""INSERT INTO applications (id, merchant_id, name, description)
            VALUES ($1, $2, $3, $4) RETURNING {_APPLICATION_COLUMNS}""",
        uuid.uuid4(),
        merchant_id,
        name,
        description,
    )
    return _application(row)


@on_database_thread
async def get_application(conn: Connection, application_id: uuid.UUID) -> Application | None:
    row = await conn.fetchrow(
        f"SELECT {_APPLICATION_COLUMNS} FROM applications WHERE id = $1", application_id
    )
    return _application(row) if row else None


@on_database_thread
async def list_applications(
    conn: Connection, merchant_id: uuid.UUID, page: PageRequest
) -> tuple[list[Application], int]:
    return await read_page(
        conn,
        page,
        columns=_APPLICATION_COLUMNS,
        rows_from="applications WHERE merchant_id = $1",
        args=[merchant_id],
        order_by="created_at DESC, id DESC",
        item=_application,
    )


@on_database_thread
async def set_application_enabled(
    conn: Connection, application_id: uuid.UUID, is_enabled: bool, *, now: datetime
) -> Application:
    """Set `isEnabled`; `StatusUnchanged` when it already has that value."""
    current = await conn.fetchval(
        "SELECT is_enabled FROM applications WHERE id = $1 FOR UPDATE", application_id
    )
    if current is None:
        raise NotFound("application not found", missing="application")
    if current == is_enabled:
        state = "enabled" if is_enabled else "disabled"
        raise StatusUnchanged(f"application is already {state}")
    row = await conn.fetchrow(
        f"""UPDATE applications SET is_enabled = $2, updated_at = $3 WHERE id = $1
            RETURNING {_APPLICATION_COLUMNS}""",
        application_id,
        is_enabled,
        now,
    )
    await notify_application_changed(conn, application_id)
    return _application(row)


@on_database_thread
async def create_api_key(
    conn: Connection,
    *,
    application_id: uuid.UUID,
    key_hash: bytes,
    key_prefix: str,
    description: str,
    most_active: int,
) -> ApiKey:
    """A new active key of the application; `LimitReached` when it already has `most_active` keys
    not revoked (counted under a lock of the application's row, which session inserts do not wait
    for). Every process hears of it on commit, and forgets the unknown keys it remembered. Run in a
    transaction."""
    await conn.execute("SELECT 1 FROM applications WHERE id = $1 FOR NO KEY UPDATE", application_id)
    active = await conn.fetchval(
        "SELECT count(*) FROM api_keys WHERE application_id = $1 AND revoked_at IS NULL", application_id
    )
    if active >= most_active:
        raise LimitReached(
            f"this application has {active} active API keys, the most it may have ({most_active}); "
            "revoke one first"
        )
    row = await conn.fetchrow(
        f"""INSERT INTO api_keys (id, application_id, key_hash, key_prefix, description)
            VALUES ($1, $2, $3, $4, $5) RETURNING {_API_KEY_COLUMNS}""",
        uuid.uuid4(),
        application_id,
        key_hash,
        key_prefix,
        description,
    )
    await notify_application_changed(conn, application_id)
    return _api_key(row)


@on_database_thread
async def list_api_keys(
    conn: Connection, application_id: uuid.UUID, page: PageRequest
) -> tuple[list[ApiKey], int]:
    return await read_page(
        conn,
        page,
        columns=_API_KEY_COLUMNS,
        rows_from="api_keys WHERE application_id = $1",
        args=[application_id],
        order_by="created_at DESC, id DESC",
        item=_api_key,
    )


_API_KEYS_OF_APPLICATIONS = f"""
    SELECT {_API_KEY_COLUMNS} FROM api_keys WHERE application_id = ANY($1::uuid[])
    ORDER BY created_at DESC, id DESC"""


@on_database_thread
async def api_keys_of_applications(
    conn: Connection, application_ids: list[uuid.UUID]
) -> dict[uuid.UUID, list[ApiKey]]:
    """Every key of each application, newest first, for `include=apiKeys`."""
    return await items_of(
        conn, _API_KEYS_OF_APPLICATIONS, application_ids, owner="application_id", item=_api_key
    )


@on_database_thread
async def revoke_api_key(
    conn: Connection, application_id: uuid.UUID, key_id: uuid.UUID, *, now: datetime
) -> None:
    """Revoke the key at once; revoking a revoked key again is accepted and changes nothing."""
    found = await conn.fetchval(
        """UPDATE api_keys SET revoked_at = coalesce(revoked_at, $3)
           WHERE id = $1 AND application_id = $2 RETURNING id""",
        key_id,
        application_id,
        now,
    )
    if found is None:
        raise NotFound("API key not found", missing="API key")
    await notify_application_changed(conn, application_id)


@on_database_thread
async def find_api_key_owner(conn: Connection, key_hash: bytes) -> ApiKeyOwner | None:
    """The application an active key belongs to; None for an unknown or revoked key."""
    row = await conn.fetchrow(
        """SELECT k.id AS key_id, k.application_id, a.merchant_id, a.is_enabled AS application_enabled
           FROM api_keys k JOIN applications a ON a.id = k.application_id
           WHERE k.key_hash = $1 AND k.revoked_at IS NULL""",
        key_hash,
    )
    return ApiKeyOwner(**dict(row.items())) if row else None
