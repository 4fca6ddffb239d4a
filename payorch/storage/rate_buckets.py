"""The shared token buckets of the rate limits: one row per key in the table `rate_buckets`, so
that every process on this database draws from the same bucket (docs/rate-limits.md).

A take is one statement: it refills the key's bucket by the same arithmetic as
`values.token_buckets.TokenBucket` (continuously at `rate`, never above `burst`), takes up to `want`
tokens, and answers how many it got and how many the bucket held before. A paced take may take
tokens that have not come yet, the bucket then owing them (negative tokens): those due within
`max_wait_s`. Time is the database's (`statement_timestamp()`), one clock for every process and
node; a take that waited for another's lock refills nothing for the wait, and the next one does.
A key without a row is a full bucket, so the first take inserts it; the row lock (the conflict of
`INSERT ... ON CONFLICT DO UPDATE`) orders takes of one key, so two takes at once never take more
than the bucket holds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from payorch.storage.database import Connection
from payorch.storage.database_thread import on_database_thread


@dataclass(frozen=True)
class BucketTake:
    """Take up to `want` tokens of `key`'s bucket (`rate` tokens a second, at most `burst`), those
    there now and those due within `max_wait_s`."""

    key: str
    rate: float
    burst: int
    want: int
    max_wait_s: float


@dataclass(frozen=True)
class Grant:
    """What a take got: `count` tokens, from a bucket holding `tokens_before` once refilled (negative
    when it owed some). The j-th token (from 1) is due `max(0, (j - tokens_before) / rate)` seconds
    after the take; with none, the next is due `(1 - tokens_before) / rate` seconds after it."""

    count: int
    tokens_before: float


# $1 key, $2 rate, $3 burst, $4 want, $5 max_wait_s. How many tokens are due within max_wait_s of a
# bucket holding `tokens`: those numbered up to tokens + max_wait_s * rate (a hair of float error
# must not cost a token), at most `want`.
_RATE, _BURST, _MAX_WAIT = "$2::double precision", "$3::double precision", "$5::double precision"
_GRANTED = f"greatest(0, least($4::integer, floor({{tokens}} + {_MAX_WAIT} * {_RATE} + 1e-9)))::integer"
_TAKE = f"""
    INSERT INTO rate_buckets AS b (key, tokens, taken, updated_at, full_at)
    SELECT $1, {_BURST} - g.granted, g.granted, statement_timestamp(),
           statement_timestamp() + make_interval(secs => g.granted / {_RATE})
    FROM (SELECT {_GRANTED.format(tokens=_BURST)} AS granted) g
    ON CONFLICT (key) DO UPDATE SET (tokens, taken, updated_at, full_at) = (
        SELECT r.tokens - g.granted, g.granted, r.at,
               r.at + make_interval(secs => ({_BURST} - (r.tokens - g.granted)) / {_RATE})
        FROM (SELECT greatest(b.updated_at, statement_timestamp()) AS at,
                     least({_BURST}, b.tokens + {_RATE} * greatest(0, extract(
                         epoch FROM statement_timestamp() - b.updated_at))::double precision) AS tokens) r,
             LATERAL (SELECT {_GRANTED.format(tokens="r.tokens")} AS granted) g)
    RETURNING taken, tokens + taken AS tokens_before"""


@on_database_thread
async def take(conn: Connection, takes: Sequence[BucketTake]) -> list[Grant]:
    """Each take of `takes` in turn, each its own statement (run them with autocommit: each commits
    at once, so none holds a row lock while the next runs); their grants in the same order."""
    grants = []
    for one in takes:
        row = await conn.fetchrow(_TAKE, one.key, float(one.rate), one.burst, one.want, float(one.max_wait_s))
        grants.append(Grant(count=row["taken"], tokens_before=row["tokens_before"]))
    return grants


_GIVE_BACK = """
    UPDATE rate_buckets
       SET tokens = least($3::double precision, tokens + $4::integer),
           full_at = full_at - make_interval(secs => $4::integer / $2::double precision)
     WHERE key = $1"""


@on_database_thread
async def give_back(conn: Connection, key: str, *, rate: float, burst: int, count: int) -> None:
    """Return `count` tokens taken from `key`'s bucket and not spent after all (never above `burst`).
    Without a row the bucket is full already."""
    await conn.execute(_GIVE_BACK, key, float(rate), burst, count)


@on_database_thread
async def delete_full(conn: Connection) -> int:
    """Delete the buckets that are full again (a key without a row is a full bucket); returns how
    many. A take that makes a bucket less than full between this statement's snapshot and its delete
    keeps its row: the row is checked again once locked."""
    deleted: str = await conn.execute("DELETE FROM rate_buckets WHERE full_at <= statement_timestamp()")
    return int(deleted.rpartition(" ")[2])
