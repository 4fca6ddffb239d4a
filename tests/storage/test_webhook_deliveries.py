"""Claims of webhook deliveries: a fair share per endpoint and per merchant, exact across processes,
leases that end when the attempt is recorded or handed back."""

from __future__ import annotations

import uuid
from typing import Any, cast

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
        most=100,
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


async def test_a_claim_skips_the_deliveries_another_transaction_holds_instead_of_waiting_for_them(
    db: Database, settings: Settings, endpoints: dict[str, uuid.UUID]
) -> None:
    # A transaction gives up `slow`'s deliveries (its endpoint deleted), not committed yet, while
    # another process claims. A claim that waited for their rows while holding the rows it had
    # updated deadlocked with such a transaction updating them in another order; it now leaves them
    # to a later round at once.
    async def claim_beside(conn: Connection) -> list[ClaimedDelivery]:
        await webhooks.fail_pending_deliveries(conn, endpoints["slow"], "the endpoint was deleted")
        other = await asyncpg.connect(settings.database.url)  # another process
        try:
            async with other.transaction():
                # Bounds the failure only: a claim that waits fails here instead of hanging.
                await other.execute("SET LOCAL lock_timeout = '10s'")
                return await claim_due_deliveries(
                    cast(Connection, other),
                    limit=10,
                    per_endpoint=SHARE,
                    per_merchant=100,
                    lease_s=60,
                    owner=None,
                    now=SYSTEM_CLOCK.now(),
                )
        finally:
            await other.close()

    claimed = await db.transaction(claim_beside)
    assert per_endpoint(claimed, endpoints) == {"slow": 0, "quick": SHARE}


# --- One merchant's backlog and endpoints against another merchant's delivery --------------------

BACKLOG = 3000  # deliveries of merchant A, due since before B's


async def _backlog(db: Database, config_ids: list[uuid.UUID], count: int) -> None:
    """`count` deliveries spread over `config_ids` (of one application), each the event of a
    session of its own, due for an hour already: written straight into the tables (INSERT ...
    SELECT generate_series)."""

    async def write(conn: Connection) -> None:
        await conn.execute(
            """WITH configs AS (
                    SELECT id, application_id, row_number() OVER (ORDER BY id) - 1 AS place
                    FROM webhook_configs WHERE id = ANY($1::uuid[])),
                numbered AS (SELECT n, gen_random_uuid() AS session_id FROM generate_series(1, $2) n),
                sessions AS (
                    INSERT INTO checkout_sessions (id, application_id, order_reference, amount_minor,
                                                   currency, status, payment_method, customer)
                    SELECT session_id, (SELECT application_id FROM configs LIMIT 1), 'backlog-' || n,
                           100, 'PLN', 'SUCCEEDED', 'card', '{}'::jsonb
                    FROM numbered),
                events AS (
                    INSERT INTO outbox_events (id, application_id, session_id, type, payload,
                                               fanned_out_at)
                    SELECT 'evt_backlog_' || n, (SELECT application_id FROM configs LIMIT 1),
                           session_id, 'session.completed', '{}'::jsonb, $3
                    FROM numbered ORDER BY n RETURNING seq, session_id)
                INSERT INTO webhook_deliveries (id, config_id, application_id, event_seq, session_id,
                                                status, next_attempt_at)
                SELECT gen_random_uuid(), c.id, c.application_id, e.seq, e.session_id, $4,
                       $3::timestamptz - interval '1 hour' + make_interval(secs => e.seq / 1000.0)
                FROM events e JOIN configs c ON c.place = e.seq % (SELECT count(*) FROM configs)""",
            config_ids,
            count,
            SYSTEM_CLOCK.now(),
            DeliveryStatus.PENDING,
        )

    await db.transaction(write)


async def _two_merchants_one_deep(
    db: Database, settings: Settings, other_application: uuid.UUID, endpoints_of_a: int
) -> tuple[list[uuid.UUID], uuid.UUID]:
    """Merchant A with `endpoints_of_a` endpoints and `BACKLOG` deliveries due among them for an hour;
    merchant B (of `other_application`) with one endpoint and one delivery due just now."""
    application_a = await _application(db, settings)
    endpoints_a = [await _endpoint(db, application_a, f"a{number}") for number in range(endpoints_of_a)]
    await _backlog(db, endpoints_a, BACKLOG)
    endpoint_b = await _endpoint(db, other_application, "b")
    await _events(db, other_application, 1)
    return endpoints_a, endpoint_b


async def test_a_merchants_many_endpoints_and_deep_backlog_leave_room_for_anothers_delivery(
    db: Database, settings: Settings, other_application: uuid.UUID
) -> None:
    # A's twelve endpoints have waited longest, more of them than the round has room for.
    endpoints_a, endpoint_b = await _two_merchants_one_deep(db, settings, other_application, 12)
    claimed = await claim(db, limit=10, per_merchant=MERCHANT_SHARE)
    assert [item.config_id for item in claimed].count(endpoint_b) == 1
    assert sum(1 for item in claimed if item.config_id in endpoints_a) == MERCHANT_SHARE


async def test_a_merchants_backlog_drains_at_its_share_round_after_round(
    db: Database, settings: Settings, other_application: uuid.UUID
) -> None:
    endpoints_a, _ = await _two_merchants_one_deep(db, settings, other_application, 1)
    for _ in range(3):
        claimed = [item for item in await claim(db, limit=10) if item.config_id in endpoints_a]
        assert len(claimed) == SHARE  # A's endpoint's share, its oldest first
        for item in claimed:
            await db.transaction(
                record_attempt,
                item.id,
                status_code=204,
                error=None,
                latency_ms=1,
                response_body="",
                outcome=DeliveryStatus.DELIVERED,
                retry_in_s=None,
                now=SYSTEM_CLOCK.now(),
            )
    delivered = await db.autocommit(_delivered_events)
    assert delivered == [f"evt_backlog_{number}" for number in range(1, 3 * SHARE + 1)]


async def _delivered_events(conn: Connection) -> list[str]:
    rows = await conn.fetch(
        """SELECT e.id FROM webhook_deliveries d JOIN outbox_events e ON e.seq = d.event_seq
            WHERE d.status = $1 ORDER BY e.seq""",
        DeliveryStatus.DELIVERED,
    )
    return [row["id"] for row in rows]


class _Recording:
    """A connection that records each statement a claim runs, with its arguments."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.statements: list[tuple[str, tuple[Any, ...]]] = []

    async def fetch(self, statement: str, *args: Any) -> list[asyncpg.Record]:
        self.statements.append((statement, args))
        return await self.conn.fetch(statement, *args)


class _RolledBack(Exception):
    def __init__(self, found: Any) -> None:
        self.found = found


async def _rolled_back(db: Database, unit: Any) -> Any:
    async def run(conn: Connection) -> None:
        raise _RolledBack(await unit(conn))

    try:
        await db.transaction(run)
    except _RolledBack as done:
        return done.found
    raise AssertionError("not rolled back")


async def test_a_claim_reads_a_few_pages_however_deep_another_merchants_backlog(
    db: Database, settings: Settings, other_application: uuid.UUID
) -> None:
    endpoints_a, endpoint_b = await _two_merchants_one_deep(db, settings, other_application, 1)

    async def statements_of_a_claim(conn: Connection) -> list[tuple[str, tuple[Any, ...]]]:
        recording = _Recording(conn)
        claimed = await claim_due_deliveries(
            cast(Connection, recording),
            limit=10,
            per_endpoint=SHARE,
            per_merchant=MERCHANT_SHARE,
            lease_s=60,
            owner=None,
            now=SYSTEM_CLOCK.now(),
        )
        assert {item.config_id for item in claimed} == {*endpoints_a, endpoint_b}
        return recording.statements

    statements = await _rolled_back(db, statements_of_a_claim)

    async def buffers_of_each(conn: Connection) -> list[int]:
        # The same statements again, on the same rows (the claim was rolled back), explained.
        found = []
        for statement, args in statements:
            (plan,) = await conn.fetchval(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {statement}", *args)
            top = plan["Plan"]
            found.append(top["Shared Hit Blocks"] + top["Shared Read Blocks"])
        return found

    buffers = await _rolled_back(db, buffers_of_each)
    # Claiming three deliveries (their rows and index entries updated) reads about 120 pages here;
    # reading A's backlog would read one per delivery at least (it did: 9,075 for 3,000).
    assert max(buffers) < BACKLOG // 6, buffers


@pytest.mark.parametrize("outcome", [DeliveryStatus.FAILED, DeliveryStatus.DELIVERED, DeliveryStatus.PENDING])
async def test_a_resend_asked_during_an_attempt_is_sent_whatever_the_attempt_ends_in(
    db: Database, endpoints: dict[str, uuid.UUID], outcome: DeliveryStatus
) -> None:
    in_flight = (await claim(db, limit=1))[0]
    resent_at = SYSTEM_CLOCK.now()
    await db.transaction(webhooks.retry_delivery, in_flight.config_id, in_flight.id, now=resent_at)
    await db.transaction(
        record_attempt,
        in_flight.id,
        status_code=200 if outcome is DeliveryStatus.DELIVERED else 500,
        error=None,
        latency_ms=1,
        response_body="",
        outcome=outcome,
        retry_in_s=3600 if outcome is DeliveryStatus.PENDING else None,
        now=SYSTEM_CLOCK.now(),
    )

    async def state(conn: Connection) -> Any:
        return await conn.fetchrow(
            "SELECT status, next_attempt_at, claimed_until, (SELECT count(*) FROM webhook_attempts a"
            " WHERE a.delivery_id = d.id) AS logged FROM webhook_deliveries d WHERE id = $1",
            in_flight.id,
        )

    row = await db.autocommit(state)
    assert (row["status"], row["next_attempt_at"], row["claimed_until"], row["logged"]) == (
        DeliveryStatus.PENDING,
        resent_at,
        None,
        1,
    )  # due since the resend, unclaimed: the next claim for its endpoint may take it


async def test_an_attempt_with_no_resend_meanwhile_ends_as_its_outcome_says(
    db: Database, endpoints: dict[str, uuid.UUID]
) -> None:
    in_flight = (await claim(db, limit=1))[0]
    await db.transaction(
        record_attempt,
        in_flight.id,
        status_code=500,
        error=None,
        latency_ms=1,
        response_body="",
        outcome=DeliveryStatus.FAILED,
        retry_in_s=None,
        now=SYSTEM_CLOCK.now(),
    )
    status = await db.autocommit(
        lambda conn: conn.fetchval("SELECT status FROM webhook_deliveries WHERE id = $1", in_flight.id)
    )
    assert status == DeliveryStatus.FAILED
    assert in_flight.id not in {item.id for item in await claim(db)}
