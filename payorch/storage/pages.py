"""A page of a list, read the one way every list reads it, and the items each row of a page owns.

A page read counts the list first, then answers a page past the end (`PageRequest.is_past`) without
reading a row, so a huge `page` costs one count; otherwise it reads the page's rows with LIMIT and
OFFSET. A list whose database keeps its count (migration 0013) passes the count it read instead.
Run a page read in `Database.snapshot` when the total and the page must agree.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from typing import TypeVar

import asyncpg

from payorch.storage.database import Connection
from payorch.storage.database_thread import on_database_thread
from payorch.values.pagination import PageRequest

T = TypeVar("T")


@on_database_thread
async def read_page(
    conn: Connection,
    page: PageRequest,
    *,
    columns: str,
    rows_from: str,
    args: Sequence[object],
    order_by: str,
    item: Callable[[asyncpg.Record], T],
    total: int | None = None,
) -> tuple[list[T], int]:
    """The `page` of the rows `SELECT {columns} FROM {rows_from}` holds in `order_by`'s order, each
    made an item by `item`, and how many rows the list holds. `rows_from` is a FROM clause with its
    WHERE, whose parameters are `args`. `total` is how many the list holds when its database keeps
    that count; by default the rows are counted (`count(*)` of `rows_from`)."""
    if total is None:
        total = int(await conn.fetchval(f"SELECT count(*) FROM {rows_from}", *args))
    if page.is_past(total):  # past the end: no need to read the items
        return [], total
    rows = await conn.fetch(
        f"""SELECT {columns} FROM {rows_from}
            ORDER BY {order_by} LIMIT ${len(args) + 1} OFFSET ${len(args) + 2}""",
        *args,
        page.limit,
        page.offset,
    )
    return [item(row) for row in rows], total


@on_database_thread
async def items_of(
    conn: Connection,
    statement: str,
    owner_ids: list[uuid.UUID],
    *,
    owner: str,
    item: Callable[[asyncpg.Record], T],
) -> dict[uuid.UUID, list[T]]:
    """The items `statement` reads for the owners `owner_ids` (its one parameter), each owner's in
    the statement's order, by its row's `owner` column; every owner has a list, empty when it owns
    nothing. Owners of an empty page read nothing."""
    found: dict[uuid.UUID, list[T]] = {owner_id: [] for owner_id in owner_ids}
    if not owner_ids:
        return found
    for row in await conn.fetch(statement, owner_ids):
        found[row[owner]].append(item(row))
    return found
