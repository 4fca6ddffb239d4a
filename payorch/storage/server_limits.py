"""What the PostgreSQL server allows: how many connections it takes from roles like payorch's."""

from __future__ import annotations

from dataclasses import dataclass

from payorch.storage.database import Connection
from payorch.storage.database_thread import on_database_thread


@dataclass(frozen=True)
class ConnectionSlots:
    """`max_connections`, and the slots of them kept for superusers (and, from PostgreSQL 16, for
    roles granted `pg_use_reserved_connections`)."""

    max_connections: int
    reserved: int

    @property
    def available(self) -> int:
        """The connections every other role may open, all clients together."""
        return self.max_connections - self.reserved


@on_database_thread
async def connection_slots(conn: Connection) -> ConnectionSlots:
    row = await conn.fetchrow(
        """SELECT current_setting('max_connections')::integer AS max_connections,
                  current_setting('superuser_reserved_connections')::integer
                  + coalesce(current_setting('reserved_connections', true)::integer, 0) AS reserved"""
    )
    return ConnectionSlots(max_connections=row["max_connections"], reserved=row["reserved"])
