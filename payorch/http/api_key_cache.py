"""Active API keys recently seen, by hash: an API-key request authenticates without a database
round trip, and a revoked key still fails on its very next request.

Entries come from `storage.applications.find_api_key_owner` (only active keys are ever cached) and
go away:
- in this process, at once: the routes that revoke a key or change an application's status call
  `forget_application` after their transaction commits;
- in every process, as soon as PostgreSQL delivers the notification those transactions send on
  commit (`storage.application_changes`, whose `keep_fresh` listens for it);
- after `ttl_s` at the latest, a last resort should a notification ever be lost.

While `keep_fresh` is not listening (starting, or its connection lost), the cache answers nothing
and every request reads the database: what it cannot hear about it must not remember. A lookup
that started before a `forget` cannot put back what was forgotten (`generation`).
"""

from __future__ import annotations

import uuid
from collections import OrderedDict
from dataclasses import dataclass

import trio

from payorch.storage.applications import ApiKeyOwner

DEFAULT_MAX_ENTRIES = 10_000


@dataclass(frozen=True)
class _Entry:
    owner: ApiKeyOwner
    cached_at: float


class ApiKeyCache:
    """Owners of active API keys by key hash, each for at most `ttl_s` seconds (trio's clock), at
    most `max_entries` of them (least recently used dropped first). `ttl_s` 0 caches nothing."""

    def __init__(self, ttl_s: float, max_entries: int = DEFAULT_MAX_ENTRIES) -> None:
        self.ttl_s = ttl_s
        self.max_entries = max_entries
        self.listening = False  # set by `keep_fresh` while it hears every change
        self.generation = 0  # moves on with every forget: a lookup older than that is not kept
        self._entries: OrderedDict[bytes, _Entry] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key_hash: bytes, now: float) -> ApiKeyOwner | None:
        """The key's owner as cached and still fresh; None when it must be read from the database."""
        if not self.listening:
            return None
        entry = self._entries.get(key_hash)
        if entry is None:
            return None
        if now - entry.cached_at >= self.ttl_s:
            del self._entries[key_hash]
            return None
        self._entries.move_to_end(key_hash)
        return entry.owner

    def put(self, key_hash: bytes, owner: ApiKeyOwner, now: float, generation: int) -> None:
        """Remember `owner`, read from the database when `generation` was current, unless something
        was forgotten since (the read may predate a revocation)."""
        if not self.listening or self.ttl_s <= 0 or generation != self.generation:
            return
        self._entries[key_hash] = _Entry(owner, now)
        self._entries.move_to_end(key_hash)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)

    def forget_expired(self, now: float) -> None:
        """Drop every entry older than `ttl_s` (they are dropped when looked up too; this is for
        keys nobody uses any more)."""
        for key_hash in [h for h, entry in self._entries.items() if now - entry.cached_at >= self.ttl_s]:
            del self._entries[key_hash]

    def forget_idle(self) -> None:
        """`forget_expired` now (the housekeeping supervisor's sweep)."""
        self.forget_expired(trio.current_time())

    def forget_application(self, application_id: uuid.UUID) -> None:
        """Drop every key of the application: one was revoked, or its status changed."""
        self.generation += 1
        for key_hash in [
            h for h, entry in self._entries.items() if entry.owner.application_id == application_id
        ]:
            del self._entries[key_hash]

    def forget_all(self) -> None:
        self.generation += 1
        self._entries.clear()
