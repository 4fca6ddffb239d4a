"""Numbered SQL migrations (`storage/migrations/NNNN_name.sql`), applied in order, each once.

All pending migrations apply in one transaction (PostgreSQL's DDL is transactional: all or none)
that holds an advisory lock, so two service processes starting together on one database do not race.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources

from payorch.storage.database import Connection, Database

_LOCK_ID = 0x7061796F7263  # "payorc"


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str


def available_migrations() -> list[Migration]:
    """Every migration shipped with payorch, in order."""
    found = []
    for entry in resources.files("payorch.storage").joinpath("migrations").iterdir():
        if entry.name.endswith(".sql"):
            version, _, name = entry.name.removesuffix(".sql").partition("_")
            found.append(Migration(int(version), name, entry.read_text()))
    return sorted(found, key=lambda migration: migration.version)


async def _apply_pending(conn: Connection, migrations: list[Migration]) -> list[str]:
    await conn.execute("SELECT pg_advisory_xact_lock($1)", _LOCK_ID)
    await conn.execute(
        """CREATE TABLE IF NOT EXISTS schema_migrations (
               version    integer PRIMARY KEY,
               name       text NOT NULL,
               applied_at timestamptz NOT NULL DEFAULT now())"""
    )
    applied = {row["version"] for row in await conn.fetch("SELECT version FROM schema_migrations")}
    done = []
    for migration in migrations:
        if migration.version in applied:
            continue
        await conn.execute(migration.sql)
        await conn.execute(
            "INSERT INTO schema_migrations (version, name) VALUES ($1, $2)", migration.version, migration.name
        )
        done.append(f"{migration.version:04d}_{migration.name}")
    return done


async def migrate(db: Database) -> list[str]:
    """Apply every migration not yet applied; returns the names of those applied now."""
    return await db.transaction(_apply_pending, available_migrations())
