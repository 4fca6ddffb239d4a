"""How many webhook delivery attempts each merchant may start: a token bucket per merchant, in the
delivery loop of one process.

An attempt costs the serving process CPU (TLS and HTTP, about 2 ms of a core each) whoever's it is,
and a receiver that answers at once frees its slot at once: `IN_FLIGHT_PER_MERCHANT` bounds a
merchant's attempts in flight but not how many it makes per second, so a merchant with a backlog
to a fast receiver took most of a core from everyone else's requests. Its bucket refills at
`webhooks.attempts_per_merchant_per_second` and holds a second's worth; a round of the loop claims
no more of a merchant's deliveries than its bucket holds whole tokens (the claim itself takes the
allowance, `storage.webhook_deliveries`), so nothing claimed waits in memory holding a lease and
the order of each session's deliveries is the claim's as before. A merchant below its rate finds
its bucket full and is not delayed at all.

Process-local, like the CPU it protects: each process serving deliveries allows each merchant its
own rate. A merchant whose bucket has refilled is forgotten (a full bucket equals a fresh one), so
what is kept follows the merchants with a backlog, not every merchant ever seen.

A merchant held to its rate is claimed for in batches of at least a fifth of its bucket
(`batch_for`: 10 attempts at 50 a second), not one attempt per round: a round that claims for a
merchant steps through each of its endpoints once (`storage.webhook_deliveries`), and the loop
makes a round each time an attempt ends, so claiming each token as it came would walk a merchant's
hundred endpoints fifty times a second to claim one delivery each time, taking the database's
CPU, and the rounds every other merchant's deliveries wait behind, for the merchant's own drain.
Its rate over a second is the same. For the same reason an attempt of such a merchant that ends
does not wake the loop (`batch_ready`) unless its bucket holds a batch and its attempts in flight
leave room for one under its share (`IN_FLIGHT_PER_MERCHANT`; `room_for_batch`): the loop wakes when
the next batch is due (`next_batch_in`), or when enough of its attempts have ended. Without the
second condition a merchant whose share, not its bucket, holds it back (its claimed attempts wait
for their start, `start_delays`, holding their slots) woke a round at every attempt's end that
claimed the one delivery its share had room for: a round per delivery, some 3 ms of the database's
CPU each, where a round per batch is enough. Nor does a round that something else woke claim for
it then (`allowances`: none until a batch has room), so it steps through none of its endpoints.

Attempts of a merchant that come faster than its rate start evenly (`start_delays`: 1/rate apart,
20 ms at 50 a second), not all at once: a batch of ten started together is 20 ms of the serving
thread in one burst, which every other merchant's requests then wait behind; spread, it is 2 ms
every 20 ms. The spacing is a schedule per merchant kept across rounds (a virtual clock, as a
cell-rate limiter keeps it), with room for `START_BURST` attempts at once: a merchant below its
rate, whose commits now and then arrive together (two payments committed in the same millisecond
are claimed in one round), starts them at once and waits for nothing; only a merchant whose
attempts keep coming faster than its rate, a backlog draining, has them spaced.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Mapping
from datetime import datetime

from payorch.values.token_buckets import TokenBucket


def burst_for(rate: float) -> int:
    """A bucket's size at `rate` attempts per second: a second's worth, at least one."""
    return max(1, math.ceil(rate))


def batch_for(burst: int) -> int:
    """The fewest attempts a merchant held to its rate is claimed for at once: a fifth of its
    bucket, at least one."""
    return max(1, burst // 5)


def room_for_batch(batch: int, share: int) -> int:
    """The room in its share of attempts in flight that a merchant held to its rate needs before a
    round claims for it again: a batch, or half its share when a batch is more than that."""
    return min(batch, max(1, share // 2))


# Attempts of one merchant that may start at once before the others are spaced at its rate: 8 ms of
# the serving thread at about 2 ms each.
START_BURST = 4


class AttemptRates:
    """The buckets of the merchants that have started attempts lately, on the clock of the `now`
    passed in (the context's: tests move it)."""

    def __init__(self, rate: float, burst: int) -> None:
        self._buckets: dict[uuid.UUID, TokenBucket] = {}
        # Per merchant, when its next attempt would start were its attempts exactly 1/rate apart
        # (seconds on the clock of `now`); forgotten once passed (`allowances`).
        self._paced_until: dict[uuid.UUID, float] = {}
        self.set_rate(rate, burst)

    def set_rate(self, rate: float, burst: int) -> None:
        """A reloaded rate: each bucket keeps its tokens (at most the new burst)."""
        self.rate = rate
        self.burst = burst
        for bucket in self._buckets.values():
            bucket.rate = rate
            bucket.burst = burst
            bucket.tokens = min(bucket.tokens, float(burst))

    def allowances(
        self, now: datetime, *, in_flight: Mapping[uuid.UUID, int] | None = None, share: int | None = None
    ) -> dict[uuid.UUID, int]:
        """The attempts each merchant with a bucket not full may start now (its whole tokens, or
        none until they make a batch, `batch_for`, or, with `share`, while its attempts in flight
        here, `in_flight`, leave no room for one: `room_for_batch`); every other merchant may start
        `burst`. Full buckets are forgotten, and schedules of attempts now passed
        (`start_delays`). Asked once a round."""
        seconds = now.timestamp()
        for merchant_id, until in list(self._paced_until.items()):
            if until <= seconds:  # its attempts came no faster than its rate: nothing to space
                del self._paced_until[merchant_id]
        batch = batch_for(self.burst)
        allowed: dict[uuid.UUID, int] = {}
        for merchant_id, bucket in list(self._buckets.items()):
            if bucket.is_full(seconds):
                del self._buckets[merchant_id]
                continue
            bucket.wait(seconds)  # refilled to now
            whole = math.floor(bucket.tokens)
            has_room = self._leaves_room((in_flight or {}).get(merchant_id, 0), share)
            allowed[merchant_id] = whole if whole >= batch and has_room else 0
        return allowed

    def batch_ready(
        self, merchant_id: uuid.UUID, now: datetime, *, in_flight: int = 0, share: int | None = None
    ) -> bool:
        """Whether a round now may claim for the merchant: it is not held to its rate (no bucket
        kept), or its bucket holds a batch and, with `share` (the most attempts of a merchant in
        flight at once), its `in_flight` attempts leave room for one (`room_for_batch`)."""
        bucket = self._buckets.get(merchant_id)
        if bucket is None:
            return True
        bucket.wait(now.timestamp())  # refilled to now
        return bucket.tokens >= batch_for(self.burst) and self._leaves_room(in_flight, share)

    def _leaves_room(self, in_flight: int, share: int | None) -> bool:
        """Whether `in_flight` attempts of a merchant leave room for a batch in its `share` (None:
        no share to heed)."""
        return share is None or share - in_flight >= room_for_batch(batch_for(self.burst), share)

    def next_batch_in(self, now: datetime) -> float | None:
        """Seconds until the first merchant waiting for a batch (its bucket holding less) holds
        one; None when no merchant waits for one. A merchant holding a batch is claimed for by the
        round its ended attempts wake, so it needs no wake of its own."""
        seconds = now.timestamp()
        batch = batch_for(self.burst)
        waits = []
        for bucket in self._buckets.values():
            bucket.wait(seconds)  # refilled to now
            if bucket.tokens < batch:
                waits.append((batch - bucket.tokens) / bucket.rate)
        return min(waits, default=None)

    def start_delays(self, merchant_id: uuid.UUID, attempts: int, now: datetime) -> list[float]:
        """When each of `attempts` attempts of the merchant, claimed now, starts, in seconds from
        now: at once while its attempts of the last moments leave room for `START_BURST` together,
        the others 1/rate apart after those before them (this round's and earlier rounds')."""
        seconds = now.timestamp()
        interval = 1 / self.rate
        room = (START_BURST - 1) * interval
        paced = max(self._paced_until.get(merchant_id, seconds), seconds)
        delays = []
        for _ in range(attempts):
            delays.append(max(paced - room - seconds, 0.0))
            paced += interval
        if attempts:
            self._paced_until[merchant_id] = paced
        return delays

    def spend(self, merchant_id: uuid.UUID, attempts: int, now: datetime) -> None:
        """Take a token for each of `attempts` attempts the merchant starts now (at most its
        allowance: a claim never takes more)."""
        seconds = now.timestamp()
        bucket = self._buckets.get(merchant_id)
        if bucket is None:
            bucket = self._buckets[merchant_id] = TokenBucket.full(self.rate, self.burst, seconds)
        for _ in range(attempts):
            bucket.take(seconds)
