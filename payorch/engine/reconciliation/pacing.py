"""How a reconciliation run shares the server and waits for its provider (docs/reconciliation.md).

- `Turns`, `Turn`: the run's place among the runs a process runs at once
  (`limits.background_per_merchant`, of which one merchant's hold `RUNS_PER_MERCHANT` at most),
  given back while the run waits for its provider, so that a provider's 429 slows its own account
  alone;
- `PageRetries`: each page of the provider's settlements asked again after a 429 or a 5xx
  (`providers.settlements.SettlementsBusy`), as the provider's `Retry-After` says or after a
  doubling pause, a bounded number of times;
- `RunsShare`, `Pace`: the process's runs held together to `reconciliation.time_share` of the
  server's time, each resting after each batch.
"""

from __future__ import annotations

import logging
import math
import uuid
from collections.abc import Awaitable, Callable
from time import perf_counter
from typing import TypeVar

import trio

from payorch.config import ReconciliationSettings
from payorch.providers.base import ProviderError
from payorch.providers.settlements import SettlementsBusy
from payorch.storage import reconciliations as store

log = logging.getLogger("payorch.reconciliation")

T = TypeVar("T")

# Of the process's places, what one merchant's runs may hold at once.
RUNS_PER_MERCHANT = 2


class Turns:
    """The places of reconciliation runs in this process: `in_all` at once, of which one merchant's
    hold `per_merchant` at most, so that a merchant with many accounts never keeps every other
    merchant's runs waiting. Each merchant's runs, and the process's, take their places first come,
    first served (`trio.CapacityLimiter`); a merchant's limiter lives while it has runs holding or
    waiting for a place."""

    def __init__(self, in_all: int, per_merchant: int) -> None:
        self._all = trio.CapacityLimiter(in_all)
        self._per_merchant = per_merchant
        self._merchants: dict[uuid.UUID, trio.CapacityLimiter] = {}

    async def take(self, merchant_id: uuid.UUID, holder: object) -> None:
        """A place for `holder`, one of `merchant_id`'s runs: its merchant's first, then the process's."""
        own = self._merchants.setdefault(merchant_id, trio.CapacityLimiter(self._per_merchant))
        await own.acquire_on_behalf_of(holder)
        try:
            await self._all.acquire_on_behalf_of(holder)
        except BaseException:
            self._give_back_own(merchant_id, holder)
            raise

    def give_back(self, merchant_id: uuid.UUID, holder: object) -> None:
        self._all.release_on_behalf_of(holder)
        self._give_back_own(merchant_id, holder)

    def _give_back_own(self, merchant_id: uuid.UUID, holder: object) -> None:
        own = self._merchants[merchant_id]
        own.release_on_behalf_of(holder)
        if own.borrowed_tokens == 0 and own.statistics().tasks_waiting == 0:
            del self._merchants[merchant_id]


class Turn:
    """A run's place (`Turns`), given back while the run waits for its provider (`pause`)."""

    def __init__(self, turns: Turns, merchant_id: uuid.UUID) -> None:
        self._turns = turns
        self._merchant_id = merchant_id
        self._held = False

    async def __aenter__(self) -> Turn:
        await self._turns.take(self._merchant_id, self)
        self._held = True
        return self

    async def __aexit__(self, *_: object) -> None:
        if self._held:
            self._turns.give_back(self._merchant_id, self)
            self._held = False

    async def pause(self, seconds: float) -> None:
        """Wait `seconds` without the place, then take one again (waiting its turn as a new run)."""
        self._turns.give_back(self._merchant_id, self)
        self._held = False
        await trio.sleep(seconds)
        await self._turns.take(self._merchant_id, self)
        self._held = True


class RunsShare:
    """The share of the server's time all of a process's runs take together
    (`reconciliation.time_share`), however many run at once: a timeline every run's batches book.

    A batch that took `busy` seconds of the run's time books `busy / share` seconds of the timeline,
    from its start or from the end of the last booking, whichever is later, and its run rests until
    that booking ends. One run alone so works a `share` of the time; two at once book one after
    the other and each rests the longer, so that together they work a `share` of it still."""

    def __init__(self, share: float) -> None:
        if not 0 < share <= 1:
            raise ValueError(f"a share of the server's time is more than 0 and at most 1, not {share}")
        self.share = share
        self._booked_until = -math.inf

    async def rest(self, began: float, busy: float) -> None:
        """Book a batch that began at `began` (`trio.current_time`) and took `busy` seconds of the
        run's time, and rest until its booking ends."""
        self._booked_until = max(self._booked_until, began) + busy / self.share
        await trio.sleep_until(self._booked_until)


class Pace:
    """Holds a run to its part of `RunsShare`: after each batch it stores the run books the time
    the batch took, less what it spent waiting for a remote provider's pages
    (`PageRetries.outside_s`: no work of the server's), and rests. A run on two cores beside the
    merchants' requests otherwise takes a core and most of PostgreSQL's other one for as long as
    it lasts, and their latency shows it."""

    def __init__(self, share: RunsShare, retries: PageRetries) -> None:
        self._share, self.retries = share, retries
        self._began, self._outside = trio.current_time(), retries.outside_s

    async def rest(self) -> None:
        now, outside = trio.current_time(), self.retries.outside_s
        busy = max(0.0, now - self._began - (outside - self._outside))
        await self._share.rest(now - busy, busy)
        # Its clock is a wall clock: the rest is not the run's work.
        self._began, self._outside = trio.current_time(), self.retries.outside_s


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
