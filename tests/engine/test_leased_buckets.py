"""Leases on shared token buckets, on an explicit clock: a lease's tokens are spent where they are,
each when it is due; an unspent one is dropped after its hold; what the shared bucket said of its
next token refuses without asking again; a lease is a tenth of a second of the rate."""

from __future__ import annotations

import pytest

from payorch.http.leased_buckets import BATCH_S, HOLD_S, LeasedBuckets


def test_nothing_leased_is_nothing_to_spend_and_nothing_known() -> None:
    leases = LeasedBuckets(rate=10.0, burst=20)
    assert leases.take("k", 0.0, max_wait=1.0) is None
    assert leases.refusal("k", 0.0, max_wait=0.0) is None


def test_a_lease_from_a_bucket_with_tokens_is_spent_at_once() -> None:
    leases = LeasedBuckets(rate=10.0, burst=20)
    leases.receive("k", count=3, tokens_before=20.0, now=5.0)
    assert [leases.take("k", 5.0, max_wait=0.0) for _ in range(4)] == [0.0, 0.0, 0.0, None]


def test_owed_tokens_are_due_one_interval_apart() -> None:
    # The shared bucket held half a token: the lease's tokens are due 0.05, 0.15 and 0.25 s on.
    leases = LeasedBuckets(rate=10.0, burst=20)
    leases.receive("k", count=3, tokens_before=0.5, now=0.0)
    assert leases.take("k", 0.0, max_wait=0.0) is None  # none is there yet
    assert [leases.take("k", 0.0, max_wait=1.0) for _ in range(3)] == [
        pytest.approx(0.05),
        pytest.approx(0.15),
        pytest.approx(0.25),
    ]


def test_a_token_spent_is_given_back_for_the_next_request() -> None:
    leases = LeasedBuckets(rate=10.0, burst=20)
    leases.receive("k", count=1, tokens_before=0.5, now=0.0)
    wait = leases.take("k", 0.0, max_wait=1.0)
    assert wait == pytest.approx(0.05)
    leases.give_back("k", 0.0 + wait)
    assert leases.take("k", 0.0, max_wait=1.0) == pytest.approx(0.05)


def test_a_leased_token_not_spent_within_its_hold_is_dropped() -> None:
    leases = LeasedBuckets(rate=10.0, burst=20)
    leases.receive("k", count=2, tokens_before=20.0, now=0.0)
    assert leases.take("k", HOLD_S, max_wait=0.0) == 0.0
    assert leases.take("k", HOLD_S + 0.01, max_wait=0.0) is None
    assert not leases.has_token("k", HOLD_S + 0.01)


def test_an_empty_shared_bucket_refuses_until_its_next_token_without_asking_again() -> None:
    leases = LeasedBuckets(rate=2.0, burst=4)
    leases.receive("k", count=0, tokens_before=0.25, now=10.0)  # the next token in 0.375 s
    assert leases.refusal("k", 10.0, max_wait=0.0) == pytest.approx(0.375)
    assert leases.refusal("k", 10.25, max_wait=0.0) == pytest.approx(0.125)
    assert leases.refusal("k", 10.25, max_wait=1.0) is None  # a paced request may wait for it
    assert leases.refusal("k", 10.5, max_wait=0.0) is None  # due: only the shared bucket knows


def test_the_last_token_of_a_lease_says_when_the_shared_bucket_has_its_next() -> None:
    leases = LeasedBuckets(rate=1.0, burst=2)
    leases.receive("k", count=2, tokens_before=2.0, now=0.0)
    assert leases.take("k", 0.0, max_wait=0.0) == 0.0
    assert leases.take("k", 0.0, max_wait=0.0) == 0.0
    assert leases.refusal("k", 0.0, max_wait=0.0) == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("rate", "burst", "lease"),
    [
        (50.0, 100, 5),  # a tenth of a second of the rate
        (150.0, 300, 15),
        (0.5, 10, 1),  # at least one token
        (1000.0, 40, 10),  # at most a quarter of the burst
        (5.0, 1, 1),
    ],
)
def test_a_lease_is_a_tenth_of_a_second_of_the_rate_within_a_quarter_of_the_burst(
    rate: float, burst: int, lease: int
) -> None:
    assert BATCH_S == 0.1
    assert LeasedBuckets(rate=rate, burst=burst).want(waiting=1) == lease


def test_a_lease_is_as_many_tokens_as_requests_wait_if_more() -> None:
    assert LeasedBuckets(rate=50.0, burst=100).want(waiting=32) == 32


def test_keys_with_nothing_leased_and_nothing_known_are_forgotten() -> None:
    leases = LeasedBuckets(rate=10.0, burst=20)
    leases.receive("spent", count=1, tokens_before=20.0, now=0.0)
    leases.take("spent", 0.0, max_wait=0.0)
    leases.receive("refused", count=0, tokens_before=0.0, now=0.0)  # next token at 0.1 s
    leases.forget_idle(0.05)
    assert len(leases) == 1
    leases.forget_idle(0.2)
    assert len(leases) == 0


def test_at_most_max_keys_are_held() -> None:
    leases = LeasedBuckets(rate=1.0, burst=100, max_keys=50)
    for number in range(200):
        leases.receive(f"ip:{number}", count=1, tokens_before=100.0, now=0.0)
    assert len(leases) == 50


def test_reconfiguring_forgets_what_was_known_and_keeps_what_was_leased() -> None:
    leases = LeasedBuckets(rate=1.0, burst=2)
    leases.receive("k", count=1, tokens_before=1.0, now=0.0)
    leases.reconfigure(rate=100.0, burst=200)
    assert leases.refusal("k", 0.0, max_wait=0.0) is None
    assert leases.take("k", 0.0, max_wait=0.0) == 0.0


@pytest.mark.parametrize(("rate", "burst"), [(0, 1), (-1.0, 1), (1.0, 0)])
def test_leases_need_a_positive_rate_and_burst(rate: float, burst: int) -> None:
    with pytest.raises(ValueError, match="rate > 0"):
        LeasedBuckets(rate=rate, burst=burst)
