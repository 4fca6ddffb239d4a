"""Routing documents: every version of each application's document, the newest in force
(docs/routing.md). Storing one notifies every process on commit (the trigger of migration 0015),
so application actors forget the document they hold. A document the same as the one in force is
not stored again."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from payorch.storage.database import Connection
from payorch.storage.database_thread import on_database_thread


@dataclass(frozen=True)
class StoredRoutingDocument:
    """One version of an application's routing document, as stored (its JSON form)."""

    version: int
    document: dict[str, Any]
    created_at: datetime


@on_database_thread
async def current_routing_document(
    conn: Connection, application_id: uuid.UUID
) -> StoredRoutingDocument | None:
    """The application's document in force (its highest version), or None when it never stored one."""
    row = await conn.fetchrow(
        """SELECT version, document, created_at FROM routing_documents
           WHERE application_id = $1 ORDER BY version DESC LIMIT 1""",
        application_id,
    )
    return StoredRoutingDocument(**dict(row.items())) if row else None


@on_database_thread
async def store_routing_document(
    conn: Connection, application_id: uuid.UUID, document: Mapping[str, Any], *, now: datetime
) -> tuple[StoredRoutingDocument, bool]:
    """Store `document` as the application's next version (the previous one plus 1, or 1), created
    at `now`; the versions before it stay. Run it in a transaction. The answer is the version in
    force and whether it is new: when `document` equals the one in force (the same JSON values:
    the same keys, lists and numbers, `1.0` equal to `1`), nothing is stored and that one is
    answered, so sending a document again changes nothing.

    Two PUTs of one application take turns: each first locks the application's row until it
    commits, so the second reads the first's version once it may go on, and stores the next. A
    lock rather than a unique violation of the key (application, version): no PUT fails and has
    to be tried again. The lock is FOR NO KEY UPDATE, which the foreign-key checks of rows that
    name the application (a session being stored takes FOR KEY SHARE) never wait for."""
    await conn.execute("SELECT 1 FROM applications WHERE id = $1 FOR NO KEY UPDATE", application_id)
    current = await current_routing_document(conn, application_id)
    if current is not None and current.document == document:
        return current, False
    row = await conn.fetchrow(
        """INSERT INTO routing_documents (application_id, version, document, created_at)
           SELECT $1, coalesce(max(version), 0) + 1, $2, $3
           FROM routing_documents WHERE application_id = $1
           RETURNING version, document, created_at""",
        application_id,
        document,
        now,
    )
    assert row is not None
    return StoredRoutingDocument(**dict(row.items())), True
