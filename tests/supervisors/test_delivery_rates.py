"""A merchant's webhook delivery attempts per second, bounded by its token bucket: a round of the
delivery loop claims no more of a merchant's deliveries than its bucket holds, however many are due
to a receiver that answers at once, and another merchant's are claimed in the same round. Time is
the clock the test moves (`tests/clock.py`); nothing here times anything."""

from __future__ import annotations

import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest

from payorch.config import Settings
from payorch.runtime import open_runtime
from payorch.storage import outbox, webhook_deliveries
from payorch.storage.database import Connection, Database
from payorch.storage.webhook_deliveries import Round, claim_due_deliveries
from payorch.supervisors.attempt_rates import START_BURST, AttemptRates
from payorch.supervisors.delivery_loop import IN_FLIGHT_PER_MERCHANT
from tests import webhook_receiver as receiving
from tests.clock import ShiftedClock
from tests.helpers import new_shop
from tests.storage.test_webhook_deliveries import _application, _endpoint, _events
from tests.webhook_receiver import WebhookReceiver

webhook_receiver = receiving.webhook_receiver

LEASE_S = 600  # longer than the clock moves: the claims of a round stay in flight


async def _claim_round(db: Database, rates: AttemptRates, clock: ShiftedClock) -> Counter[uuid.UUID]:
    """One claim as the delivery loop makes it (shares far above what is due: only the buckets
    bound it), its attempts spent from the buckets: how many were claimed per application."""
    now = clock.now()
    claimed = await db.transaction(
        claim_due_deliveries,
        limit=128,
        per_endpoint=100,
        per_merchant=100,
        lease_s=LEASE_S,
        owner=None,
        now=now,
        allowances=rates.allowances(now),
        default_allowance=rates.burst,
    )
    for merchant_id, attempts in Counter(delivery.merchant_id for delivery in claimed).items():
        rates.spend(merchant_id, attempts, now)
    return Counter(delivery.application_id for delivery in claimed)


async def test_a_round_claims_no_more_of_a_merchants_deliveries_than_its_bucket_holds_and_anothers_beside(
    db: Database, settings: Settings, clock: ShiftedClock
) -> None:
    # Both made before any delivery is due: the runtime that makes one would attempt them.
    busy = await _application(db, settings)
    quiet = await _application(db, settings)
    await _endpoint(db, busy, "busy")
    await _endpoint(db, quiet, "quiet")
    await _events(db, busy, 10)
    await _events(db, quiet, 1)
    # A token every 20 s: the real seconds this test takes add none.
    rates = AttemptRates(rate=0.05, burst=3)

    assert await _claim_round(db, rates, clock) == {busy: 3, quiet: 1}
    assert await _claim_round(db, rates, clock) == {}  # the busy merchant's bucket is empty
    clock.advance(40)  # two tokens
    assert await _claim_round(db, rates, clock) == {busy: 2}
    await _events(db, quiet, 1)
    # The quiet merchant, below its rate, is not held back by the busy one's empty bucket.
    assert await _claim_round(db, rates, clock) == {quiet: 1}


async def test_a_merchant_held_to_its_rate_is_claimed_for_in_batches_not_one_attempt_per_round(
    db: Database, settings: Settings, clock: ShiftedClock
) -> None:
    busy = await _application(db, settings)
    await _endpoint(db, busy, "busy")
    await _events(db, busy, 40)
    # 10 a second, a bucket of 10: claimed for 2 at a time once its first second's worth is spent.
    rates = AttemptRates(rate=10, burst=10)

    assert await _claim_round(db, rates, clock) == {busy: 10}
    clock.advance(0.1)  # one token: not a batch, so the round walks none of the merchant's endpoints
    assert await _claim_round(db, rates, clock) == {}
    clock.advance(0.1)  # two: a batch
    assert await _claim_round(db, rates, clock) == {busy: 2}
    clock.advance(1.0)  # the same rate over time: ten tokens, ten attempts
    assert await _claim_round(db, rates, clock) == {busy: 10}


def test_an_attempt_of_a_merchant_without_a_batch_wakes_nobody_and_the_loop_waits_for_the_next_batch() -> (
    None
):
    now = datetime(2026, 1, 1, tzinfo=UTC)
    rates = AttemptRates(rate=10, burst=10)
    held, fresh = uuid.uuid4(), uuid.uuid4()
    assert rates.next_batch_in(now) is None  # nobody held to the rate: the loop waits its idle wait
    rates.spend(held, 10, now)  # its second's worth spent

    assert not rates.batch_ready(held, now)
    assert rates.batch_ready(fresh, now)  # a merchant below its rate wakes the loop as before
    assert rates.next_batch_in(now) == pytest.approx(0.2)  # a batch of two, at ten a second
    later = now + timedelta(seconds=0.25)
    assert rates.batch_ready(held, later)
    # Holding a batch, it is claimed for by the round its ended attempts wake: no timed wake.
    assert rates.next_batch_in(later) is None


def test_a_merchant_held_back_by_its_share_in_flight_wakes_the_loop_only_once_a_batch_has_room() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    rates = AttemptRates(rate=50, burst=50)  # batches of 10
    held, fresh = uuid.uuid4(), uuid.uuid4()
    rates.spend(held, 16, now)  # its bucket still holds 34: its share, not its rate, holds it back
    share = 16

    assert rates.batch_ready(held, now)  # no share given: its bucket alone
    assert not rates.batch_ready(held, now, in_flight=15, share=share)  # room for one: not a batch
    assert not rates.batch_ready(held, now, in_flight=9, share=share)
    # A batch of 10 is more than half its share: half its share (8) is room enough.
    assert rates.batch_ready(held, now, in_flight=8, share=share)
    # A merchant not held to its rate wakes the loop at every attempt's end, as before.
    assert rates.batch_ready(fresh, now, in_flight=15, share=share)
    # Nor does a round another wake-up makes claim the one delivery its share has room for.
    assert rates.allowances(now, in_flight={held: 15, fresh: 15}, share=share) == {held: 0}
    assert rates.allowances(now, in_flight={held: 8}, share=share) == {held: 34}
    rates.spend(held, 30, now)  # four tokens left: no batch, however much room
    assert not rates.batch_ready(held, now, in_flight=0, share=share)


@pytest.fixture
def receiving_settings(settings: Settings, webhook_receiver: WebhookReceiver) -> Settings:
    webhooks = settings.webhooks.model_copy(update={"ca_bundle": webhook_receiver.ca_path})
    return settings.model_copy(update={"webhooks": webhooks})


async def test_a_backlog_to_a_receiver_answering_at_once_is_claimed_in_batches_not_a_round_per_delivery(
    db: Database,
    receiving_settings: Settings,
    webhook_receiver: WebhookReceiver,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Its merchant's share of attempts in flight, not its bucket, holds it back (its claimed
    attempts wait for their start, 20 ms apart): a round that claims for it claims a batch."""
    fan_out_and_claim = webhook_deliveries.fan_out_and_claim
    claiming_rounds: list[int] = []

    async def counted(conn: Connection, **arguments: object) -> Round:
        done = await fan_out_and_claim(conn, **arguments)  # type: ignore[arg-type]
        if done.claimed:
            claiming_rounds.append(len(done.claimed))
        return done

    monkeypatch.setattr(webhook_deliveries, "fan_out_and_claim", counted)
    endpoints, events = 4, 20
    async with open_runtime(receiving_settings, db) as runtime:
        client = runtime.app.test_client()
        shop = await new_shop(client, db, receiving_settings)
        for number in range(endpoints):
            response = await client.post(
                f"/api/v1/applications/{shop.application_id}/webhooks",
                json={"url": f"{webhook_receiver.url}/{number}"},
                headers=shop.merchant.headers,
            )
            assert response.status_code == 201, await response.get_data(as_text=True)

        async def add(conn: Connection) -> None:
            for _ in range(events):
                await outbox.add_event(
                    conn,
                    event_id=f"evt_{uuid.uuid4().hex}",
                    application_id=uuid.UUID(shop.application_id),
                    session_id=None,
                    event_type="session.completed",
                    payload={},
                )

        await db.transaction(add)
        await webhook_receiver.wait_for(endpoints * events, timeout_s=30)

    assert sum(claiming_rounds) == endpoints * events
    # A round claims for the merchant once half its share (8) has room, the last what is left (a
    # round per delivery claimed one each: some 60 rounds here).
    assert len(claiming_rounds) <= endpoints * events // (IN_FLIGHT_PER_MERCHANT // 4)


T0 = datetime(2026, 1, 1, tzinfo=UTC)


def test_a_merchant_below_its_rate_whose_attempts_come_together_starts_them_at_once() -> None:
    rates = AttemptRates(50.0, 50)
    merchant = uuid.uuid4()
    # Two payments committed together, claimed in one round, every 50 ms: 20 a second.
    for round_index in range(10):
        at = T0 + timedelta(seconds=0.05 * round_index)
        assert rates.start_delays(merchant, 2, at) == [0.0, 0.0]
    assert rates.start_delays(merchant, 0, T0) == []


def test_attempts_beyond_the_burst_start_evenly_at_the_rate_across_rounds() -> None:
    rates = AttemptRates(50.0, 50)
    merchant, other = uuid.uuid4(), uuid.uuid4()
    spaced = [0.02 * (index + 1) for index in range(4)]
    assert rates.start_delays(merchant, START_BURST + 4, T0) == pytest.approx([0.0] * START_BURST + spaced)
    # The next round, at once: after those already scheduled, not all at once again.
    assert rates.start_delays(merchant, 2, T0) == pytest.approx([0.1, 0.12])
    # Another merchant's attempts are not spaced behind them.
    assert rates.start_delays(other, 2, T0) == [0.0, 0.0]
    # Once its schedule has passed, the merchant starts at once again.
    assert rates.start_delays(merchant, 1, T0 + timedelta(seconds=1)) == [0.0]
