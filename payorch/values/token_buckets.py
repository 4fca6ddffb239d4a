"""Token buckets: how often a caller may act, with bursts. Pure: the clock is passed in as seconds.

A bucket holds up to `burst` tokens and refills continuously at `rate` tokens per second; each
request takes one token, and a request finding less than one token is refused with the time until
one is there.

This is the arithmetic of one bucket. The service's rate limits keep their buckets in PostgreSQL,
shared by every process (`storage.rate_buckets` refills and takes by this same arithmetic in SQL),
and each process leases tokens of them (`http.leased_buckets`), holding at most `DEFAULT_MAX_KEYS`
keys' leases. `InFlightLimit` bounds what one key has in flight at once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

DEFAULT_MAX_KEYS = 100_000  # keys a process holds leases of (`http.leased_buckets`)


@dataclass
class TokenBucket:
    """`tokens` as of `updated_at` (seconds on the caller's clock)."""

    rate: float
    burst: int
    tokens: float
    updated_at: float

    @classmethod
    def full(cls, rate: float, burst: int, now: float) -> TokenBucket:
        """A bucket holding `burst` tokens at `now`."""
        if rate <= 0 or burst < 1:
            raise ValueError("a token bucket needs rate > 0 and burst >= 1")
        return cls(rate=rate, burst=burst, tokens=float(burst), updated_at=now)

    def _refill(self, now: float) -> None:
        # A clock that steps back refills nothing rather than draining the bucket.
        elapsed = max(0.0, now - self.updated_at)
        self.tokens = min(float(self.burst), self.tokens + elapsed * self.rate)
        self.updated_at = max(self.updated_at, now)

    def take(self, now: float) -> float | None:
        """Take one token: None when there was one, else the seconds until one is available
        (nothing is taken then)."""
        self._refill(now)
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return None
        return (1.0 - self.tokens) / self.rate

    def wait(self, now: float) -> float | None:
        """What `take` would answer at `now`, without taking anything."""
        self._refill(now)
        return None if self.tokens >= 1.0 else (1.0 - self.tokens) / self.rate

    def is_full(self, now: float) -> bool:
        """Whether the bucket has refilled to `burst` by `now`: it then equals a fresh one."""
        return self.tokens + max(0.0, now - self.updated_at) * self.rate >= self.burst


def whole_seconds(wait: float) -> int:
    """`wait` rounded up to whole seconds, at least 1: what a `Retry-After` header can say."""
    # A hair of float error (1.0000000001 after refill arithmetic) must not become a second more.
    return max(1, math.ceil(wait - 1e-9))


class InFlightLimit:
    """At most `per_key` operations of one key at once. Only keys with an operation in flight are
    held, so memory follows what is in flight, not how many keys were ever seen."""

    def __init__(self, per_key: int) -> None:
        if per_key < 1:
            raise ValueError("an in-flight limit needs per_key >= 1")
        self.per_key = per_key
        self._in_flight: dict[str, int] = {}

    def try_enter(self, key: str) -> bool:
        """Start an operation of `key`: False (and nothing started) when `per_key` are in flight."""
        count = self._in_flight.get(key, 0)
        if count >= self.per_key:
            return False
        self._in_flight[key] = count + 1
        return True

    def leave(self, key: str) -> None:
        """End an operation of `key` that `try_enter` started."""
        count = self._in_flight[key] - 1
        if count:
            self._in_flight[key] = count
        else:
            del self._in_flight[key]

    def in_flight(self, key: str) -> int:
        """How many operations of `key` are in flight."""
        return self._in_flight.get(key, 0)

    def __len__(self) -> int:
        """How many keys have an operation in flight."""
        return len(self._in_flight)
