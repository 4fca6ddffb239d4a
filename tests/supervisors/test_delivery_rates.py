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
from payorch.storage.database import Database
from payorch.storage.webhook_deliveries import claim_due_deliveries
from payorch.supervisors.attempt_rates import AttemptRates, start_delays
from tests.clock import ShiftedClock
from tests.storage.test_webhook_deliveries import _application, _endpoint, _events

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


def test_the_attempts_a_round_claims_for_a_merchant_start_evenly_at_its_rate_the_first_at_once() -> None:
    assert start_delays(1, 50.0) == [0.0]
    assert start_delays(5, 50.0) == pytest.approx([0.0, 0.02, 0.04, 0.06, 0.08])
    assert start_delays(0, 50.0) == []
