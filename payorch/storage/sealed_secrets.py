"""Every column that holds a value sealed with `security.encryption_keys`, read in batches and
replaced by compare-and-set: what `payorch rotate-credentials` (`engine.accounts.key_rotation`) works through.

A new column holding a `SecretBox.seal` value belongs in `SEALED_COLUMNS` (tests/test_key_rotation.py
fails for a `bytea` column that is neither here nor known to hold a hash).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from payorch.storage.database import Connection
from payorch.storage.database_thread import on_database_thread

Key = tuple[Any, ...]


@dataclass(frozen=True)
class SealedColumn:
    table: str
    column: str
    key_columns: tuple[str, ...]  # the table's primary key
    key_types: tuple[str, ...]  # their PostgreSQL types

    @property
    def name(self) -> str:
        return f"{self.table}.{self.column}"

    @property
    def _key(self) -> str:
        return "(" + ", ".join(f"t.{column}" for column in self.key_columns) + ")"

    def _keys_from(self, first: int) -> str:
        """`unnest` of one array parameter per key column, from parameter `$first`."""
        arrays = ", ".join(f"${first + n}::{kind}[]" for n, kind in enumerate(self.key_types))
        return f"unnest({arrays})"


SEALED_COLUMNS = (
    SealedColumn("provider_configs", "credentials", ("application_id", "provider"), ("uuid", "text")),
    SealedColumn("provider_configs", "webhook_secret", ("application_id", "provider"), ("uuid", "text")),
    SealedColumn("webhook_configs", "secret", ("id",), ("uuid",)),
    SealedColumn("webhook_configs", "previous_secret", ("id",), ("uuid",)),
    SealedColumn("sandbox_webhook_endpoints", "secret", ("id",), ("text",)),
)


@dataclass(frozen=True)
class Sealed:
    key: Key
    value: bytes


def _sealed(column: SealedColumn, rows: list[Any]) -> list[Sealed]:
    width = len(column.key_columns)
    return [Sealed(key=tuple(row[:width]), value=bytes(row[width])) for row in rows]


def _columns(keys: list[Key], width: int) -> list[list[Any]]:
    return [[key[n] for key in keys] for n in range(width)]


@on_database_thread
async def sealed_after(conn: Connection, column: SealedColumn, after: Key | None, limit: int) -> list[Sealed]:
    """Up to `limit` non-null values of `column`, in key order, of the rows after the key `after`
    (from the first row when None)."""
    keys = ", ".join(f"t.{name}" for name in column.key_columns)
    bound = ""
    if after is not None:
        params = ", ".join(f"${n + 2}::{kind}" for n, kind in enumerate(column.key_types))
        bound = f"AND {column._key} > ({params})"
    rows = await conn.fetch(
        f"""SELECT {keys}, t.{column.column} FROM {column.table} AS t
            WHERE t.{column.column} IS NOT NULL {bound} ORDER BY {keys} LIMIT $1""",
        limit,
        *(after or ()),
    )
    return _sealed(column, rows)


@on_database_thread
async def sealed_of(conn: Connection, column: SealedColumn, keys: list[Key]) -> list[Sealed]:
    """The current non-null values of `column` in the rows with these keys (rows gone are left out)."""
    names = ", ".join(f"t.{name}" for name in column.key_columns)
    rows = await conn.fetch(
        f"""SELECT {names}, t.{column.column} FROM {column.table} AS t
            WHERE {column._key} IN (SELECT * FROM {column._keys_from(1)})
              AND t.{column.column} IS NOT NULL""",
        *_columns(keys, len(column.key_columns)),
    )
    return _sealed(column, rows)


@on_database_thread
async def replace_sealed(
    conn: Connection, column: SealedColumn, replacements: list[tuple[Key, bytes, bytes]]
) -> list[Key]:
    """For each (key, old, new): `column` becomes `new` in that row if it still holds `old`. The
    keys of the rows replaced; a row changed (or deleted) since `old` was read is left as it is."""
    width = len(column.key_columns)
    keys = [key for key, _, _ in replacements]
    names = ", ".join(f"k{n}" for n in range(width))
    arrays = ", ".join(f"${n + 1}::{kind}[]" for n, kind in enumerate(column.key_types))
    matches = " AND ".join(f"t.{name} = v.k{n}" for n, name in enumerate(column.key_columns))
    rows = await conn.fetch(
        f"""UPDATE {column.table} AS t SET {column.column} = v.new
            FROM unnest({arrays}, ${width + 1}::bytea[], ${width + 2}::bytea[]) AS v({names}, old, new)
            WHERE {matches} AND t.{column.column} = v.old
            RETURNING {", ".join(f"t.{name}" for name in column.key_columns)}""",
        *_columns(keys, width),
        [old for _, old, _ in replacements],
        [new for _, _, new in replacements],
    )
    return [tuple(row) for row in rows]
