"""Wake-ups: one task telling another, in this process, that there is work.

`Wakeup` is the mechanism: rung any number of times while nobody waits, it wakes its waiter once.
A database has two, each rung after the commit of a transaction whose unit wrote what its loop
delivers (`UnitWrites`):
- `delivery_wakeup` (a `DeliveryWakeup`), which the webhook delivery supervisor waits on between
  rounds: rung for an outbox event, and also when a delivery slot frees and when claims are taken
  over from a dead node. Other processes hear of new events through PostgreSQL's `NOTIFY payorch_outbox`
  instead, whose payload is the wake-up's `origin`: a listener skips its own database's
  notifications, the wake-up having already rung.
- `sandbox_wakeup`, which the sandbox's event sender waits on: rung for a sandbox event queued, and
  when sandbox deliveries are taken over from a dead node. An event another process queues is that
  process's sender's to deliver; this one finds it at its next look (at most a second away).
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


class UnitWrites:
    """What one transaction's unit wrote that a loop waits for: a mutable mark the caller makes and
    keeps, and the unit's side finds through a context variable (the unit runs as an asyncio task of
    its own, so a value set there never reaches the caller; a change to this object does)."""

    def __init__(self, delivery: DeliveryWakeup, sandbox: Wakeup) -> None:
        self.delivery, self.sandbox = delivery, sandbox
        self.outbox_written = False
        self.sandbox_queued = False

    def track(self) -> None:
        """Make this the mark of the unit about to run in the current context."""
        _writes.set(self)

    def ring_what_was_written(self) -> None:
        """After the commit: wake the loop of each kind of work the unit wrote."""
        if self.outbox_written:
            self.delivery.ring()
        if self.sandbox_queued:
            self.sandbox.ring()


_writes: ContextVar[UnitWrites | None] = ContextVar("payorch_unit_writes", default=None)


def mark_outbox_written() -> str:
    """Note that the unit running in this context wrote an outbox event; the origin its NOTIFY
    carries ("" outside a tracked unit: nothing to note, and no process skips it)."""
    writes = _writes.get()
    if writes is None:
        return ""
    writes.outbox_written = True
    return writes.delivery.origin


def mark_sandbox_event_queued() -> None:
    """Note that the unit running in this context queued a sandbox event (nothing outside a tracked
    unit: the sender finds it at its next look)."""
    writes = _writes.get()
    if writes is not None:
        writes.sandbox_queued = True
