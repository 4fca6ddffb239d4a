"""The one clock payorch reads wall time from: every `expires_at`, lease, retry time and signature
timestamp is `clock.now()`, computed in Python and passed into SQL, never the database's `now()`.

The runtime builds the clock and hands it to everything that needs the time (`open_runtime`'s
`clock`). The service runs on `SYSTEM_CLOCK`; a test hands in a clock it can move, so expiry,
retries and leases are tested by moving time, not by waiting for it. Intervals measured inside one
process (timeouts, rate-limit buckets, provider health) use Trio's monotonic clock as before.

Only a row's creation time that nothing is ever compared against (when a merchant, application, key,
webhook configuration, delivery or event was made) is left to the column's default, the database's
`now()`; a session's, a refund's and an Idempotency-Key's come from the clock like every other time.

Nodes of one service compare each other's times (a lease written by one is judged by another), so
their hosts' clocks must agree to well under a second, as NTP keeps them.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Protocol


class Clock(Protocol):
    def now(self) -> datetime:
        """The current wall time, timezone-aware, in UTC."""
        ...


class SystemClock:
    """The host's wall clock."""

    def now(self) -> datetime:
        return datetime.now(UTC)

    def __repr__(self) -> str:
        return "SystemClock()"


SYSTEM_CLOCK = SystemClock()
