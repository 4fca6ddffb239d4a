"""Rate limits that hold for every process on one database: token buckets kept in PostgreSQL
(`storage.rate_buckets`), of which each process leases batches (`http.leased_buckets`).

A request first spends a token this process leased already: no round trip. When it has none, it
takes a lease at the shared bucket, one statement; requests of the same key that come meanwhile
wait for that take rather than making their own, and the next lease is sized for those waiting. A
request the shared bucket has no token for (within the wait it may take) is refused, and so is
every later one until that bucket's next token is due, without asking again. So a refused flood
costs one round trip per refusal window, and a key busy on a process about one per
`leased_buckets.BATCH_S`.

`reserve` takes one token of each of several buckets, all or none (an API key's and its
merchant's): a token taken and not used after all goes back to this process's lease.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Protocol

import trio

from payorch.http.leased_buckets import LeasedBuckets
from payorch.storage import rate_buckets
from payorch.storage.database import Database
from payorch.storage.rate_buckets import BucketTake, Grant


class BucketStore(Protocol):
    """Where the shared buckets are kept."""

    async def take(self, takes: Sequence[BucketTake]) -> list[Grant]:
        """Each take of `takes` (`rate_buckets.take`)."""
        ...

    async def give_back(self, key: str, *, rate: float, burst: int, count: int) -> None:
        """Return tokens not spent after all (`rate_buckets.give_back`)."""
        ...


class DatabaseBuckets:
    """The shared buckets in the database's `rate_buckets` table, each take one autocommit unit."""

    def __init__(self, db: Database) -> None:
        self._db = db

    async def take(self, takes: Sequence[BucketTake]) -> list[Grant]:
        return await self._db.autocommit(rate_buckets.take, takes)

    async def give_back(self, key: str, *, rate: float, burst: int, count: int) -> None:
        await self._db.autocommit(rate_buckets.give_back, key, rate=rate, burst=burst, count=count)


class Refused(Exception):
    """The bucket of `reserve`'s claim number `index` has no token within the wait allowed: the
    next comes in `wait` seconds. Nothing was taken."""

    def __init__(self, index: int, wait: float) -> None:
        super().__init__(index, wait)
        self.index = index
        self.wait = wait


class SharedLimiter:
    """One limit's shared buckets, one per key, all with the same `rate` and `burst`: named `name`
    in the store (a key `k` is the store's `<name>/<k>`)."""

    def __init__(self, name: str, store: BucketStore, rate: float, burst: int) -> None:
        self.name = name
        self.store = store
        self.leases = LeasedBuckets(rate, burst)
        self._takes: dict[str, trio.Event] = {}  # keys whose take at the store is under way, set when done
        self._waiting: Counter[str] = Counter()  # requests inside `reserve` for each key

    def reconfigure(self, rate: float, burst: int) -> None:
        """Lease at `rate` and `burst` from the next take on (`LeasedBuckets.reconfigure`)."""
        self.leases.reconfigure(rate, burst)

    def known_refusal(self, key: str) -> float | None:
        """The seconds until `key`'s bucket has a token, when this process knows it has none now and
        has leased none; None otherwise (nothing is taken, nothing asked)."""
        now = trio.current_time()
        if self.leases.has_token(key, now):
            return None
        return self.leases.refusal(key, now, 0.0)

    async def take(self, key: str) -> float | None:
        """Take one token of `key`'s bucket now: None when taken, else the seconds until one is
        there (nothing taken)."""
        try:
            await reserve([(self, key)], 0.0)
        except Refused as refused:
            return refused.wait
        return None

    async def give_back(self, key: str) -> None:
        """Return to `key`'s shared bucket a token `take` took and that was not spent after all."""
        self.leases.forget_known(key)
        leases = self.leases
        await self.store.give_back(self._stored(key), rate=leases.rate, burst=leases.burst, count=1)

    def forget_idle(self) -> None:
        """Drop the keys with nothing leased and nothing known."""
        self.leases.forget_idle(trio.current_time())

    def _stored(self, key: str) -> str:
        return f"{self.name}/{key}"


Claim = tuple[SharedLimiter, str]


async def reserve(claims: Sequence[Claim], max_wait: float) -> float:
    """Take one token of each claim's bucket (a limiter and a key), each due within `max_wait`
    seconds: the seconds to wait before the last of them is due (0 when all are there now), all
    taken. `Refused` (the first claim found without one) when one is further away: nothing taken
    then. A claim this process has no token of is asked of the store; the claims that need a take
    at once are taken in one unit of work."""
    held: list[tuple[SharedLimiter, str, float]] = []  # (limiter, key, when its token is due)
    # A request counts itself among those waiting on its keys only once it has to wait (what the
    # next lease is sized by): spending tokens this process leased already is the common case.
    waiting = False
    try:
        pending = list(enumerate(claims))
        while True:
            now = trio.current_time()
            missing = []
            for index, (limiter, key) in pending:
                wait = limiter.leases.take(key, now, max_wait)
                if wait is not None:
                    held.append((limiter, key, now + wait))
                    continue
                refused = limiter.leases.refusal(key, now, max_wait)
                if refused is not None:
                    raise Refused(index, refused)
                missing.append((index, (limiter, key)))
            if not missing:
                return max((due_at for *_, due_at in held), default=now) - now
            pending = missing
            if not waiting:
                waiting = True
                for limiter, key in claims:
                    limiter._waiting[key] += 1
            under_way = [limiter._takes[key] for _, (limiter, key) in pending if key in limiter._takes]
            if under_way:
                # Another request of this process is taking a lease for one of these keys: wait
                # for it, then spend from it (or take again).
                await under_way[0].wait()
                continue
            await _take_leases([claim for _, claim in pending], max_wait)
    except BaseException:
        for limiter, key, due_at in held:
            limiter.leases.give_back(key, due_at)
        raise
    finally:
        if waiting:
            for limiter, key in claims:
                limiter._waiting[key] -= 1
                if not limiter._waiting[key]:
                    del limiter._waiting[key]


async def _take_leases(claims: Sequence[Claim], max_wait: float) -> None:
    """Take a lease of each claim's shared bucket, in one unit of work at the store; requests of
    the same keys wait for it meanwhile."""
    stores = {limiter.store for limiter, _ in claims}
    if len(stores) > 1:
        raise ValueError("the claims of one reservation share one store")
    takes = []
    for limiter, key in claims:
        limiter._takes[key] = trio.Event()
        leases = limiter.leases
        want = leases.want(limiter._waiting[key])
        takes.append(BucketTake(limiter._stored(key), leases.rate, leases.burst, want, max_wait))
    try:
        grants = await stores.pop().take(takes)
        now = trio.current_time()
        for (limiter, key), grant in zip(claims, grants, strict=True):
            limiter.leases.receive(key, grant.count, grant.tokens_before, now)
    finally:
        for limiter, key in claims:
            limiter._takes.pop(key).set()
