"""The shared token buckets' statement: a new key's bucket is full, a take gets what is there (and,
paced, what comes within its wait), the bucket refills at its rate up to its burst, and takes from
several connections at once never get more than the bucket holds.

Time is the database's: a test makes time pass for a bucket by moving its `updated_at` back. The
buckets refill at one token per 100 s, so that the test's own time refills nothing to speak of."""

from __future__ import annotations

import pytest
import trio

from payorch.storage import rate_buckets
from payorch.storage.database import Connection, Database
from payorch.storage.rate_buckets import BucketTake, Grant

RATE = 0.01


async def _take(db: Database, want: int, *, max_wait_s: float = 0.0) -> Grant:
    [grant] = await db.autocommit(rate_buckets.take, [BucketTake("k", RATE, 5, want, max_wait_s)])
    return grant


async def _seconds_pass(db: Database, seconds: float) -> None:
    async def move_back(conn: Connection) -> None:
        await conn.execute(
            """UPDATE rate_buckets SET updated_at = updated_at - make_interval(secs => $1),
                                       full_at = full_at - make_interval(secs => $1)""",
            seconds,
        )

    await db.autocommit(move_back)


async def _rows(db: Database) -> int:
    async def count(conn: Connection) -> int:
        return int(await conn.fetchval("SELECT count(*) FROM rate_buckets"))

    return await db.autocommit(count)


async def test_a_new_key_has_a_full_bucket(db: Database) -> None:
    grant = await _take(db, 3)
    assert grant == Grant(count=3, tokens_before=5.0)


async def test_a_take_gets_what_is_left_and_then_nothing(db: Database) -> None:
    await _take(db, 4)
    first = await _take(db, 4)
    assert first.count == 1
    assert first.tokens_before == pytest.approx(1.0, abs=0.01)
    second = await _take(db, 4)
    assert second.count == 0
    assert second.tokens_before == pytest.approx(0.0, abs=0.01)


async def test_the_bucket_refills_at_its_rate(db: Database) -> None:
    await _take(db, 5)
    await _seconds_pass(db, 200.0)  # two tokens
    grant = await _take(db, 5)
    assert grant.count == 2
    assert grant.tokens_before == pytest.approx(2.0, abs=0.01)


async def test_the_bucket_never_holds_more_than_its_burst(db: Database) -> None:
    await _take(db, 1)
    await _seconds_pass(db, 3600.0 * 24)
    assert (await _take(db, 10)).count == 5


async def test_a_paced_take_owes_the_tokens_due_within_its_wait(db: Database) -> None:
    await _take(db, 5)
    paced = await _take(db, 5, max_wait_s=250.0)  # two more come within 250 s
    assert paced.count == 2
    # The bucket owes them: the next request's token is 300 s away, more than it may wait.
    refused = await _take(db, 1, max_wait_s=250.0)
    assert refused.count == 0
    assert (1 - refused.tokens_before) / RATE == pytest.approx(300.0, abs=1.0)


async def test_giving_back_returns_tokens_up_to_the_burst(db: Database) -> None:
    await _take(db, 5)
    await db.autocommit(rate_buckets.give_back, "k", rate=RATE, burst=5, count=2)
    assert (await _take(db, 5)).count == 2
    await db.autocommit(rate_buckets.give_back, "k", rate=RATE, burst=5, count=50)
    assert (await _take(db, 50)).count == 5


async def test_full_buckets_are_deleted_and_the_others_kept(db: Database) -> None:
    await _take(db, 1)
    await db.autocommit(rate_buckets.take, [BucketTake("other", RATE, 5, 5, 0.0)])
    assert await db.autocommit(rate_buckets.delete_full) == 0
    await _seconds_pass(db, 120.0)  # "k" refilled its one token; "other" holds 1.2 of 5
    assert await db.autocommit(rate_buckets.delete_full) == 1
    assert await _rows(db) == 1
    assert (await db.autocommit(rate_buckets.take, [BucketTake("other", RATE, 5, 5, 0.0)]))[0].count == 1


async def test_takes_from_many_connections_at_once_never_exceed_the_bucket(db: Database) -> None:
    # A slow refill (one token an hour): what the takes get together is what the bucket held.
    grants: list[Grant] = []

    async def take_some() -> None:
        for _ in range(5):
            grants.extend(
                await db.autocommit(rate_buckets.take, [BucketTake("shared", 1 / 3600, 30, 2, 0.0)])
            )

    async with trio.open_nursery() as nursery:
        for _ in range(4):  # the pool's four connections
            nursery.start_soon(take_some)
    assert sum(grant.count for grant in grants) == 30
    assert len(grants) == 20
