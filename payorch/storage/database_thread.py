"""Which functions run on the database's thread, said where each is defined: `@on_database_thread`.

payorch runs asyncpg on an asyncio loop in a thread of its own (`storage.loop_thread`); everything
else runs on Trio's thread (or, said where it is done, in a worker thread or process). A function
that runs on the database's thread takes the connection `conn` first and is marked here; Trio code
hands it to `Database.transaction`, `autocommit` or `snapshot` (`storage.database`), which refuse a
unit of payorch's that is not marked (`marked_unit`). tests/test_database_thread.py holds every
function of payorch taking `conn` first to the mark, and only those. Nothing here imports the rest
of payorch, so every module that writes a unit can import it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

F = TypeVar("F", bound=Callable[..., object])

_MARK = "payorch_on_database_thread"


def on_database_thread(function: F) -> F:
    """Mark `function` as running on the database's asyncio thread (`storage.loop_thread`), never on
    Trio's: it takes a connection first and is handed to `Database.transaction`, `autocommit` or
    `snapshot`, or called by a function that is. The mark is an attribute and nothing else."""
    setattr(function, _MARK, True)
    return function


def marked_unit(unit: Callable[..., object]) -> Callable[..., object]:
    """`unit`, if it is marked or is not payorch's own (a test's, a bench's); `TypeError` else."""
    if not getattr(unit, _MARK, False) and str(getattr(unit, "__module__", "")).startswith("payorch."):
        name = getattr(unit, "__qualname__", unit)
        raise TypeError(f"{name} runs on the database's thread: mark it @on_database_thread")
    return unit
