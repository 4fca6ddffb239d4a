"""Units of several callers stored by one statement: group commit across application actors.

Each application's actor hands the database its own unit of work (`storage.database`). With many
applications each busy, every actor sees about one create at a time, and each create is then a
crossing of its own, a statement of its own and a commit of its own. `Together` lets callers that
would run the same kind of statement at the same moment (the same `shared` function) have it run
once for all of them, in one unit, one crossing and one commit:

- a caller that finds fewer than `in_flight` shared units under way leads: it lets the callers of
  the same moment join (one Trio checkpoint), then takes the waiting parts, its own first, up to
  `max_rows` rows, and runs them; one that finds them all under way waits for one to end, at most
  `wait_s`, then runs its own unit alone, as it would have without this;
- a leader alone in its group runs its own unit (`alone`), exactly as without this;
- a group of several runs `shared(conn, parts)`, one statement (so all or none, in autocommit):
  when it commits, every caller gets its `stored` answer; should it fail in any way (a key seen
  before, a row refused, the database unavailable, the leader cancelled), nothing of it remains
  and each caller runs its own unit alone, in its own task, with its own outcome.

So a caller's part never fails another's: the most one caller's part costs another is the shared
unit it was in, and the wait for one, at most `wait_s`. Nothing is held but the parts waiting, at
most one per caller waiting.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import trio

log = logging.getLogger("payorch.storage")

if TYPE_CHECKING:
    from payorch.storage.database import Connection, Database

P = TypeVar("P")
T = TypeVar("T")

Shared = Callable[["Connection", Sequence[Any]], Awaitable[None]]

# Shared units under way at once: one lets the parts of the moment wait for it, and join the next.
IN_FLIGHT = 1
# The rows of one shared statement at most.
MAX_ROWS = 64
# How long a part waits for a shared unit under way to end before its caller runs it alone.
WAIT_S = 0.025


@dataclass(eq=False)
class _Part:
    shared: Shared
    part: object
    rows: int
    taken: bool = False  # into a group by a leader
    stored: bool | None = None  # once its group ended: whether the shared unit committed
    ended: trio.Event = field(default_factory=trio.Event)


class Together:
    """Where callers of the same statement at the same moment meet (the module's text); one per
    database."""

    def __init__(
        self, *, in_flight: int = IN_FLIGHT, max_rows: int = MAX_ROWS, wait_s: float = WAIT_S
    ) -> None:
        self._in_flight_max = in_flight
        self._max_rows = max_rows
        self._wait_s = wait_s
        self._in_flight = 0
        self._waiting: list[_Part] = []
        self._unit_ended = trio.Event()
        # Shared units that committed, and the parts they held, since the database opened.
        self.shared_units = 0
        self.shared_parts = 0

    @property
    def waiting(self) -> int:
        """The parts waiting for a shared unit under way to end."""
        return len(self._waiting)

    async def run(
        self,
        db: Database,
        shared: Callable[[Connection, Sequence[P]], Awaitable[None]],
        part: P,
        rows: int,
        *,
        stored: T,
        alone: Callable[[], Awaitable[T]],
    ) -> T:
        """`stored` once `shared(conn, parts)` committed with `part` (of `rows` rows) among the
        parts of callers of the same moment; else what `alone()` (the caller's own unit, marked to
        run on the database's thread by whoever wrote it) returns or raises."""
        mine = _Part(shared, part, rows)
        deadline = trio.current_time() + self._wait_s
        group: list[_Part] | None = None
        self._waiting.append(mine)
        try:
            while not mine.taken:
                if self._in_flight < self._in_flight_max:
                    await trio.lowlevel.checkpoint()  # the callers of this moment join
                    if not mine.taken and self._in_flight < self._in_flight_max:
                        group = self._take(mine)
                    continue
                with trio.move_on_at(deadline):
                    await self._unit_ended.wait()
                if not mine.taken and trio.current_time() >= deadline:
                    break
        finally:
            if not mine.taken:
                self._waiting.remove(mine)
        if not mine.taken:  # waited long enough for a shared unit to end
            return await alone()
        if group is not None:  # led
            if len(group) == 1:
                return await self._holding_a_slot(alone)
            await self._run_shared(db, group)
        await mine.ended.wait()
        return stored if mine.stored else await alone()

    def _take(self, leader: _Part) -> list[_Part]:
        """The leader's group: itself, then the parts waiting for the same statement, oldest first,
        up to `max_rows` rows."""
        self._waiting.remove(leader)
        group, rows = [leader], leader.rows
        for waiting in list(self._waiting):
            if waiting.shared == leader.shared and rows + waiting.rows <= self._max_rows:
                group.append(waiting)
                rows += waiting.rows
                self._waiting.remove(waiting)
        for taken in group:
            taken.taken = True
        return group

    async def _holding_a_slot(self, unit: Callable[[], Awaitable[T]]) -> T:
        self._in_flight += 1
        try:
            return await unit()
        finally:
            self._end_unit()

    async def _run_shared(self, db: Database, group: Sequence[_Part]) -> None:
        """The group's statement in one unit; each part told whether it committed, however it
        ended."""
        shared, parts = group[0].shared, [taken.part for taken in group]
        committed = False
        try:
            await self._holding_a_slot(lambda: db.autocommit(shared, parts))
            committed = True
        except Exception:  # each caller runs its own unit alone, and meets its own failure there
            log.debug("a shared statement failed; each of its callers runs its own unit", exc_info=True)
        finally:
            if committed:
                self.shared_units += 1
                self.shared_parts += len(group)
            for taken in group:
                taken.stored = committed
                taken.ended.set()

    def _end_unit(self) -> None:
        self._in_flight -= 1
        self._unit_ended.set()
        self._unit_ended = trio.Event()


__all__ = ["Together"]
