"""Units of several callers run by one statement: group commit across application actors, and reads
of the same moment read together.

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

Reads meet the same way (`Together.read`): sessions read by id by requests of the same moment are
read by one statement, `shared(conn, parts)` answering one item a part in their order, and each
caller takes its own; a group of one reads through the same statement and meets its own failure.
The database keeps one `Together` for stores and one for reads (`Database.together`,
`Database.reads_together`), so a read never waits for a store's shared unit.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar, cast

import trio

log = logging.getLogger("payorch.storage")

if TYPE_CHECKING:
    from payorch.storage.database import Connection, Database

P = TypeVar("P")
R = TypeVar("R")
T = TypeVar("T")

Shared = Callable[["Connection", Sequence[Any]], Awaitable[Sequence[Any] | None]]

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
    answer: object = None  # then, for a read: what the shared unit answered for this part
    ended: trio.Event = field(default_factory=trio.Event)


class Together:
    """Where callers of the same statement at the same moment meet (the module's text)."""

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
        group = await self._wait_to_be_taken(mine)
        if not mine.taken:  # waited long enough for a shared unit to end
            return await alone()
        if group is not None:  # led
            if len(group) == 1:
                return await self._holding_a_slot(alone)
            await self._run_shared(db, group)
        await mine.ended.wait()
        return stored if mine.stored else await alone()

    async def read(
        self,
        db: Database,
        shared: Callable[[Connection, Sequence[P]], Awaitable[Sequence[R]]],
        part: P,
        *,
        alone: Callable[[], Awaitable[R]],
    ) -> R:
        """What `shared(conn, parts)` answers for `part` (its answers in the order of `parts`, one
        each), read in one unit with the parts of callers of the same moment; a group of one reads
        it alone, `shared(conn, [part])`, and meets its own failure. Should the unit of several fail,
        or the wait for a shared unit under way run out, what `alone()` returns or raises."""
        mine = _Part(shared, part, 1)
        group = await self._wait_to_be_taken(mine)
        if not mine.taken:
            return await alone()
        if group is not None:
            if len(group) == 1:
                answers = await self._holding_a_slot(lambda: db.autocommit(shared, [part]))
                return answers[0]
            await self._run_shared(db, group)
        await mine.ended.wait()
        return cast(R, mine.answer) if mine.stored else await alone()

    async def _wait_to_be_taken(self, mine: _Part) -> list[_Part] | None:
        """Wait until `mine` is taken into a group: the group, when this caller leads it; None when
        another leads it, or when the wait for a shared unit to end ran out (`mine.taken` false)."""
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
        return group

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
        answers: Sequence[Any] = [None] * len(group)
        committed = False
        try:
            answered = await self._holding_a_slot(lambda: db.autocommit(shared, parts))
            if answered is not None:  # a read's: one answer a part, in their order
                if len(answered) != len(group):
                    raise ValueError(f"{len(answered)} answers for {len(group)} parts")
                answers = answered
            committed = True
        except Exception:  # each caller runs its own unit alone, and meets its own failure there
            log.debug("a shared statement failed; each of its callers runs its own unit", exc_info=True)
        finally:
            if committed:
                self.shared_units += 1
                self.shared_parts += len(group)
            for taken, answer in zip(group, answers, strict=True):
                taken.stored = committed
                taken.answer = answer
                taken.ended.set()

    def _end_unit(self) -> None:
        self._in_flight -= 1
        self._unit_ended.set()
        self._unit_ended = trio.Event()


__all__ = ["Together"]
