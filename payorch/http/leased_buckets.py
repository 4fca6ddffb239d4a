"""Leases on shared token buckets: the tokens one process has taken from a bucket every process
shares (kept in PostgreSQL, `storage.rate_buckets`) and not spent yet, so that a request costs a
round trip to the shared bucket only once per batch. Pure: the clock is passed in as seconds.

A take at the shared bucket gets up to `want` tokens: those there now and, for a paced limit, those
due within its wait (the bucket then owes them), and says how many the bucket held before
(`tokens_before`). The j-th token (from 1) may be spent `max(0, (j - tokens_before) / rate)` seconds
after the take. Per key this process keeps:

- the leased tokens it has not spent, each with the time it may be spent from. The shared bucket
  counted them as spent when they were leased, so no process spends more than it leased; one not
  spent within `HOLD_S` of its time is dropped, which only makes the limit stricter.
- when the shared bucket's next token comes, as of the last take: the bucket only refills at its rate
  and only loses tokens to other takes, so no token can come sooner. A request that would wait longer
  than it may is refused here, without asking the shared bucket again.

A lease is `BATCH_S` of the rate (at least one token, at most `burst // SHARES`), or as many tokens as
requests are waiting for one if more. So a key costs one take per lease: a key busy on this process
about one every `BATCH_S`, and a quiet one one per lease's worth of requests within `HOLD_S`. What
the processes hold unspent is at most about one lease each: a client can get that much more than
the bucket in a burst, and loses it when it stops using a process.

Memory stays bounded: a key with nothing leased and nothing known is dropped (least recently used
first), and at most `max_keys` are held; dropping a key loses its leased tokens (stricter) or what it
knew (one more take), nothing else.
"""

from __future__ import annotations

import heapq
import math
from collections import OrderedDict
from dataclasses import dataclass, field

from payorch.values.token_buckets import DEFAULT_MAX_KEYS

# A lease is about this many seconds of the rate: a key busy on a process costs it one take at the
# shared bucket per this many seconds.
BATCH_S = 0.1
# A leased token not spent within this many seconds of its time is dropped.
HOLD_S = 5.0
# A lease is at most this share of the burst, so that several processes busy on one key each get
# a lease out of a full bucket.
SHARES = 4


@dataclass
class _Run:
    """The tokens of one take, numbered `next` to `last` (from 1) as the shared bucket counted them:
    token j may be spent from `origin + max(0, (j - before) / rate)`. Kept as these five numbers,
    whatever its size."""

    origin: float
    before: float
    rate: float
    next: int
    last: int

    def due(self, number: int) -> float:
        return self.origin + max(0.0, (number - self.before) / self.rate)

    def drop_expired(self, now: float) -> None:
        """Skip the tokens whose time is more than `HOLD_S` past."""
        cutoff = now - HOLD_S - self.origin
        if cutoff > 0:
            # due(j) >= now - HOLD_S  <=>  j >= before + cutoff * rate
            self.next = max(self.next, math.ceil(self.before + cutoff * self.rate - 1e-9))


@dataclass
class _Lease:
    runs: list[_Run] = field(default_factory=list)  # what takes leased and is not spent yet
    given_back: list[float] = field(default_factory=list)  # heap: when each may be spent
    next_shared_at: float = -math.inf  # the shared bucket's next token comes no sooner

    def drop_expired(self, now: float) -> None:
        spent = False
        for run in self.runs:
            run.drop_expired(now)
            spent = spent or run.next > run.last
        if spent:
            self.runs = [run for run in self.runs if run.next <= run.last]
        while self.given_back and self.given_back[0] + HOLD_S < now:
            heapq.heappop(self.given_back)

    def next_due(self, now: float) -> float | None:
        """When the next leased token may be spent (the expired ones dropped); None without one."""
        self.drop_expired(now)
        if len(self.runs) == 1 and not self.given_back:  # the common case: one lease being spent
            run = self.runs[0]
            return run.due(run.next)
        dues = [run.due(run.next) for run in self.runs] + self.given_back[:1]
        return min(dues, default=None)

    def spend_next(self) -> float:
        """Spend the token `next_due` named: when it may be spent."""
        earliest = min(self.runs, key=lambda run: run.due(run.next), default=None)
        if self.given_back and (earliest is None or self.given_back[0] <= earliest.due(earliest.next)):
            return heapq.heappop(self.given_back)
        assert earliest is not None
        earliest.next += 1
        return earliest.due(earliest.next - 1)

    def is_idle(self, now: float) -> bool:
        """Nothing leased, nothing known: a new key would be no different."""
        return self.next_due(now) is None and self.next_shared_at <= now


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
    def lease(self) -> int:
        """How many tokens a lease is when fewer requests wait: `BATCH_S` of the rate, at least
        one, at most `burst // SHARES`."""
        return max(1, min(math.ceil(self.rate * BATCH_S - 1e-9), self.burst // SHARES))

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
        due = lease.next_due(now)
        if due is None or due - now > max_wait:
            return None
        return max(0.0, lease.spend_next() - now)

    def has_token(self, key: str, now: float) -> bool:
        """Whether a leased token of `key` may be spent now (nothing is spent)."""
        lease = self._leases.get(key)
        if lease is None:
            return False
        due = lease.next_due(now)
        return due is not None and due <= now

    def refusal(self, key: str, now: float, max_wait: float) -> float | None:
        """The seconds until the shared bucket of `key` has its next token, when that is known to be
        more than `max_wait` away (a request must then be refused); None when it may be sooner."""
        lease = self._leases.get(key)
        if lease is None:
            return None
        wait = lease.next_shared_at - now
        return wait if wait > max_wait else None

    def want(self, waiting: int) -> int:
        """How many tokens to ask a shared bucket for, `waiting` requests waiting for one: a lease,
        or as many as wait if more."""
        return max(self.lease, waiting)

    def receive(self, key: str, count: int, tokens_before: float, now: float) -> None:
        """Keep what a take at the shared bucket of `key` got at `now`: `count` tokens, from a
        bucket that held `tokens_before`."""
        lease = self._lease(key)
        if count > 0:
            lease.runs.append(_Run(now, tokens_before, self.rate, next=1, last=count))
        # The bucket's next token after these, as of the take: no sooner than that.
        lease.next_shared_at = now + max(0.0, (count + 1 - tokens_before) / self.rate)

    def give_back(self, key: str, due_at: float) -> None:
        """Return a leased token spent by `take` (due at `due_at`) and not used after all."""
        lease = self._leases.get(key)
        if lease is None:
            return  # dropped meanwhile: the token is lost, which is stricter
        heapq.heappush(lease.given_back, due_at)

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
