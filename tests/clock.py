"""A clock a test moves: the host's time plus however far the test has moved it.

The runtime of the tests reads wall time from one (`conftest.clock`), so a test proves what happens
when a session expires, a retry falls due or a lease runs out by moving time past it
(`clock.advance(61)`), not by waiting. The supervisors poll at least every second, so a test then
waits a bounded moment for the effect (`helpers.eventually`).

Why not Trio's `autojump_clock`: the service's tests talk to a real PostgreSQL and real sockets. To
Trio, a task waiting on either is idle, and the autojump clock jumps to the next timeout whenever
every task is idle, so a slow query would fire request and provider timeouts that never happen in
production. Pure code (no I/O) is still tested under `autojump_clock`.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta


class ShiftedClock:
    """Wall time, moved forward by `advance()`; never moves back."""

    def __init__(self) -> None:
        self.shift = timedelta()

    def now(self) -> datetime:
        return datetime.now(UTC) + self.shift

    def advance(self, seconds: float) -> None:
        """Move time forward by `seconds`."""
        assert seconds >= 0, "time never moves back"
        self.shift += timedelta(seconds=seconds)

    def timestamp(self) -> int:
        """Now in Unix seconds, as signatures carry it."""
        return int(self.now().timestamp())
