"""How a reconciliation run shares the server and waits for its provider (docs/reconciliation.md).

- `Turn`: the run's place among the runs a process runs at once (`limits.background_per_merchant`),
  given back while the run waits for its provider, so that a provider's 429 slows its own account
  alone;
- `PageRetries`: each page of the provider's settlements asked again after a 429 or a 5xx
  (`providers.settlements.SettlementsBusy`), as the provider's `Retry-After` says or after a
  doubling pause, a bounded number of times;
- `Pace`: the run held to `reconciliation.time_share` of the server's time, resting after each batch.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from time import perf_counter
from typing import TypeVar

import trio

from payorch.config import ReconciliationSettings
from payorch.providers.base import ProviderError
from payorch.providers.settlements import SettlementsBusy
from payorch.storage import reconciliations as store
from payorch.values.cpu_share import CpuShare

log = logging.getLogger("payorch.reconciliation")

T = TypeVar("T")


class Turn:
    """A run's place among the runs this process runs at once (`limits.background_per_merchant`),
    given back while the run waits for its provider (`pause`)."""

    def __init__(self, turns: trio.CapacityLimiter) -> None:
        self._turns = turns
        self._held = False

    async def __aenter__(self) -> Turn:
        await self._turns.acquire_on_behalf_of(self)
        self._held = True
        return self

    async def __aexit__(self, *_: object) -> None:
        if self._held:
            self._turns.release_on_behalf_of(self)
            self._held = False

    async def pause(self, seconds: float) -> None:
        """Wait `seconds` without the place, then take one again (waiting its turn as a new run)."""
        self._turns.release_on_behalf_of(self)
        self._held = False
        await trio.sleep(seconds)
        await self._turns.acquire_on_behalf_of(self)
        self._held = True


class Pace:
    """Holds a run to `reconciliation.time_share` of the server's time: after each batch it stores
    the run rests in proportion to the time the batch took, less what it spent waiting for a remote
    provider's pages (`PageRetries.outside_s`: no work of the server's). A run on two cores beside
    the merchants' requests otherwise takes a core and most of PostgreSQL's other one for as long as
    it lasts, and their latency shows it."""

    def __init__(self, share: float, retries: PageRetries) -> None:
        # The run's own time: the server's time less what it spent on the provider's pages.
        self._pacing = CpuShare(share, lambda: perf_counter() - retries.outside_s)

    async def rest(self) -> None:
        await trio.sleep(self._pacing.rest_s())
        self._pacing.restart()  # its clock is a wall clock: the rest is not the run's work


class PageRetries:
    """How a run reads each page of its provider's settlements (`providers.settlements.PageReads`):
    a page answered 429 or 5xx (`SettlementsBusy`) is asked again after the provider's
    `Retry-After`, else after `page_retry_first_s` doubling per try (at most `page_retry_max_s`),
    the run's turn given back meanwhile. After `page_attempts` tries of one page, or when the
    provider asks for a wait longer than `page_retry_max_s`, the run fails, saying so."""

    def __init__(self, settings: ReconciliationSettings, turn: Turn, run: store.Run) -> None:
        self._settings, self._turn, self._run = settings, turn, run
        self.outside_s = 0.0  # spent reading pages and waiting to read them again

    async def __call__(self, read: Callable[[], Awaitable[T]]) -> T:
        began = perf_counter()
        try:
            return await self._read(read)
        finally:
            self.outside_s += perf_counter() - began

    async def _read(self, read: Callable[[], Awaitable[T]]) -> T:
        attempts, longest = self._settings.page_attempts, self._settings.page_retry_max_s
        for attempt in range(1, attempts + 1):
            try:
                return await read()
            except SettlementsBusy as busy:
                asked = busy.retry_after_s
                if asked is not None and asked > longest:
                    raise ProviderError(
                        f"{busy}; it asked to wait {asked:g} s (Retry-After), longer than a run waits "
                        f"({longest:g} s): start the run again later"
                    ) from busy
                if attempt == attempts:
                    raise ProviderError(
                        f"{busy}; still so after {attempts} tries of the page: start the run again later"
                    ) from busy
                pause = asked if asked is not None else self._settings.page_retry_first_s * 2 ** (attempt - 1)
                pause = min(pause, longest)
                log.info(
                    "reconciliation waits for its provider",
                    extra={
                        "runId": str(self._run.id),
                        "provider": self._run.provider,
                        "attempt": attempt,
                        "pauseS": pause,
                        "error": str(busy),
                    },
                )
                await self._turn.pause(pause)
        raise AssertionError("unreachable: the last try returns or raises")
