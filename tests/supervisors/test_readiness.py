"""`open_runtime` returns once every part is ready to do its work, not merely once each was started.

Each test leaves work for a part's first pass while no runtime runs, enters `open_runtime`, and finds
the work done as soon as it is in: nothing is waited for, so a part that reported ready before its
first pass would fail the test. A part that fails before it is ready fails the start instead."""

from __future__ import annotations

import logging
import uuid
from datetime import timedelta

import pytest

from payorch.config import Settings
from payorch.engine.context import Context
from payorch.runtime import open_runtime
from payorch.storage import claim_takeover, idempotency_keys, outbox
from payorch.storage.database import Connection, Database
from payorch.supervisors import takeover_loop
from payorch.values.clock import SYSTEM_CLOCK
from tests.storage.test_claim_takeover import delivery_claimed_by_a_gone_node
from tests.storage.test_webhook_deliveries import _application, _endpoint

SUPERVISED = (
    "application changes",
    "idle state",
    "full rate buckets",
    "claim takeover",
    "session expiry",
    "refund submission",
    "idempotency key expiry",
    "webhook delivery",
    "delivery statistics",
    "attempt details pruning",
    "sandbox events",
    "daily reconciliation",
)


async def test_every_supervised_loop_is_running_when_open_runtime_returns(
    db: Database, settings: Settings
) -> None:
    async with open_runtime(settings, db) as runtime:
        assert runtime.services.supervisors.running == dict.fromkeys(SUPERVISED, True)


async def _dedicated(conn: Connection) -> list[str]:
    """The names of the connections to this database outside the pool (`storage.dedicated`)."""
    rows = await conn.fetch(
        """SELECT application_name FROM pg_stat_activity
           WHERE datname = current_database() AND application_name LIKE 'payorch %'"""
    )
    return [row["application_name"] for row in rows]


async def test_one_connection_beside_the_pool_holds_the_node_and_listens_when_open_runtime_returns(
    db: Database, settings: Settings
) -> None:
    assert await db.autocommit(_dedicated) == []
    async with open_runtime(settings, db) as runtime:
        assert await db.autocommit(_dedicated) == ["payorch node"]
        channels = runtime.services.context.channels
        assert runtime.services.context.node.id is not None
        assert channels.applications.listening and channels.outbox.listening


async def test_the_claims_of_a_gone_node_are_released_when_open_runtime_returns(
    db: Database, settings: Settings
) -> None:
    gone = await delivery_claimed_by_a_gone_node(db, settings)
    assert await db.autocommit(claim_takeover.gone_claim_owners) == [gone]
    async with open_runtime(settings, db):
        assert await db.autocommit(claim_takeover.gone_claim_owners) == []


async def _deliveries_of(conn: Connection, event_id: str) -> int:
    return int(
        await conn.fetchval(
            """SELECT count(*) FROM webhook_deliveries d JOIN outbox_events e ON e.seq = d.event_seq
               WHERE e.id = $1""",
            event_id,
        )
    )


async def test_an_event_committed_while_no_process_ran_is_fanned_out_when_open_runtime_returns(
    db: Database, settings: Settings
) -> None:
    application_id = await _application(db, settings)
    await _endpoint(db, application_id, "receiver")
    event_id = f"evt_{uuid.uuid4().hex}"

    async def add(conn: Connection) -> None:
        await outbox.add_event(
            conn,
            event_id=event_id,
            application_id=application_id,
            session_id=None,
            event_type="session.completed",
            payload={},
        )

    await db.transaction(add)
    async with open_runtime(settings, db):
        assert await db.autocommit(_deliveries_of, event_id) == 1


async def _keys(conn: Connection, key: str) -> int:
    return int(await conn.fetchval("SELECT count(*) FROM idempotency_keys WHERE key = $1", key))


async def test_a_key_past_its_retention_is_deleted_when_open_runtime_returns(
    db: Database, settings: Settings
) -> None:
    application_id = await _application(db, settings)
    await db.transaction(
        idempotency_keys.claim_idempotency_key,
        application_id=application_id,
        scope="POST /api/v1/sessions",
        key="kept-too-long",
        fingerprint=b"\1" * 32,
        lease_s=60,
        retention_s=60,
        owner=None,
        now=SYSTEM_CLOCK.now() - timedelta(days=1),
    )
    assert await db.autocommit(_keys, "kept-too-long") == 1
    async with open_runtime(settings, db):
        assert await db.autocommit(_keys, "kept-too-long") == 0


async def test_a_part_that_fails_before_it_is_ready_fails_the_start_with_a_line_naming_it(
    db: Database, settings: Settings, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    async def refused(context: Context) -> None:
        raise RuntimeError("the claims cannot be read")

    monkeypatch.setattr(takeover_loop, "take_over_claims_of_gone_nodes", refused)
    with (
        caplog.at_level(logging.ERROR, logger="payorch.supervisors"),
        pytest.RaisesGroup(pytest.RaisesExc(RuntimeError, match="the claims cannot be read")),
    ):
        async with open_runtime(settings, db):
            pytest.fail("the runtime started without its claim takeover")
    (line,) = caplog.records
    assert (line.message, line.supervisor) == (  # type: ignore[attr-defined]
        "supervisor failed before it was ready: the service does not start",
        "claim takeover",
    )
