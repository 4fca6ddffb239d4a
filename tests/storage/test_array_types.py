"""Arrays of integers and of uuids, known to each new connection without a catalog lookup of its own."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
import trio

from payorch.config import Settings
from payorch.storage import array_types
from payorch.storage.database import Connection, open_database
from payorch.storage.loop_thread import LoopBoundConnection


async def test_only_the_processs_first_connection_looks_up_integer_and_uuid_arrays(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    lookups: list[tuple[int, ...]] = []
    real = LoopBoundConnection._introspect_types

    async def counted(self: LoopBoundConnection, typeoids: Any, *rest: Any) -> Any:
        lookups.append(tuple(typeoids))
        return await real(self, typeoids, *rest)

    monkeypatch.setattr(LoopBoundConnection, "_introspect_types", counted)
    monkeypatch.setattr(array_types, "_known", None)  # as in a process that has not connected yet
    ids = [uuid.uuid4(), uuid.uuid4()]

    async def round_trip(conn: Connection) -> tuple[list[int], list[uuid.UUID]]:
        row = await conn.fetchrow("SELECT $1::int4[] AS numbers, $2::uuid[] AS ids", [1, 2, 3], ids)
        assert row is not None
        return list(row["numbers"]), list(row["ids"])

    async with open_database(settings.database.url, min_size=3, max_size=3) as db:
        # Three units at once: each holds a connection of its own.
        results: list[tuple[list[int], list[uuid.UUID]]] = []

        async def one() -> None:
            results.append(await db.snapshot(round_trip))

        async with trio.open_nursery() as nursery:
            for _ in range(3):
                nursery.start_soon(one)

    assert results == [([1, 2, 3], ids)] * 3
    assert lookups == [array_types.ARRAY_TYPE_OIDS]
