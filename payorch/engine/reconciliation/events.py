"""`reconciliation.completed`: the webhook event a run sends when it completes, written in the
transaction that marks it COMPLETED, to the configurations that subscribe to it (it is not in the
default `subscribedEvents`). It belongs to no session."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from pydantic import Field, with_config
from typing_extensions import TypedDict  # pydantic needs this one on Python < 3.12

from payorch.engine.body_types import CLOSED, EventType, Timestamp, Uuid
from payorch.engine.payments.records import new_event_id
from payorch.storage import observed_fees, outbox
from payorch.storage import reconciliations as store
from payorch.storage.database import Connection
from payorch.storage.database_thread import on_database_thread
from payorch.values.reconciliation import ItemOutcome, RunState
from payorch.values.timefmt import iso

COMPLETED: EventType = "reconciliation.completed"


@with_config(CLOSED)
class ReconciliationEventData(TypedDict):
    """`data` of a `reconciliation.completed` event: the run, and how many items of each outcome."""

    reconciliationId: Uuid
    provider: str
    period: dict[str, str]  # {"from": "YYYY-MM-DD", "to": "YYYY-MM-DD"}
    counts: dict[str, Annotated[int, Field(ge=0)]]
    repaired: Annotated[int, Field(ge=0)]


@with_config(CLOSED)
class ReconciliationEvent(TypedDict):
    id: str
    type: EventType
    createdAt: Timestamp
    applicationId: Uuid
    data: ReconciliationEventData


@on_database_thread
async def complete_run(conn: Connection, run: store.Run, *, repaired: int, now: datetime) -> None:
    """Mark the run COMPLETED, keep the fees it observed (`storage.observed_fees`) and write its
    `reconciliation.completed` event, in one transaction."""
    await store.finish_run(conn, run.id, RunState.COMPLETED, error=None, repaired=repaired, now=now)
    await observed_fees.record_run_fees(
        conn, run.id, run.application_id, run.provider, run.first_day, run.last_day
    )
    summary = await store.summary(conn, run.id)
    event_id = new_event_id()
    body: ReconciliationEvent = {
        "id": event_id,
        "type": COMPLETED,
        "createdAt": iso(now),
        "applicationId": str(run.application_id),
        "data": {
            "reconciliationId": str(run.id),
            "provider": run.provider,
            "period": {"from": run.first_day.isoformat(), "to": run.last_day.isoformat()},
            "counts": {outcome.value: summary.counts.get(outcome, 0) for outcome in ItemOutcome},
            "repaired": repaired,
        },
    }
    await outbox.add_event(
        conn,
        event_id=event_id,
        application_id=run.application_id,
        session_id=None,
        event_type=COMPLETED,
        payload=body,
    )
