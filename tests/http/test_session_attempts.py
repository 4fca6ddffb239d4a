"""A session's payment attempts: the read record's `attempts`, oldest first, the last being the one the
session's row holds; ending the open attempt and opening the next (`storage.next_attempt`), under the
session's row lock, one next attempt however many ask."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import timedelta
from decimal import Decimal
from typing import Any, cast

import asyncpg
import pytest
import trio

from payorch.config import Settings
from payorch.storage import attempts, refunds, sessions
from payorch.storage.database import Connection, Database
from payorch.storage.next_attempt import AttemptEnding, NextAttempt, next_attempt_asked_at, open_next_attempt
from payorch.values.clock import SYSTEM_CLOCK
from payorch.values.statuses import AttemptStatus, FailureReason, RoutingReason
from tests.helpers import Client, Shop, create_session, expire_now, new_shop
from tests.http.test_refunds import paid_session, record_of, record_when


@pytest.fixture
async def shop(client: Client, db: Database, settings: Settings) -> Shop:
    return await new_shop(client, db, settings)


async def _created(client: Client, shop: Shop) -> dict[str, Any]:
    response = await create_session(client, shop, f"key-{uuid.uuid4()}")
    assert response.status_code == 201
    body: dict[str, Any] = await response.get_json()
    return body


async def _stored(db: Database, session_id: str) -> sessions.CheckoutSession:
    found = await db.autocommit(sessions.get_session, uuid.UUID(session_id))
    assert found is not None
    return found


def _declined(session: sessions.CheckoutSession) -> AttemptEnding:
    """The session's open attempt, declined at its provider."""
    assert session.provider_name is not None and session.provider_reference is not None
    return AttemptEnding(
        provider_name=session.provider_name,
        provider_reference=session.provider_reference,
        status=AttemptStatus.DECLINED,
        failure_reason=FailureReason.INSUFFICIENT_FUNDS,
        provider_code="insufficient_funds",
    )


def _at_stripe(reference: str = "cs_test_second") -> NextAttempt:
    return NextAttempt(
        provider_name="stripe",
        provider_reference=reference,
        checkout_url=f"https://checkout.stripe.example/c/pay/{reference}",
        routing_score=Decimal("0.8000"),
        routing_rule=None,
        routing_reason=RoutingReason.RECOVERY,
        routing_version=0,
    )


async def _open_next(
    db: Database, shop: Shop, session: sessions.CheckoutSession, next_attempt: NextAttempt
) -> sessions.CheckoutSession | None:
    return await db.transaction(
        open_next_attempt,
        application_id=uuid.UUID(shop.application_id),
        session_id=session.id,
        ending=_declined(session),
        next_attempt=next_attempt,
        now=SYSTEM_CLOCK.now(),
    )


async def test_a_new_session_reads_with_one_open_attempt_at_its_provider(client: Client, shop: Shop) -> None:
    created = await _created(client, shop)
    record = await record_of(client, shop, created["sessionId"])
    assert record["attempts"] == [
        {
            "number": 1,
            "provider": "sandbox",
            "status": "OPEN",
            "failureReason": None,
            "providerCode": None,
            "reason": created["routing"]["reason"],
            "createdAt": created["createdAt"],
            "endedAt": None,
        }
    ]


async def test_a_paid_session_reads_with_one_succeeded_attempt(client: Client, shop: Shop) -> None:
    session_id = await paid_session(client, shop)
    record = await record_of(client, shop, session_id)
    [attempt] = record["attempts"]
    assert (attempt["provider"], attempt["status"], attempt["failureReason"]) == (
        "sandbox",
        "SUCCEEDED",
        None,
    )
    assert attempt["endedAt"] == record["updatedAt"]


async def test_an_expired_session_reads_with_its_attempt_expired(
    client: Client, shop: Shop, db: Database
) -> None:
    created = await _created(client, shop)
    await expire_now(db, created["sessionId"])
    record = await record_when(client, shop, created["sessionId"], lambda found: found["status"] == "FAILED")
    [attempt] = record["attempts"]
    assert (attempt["status"], attempt["failureReason"]) == ("EXPIRED", "EXPIRED")
    assert attempt["endedAt"] == record["expiresAt"]


async def test_opening_the_next_attempt_ends_the_open_one_and_the_session_describes_the_next(
    client: Client, shop: Shop, db: Database
) -> None:
    created = await _created(client, shop)
    first = await _stored(db, created["sessionId"])

    moved = await _open_next(db, shop, first, _at_stripe())

    assert moved is not None
    assert (moved.provider_name, moved.provider_reference) == ("stripe", "cs_test_second")
    assert moved.checkout_url == "https://checkout.stripe.example/c/pay/cs_test_second"
    record = await record_of(client, shop, created["sessionId"])
    assert record["status"] == "PENDING"
    assert record["providerName"] == "stripe"
    assert record["routing"] == {
        "selectedProvider": "stripe",
        "score": Decimal("0.8000"),
        "rule": None,
        "reason": "recovery",
        "version": 0,
    }
    declined, opened = record["attempts"]
    assert declined == {
        "number": 1,
        "provider": "sandbox",
        "status": "DECLINED",
        "failureReason": "INSUFFICIENT_FUNDS",
        "providerCode": "insufficient_funds",
        "reason": created["routing"]["reason"],
        "createdAt": created["createdAt"],
        "endedAt": record["updatedAt"],
    }
    assert opened == {
        "number": 2,
        "provider": "stripe",
        "status": "OPEN",
        "failureReason": None,
        "providerCode": None,
        "reason": "recovery",
        "createdAt": declined["endedAt"],
        "endedAt": None,
    }
    [stored] = await db.autocommit(attempts.attempts_of_session, first.id)
    assert (stored.number, stored.provider_reference) == (1, first.provider_reference)
    read = await db.autocommit(refunds.session_with_refunds, first.id)
    assert read is not None and read[2] == [stored]  # as the session read folds it in


async def test_a_third_attempt_follows_the_second_oldest_first(
    client: Client, shop: Shop, db: Database
) -> None:
    created = await _created(client, shop)
    second = await _open_next(db, shop, await _stored(db, created["sessionId"]), _at_stripe())
    assert second is not None
    third = await _open_next(
        db, shop, second, dataclasses.replace(_at_stripe("tr_third"), provider_name="mollie")
    )
    assert third is not None
    record = await record_of(client, shop, created["sessionId"])
    assert [(a["number"], a["provider"], a["status"]) for a in record["attempts"]] == [
        (1, "sandbox", "DECLINED"),
        (2, "stripe", "DECLINED"),
        (3, "mollie", "OPEN"),
    ]


async def test_ending_an_attempt_no_longer_open_changes_nothing(
    client: Client, shop: Shop, db: Database
) -> None:
    # A double return: the second asks to end the attempt the first already ended.
    created = await _created(client, shop)
    first = await _stored(db, created["sessionId"])
    assert await _open_next(db, shop, first, _at_stripe()) is not None

    assert await _open_next(db, shop, first, _at_stripe("cs_test_third")) is None

    record = await record_of(client, shop, created["sessionId"])
    assert [a["provider"] for a in record["attempts"]] == ["sandbox", "stripe"]
    assert (await _stored(db, created["sessionId"])).provider_reference == "cs_test_second"


async def test_opening_the_next_attempt_waits_for_the_sessions_row_lock(
    client: Client, shop: Shop, db: Database, settings: Settings
) -> None:
    created = await _created(client, shop)
    first = await _stored(db, created["sessionId"])

    async def second_call_while_the_first_holds_the_lock(conn: Connection) -> None:
        assert await open_next_attempt(
            conn,
            application_id=first.application_id,
            session_id=first.id,
            ending=_declined(first),
            next_attempt=_at_stripe(),
            now=SYSTEM_CLOCK.now(),
        )
        other = await asyncpg.connect(settings.database.url)  # another process
        try:
            async with other.transaction():
                await other.execute("SET LOCAL lock_timeout = '200ms'")
                with pytest.raises(asyncpg.LockNotAvailableError):
                    await open_next_attempt(
                        cast(Connection, other),
                        application_id=first.application_id,
                        session_id=first.id,
                        ending=_declined(first),
                        next_attempt=_at_stripe("cs_test_other"),
                        now=SYSTEM_CLOCK.now(),
                    )
        finally:
            await other.close()

    await db.transaction(second_call_while_the_first_holds_the_lock)
    record = await record_of(client, shop, created["sessionId"])
    assert [a["provider"] for a in record["attempts"]] == ["sandbox", "stripe"]


async def test_calls_at_once_for_the_same_attempt_open_one_next_attempt(
    client: Client, shop: Shop, db: Database
) -> None:
    created = await _created(client, shop)
    first = await _stored(db, created["sessionId"])
    opened: list[sessions.CheckoutSession | None] = []

    async def call(index: int) -> None:
        opened.append(await _open_next(db, shop, first, _at_stripe(f"cs_test_{index}")))

    async with trio.open_nursery() as nursery:
        for index in range(8):
            nursery.start_soon(call, index)

    [winner] = [session for session in opened if session is not None]
    record = await record_of(client, shop, created["sessionId"])
    assert [(a["provider"], a["status"]) for a in record["attempts"]] == [
        ("sandbox", "DECLINED"),
        ("stripe", "OPEN"),
    ]
    assert (await _stored(db, created["sessionId"])).provider_reference == winner.provider_reference


async def test_another_merchants_session_is_never_touched(
    client: Client, shop: Shop, db: Database, settings: Settings
) -> None:
    other_shop = await new_shop(client, db, settings)
    theirs = await _stored(db, (await _created(client, other_shop))["sessionId"])

    assert await _open_next(db, shop, theirs, _at_stripe()) is None

    assert await _stored(db, str(theirs.id)) == theirs
    assert await db.autocommit(attempts.attempts_of_session, theirs.id) == []
    [attempt] = (await record_of(client, other_shop, str(theirs.id)))["attempts"]
    assert (attempt["provider"], attempt["status"]) == ("sandbox", "OPEN")


async def test_a_session_no_longer_pending_opens_no_attempt(client: Client, shop: Shop, db: Database) -> None:
    session_id = await paid_session(client, shop)
    paid = await _stored(db, session_id)

    assert await _open_next(db, shop, paid, _at_stripe()) is None

    assert [a["status"] for a in (await record_of(client, shop, session_id))["attempts"]] == ["SUCCEEDED"]


async def test_the_session_list_shows_each_sessions_attempts(
    client: Client, shop: Shop, db: Database
) -> None:
    fresh = await _created(client, shop)
    moved = await _created(client, shop)
    assert await _open_next(db, shop, await _stored(db, moved["sessionId"]), _at_stripe()) is not None

    response = await client.get(f"/api/v1/applications/{shop.application_id}/sessions", headers=shop.headers)
    assert response.status_code == 200
    listed = {item["id"]: item for item in (await response.get_json())["items"]}
    assert [a["status"] for a in listed[fresh["sessionId"]]["attempts"]] == ["OPEN"]
    assert [(a["provider"], a["status"]) for a in listed[moved["sessionId"]]["attempts"]] == [
        ("sandbox", "DECLINED"),
        ("stripe", "OPEN"),
    ]
    single = await record_of(client, shop, moved["sessionId"])
    assert listed[moved["sessionId"]]["attempts"] == single["attempts"]


async def test_racing_returns_ask_the_next_provider_with_the_first_returns_moment_until_it_opens(
    client: Client, db: Database, shop: Shop
) -> None:
    session = await _stored(db, (await _created(client, shop))["sessionId"])
    assert session.provider_reference is not None
    first, later = SYSTEM_CLOCK.now(), SYSTEM_CLOCK.now() + timedelta(minutes=3)
    # The first return writes its moment; a later or racing one, on any process, reads it back.
    assert await db.autocommit(next_attempt_asked_at, session.id, session.provider_reference, first) == first
    assert await db.autocommit(next_attempt_asked_at, session.id, session.provider_reference, later) == first
    assert await _open_next(db, shop, session, _at_stripe()) is not None
    # The attempt that was asked about has ended: nobody asks for a next one after it any more.
    assert await db.autocommit(next_attempt_asked_at, session.id, session.provider_reference, later) is None
    # The attempt now open starts afresh.
    assert await db.autocommit(next_attempt_asked_at, session.id, "cs_test_second", later) == later
