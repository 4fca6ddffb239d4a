"""A sudden backlog of webhook deliveries is analysed once `webhooks.analyse_after_changes` of the
table's rows have changed since its last analysis, so the delivery claim is planned for the backlog
it has (docs/webhooks.md, "Statistics after a sudden backlog"); fewer changes, or a threshold of 0,
leave the table to autovacuum. PostgreSQL's counts of changed rows reach its statistics view when a
backend goes idle: each write here asks for that flush (`pg_stat_force_next_flush`), so the counts
are there as soon as its transaction has committed."""

from __future__ import annotations

from payorch.config import Settings
from payorch.storage import table_statistics
from payorch.storage.database import Connection, Database
from payorch.supervisors.delivery_statistics import TABLE, analyse_if_changed
from tests.storage.test_webhook_deliveries import _application, _endpoint, _events


async def _flush_counts(conn: Connection) -> None:
    await conn.execute("SELECT pg_stat_force_next_flush()")


async def _backlog(db: Database, settings: Settings, deliveries: int) -> None:
    """`deliveries` new PENDING deliveries, their changes counted in PostgreSQL's statistics."""
    application = await _application(db, settings)
    await _endpoint(db, application, "backlog")
    await _events(db, application, deliveries)
    await db.autocommit(_flush_counts)


async def _last_analysed(conn: Connection) -> object:
    return await conn.fetchval(
        "SELECT last_analyze FROM pg_stat_user_tables WHERE relid = to_regclass($1)", TABLE
    )


async def test_deliveries_are_analysed_once_the_changes_since_the_last_analysis_reach_the_threshold(
    db: Database, settings: Settings
) -> None:
    await _backlog(db, settings, 30)
    changes = await db.autocommit(table_statistics.changes_since_analysed, TABLE)
    assert changes >= 30

    before = await db.autocommit(_last_analysed)
    assert await analyse_if_changed(db, threshold=changes + 1) is False
    assert await db.autocommit(_last_analysed) == before

    assert await analyse_if_changed(db, threshold=30) is True
    assert await db.autocommit(_last_analysed) not in (None, before)
    assert await db.autocommit(table_statistics.changes_since_analysed, TABLE) == 0
    # Nothing changed since: the next check leaves the table alone.
    assert await analyse_if_changed(db, threshold=30) is False


async def test_a_threshold_of_zero_leaves_the_deliveries_to_autovacuum(
    db: Database, settings: Settings
) -> None:
    await _backlog(db, settings, 5)
    before = await db.autocommit(_last_analysed)
    assert await analyse_if_changed(db, threshold=0) is False
    assert await db.autocommit(_last_analysed) == before
