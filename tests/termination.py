"""What a test process must end before it ends, should it be ended by SIGTERM (a run interrupted, a
CI job cancelled): pytest runs no teardown then, and the embedded PostgreSQL, ChromeDriver and its
Chromium, each a process of its own, would be left running without a parent.

A session fixture that starts one registers how to end it (`ended_with_this_process`), in the main
thread; on SIGTERM each is ended, the newest first, and the process then ends as the signal would
have ended it."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Callable, Iterator
from types import FrameType

_ENDINGS: list[Callable[[], None]] = []


def _ended(signum: int, frame: FrameType | None) -> None:
    for end in reversed(_ENDINGS):
        with contextlib.suppress(Exception):
            end()
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)


@contextlib.contextmanager
def ended_with_this_process(end: Callable[[], None]) -> Iterator[None]:
    """While the block runs, `end()` is called should this process be ended by SIGTERM."""
    signal.signal(signal.SIGTERM, _ended)
    _ENDINGS.append(end)
    try:
        yield
    finally:
        _ENDINGS.remove(end)
