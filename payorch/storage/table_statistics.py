"""The planner's statistics of the tables whose plans depend on them most: how many rows changed
since a table was last analysed, and analysing it now.

PostgreSQL's autovacuum analyses a table once its changes since the last analysis pass 50 rows plus
10% of its rows. For `webhook_deliveries`, whose history grows without bound while its PENDING rows
are few, a sudden backlog (a merchant's hundred endpoints and a burst of events: 100,000 PENDING
rows in seconds) may stay far below that 10% and be planned for minutes, or for good, on statistics
that say almost nothing is PENDING: the delivery claim then reads every PENDING delivery of an
application where it meant to step through one endpoint's (docs/webhooks.md, "Statistics after a
sudden backlog"). `supervisors.delivery_statistics` watches the changes and analyses the table here.
"""

from __future__ import annotations

from payorch.storage.database import Connection
from payorch.storage.database_thread import on_database_thread

# The first key of the advisory lock held while a process analyses a table (the second is the
# table's oid): "pays". One process analyses; the others find the lock taken and leave it.
ANALYSE_LOCK = 0x70617973


@on_database_thread
async def changes_since_analysed(conn: Connection, table: str) -> int:
    """Rows inserted, updated or deleted in `table` (of the current schema) since it was last analysed,
    as PostgreSQL's statistics collector counts them (they reach it within a second or so of each
    transaction's end); 0 for a table it has not counted yet."""
    changes = await conn.fetchval(
        "SELECT n_mod_since_analyze FROM pg_stat_user_tables WHERE relid = to_regclass($1)",
        table,
    )
    return int(changes or 0)


@on_database_thread
async def analyse_unless_analysing(conn: Connection, table: str) -> bool:
    """Analyse `table` now, in this transaction, unless another process is analysing it through this
    module (then False at once, without waiting). `table` is one of payorch's own table names, never
    input."""
    taken = await conn.fetchval(
        "SELECT pg_try_advisory_xact_lock($1, to_regclass($2)::oid::int)", ANALYSE_LOCK, table
    )
    if not taken:
        return False
    await conn.execute(f"ANALYZE {table}")
    return True
