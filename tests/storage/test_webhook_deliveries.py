"""Claims of webhook deliveries: a fair share per endpoint and per merchant, exact across processes,
leases that end when the attempt is recorded or handed back."""

from __future__ import annotations

import uuid
from typing import Any

import asyncpg
import pytest

from payorch.config import Settings
from payorch.runtime import open_runtime
from payorch.storage import outbox, webhooks
from payorch.storage.database import Connection, Database
from payorch.storage.webhook_deliveries import (
    ClaimedDelivery,
    claim_due_deliveries,
    fan_out_and_claim,
    record_attempt,
    release_claims,
)
from payorch.values.clock import SYSTEM_CLOCK
from payorch.values.statuses import DeliveryStatus
from tests.helpers import new_application, new_merchant

SHARE = 2
MERCHANT_SHARE = 3  # beyond one endpoint's share, below two endpoints' shares


async def _application(db: Database, settings: Settings) -> uuid.UUID:
    """An application, made through the API of a runtime that is stopped again: no supervisor claims
    anything while these tests do."""
    async with open_runtime(settings, db) as runtime:
        client = runtime.app.test_client()
        merchant = await new_merchant(client, db, settings)
        return uuid.UUID((await new_application(client, merchant))["id"])


async def _endpoint(db: Database, application_id: uuid.UUID, name: str) -> uuid.UUID:
    config = await db.transaction(
        webhooks.create_webhook,
        application_id=application_id,
        url=f"https://{name}.example/hooks",
        subscribed_events=["session.completed"],
        secret=b"sealed",
        key_fingerprint="sha256:0",
    )
    return config.id


async def _events(db: Database, application_id: uuid.UUID, count: int) -> None:
    async def add(conn: Connection) -> None:
        for _ in range(count):
            await outbox.add_event(
                conn,
                event_id=f"evt_{uuid.uuid4().hex}",
                application_id=application_id,
                session_id=None,
                event_type="session.completed",
                payload={},
            )
        await fan_out_and_claim(
            conn,
            first_wait_s=0,
            fan_out_limit=200,
            limit=0,  # fan out only: the tests claim themselves
            per_endpoint=SHARE,
            per_merchant=MERCHANT_SHARE,
            lease_s=60,
            owner=None,
            now=SYSTEM_CLOCK.now(),
        )

    await db.transaction(add)


@pytest.fixture
async def other_application(db: Database, settings: Settings) -> uuid.UUID:
    """Another merchant's application, made before any delivery is due: the runtime that makes it
    would otherwise attempt (and reschedule) the deliveries these tests claim."""
    return await _application(db, settings)


@pytest.fixture
async def endpoints(db: Database, settings: Settings, other_application: uuid.UUID) -> dict[str, uuid.UUID]:
    """Endpoints `slow` and `quick` of one application; 5 events due, each to both. Made once
    `other_application` is (pytest-trio sets up fixtures concurrently): its runtime, still running,
    would attempt them."""
    application_id = await _application(db, settings)
    found = {name: await _endpoint(db, application_id, name) for name in ("slow", "quick")}
    await _events(db, application_id, 5)
    return found


async def claim(db: Database, limit: int = 10, per_merchant: int = 100) -> list[ClaimedDelivery]:
    return await db.transaction(
        claim_due_deliveries,
        limit=limit,
        per_endpoint=SHARE,
        per_merchant=per_merchant,
        lease_s=60,
        owner=None,
        now=SYSTEM_CLOCK.now(),
    )


def per_endpoint(claimed: list[ClaimedDelivery], endpoints: dict[str, uuid.UUID]) -> dict[str, int]:
    return {name: sum(1 for item in claimed if item.config_id == id_) for name, id_ in endpoints.items()}


async def test_no_endpoint_gets_more_than_its_share_of_attempts_in_flight(
    db: Database, endpoints: dict[str, uuid.UUID]
) -> None:
    assert per_endpoint(await claim(db), endpoints) == {"slow": SHARE, "quick": SHARE}
    assert await claim(db) == []  # both at their share until an attempt ends


async def test_every_endpoints_first_delivery_is_claimed_before_any_second(
    db: Database, endpoints: dict[str, uuid.UUID]
) -> None:
    assert per_endpoint(await claim(db, limit=2), endpoints) == {"slow": 1, "quick": 1}


async def test_no_merchant_gets_more_than_its_share_however_many_endpoints_it_registers(
    db: Database, other_application: uuid.UUID, endpoints: dict[str, uuid.UUID]
) -> None:
    # The merchant of `slow` and `quick` registers a third endpoint; another merchant has one.
    first_application = await db.autocommit(_application_of, endpoints["slow"])
    endpoints["third"] = await _endpoint(db, first_application, "third")
    endpoints["other"] = await _endpoint(db, other_application, "other")
    await _events(db, first_application, 5)
    await _events(db, other_application, 5)

    claimed = per_endpoint(await claim(db, per_merchant=MERCHANT_SHARE), endpoints)
    assert sum(claimed[name] for name in ("slow", "quick", "third")) == MERCHANT_SHARE
    assert claimed["other"] == SHARE  # the other merchant's endpoint is served all the same
    assert await claim(db, per_merchant=MERCHANT_SHARE) == []


async def _application_of(conn: Connection, config_id: uuid.UUID) -> uuid.UUID:
    application_id: uuid.UUID = await conn.fetchval(
        "SELECT application_id FROM webhook_configs WHERE id = $1", config_id
    )
    return application_id


async def test_a_recorded_attempt_frees_its_endpoints_share(
    db: Database, endpoints: dict[str, uuid.UUID]
) -> None:
    first = await claim(db)
    done = next(item for item in first if item.config_id == endpoints["quick"])
    await db.transaction(
        record_attempt,
        done.id,
        status_code=200,
        error=None,
        latency_ms=1,
        response_body="",
        outcome=DeliveryStatus.DELIVERED,
        retry_in_s=None,
        now=SYSTEM_CLOCK.now(),
    )
    assert per_endpoint(await claim(db), endpoints) == {"slow": 0, "quick": 1}


async def _claims_of_two_processes_at_once(
    db: Database, settings: Settings, *, limit: int, per_merchant: int
) -> tuple[list[ClaimedDelivery], list[ClaimedDelivery]]:
    """A claim of up to `limit` deliveries, and another process's claim of up to 10 made while the
    first one's transaction is still open."""

    async def both(conn: Connection) -> tuple[list[ClaimedDelivery], list[ClaimedDelivery]]:
        claim_now = {"per_endpoint": SHARE, "per_merchant": per_merchant, "lease_s": 60, "owner": None}
        mine = await claim_due_deliveries(conn, limit=limit, now=SYSTEM_CLOCK.now(), **claim_now)
        other = await asyncpg.connect(settings.database.url)  # another process, while this one claims
        try:
            async with other.transaction():
                theirs = await claim_due_deliveries(other, limit=10, now=SYSTEM_CLOCK.now(), **claim_now)
        finally:
            await other.close()
        return mine, theirs

    return await db.transaction(both)


async def test_a_second_process_claiming_meanwhile_skips_the_merchants_being_claimed_for(
    db: Database, settings: Settings, other_application: uuid.UUID, endpoints: dict[str, uuid.UUID]
) -> None:
    endpoints["other"] = await _endpoint(db, other_application, "other")
    await _events(db, other_application, 5)
    mine, theirs = await _claims_of_two_processes_at_once(db, settings, limit=1, per_merchant=100)
    (claimed_here,) = mine
    # Not the endpoint being claimed for, nor any other of its merchant's: another merchant's.
    assert {item.config_id for item in theirs} == {endpoints["other"]}
    # Once this claim committed, the counts of what is in flight are exact for everyone.
    shares_left = {name: SHARE for name in endpoints} | {"other": 0}
    shares_left[next(name for name, id_ in endpoints.items() if id_ == claimed_here.config_id)] -= 1
    assert per_endpoint(await claim(db), endpoints) == shares_left


async def test_processes_claiming_at_once_never_pass_a_merchants_share_together(
    db: Database, settings: Settings, endpoints: dict[str, uuid.UUID]
) -> None:
    # The merchant has a third endpoint: while one process claims for two, another could claim for
    # the third, the merchant's claims of neither counted in the other's.
    application_id = await db.autocommit(_application_of, endpoints["slow"])
    endpoints["third"] = await _endpoint(db, application_id, "third")
    await _events(db, application_id, 5)
    mine, theirs = await _claims_of_two_processes_at_once(db, settings, limit=2, per_merchant=MERCHANT_SHARE)
    assert len(mine) == 2
    assert theirs == []  # the merchant is being claimed for: left to the next round
    assert len(await claim(db, per_merchant=MERCHANT_SHARE)) == MERCHANT_SHARE - 2


async def test_a_claim_handed_back_is_due_again_unattempted(
    db: Database, endpoints: dict[str, uuid.UUID]
) -> None:
    claimed = await claim(db)
    await db.transaction(release_claims, [item.id for item in claimed], now=SYSTEM_CLOCK.now())

    async def state(conn: Connection) -> list[Any]:
        return list(
            await conn.fetch(
                "SELECT attempts, claimed_until, next_attempt_at <= now() AS due FROM webhook_deliveries"
            )
        )

    assert {(row["attempts"], row["claimed_until"], row["due"]) for row in await db.autocommit(state)} == {
        (0, None, True)
    }
    assert len(await claim(db)) == len(claimed)
