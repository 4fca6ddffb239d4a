"""Leases on shared token buckets: the tokens one process has taken from a bucket every process
shares (kept in PostgreSQL, `storage.rate_buckets`) and not spent yet, so that a request costs a
round trip to the shared bucket only once per batch. Pure: the clock is passed in as seconds.

A take at the shared bucket gets up to `want` tokens: those there now and, for a paced limit, those
due within its wait (the bucket then owes them), and says how many the bucket held before
(`tokens_before`). The j-th token (from 1) may be spent `max(0, (j - tokens_before) / rate)` seconds
after the take. Per key this process keeps:

- the leased tokens it has not spent, each with the time it may be spent from. One not spent within
  `HOLD_S` of that time is dropped: the shared bucket counted it as spent, so an unspent lease makes
  the limit stricter, never more lenient.
- when the shared bucket's next token comes, as of the last take: the bucket only refills at its rate
  and only loses tokens to other takes, so no token can come sooner. A request that would wait longer
  than it may is refused here, without asking the shared bucket again.
- how fast this process spent its last lease: the next one is about `BATCH_S` of that pace (at least
  one token, at least as many as requests are waiting for one, at most `burst // SHARES`). A key busy
  on this process costs about one take every `BATCH_S`; a quiet one, one per request; and a lease
  unspent is at most about `BATCH_S` of this process's pace on the key.

Memory stays bounded as in `token_buckets.RateLimiter`: a key with nothing leased and nothing known
is dropped (least recently used first), and at most `max_keys` are held; dropping a key loses its
leased tokens (stricter) or what it knew (one more take), nothing else.
"""

from __future__ import annotations

import heapq
import math
from collections import OrderedDict
from dataclasses import dataclass, field

from payorch.engine.token_buckets import DEFAULT_MAX_KEYS

# A busy key's lease is about this many seconds of its pace on this process: it costs one take
# at the shared bucket per this many seconds.
BATCH_S = 0.1
# A leased token not spent within this many seconds of its time is dropped.
HOLD_S = 1.0
# A lease is at most this share of the burst, so that several processes busy on one key each get
# a lease out of a full bucket.
SHARES = 4


@dataclass
class _Lease:
    due: list[float] = field(default_factory=list)  # heap: when each leased token may be spent
    next_shared_at: float = -math.inf  # the shared bucket's next token comes no sooner
    taken_at: float | None = None  # when the last lease was taken
    spent: int = 0  # tokens spent since

    def drop_expired(self, now: float) -> None:
        while self.due and self.due[0] + HOLD_S < now:
            heapq.heappop(self.due)

    def is_idle(self, now: float) -> bool:
        """Nothing leased, nothing known: a new key would be no different."""
        self.drop_expired(now)
        return not self.due and self.next_shared_at <= now


class LeasedBuckets:
    """This process's leases on the shared buckets of one limit, one per key, all with the same
    `rate` (tokens per second) and `burst`."""

    def __init__(self, rate: float, burst: int, *, max_keys: int = DEFAULT_MAX_KEYS) -> None:
        if rate <= 0 or burst < 1 or max_keys < 1:
            raise ValueError("leased buckets need rate > 0, burst >= 1 and max_keys >= 1")
        self.rate = rate
        self.burst = burst
        self.max_keys = max_keys
        self._leases: OrderedDict[str, _Lease] = OrderedDict()  # least recently used first

    def __len__(self) -> int:
        """How many keys are held (idle ones may not have been dropped yet)."""
        return len(self._leases)

    @property
    def largest_lease(self) -> int:
        return max(1, self.burst // SHARES)

    def reconfigure(self, rate: float, burst: int) -> None:
        """Lease at `rate` and `burst` from now on. What was leased stays; what was known of the
        shared buckets' next tokens is forgotten (a higher rate brings them sooner)."""
        if rate <= 0 or burst < 1:
            raise ValueError("leased buckets need rate > 0 and burst >= 1")
        self.rate = rate
        self.burst = burst
        for lease in self._leases.values():
            lease.next_shared_at = -math.inf

    def take(self, key: str, now: float, max_wait: float) -> float | None:
        """Spend a leased token of `key` that may be spent within `max_wait` seconds: the seconds
        to wait for it (0 when it may be spent now), or None when there is none (nothing spent)."""
        self.forget_idle(now)
        lease = self._leases.get(key)
        if lease is None:
            return None
        self._leases.move_to_end(key)
        lease.drop_expired(now)
        if not lease.due or lease.due[0] - now > max_wait:
            return None
        lease.spent += 1
        return max(0.0, heapq.heappop(lease.due) - now)

    def has_token(self, key: str, now: float) -> bool:
        """Whether a leased token of `key` may be spent now (nothing is spent)."""
        lease = self._leases.get(key)
        if lease is None:
            return False
        lease.drop_expired(now)
        return bool(lease.due) and lease.due[0] <= now

    def refusal(self, key: str, now: float, max_wait: float) -> float | None:
        """The seconds until the shared bucket of `key` has its next token, when that is known to be
        more than `max_wait` away (a request must then be refused); None when it may be sooner."""
        lease = self._leases.get(key)
        if lease is None:
            return None
        wait = lease.next_shared_at - now
        return wait if wait > max_wait else None

    def want(self, key: str, now: float, waiting: int) -> int:
        """How many tokens to ask the shared bucket of `key` for, `waiting` requests waiting for one:
        about `BATCH_S` of the pace this process spent its last lease at, at least `waiting` (and
        one), at most `largest_lease`."""
        lease = self._leases.get(key)
        pace = 0.0
        if lease is not None and lease.taken_at is not None:
            pace = min(self.rate, lease.spent / max(now - lease.taken_at, BATCH_S / 10))
        return max(1, min(self.largest_lease, max(waiting, math.ceil(pace * BATCH_S - 1e-9))))

    def receive(self, key: str, count: int, tokens_before: float, now: float) -> None:
        """Keep what a take at the shared bucket of `key` got at `now`: `count` tokens, from a
        bucket that held `tokens_before`."""
        lease = self._lease(key)
        lease.taken_at = now
        lease.spent = 0
        for number in range(1, count + 1):
            heapq.heappush(lease.due, now + max(0.0, (number - tokens_before) / self.rate))
        # The bucket's next token after these, as of the take: no sooner than that.
        lease.next_shared_at = now + max(0.0, (count + 1 - tokens_before) / self.rate)

    def give_back(self, key: str, due_at: float) -> None:
        """Return a leased token spent by `take` (due at `due_at`) and not used after all."""
        lease = self._leases.get(key)
        if lease is None:
            return  # dropped meanwhile: the token is lost, which is stricter
        lease.spent = max(0, lease.spent - 1)
        heapq.heappush(lease.due, due_at)

    def forget_known(self, key: str) -> None:
        """Forget when the shared bucket of `key` has its next token (tokens were given back to it)."""
        lease = self._leases.get(key)
        if lease is not None:
            lease.next_shared_at = -math.inf

    def forget_idle(self, now: float) -> None:
        """Drop the keys with nothing leased and nothing known, from the least recently used on."""
        while self._leases:
            oldest = next(iter(self._leases.values()))
            if not oldest.is_idle(now):
                return
            self._leases.popitem(last=False)

    def _lease(self, key: str) -> _Lease:
        lease = self._leases.get(key)
        if lease is None:
            lease = self._leases[key] = _Lease()
            while len(self._leases) > self.max_keys:
                self._leases.popitem(last=False)
        else:
            self._leases.move_to_end(key)
        return lease
