"""Keeping the delivery claim's plans true to the backlog: `webhook_deliveries` is analysed as soon
as `webhooks.analyse_after_changes` of its rows have changed since its last analysis, checked every
`CHECK_EVERY_S`.

The claim's cost follows what it can claim only while PostgreSQL knows roughly how many deliveries
are PENDING (docs/webhooks.md, "Statistics after a sudden backlog"); autovacuum's own threshold
grows with the table's history and can leave a sudden backlog unplanned-for for minutes or for
good. One check is one read of PostgreSQL's statistics view; an analysis reads a sample of the
table (30,000 rows at the default statistics target: a fraction of a second of one backend) and
does not block reads or writes. With several processes, one analyses and the others skip that turn.
The delivery loop never waits for it. A role that does not own the table cannot analyse it:
PostgreSQL then skips it with a warning, and autovacuum's own thresholds are all there is.
"""

from __future__ import annotations

import logging

import trio

from payorch.engine.context import Context
from payorch.restarts import SupervisorBoard, supervised
from payorch.storage import table_statistics
from payorch.storage.database import Database

log = logging.getLogger("payorch.webhooks")

CHECK_EVERY_S = 5.0
TABLE = "webhook_deliveries"


async def analyse_if_changed(db: Database, threshold: int) -> bool:
    """Analyse `webhook_deliveries` if `threshold` (0: never) of its rows have changed since it was
    last analysed; whether this process analysed it."""
    if threshold == 0:
        return False
    changes = await db.autocommit(table_statistics.changes_since_analysed, TABLE)
    if changes < threshold:
        return False
    analysed = await db.transaction(table_statistics.analyse_unless_analysing, TABLE)
    if analysed:
        log.info("webhook deliveries analysed after %d changed rows", changes)
    return analysed


async def _check_loop(
    context: Context, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
) -> None:
    task_status.started()
    while True:
        # Read at each check: a reload that changes it applies from the next one.
        await analyse_if_changed(context.db, context.settings.webhooks.analyse_after_changes)
        await trio.sleep(CHECK_EVERY_S)


async def run_delivery_statistics(
    context: Context, board: SupervisorBoard, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
) -> None:
    """Analyse `webhook_deliveries` whenever enough of it changed, until cancelled, restarted when
    it fails. Started at once: nothing has changed yet."""
    await supervised(board, "delivery statistics", _check_loop, context, task_status=task_status)
