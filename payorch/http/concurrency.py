"""At most N operations of one key at once, the rest waiting their turn for a bounded time.

Only keys with an operation running or waiting are held, so memory follows what is in flight, not
how many keys were ever seen; and since nobody waits longer than the patience they were given, the
waiters of one key are bounded by how many requests it may start in that time (its rate limit).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import trio


@dataclass
class _Turns:
    semaphore: trio.Semaphore
    users: int = field(default=0)  # holding a turn or waiting for one


class KeyedConcurrencyLimit:
    """Up to `per_key` holders per key at once. A change of `per_key` holds for keys that have
    nobody holding or waiting (the others keep theirs until they are idle)."""

    def __init__(self, per_key: int) -> None:
        if per_key < 1:
            raise ValueError("a concurrency limit needs per_key >= 1")
        self.per_key = per_key
        self._turns: dict[str, _Turns] = {}

    def __len__(self) -> int:
        """How many keys have an operation running or waiting."""
        return len(self._turns)

    @asynccontextmanager
    async def hold(self, key: str, patience_s: float) -> AsyncIterator[bool]:
        """Hold a turn of `key` for the block: yields True once one was had, or False (holding
        nothing) when none came within `patience_s` seconds."""
        turns = self._turns.get(key)
        if turns is None:
            turns = self._turns[key] = _Turns(trio.Semaphore(self.per_key))
        turns.users += 1
        try:
            try:
                turns.semaphore.acquire_nowait()
                acquired = True
            except trio.WouldBlock:
                acquired = False
                with trio.move_on_after(patience_s):
                    await turns.semaphore.acquire()
                    acquired = True
            if not acquired:
                yield False
                return
            try:
                yield True
            finally:
                turns.semaphore.release()
        finally:
            turns.users -= 1
            if not turns.users:
                del self._turns[key]
