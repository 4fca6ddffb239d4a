"""`python -m bench.rate_limits`: what a shared rate limit costs a request (docs/rate-limits.md).

The rate limits keep their buckets in PostgreSQL and each process leases tokens of them
(`payorch.http.shared_limits`). This measures, against an embedded PostgreSQL on loopback, with the
`rate_buckets` table of the migrations:

- a take at the shared bucket, one at a time: the round trip a request pays when its process has no
  token of its key leased (wall time and CPU of this process per take);
- a request of an API key whose process has no token leased of the key nor of its merchant (its
  first in five seconds there: one unit of work with a take of each);
- a request that spends a token its process leased already (no round trip);
- an API key and its merchant charged together (`reserve`, as `RequestLimits.pace_api_key` does),
  by 32 callers at once as fast as they can go, the limits out of reach: requests per round trip;
- the same at a key's default limit (50/s): requests per round trip when the limit is what paces.

CPU is of this process only (both its threads), PostgreSQL's own is not in it. Bounded: about 20 s.
Figures go to stdout, progress to stderr.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import trio

from bench.payorch_target import temporary_postgres
from payorch.http.shared_limits import DatabaseBuckets, SharedLimiter, reserve
from payorch.storage.database import open_database
from payorch.storage.embedded import start_embedded_postgres
from payorch.storage.migrations import migrate
from payorch.storage.rate_buckets import BucketTake, Grant

CALLERS = 32
UNREACHABLE = 1e9  # a rate (and burst) no caller reaches: the limit never refuses


class CountedBuckets(DatabaseBuckets):
    """The database's buckets, counting the takes asked of them."""

    round_trips = 0

    async def take(self, takes: Sequence[BucketTake]) -> list[Grant]:
        self.round_trips += 1
        return await super().take(takes)


def _cpu() -> float:
    return time.process_time()


def _each(wall: float, cpu: float, count: int) -> str:
    return f"{wall / count * 1000:.3f} ms, CPU {cpu / count * 1000:.3f} ms each"


async def _takes_one_at_a_time(store: CountedBuckets, count: int) -> str:
    start, cpu = time.perf_counter(), _cpu()
    for number in range(count):
        await store.take([BucketTake(f"bench/one-{number % 100}", UNREACHABLE, 10**9, 1, 0.0)])
    wall, used = time.perf_counter() - start, _cpu() - cpu
    return f"take at the shared bucket, one at a time: {_each(wall, used, count)}"


async def _first_requests(store: CountedBuckets, count: int) -> str:
    key = SharedLimiter("bench-quiet", store, rate=50.0, burst=100)
    merchant = SharedLimiter("bench-quiet-merchant", store, rate=150.0, burst=300)
    start, cpu = time.perf_counter(), _cpu()
    for number in range(count):
        await reserve([(key, f"apikey:{number}"), (merchant, f"merchant-keys:{number}")], 1.0)
    wall, used = time.perf_counter() - start, _cpu() - cpu
    return f"first request of an API key and its merchant (one unit): {_each(wall, used, count)}"


async def _leased_spends(store: CountedBuckets, count: int) -> str:
    limiter = SharedLimiter("bench-leased", store, rate=UNREACHABLE, burst=10**9)
    # A first burst makes the lease large: this measures spending what is leased.
    for _ in range(1000):
        await reserve([(limiter, "k")], 0.0)
    store.round_trips = 0
    start, cpu = time.perf_counter(), _cpu()
    for _ in range(count):
        await reserve([(limiter, "k")], 0.0)
    wall, used = time.perf_counter() - start, _cpu() - cpu
    return (
        f"spend of a leased token: {wall / count * 1e6:.1f} us, CPU {used / count * 1e6:.1f} us each; "
        f"{store.round_trips} takes in {count} requests"
    )


async def _callers(store: CountedBuckets, rate: float, burst: int, seconds: float) -> int:
    """`CALLERS` callers charging an API key and its merchant for `seconds`, each as soon as its last
    reservation was granted (and waited for): how many were granted."""
    key = SharedLimiter("bench-requests", store, rate=rate, burst=burst)
    merchant = SharedLimiter("bench-merchant-keys", store, rate=3 * rate, burst=3 * burst)
    granted = 0

    async def caller() -> None:
        nonlocal granted
        while True:
            wait = await reserve([(key, f"apikey:{rate}"), (merchant, f"merchant-keys:{rate}")], 1.0)
            await trio.sleep(wait)
            granted += 1

    store.round_trips = 0
    with trio.move_on_after(seconds):
        async with trio.open_nursery() as nursery:
            for _ in range(CALLERS):
                nursery.start_soon(caller)
    return granted


async def _main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="payorch-bench-limits-") as work_dir:
        pgdata = Path(work_dir) / "pgdata"
        async with temporary_postgres(pgdata):
            url = await start_embedded_postgres(pgdata)
            async with open_database(url, min_size=4, max_size=4) as db:
                await migrate(db)
                store = CountedBuckets(db)
                print("PostgreSQL up; measuring", file=sys.stderr)
                print(await _takes_one_at_a_time(store, 2000))
                print(await _first_requests(store, 2000))
                print(await _leased_spends(store, 20_000))
                for label, rate, burst in (("out of reach", UNREACHABLE, 10**9), ("at 50/s", 50.0, 100)):
                    granted = await _callers(store, rate, burst, args.seconds)
                    per_trip = granted / max(store.round_trips, 1)
                    print(
                        f"API key and merchant, {CALLERS} callers, limit {label}: "
                        f"{granted / args.seconds:.0f} requests/s, {per_trip:.1f} requests per round trip"
                    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.rate_limits", description=__doc__)
    parser.add_argument("--seconds", type=float, default=5.0, help="each callers' window (default 5)")
    trio.run(_main, parser.parse_args(argv))


if __name__ == "__main__":
    main()
