"""Wake-ups: one task telling another, in this process, that there is work.

`Wakeup` is the mechanism: rung any number of times while nobody waits, it wakes its waiter once.
`DeliveryWakeup` is the one the webhook delivery supervisor waits on between rounds: rung after the
commit of each transaction of this database whose unit wrote an outbox event (`OutboxWrites`), when
a delivery slot frees, and when claims are taken over from a dead node. Other processes hear of new
events through PostgreSQL's `NOTIFY payorch_outbox` instead, whose payload is the wake-up's
`origin`: a listener skips its own database's notifications, the wake-up having already rung.
"""

from __future__ import annotations

import secrets
from contextvars import ContextVar

import trio


class Wakeup:
    """Rings while no one waits are kept as one: many rings during one round make one more round,
    not one each."""

    def __init__(self) -> None:
        self._rung = trio.Event()

    def ring(self) -> None:
        self._rung.set()

    async def wait(self) -> None:
        """Return once rung since the last `wait` returned (at once if it already was)."""
        await self._rung.wait()
        self._rung = trio.Event()


class DeliveryWakeup(Wakeup):
    """What wakes the webhook delivery supervisor of this process (see the module's text)."""

    def __init__(self) -> None:
        super().__init__()
        self.origin = secrets.token_hex(8)  # the NOTIFY payload of this database's events


class OutboxWrites:
    """Whether one transaction's unit wrote outbox events: a mutable mark the caller makes and keeps,
    and the unit's side finds through a context variable (the unit runs as an asyncio task of its
    own, so a value set there never reaches the caller; a change to this object does)."""

    def __init__(self, wakeup: DeliveryWakeup) -> None:
        self.wakeup = wakeup
        self.written = False

    def track(self) -> None:
        """Make this the mark of the unit about to run in the current context."""
        _writes.set(self)

    def ring_if_written(self) -> None:
        """After the commit: wake the delivery supervisor when an event was written."""
        if self.written:
            self.wakeup.ring()


_writes: ContextVar[OutboxWrites | None] = ContextVar("payorch_outbox_writes", default=None)


def mark_outbox_written() -> str:
    """Note that the unit running in this context wrote an outbox event; the origin its NOTIFY
    carries ("" outside a tracked unit: nothing to note, and no process skips it)."""
    writes = _writes.get()
    if writes is None:
        return ""
    writes.written = True
    return writes.wakeup.origin
