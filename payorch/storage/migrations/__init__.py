"""Numbered migrations in this package, applied in order, each once.

A migration is `NNNN_name.sql`, or `NNNN_name.py` when its SQL is written from payorch's code: a
module whose `sql()` returns the statements (migration 0014 writes the CHECK constraints of the
enumerated columns from the enumerations, `storage.enumerated_columns`). A Python migration that
sets `REPEATABLE = True` is idempotent, and is applied again whenever the SQL it returns changes:
`schema_migrations` keeps the SHA-256 of the SQL applied for each migration. Repeatable migrations
run after every other pending one, so that what they write may name a table or column a migration
numbered after them adds (0014's constraints name columns of later migrations).

All pending migrations apply in one transaction (PostgreSQL's DDL is transactional: all or none)
that holds an advisory lock, so two service processes starting together on one database do not race.
"""

from __future__ import annotations

import hashlib
import importlib
from dataclasses import dataclass
from importlib import resources

from payorch.storage.database import Connection, Database
from payorch.storage.database_thread import on_database_thread

_LOCK_ID = 0x7061796F7263  # "payorc"


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str
    repeatable: bool = False  # applied again whenever `sql` changes

    @property
    def checksum(self) -> bytes:
        return hashlib.sha256(self.sql.encode()).digest()


def available_migrations() -> list[Migration]:
    """Every migration shipped with payorch, in order."""
    found = []
    for entry in resources.files(__name__).iterdir():
        stem, _, suffix = entry.name.partition(".")
        if not stem[:1].isdigit():
            continue
        version, _, name = stem.partition("_")
        if suffix == "sql":
            found.append(Migration(int(version), name, entry.read_text()))
        elif suffix == "py":
            module = importlib.import_module(f"{__name__}.{stem}")
            found.append(
                Migration(int(version), name, module.sql(), repeatable=getattr(module, "REPEATABLE", False))
            )
    return sorted(found, key=lambda migration: migration.version)


@on_database_thread
async def _apply_pending(conn: Connection, migrations: list[Migration]) -> list[str]:
    await conn.execute("SELECT pg_advisory_xact_lock($1)", _LOCK_ID)
    await conn.execute(
        """CREATE TABLE IF NOT EXISTS schema_migrations (
               version    integer PRIMARY KEY,
               name       text NOT NULL,
               applied_at timestamptz NOT NULL DEFAULT now())"""
    )
    # The SHA-256 of the SQL applied; NULL for the migrations applied before it was kept.
    await conn.execute("ALTER TABLE schema_migrations ADD COLUMN IF NOT EXISTS checksum bytea")
    applied = {
        row["version"]: row["checksum"]
        for row in await conn.fetch("SELECT version, checksum FROM schema_migrations")
    }
    done = []
    # In order, the repeatable ones last (see the module's docstring).
    for migration in sorted(migrations, key=lambda item: (item.repeatable, item.version)):
        if migration.version not in applied:
            await conn.execute(migration.sql)
            await conn.execute(
                "INSERT INTO schema_migrations (version, name, checksum) VALUES ($1, $2, $3)",
                migration.version,
                migration.name,
                migration.checksum,
            )
        elif migration.repeatable and applied[migration.version] != migration.checksum:
            await conn.execute(migration.sql)
            await conn.execute(
                "UPDATE schema_migrations SET checksum = $2, applied_at = DEFAULT WHERE version = $1",
                migration.version,
                migration.checksum,
            )
        else:
            continue
        done.append(f"{migration.version:04d}_{migration.name}")
    return done


async def migrate(db: Database) -> list[str]:
    """Apply every migration not yet applied, and every repeatable one whose SQL changed; returns
    the names of those applied now."""
    return await db.transaction(_apply_pending, available_migrations())
