"""Limits shared by several processes, each leasing tokens of one shared bucket: together they never
allow more than the bucket, requests at once on one process make one take, a refused key is not
asked again before its next token, and a reservation of two buckets takes both or neither.

The shared buckets are kept in memory here (`InMemoryBuckets`: `TokenBucket`'s arithmetic and a
paced take's, `reserve_token`, which the database's statement implements,
tests/storage/test_rate_buckets.py), on Trio's autojump clock; each take is a round trip of 1 ms."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
import trio

from payorch.http.shared_limits import Refused, SharedLimiter, reserve
from payorch.storage.rate_buckets import BucketTake, Grant
from payorch.values.token_buckets import TokenBucket

ROUND_TRIP_S = 0.001


class InMemoryBuckets:
    """Shared buckets in this process's memory, counting the takes asked of them."""

    def __init__(self) -> None:
        self.buckets: dict[str, TokenBucket] = {}
        self.round_trips = 0

    async def take(self, takes: Sequence[BucketTake]) -> list[Grant]:
        self.round_trips += 1
        await trio.sleep(ROUND_TRIP_S)
        now = trio.current_time()
        grants = []
        for one in takes:
            bucket = self.buckets.setdefault(one.key, TokenBucket.full(one.rate, one.burst, now))
            bucket.wait(now)  # refilled
            before, count = bucket.tokens, 0
            while count < one.want and reserve_token(bucket, now, one.max_wait_s)[1] is None:
                count += 1
            grants.append(Grant(count, before))
        return grants

    async def give_back(self, key: str, *, rate: float, burst: int, count: int) -> None:
        self.round_trips += 1
        bucket = self.buckets.get(key)
        if bucket is not None:
            bucket.tokens = min(float(burst), bucket.tokens + count)


def reserve_token(bucket: TokenBucket, now: float, max_wait: float) -> tuple[float, float | None]:
    """Take `bucket`'s next token, waiting for it when it is at most `max_wait` seconds away, as a
    paced take of `storage.rate_buckets` does: `(seconds to wait first, None)`, 0 when there was one;
    or, when it is further away, `(0, seconds until it is)` and nothing taken. Reserved tokens make
    the bucket owe them, so each caller waits its turn behind those before it."""
    bucket.wait(now)  # refilled to now
    wait = max(0.0, (1.0 - bucket.tokens) / bucket.rate)
    if wait > max_wait:
        return 0.0, wait
    bucket.tokens -= 1.0
    return wait, None


async def allowed(limiter: SharedLimiter, key: str) -> bool:
    return await limiter.take(key) is None


async def test_processes_sharing_a_bucket_allow_no_more_than_it_holds(autojump_clock: trio.abc.Clock) -> None:
    store = InMemoryBuckets()
    processes = [SharedLimiter("requests", store, rate=0.001, burst=10) for _ in range(3)]
    answers = [await allowed(processes[number % 3], "apikey:a") for number in range(30)]
    assert sum(answers) == 10
    assert answers[:10] == [True] * 10  # a quiet key leases one token at a time: none is lost


async def test_requests_at_once_on_one_process_make_one_take_each_batch(
    autojump_clock: trio.abc.Clock,
) -> None:
    store = InMemoryBuckets()
    limiter = SharedLimiter("requests", store, rate=1.0, burst=100)
    answers: list[bool] = []

    async def request() -> None:
        answers.append(await allowed(limiter, "apikey:a"))

    async with trio.open_nursery() as nursery:
        for _ in range(20):
            nursery.start_soon(request)
    assert answers == [True] * 20
    # The first take was sized for the first request; the second for the 19 waiting for it.
    assert store.round_trips == 2


async def test_a_refused_key_is_not_asked_again_before_its_next_token(autojump_clock: trio.abc.Clock) -> None:
    store = InMemoryBuckets()
    limiter = SharedLimiter("requests", store, rate=1.0, burst=1)
    assert await allowed(limiter, "apikey:a")
    assert await limiter.take("apikey:a") == pytest.approx(1.0, abs=0.01)
    round_trips = store.round_trips
    for _ in range(10):
        assert not await allowed(limiter, "apikey:a")
    assert store.round_trips == round_trips
    await trio.sleep(1.0)
    assert await allowed(limiter, "apikey:a")


async def test_a_paced_request_waits_for_a_token_another_process_left(autojump_clock: trio.abc.Clock) -> None:
    store = InMemoryBuckets()
    first, second = (SharedLimiter("events", store, rate=10.0, burst=1) for _ in range(2))
    assert await reserve([(first, "ip:a")], 1.0) == 0.0
    # The bucket is empty: the next token is 0.1 s away, within the wait, the one after 0.2 s.
    assert await reserve([(second, "ip:a")], 1.0) == pytest.approx(0.1, abs=0.01)
    assert await reserve([(first, "ip:a")], 1.0) == pytest.approx(0.2, abs=0.01)


async def test_a_reservation_refused_by_its_second_bucket_takes_no_token_of_the_first(
    autojump_clock: trio.abc.Clock,
) -> None:
    store = InMemoryBuckets()
    keys = SharedLimiter("requests", store, rate=0.001, burst=2)
    merchants = SharedLimiter("merchant-keys", store, rate=0.001, burst=1)
    claims = [(keys, "apikey:a"), (merchants, "merchant-keys:m")]
    assert await reserve(claims, 0.0) == 0.0
    with pytest.raises(Refused) as refused:
        await reserve(claims, 0.0)
    assert refused.value.index == 1
    # The key's second token was not spent: another request of the key alone still has it.
    assert await allowed(keys, "apikey:a")
    assert not await allowed(keys, "apikey:a")


async def test_a_token_given_back_is_in_the_shared_bucket_again(autojump_clock: trio.abc.Clock) -> None:
    store = InMemoryBuckets()
    first, second = (SharedLimiter("failed-logins", store, rate=0.001, burst=1) for _ in range(2))
    assert await allowed(first, "account:a@b.example")
    assert not await allowed(first, "account:a@b.example")
    await first.give_back("account:a@b.example")
    assert await allowed(second, "account:a@b.example")
    assert not await allowed(first, "account:a@b.example")


def test_reserving_paces_callers_to_the_rate_each_behind_the_ones_before() -> None:
    bucket = TokenBucket.full(rate=10, burst=2, now=0.0)
    waits = [reserve_token(bucket, 0.0, max_wait=1.0) for _ in range(5)]
    assert waits == [
        (0.0, None),
        (0.0, None),
        (pytest.approx(0.1), None),
        (pytest.approx(0.2), None),
        (pytest.approx(0.3), None),
    ]


def test_a_token_further_away_than_the_wait_allowed_is_refused_and_nothing_taken() -> None:
    bucket = TokenBucket.full(rate=10, burst=1, now=0.0)
    assert reserve_token(bucket, 0.0, max_wait=0.15) == (0.0, None)
    assert reserve_token(bucket, 0.0, max_wait=0.15) == (pytest.approx(0.1), None)
    assert reserve_token(bucket, 0.0, max_wait=0.15) == (0.0, pytest.approx(0.2))
    assert reserve_token(bucket, 0.2, max_wait=0.15) == (pytest.approx(0.0), None)  # the refusal took nothing
