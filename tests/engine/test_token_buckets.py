"""Token buckets on an explicit clock: bursts, refusals with the right wait, refill; and the in-flight
limit per key. (A paced take's arithmetic: tests/http/test_shared_limits.py.)"""

from __future__ import annotations

import pytest

from payorch.values.token_buckets import InFlightLimit, TokenBucket, whole_seconds


def test_a_burst_is_allowed_then_the_next_request_waits_one_interval() -> None:
    bucket = TokenBucket.full(rate=2.0, burst=3, now=100.0)
    assert [bucket.take(100.0) for _ in range(3)] == [None, None, None]
    assert bucket.take(100.0) == pytest.approx(0.5)


def test_a_refused_request_takes_nothing() -> None:
    bucket = TokenBucket.full(rate=1.0, burst=1, now=0.0)
    assert bucket.take(0.0) is None
    assert bucket.take(0.25) == pytest.approx(0.75)
    assert bucket.take(0.5) == pytest.approx(0.5)
    assert bucket.take(1.0) is None


def test_the_bucket_refills_continuously_at_the_rate() -> None:
    bucket = TokenBucket.full(rate=1.0, burst=3, now=0.0)
    for _ in range(3):
        bucket.take(0.0)
    assert bucket.take(0.5) == pytest.approx(0.5)
    assert bucket.take(1.0) is None
    assert bucket.take(1.0) == pytest.approx(1.0)
    assert bucket.take(3.0) is None
    assert bucket.take(3.0) is None
    assert bucket.take(3.0) is not None


def test_the_bucket_never_holds_more_than_the_burst() -> None:
    bucket = TokenBucket.full(rate=1.0, burst=2, now=0.0)
    bucket.take(0.0)
    assert [bucket.take(1000.0) for _ in range(3)] == [None, None, pytest.approx(1.0)]


def test_a_clock_stepping_back_refills_nothing_and_drains_nothing() -> None:
    bucket = TokenBucket.full(rate=1.0, burst=2, now=10.0)
    assert bucket.take(10.0) is None
    assert bucket.take(5.0) is None
    assert bucket.take(5.0) == pytest.approx(1.0)


def test_a_bucket_is_full_again_once_idle_for_burst_over_rate_seconds() -> None:
    bucket = TokenBucket.full(rate=1.0, burst=5, now=0.0)
    bucket.take(0.0)
    assert not bucket.is_full(0.5)
    assert bucket.is_full(1.0)


@pytest.mark.parametrize(("wait", "seconds"), [(0.01, 1), (1.0, 1), (1.0000000001, 1), (1.2, 2), (59.5, 60)])
def test_waits_are_whole_seconds_rounded_up_and_at_least_one(wait: float, seconds: int) -> None:
    assert whole_seconds(wait) == seconds


@pytest.mark.parametrize(("rate", "burst"), [(0.0, 1), (-1.0, 1), (1.0, 0)])
def test_a_bucket_needs_a_positive_rate_and_burst(rate: float, burst: int) -> None:
    with pytest.raises(ValueError):
        TokenBucket.full(rate=rate, burst=burst, now=0.0)


def test_wait_tells_what_take_would_answer_without_taking() -> None:
    bucket = TokenBucket.full(rate=1.0, burst=2, now=0.0)
    assert bucket.wait(0.0) is None
    bucket.take(0.0)
    assert bucket.wait(0.0) is None
    bucket.take(0.0)
    assert bucket.wait(0.25) == pytest.approx(0.75)
    assert bucket.wait(0.25) == pytest.approx(0.75)  # asking twice took nothing
    assert bucket.take(1.0) is None


def test_an_in_flight_limit_refuses_past_its_share_per_key_and_forgets_idle_keys() -> None:
    limit = InFlightLimit(per_key=2)
    assert limit.try_enter("a") and limit.try_enter("a")
    assert not limit.try_enter("a")
    assert limit.try_enter("b")  # another key has its own share
    limit.leave("a")
    assert limit.try_enter("a")
    for key in ("a", "a", "b"):
        limit.leave(key)
    assert len(limit) == 0
