"""Migrations: SQL files and Python modules, each applied once; a repeatable one again whenever the
SQL it writes changes."""

from __future__ import annotations

from payorch.storage.database import Connection, Database
from payorch.storage.enumerated_columns import ENUMERATED_COLUMNS, check_constraints
from payorch.storage.migrations import Migration, _apply_pending, available_migrations, migrate

PROBE = "CREATE TABLE IF NOT EXISTS migration_probe (note text); INSERT INTO migration_probe VALUES ('{}')"


async def _notes(db: Database) -> list[str]:
    async def read(conn: Connection) -> list[str]:
        return [row["note"] for row in await conn.fetch("SELECT note FROM migration_probe ORDER BY note")]

    return await db.autocommit(read)


def test_the_enumerated_columns_migration_is_python_written_from_the_enumerations() -> None:
    (migration,) = [item for item in available_migrations() if item.name == "enumerated_columns"]
    assert (migration.version, migration.repeatable) == (14, True)
    assert migration.sql == check_constraints()
    versions = [item.version for item in available_migrations()]
    assert versions == sorted(versions) == list(range(1, len(versions) + 1))


async def test_a_repeatable_migration_is_applied_again_when_its_sql_changes_and_only_then(
    db: Database,
) -> None:
    first = Migration(9001, "probe", PROBE.format("first"), repeatable=True)
    assert await db.transaction(_apply_pending, [first]) == ["9001_probe"]
    assert await db.transaction(_apply_pending, [first]) == []
    changed = Migration(9001, "probe", PROBE.format("changed"), repeatable=True)
    assert await db.transaction(_apply_pending, [changed]) == ["9001_probe"]
    assert await _notes(db) == ["changed", "first"]


async def test_a_repeatable_migration_runs_after_the_others_so_it_may_name_what_they_add(
    db: Database,
) -> None:
    adds = Migration(9004, "adds", "CREATE TABLE migration_late (note text)")
    names = Migration(9003, "names", "INSERT INTO migration_late VALUES ('seen')", repeatable=True)
    assert await db.transaction(_apply_pending, [names, adds]) == ["9004_adds", "9003_names"]


async def test_a_migration_that_is_not_repeatable_is_never_applied_again(db: Database) -> None:
    await db.transaction(_apply_pending, [Migration(9002, "probe", PROBE.format("first"))])
    assert await db.transaction(_apply_pending, [Migration(9002, "probe", PROBE.format("changed"))]) == []
    assert await _notes(db) == ["first"]


async def test_a_database_whose_constraints_an_older_enumeration_wrote_is_brought_up_to_date(
    db: Database,
) -> None:
    # As if migration 0014 had been applied when the sessions' statuses were fewer: an older SQL.
    column = ENUMERATED_COLUMNS[0]

    async def as_written_before(conn: Connection) -> None:
        await conn.execute(
            f"""ALTER TABLE {column.table} DROP CONSTRAINT {column.constraint},
                    ADD CONSTRAINT {column.constraint} CHECK ({column.column} IN ('PENDING'))"""
        )
        await conn.execute("UPDATE schema_migrations SET checksum = '\\x00' WHERE version = 14")

    await db.transaction(as_written_before)
    assert await migrate(db) == ["0014_enumerated_columns"]

    async def definition(conn: Connection) -> str:
        found: str = await conn.fetchval(
            "SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conname = $1", column.constraint
        )
        return found

    written = await db.autocommit(definition)
    assert all(f"'{member.value}'" in written for member in column.enumeration)
    assert await migrate(db) == []
