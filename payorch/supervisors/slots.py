"""Work slots: how a supervisor keeps a fixed pool of tasks busy with one merchant's work never able
to hold more than its share, and one item's failure never able to fail another.

`WorkSlots` is the pool: each item runs in a task of its own; a freed slot rings the loop's wake-up
(unless the loop says its owner could not be given more now, `wakes_for`), and the loop's next round
takes new work into the free slots (the webhook delivery loop, and `DueWork`'s loops). So a slow
item holds its own slot, never a batch.

`DueWork` is the loop of the expiry and refund-submission supervisors on top of it: each round
picks due items into the free slots, at most `limits.background_per_merchant` per merchant in flight
(`storage.due_work`), and hands each one to its application's actor. An item that fails is left for
a later round and fails alone: an application whose actor's mailbox is full (`ServiceBusy`: a
merchant's own requests fill it) is left alone for a pause that doubles per failure, its items
skipped; any other failure of an item leaves that item alone likewise. The supervisor itself never
fails for an item, so it never restarts and `/readyz` never turns for one merchant's load.
"""

from __future__ import annotations

import logging
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from functools import partial

import trio

from payorch.engine.context import Context
from payorch.storage.due_work import DueItem, Skips
from payorch.storage.wakeup import Wakeup
from payorch.values.errors import ServiceBusy

log = logging.getLogger("payorch.supervisors")

# A failed item (or a busy application) is left alone this long, doubling per failure up to the most.
FIRST_PAUSE_S = 0.5
LONGEST_PAUSE_S = 30.0


class WorkSlots:
    """The items a loop has in flight (item id -> whose it is, a merchant's or an application's),
    and the wake-up it waits on between rounds, which a freed slot rings when `wakes_for(owner)`
    (always, unless the loop says otherwise)."""

    def __init__(
        self, size: int, wakeup: Wakeup, wakes_for: Callable[[uuid.UUID], bool] | None = None
    ) -> None:
        self.size = size
        self.in_flight: dict[uuid.UUID, uuid.UUID] = {}
        self._wakeup = wakeup
        self._wakes_for = wakes_for

    @property
    def free(self) -> int:
        return max(self.size - len(self.in_flight), 0)

    def per_owner(self) -> dict[uuid.UUID, int]:
        return dict(Counter(self.in_flight.values()))

    def start(
        self, nursery: trio.Nursery, item: uuid.UUID, owner: uuid.UUID, work: Callable[[], Awaitable[None]]
    ) -> None:
        """Run `work` in a slot of its own. It must not raise (but `trio.Cancelled`): it runs in the
        loop's nursery."""
        self.in_flight[item] = owner
        nursery.start_soon(self._run, item, work)

    async def _run(self, item: uuid.UUID, work: Callable[[], Awaitable[None]]) -> None:
        await work()
        # Not when cancelled: what shutdown interrupts stays listed, for the loop to hand back.
        owner = self.in_flight.pop(item, None)
        if owner is None or self._wakes_for is None or self._wakes_for(owner):
            self.wake()

    def wake(self) -> None:
        self._wakeup.ring()

    async def wait_for_wake(self, timeout_s: float) -> None:
        with trio.move_on_after(timeout_s):
            await self._wakeup.wait()


class Pauses:
    """Keys (items, applications) left alone for a while after a failure: `FIRST_PAUSE_S`, doubling
    per failure in a row up to `LONGEST_PAUSE_S`. In memory: a restart starts afresh."""

    def __init__(self) -> None:
        self._paused: dict[uuid.UUID, tuple[float, float]] = {}  # key -> (until, pause)

    def pause(self, key: uuid.UUID) -> float:
        _, previous = self._paused.get(key, (0.0, 0.0))
        pause = min(previous * 2, LONGEST_PAUSE_S) if previous else FIRST_PAUSE_S
        self._paused[key] = (trio.current_time() + pause, pause)
        return pause

    def clear(self, key: uuid.UUID) -> None:
        self._paused.pop(key, None)

    def active(self) -> list[uuid.UUID]:
        """The keys paused now; those whose pause ended long ago are forgotten."""
        now = trio.current_time()
        for key, (until, _) in list(self._paused.items()):
            if until < now - LONGEST_PAUSE_S:
                del self._paused[key]
        return [key for key, (until, _) in self._paused.items() if until > now]


Pick = Callable[[int, Skips], Awaitable[list[DueItem]]]


class DueWork:
    """One loop's due work in slots (see the module's description). `pick(limit, skips)` takes due
    items (a fair share per merchant); `handle(item)` does one (asking its actor);
    `give_back(items)` returns claims the loop will not finish (on a failure, and on shutdown)."""

    def __init__(
        self,
        name: str,
        context: Context,
        *,
        pick: Pick,
        handle: Callable[[DueItem], Awaitable[object]],
        give_back: Callable[[list[uuid.UUID]], Awaitable[None]] | None = None,
    ) -> None:
        self.name = name
        self.context = context
        self.slots = WorkSlots(context.settings.limits.background_slots, Wakeup())
        self.busy = Pauses()  # applications whose actor's mailbox was full
        self.failing = Pauses()  # items that failed
        self._pick = pick
        self._handle = handle
        self._give_back = give_back

    async def round(self, nursery: trio.Nursery) -> int:
        """Pick due items into the free slots and start each; returns how many started."""
        limits = self.context.settings.limits  # a reload's new limits hold from the next round
        self.slots.size = limits.background_slots
        skips = Skips(
            in_flight=self.slots.per_owner(),
            items=[*self.slots.in_flight, *self.failing.active()],
            applications=self.busy.active(),
        )
        due = await self._pick(self.slots.free, skips)
        for item in due:
            self.slots.start(nursery, item.id, item.merchant_id, partial(self._run, item))
        return len(due)

    async def _run(self, item: DueItem) -> None:
        ids = {"applicationId": str(item.application_id), "itemId": str(item.id)}
        try:
            await self._handle(item)
        except ServiceBusy:
            pause = self.busy.pause(item.application_id)
            log.warning(
                "the application's actor is busy: its due work waits",
                extra={"supervisor": self.name, **ids, "retryInS": pause},
            )
            await self._hand_back(item)
        except Exception:
            pause = self.failing.pause(item.id)
            log.exception(
                "a due item failed: it is tried again later",
                extra={"supervisor": self.name, **ids, "retryInS": pause},
            )
            await self._hand_back(item)
        else:
            self.busy.clear(item.application_id)
            self.failing.clear(item.id)

    async def _hand_back(self, item: DueItem) -> None:
        if self._give_back is None:
            return
        try:
            await self._give_back([item.id])
        except Exception:
            log.exception(
                "could not hand a claim back; it is due again when its lease runs out",
                extra={"supervisor": self.name, "itemId": str(item.id)},
            )

    async def hand_back_in_flight(self) -> None:
        """Shutting down: hand back what is in flight, so another process need not wait out a lease."""
        if self._give_back is not None and self.slots.in_flight:
            with trio.move_on_after(5, shield=True):
                await self._give_back(list(self.slots.in_flight))
