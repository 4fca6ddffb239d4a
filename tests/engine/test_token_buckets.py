"""Token buckets on an explicit clock: bursts, refusals with the right wait, refill, bounded memory."""

from __future__ import annotations

import pytest

from payorch.engine.token_buckets import InFlightLimit, RateLimiter, TokenBucket, whole_seconds


def test_a_burst_is_allowed_then_the_next_request_waits_one_interval() -> None:
    limiter = RateLimiter(rate=2.0, burst=3)
    assert [limiter.take("k", 100.0) for _ in range(3)] == [None, None, None]
    assert limiter.take("k", 100.0) == pytest.approx(0.5)


def test_a_refused_request_takes_nothing() -> None:
    limiter = RateLimiter(rate=1.0, burst=1)
    assert limiter.take("k", 0.0) is None
    assert limiter.take("k", 0.25) == pytest.approx(0.75)
    assert limiter.take("k", 0.5) == pytest.approx(0.5)
    assert limiter.take("k", 1.0) is None


def test_the_bucket_refills_continuously_at_the_rate() -> None:
    limiter = RateLimiter(rate=1.0, burst=3)
    for _ in range(3):
        limiter.take("k", 0.0)
    assert limiter.take("k", 0.5) == pytest.approx(0.5)
    assert limiter.take("k", 1.0) is None
    assert limiter.take("k", 1.0) == pytest.approx(1.0)
    assert limiter.take("k", 3.0) is None
    assert limiter.take("k", 3.0) is None
    assert limiter.take("k", 3.0) is not None


def test_the_bucket_never_holds_more_than_the_burst() -> None:
    limiter = RateLimiter(rate=1.0, burst=2)
    limiter.take("k", 0.0)
    assert [limiter.take("k", 1000.0) for _ in range(3)] == [None, None, pytest.approx(1.0)]


def test_a_clock_stepping_back_refills_nothing_and_drains_nothing() -> None:
    bucket = TokenBucket.full(rate=1.0, burst=2, now=10.0)
    assert bucket.take(10.0) is None
    assert bucket.take(5.0) is None
    assert bucket.take(5.0) == pytest.approx(1.0)


def test_keys_have_independent_buckets() -> None:
    limiter = RateLimiter(rate=1.0, burst=1)
    assert limiter.take("apikey:a", 0.0) is None
    assert limiter.take("apikey:a", 0.0) is not None
    assert limiter.take("apikey:b", 0.0) is None
    assert limiter.take("ip:a", 0.0) is None


def test_buckets_full_again_are_forgotten() -> None:
    limiter = RateLimiter(rate=1.0, burst=5)  # one token taken is back 1 s later
    for number in range(1000):
        limiter.take(f"ip:{number}", number / 10_000)  # a flood of distinct keys within 0.1 s
    assert len(limiter) == 1000
    limiter.take("ip:late", 1.5)
    assert len(limiter) == 1


def test_a_busy_key_is_kept_while_idle_ones_are_forgotten() -> None:
    limiter = RateLimiter(rate=1.0, burst=2)
    limiter.take("idle", 0.0)
    for second in range(1, 6):
        limiter.take("busy", float(second))
        limiter.take("busy", float(second))
    assert len(limiter) == 1
    assert limiter.take("busy", 5.0) == pytest.approx(1.0)  # its state survived the sweeps


def test_memory_is_capped_under_a_flood_of_distinct_keys() -> None:
    limiter = RateLimiter(rate=1.0, burst=100, max_keys=50)
    for number in range(10_000):
        limiter.take(f"ip:{number}", 0.0)
        assert len(limiter) <= 50
    assert len(limiter) == 50


def test_a_key_pushed_out_by_the_cap_starts_again_full() -> None:
    limiter = RateLimiter(rate=1.0, burst=1, max_keys=2)
    limiter.take("a", 0.0)
    limiter.take("b", 0.0)
    limiter.take("c", 0.0)  # pushes out "a", the least recently used
    assert limiter.take("a", 0.0) is None


@pytest.mark.parametrize(("wait", "seconds"), [(0.01, 1), (1.0, 1), (1.0000000001, 1), (1.2, 2), (59.5, 60)])
def test_waits_are_whole_seconds_rounded_up_and_at_least_one(wait: float, seconds: int) -> None:
    assert whole_seconds(wait) == seconds


@pytest.mark.parametrize(("rate", "burst"), [(0.0, 1), (-1.0, 1), (1.0, 0)])
def test_a_limiter_needs_a_positive_rate_and_burst(rate: float, burst: int) -> None:
    with pytest.raises(ValueError):
        RateLimiter(rate=rate, burst=burst)


def test_wait_tells_what_take_would_answer_without_taking() -> None:
    limiter = RateLimiter(rate=1.0, burst=2)
    assert limiter.wait("k", 0.0) is None  # a key never seen has a full bucket
    limiter.take("k", 0.0)
    assert limiter.wait("k", 0.0) is None
    limiter.take("k", 0.0)
    assert limiter.wait("k", 0.25) == pytest.approx(0.75)
    assert limiter.wait("k", 0.25) == pytest.approx(0.75)  # asking twice took nothing
    assert limiter.take("k", 1.0) is None


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


def test_refilled_buckets_are_dropped_without_any_request() -> None:
    limiter = RateLimiter(rate=1.0, burst=2)
    limiter.take("idle", now=0.0)
    limiter.take("busy", now=9.5)
    limiter.forget_idle(now=10.0)
    assert len(limiter) == 1


def test_reconfigure_keeps_tokens_up_to_the_new_burst_and_refills_at_the_new_rate() -> None:
    limiter = RateLimiter(rate=1.0, burst=10)
    for _ in range(2):
        assert limiter.take("k", 0.0) is None  # 8 tokens left
    limiter.reconfigure(rate=0.5, burst=3)
    for _ in range(3):
        assert limiter.take("k", 0.0) is None
    assert limiter.take("k", 0.0) == pytest.approx(2.0)  # one token at 0.5 per second
    assert limiter.take("new", 0.0) is None  # a new key gets the new burst


def test_reserving_paces_callers_to_the_rate_each_behind_the_ones_before() -> None:
    limiter = RateLimiter(rate=10, burst=2)
    waits = [limiter.reserve("ip:a", 0.0, max_wait=1.0) for _ in range(5)]
    assert waits == [
        (0.0, None),
        (0.0, None),
        (pytest.approx(0.1), None),
        (pytest.approx(0.2), None),
        (pytest.approx(0.3), None),
    ]


def test_a_token_further_away_than_the_wait_allowed_is_refused_and_nothing_taken() -> None:
    limiter = RateLimiter(rate=10, burst=1)
    assert limiter.reserve("ip:a", 0.0, max_wait=0.15) == (0.0, None)
    assert limiter.reserve("ip:a", 0.0, max_wait=0.15) == (pytest.approx(0.1), None)
    assert limiter.reserve("ip:a", 0.0, max_wait=0.15) == (0.0, pytest.approx(0.2))
    assert limiter.reserve("ip:a", 0.2, max_wait=0.15) == (
        pytest.approx(0.0),
        None,
    )  # the refusal took nothing
