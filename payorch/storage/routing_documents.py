"""Routing documents: every version of each application's document, the newest in force
(docs/routing.md), each with when it was stored and by whom. Storing one notifies every process on
commit (the trigger of migration 0015), so application actors forget the document they hold. A
document the same as the one in force is not stored again; one sent on the condition that a given
version is in force (`If-Match`) is stored only while it is. The versions are listed a page at a
time, newest first, and each read back."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import asyncpg

from payorch.storage.database import Connection
from payorch.storage.database_thread import on_database_thread
from payorch.storage.pages import read_page
from payorch.values.errors import PreconditionFailed
from payorch.values.pagination import PageRequest

# The largest version a path may name: the column is a PostgreSQL integer.
MAX_VERSION = 2**31 - 1


@dataclass(frozen=True)
class RoutingVersion:
    """One version of an application's routing document, without the document: when it was stored
    and by which user (None: stored before payorch kept it), with that user's e-mail as it was then
    (None before payorch kept it: migration 0037)."""

    version: int
    created_at: datetime
    stored_by: uuid.UUID | None
    stored_by_email: str | None = None


@dataclass(frozen=True)
class StoredRoutingDocument:
    """One version of an application's routing document, as stored (its JSON form)."""

    version: int
    document: dict[str, Any]
    created_at: datetime
    stored_by: uuid.UUID | None = None


_COLUMNS = "version, document, created_at, stored_by"


def _stored(row: asyncpg.Record) -> StoredRoutingDocument:
    return StoredRoutingDocument(**dict(row.items()))


@on_database_thread
async def current_routing_document(
    conn: Connection, application_id: uuid.UUID
) -> StoredRoutingDocument | None:
    """The application's document in force (its highest version), or None when it never stored one."""
    row = await conn.fetchrow(
        f"""SELECT {_COLUMNS} FROM routing_documents
            WHERE application_id = $1 ORDER BY version DESC LIMIT 1""",
        application_id,
    )
    return _stored(row) if row else None


@on_database_thread
async def routing_document_version(
    conn: Connection, application_id: uuid.UUID, version: int
) -> StoredRoutingDocument | None:
    """Version `version` of the application's document, or None when it has no such version."""
    row = await conn.fetchrow(
        f"SELECT {_COLUMNS} FROM routing_documents WHERE application_id = $1 AND version = $2",
        application_id,
        version,
    )
    return _stored(row) if row else None


@on_database_thread
async def list_routing_versions(
    conn: Connection, application_id: uuid.UUID, page: PageRequest
) -> tuple[list[RoutingVersion], int]:
    """A page of the application's versions, newest first, and how many it has."""
    return await read_page(
        conn,
        page,
        columns="version, created_at, stored_by, stored_by_email",
        rows_from="routing_documents WHERE application_id = $1",
        args=[application_id],
        order_by="version DESC",
        item=lambda row: RoutingVersion(**dict(row.items())),
    )


@on_database_thread
async def store_routing_document(
    conn: Connection,
    application_id: uuid.UUID,
    document: Mapping[str, Any],
    *,
    now: datetime,
    stored_by: uuid.UUID | None = None,
    if_version: frozenset[int] | None = None,
) -> tuple[StoredRoutingDocument, bool]:
    """Store `document` as the application's next version (the previous one plus 1, or 1), created
    at `now` by the user `stored_by` (whose e-mail is kept with it); the versions before it stay.
    Run it in a transaction. The answer is the version in force and whether it is new: when
    `document` equals the one in force (the same JSON values: the same keys, lists and numbers,
    `1.0` equal to `1`), nothing is stored and that one is answered, so sending a document again
    changes nothing.

    `if_version`: the versions the caller allows to be in force (0: none stored yet), `If-Match`'s;
    `PreconditionFailed` (412) and nothing stored when another is. None: any.

    Two PUTs of one application take turns: each first locks the application's row until it
    commits, so the second reads the first's version once it may go on, and stores the next (or,
    on the condition of the version both read before, is refused). A lock rather than a unique
    violation of the key (application, version): no PUT fails and has to be tried again. The lock
    is FOR NO KEY UPDATE, which the foreign-key checks of rows that name the application (a
    session being stored takes FOR KEY SHARE) never wait for."""
    await conn.execute("SELECT 1 FROM applications WHERE id = $1 FOR NO KEY UPDATE", application_id)
    current = await current_routing_document(conn, application_id)
    in_force = 0 if current is None else current.version
    if if_version is not None and in_force not in if_version:
        raise PreconditionFailed(
            f"the routing document in force is version {in_force}, not the one If-Match names: "
            "nothing was stored (read it again, then send your change)"
        )
    if current is not None and current.document == document:
        return current, False
    row = await conn.fetchrow(
        f"""INSERT INTO routing_documents
                (application_id, version, document, created_at, stored_by, stored_by_email)
            SELECT $1, coalesce(max(version), 0) + 1, $2, $3, $4,
                   (SELECT email FROM users WHERE id = $4)
            FROM routing_documents WHERE application_id = $1
            RETURNING {_COLUMNS}""",
        application_id,
        document,
        now,
        stored_by,
    )
    assert row is not None
    return _stored(row), True
