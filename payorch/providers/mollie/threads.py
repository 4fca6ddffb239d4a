"""How many of the SDK's blocking calls run at once, and whose: the adapter's whole limit, and a share
of it per Mollie account, so that one merchant's many or slow calls (each holds its thread until the
SDK's own timeout, even when payorch has given up on it) can never take every thread from the others.

`AccountThreads.limiter(api_key)` is what `trio.to_thread.run_sync(limiter=...)` takes: a thread
starts once it holds a place in its account's share and in the whole, and gives both back when it
ends. An account's share is forgotten as soon as none of its calls runs or waits.
"""

from __future__ import annotations

import hashlib

import trio


class AccountThreads:
    def __init__(self, total: int, per_account: int) -> None:
        self.whole = trio.CapacityLimiter(total)
        self.per_account = min(per_account, total)
        self._shares: dict[bytes, trio.CapacityLimiter] = {}

    def limiter(self, api_key: str) -> _BothLimits:
        """The limits a call with `api_key` runs under (accounts are told apart by a hash of it)."""
        return _BothLimits(self, hashlib.sha256(api_key.encode()).digest())

    def accounts(self) -> int:
        """How many accounts have a call running or waiting."""
        return len(self._shares)

    def _share(self, account: bytes) -> trio.CapacityLimiter:
        share = self._shares.get(account)
        if share is None:
            share = self._shares[account] = trio.CapacityLimiter(self.per_account)
        return share

    def _forget_if_idle(self, account: bytes) -> None:
        share = self._shares.get(account)
        if share is not None and share.borrowed_tokens == 0 and share.statistics().tasks_waiting == 0:
            del self._shares[account]


class _BothLimits:
    """The account's share, then the whole: what `trio.to_thread.run_sync` acquires for a thread.
    The share is looked up when the thread asks for its places, so a call cancelled before it asks
    leaves none behind."""

    def __init__(self, threads: AccountThreads, account: bytes) -> None:
        self._threads, self._account = threads, account

    async def acquire_on_behalf_of(self, borrower: object) -> None:
        share = self._threads._share(self._account)
        try:
            await share.acquire_on_behalf_of(borrower)
        except BaseException:
            self._threads._forget_if_idle(self._account)
            raise
        try:
            await self._threads.whole.acquire_on_behalf_of(borrower)
        except BaseException:
            self._release_share(borrower)
            raise

    def release_on_behalf_of(self, borrower: object) -> None:
        self._threads.whole.release_on_behalf_of(borrower)
        self._release_share(borrower)

    def _release_share(self, borrower: object) -> None:
        self._threads._shares[self._account].release_on_behalf_of(borrower)
        self._threads._forget_if_idle(self._account)
