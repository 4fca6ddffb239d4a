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

Unknown keys (never issued, or revoked) are remembered too, by hash, for `miss_ttl_s`: a flood of
one bad key costs one database read per `miss_ttl_s`, not one per request. At most `max_entries`
of them are held (the longest known dropped first), apart from the active keys, so a flood of
distinct bad keys cannot push active keys out or grow memory; the per-address limit on failed
authentications (`http/request_limits.py`) is what holds that flood back. A remembered miss can never
make a new key fail: a key's hash is unknown to everyone until its create call answers with the
key, so nobody can have asked for it before it existed. On top of that, creating a key notifies
its application's change like a revocation, and every change forgets every remembered miss.
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

    def __init__(
        self, ttl_s: float, max_entries: int = DEFAULT_MAX_ENTRIES, *, miss_ttl_s: float = 0.0
    ) -> None:
        self.ttl_s = ttl_s
        self.miss_ttl_s = miss_ttl_s
        self.max_entries = max_entries
        self.listening = False  # set by `keep_fresh` while it hears every change
        self.generation = 0  # moves on with every forget: a lookup older than that is not kept
        self._entries: OrderedDict[bytes, _Entry] = OrderedDict()
        self._misses: OrderedDict[bytes, float] = OrderedDict()  # unknown key hash -> when found so

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

    def is_missing(self, key_hash: bytes, now: float) -> bool:
        """Whether the key was found unknown less than `miss_ttl_s` ago (and nothing changed since)."""
        if not self.listening:
            return False
        found_at = self._misses.get(key_hash)
        if found_at is None:
            return False
        if now - found_at >= self.miss_ttl_s:
            del self._misses[key_hash]
            return False
        return True

    def put_missing(self, key_hash: bytes, now: float, generation: int) -> None:
        """Remember that the database knew no active key of this hash when `generation` was
        current, unless something was forgotten since (a key may have been created meanwhile)."""
        if not self.listening or self.miss_ttl_s <= 0 or generation != self.generation:
            return
        self._misses[key_hash] = now
        self._misses.move_to_end(key_hash)
        while len(self._misses) > self.max_entries:
            self._misses.popitem(last=False)

    def forget_expired(self, now: float) -> None:
        """Drop every entry older than `ttl_s`, and every miss older than `miss_ttl_s` (they are
        dropped when looked up too; this is for keys nobody uses any more)."""
        for key_hash in [h for h, entry in self._entries.items() if now - entry.cached_at >= self.ttl_s]:
            del self._entries[key_hash]
        # Misses are kept in the order they were found (a lookup does not move them): oldest first.
        while self._misses and now - next(iter(self._misses.values())) >= self.miss_ttl_s:
            self._misses.popitem(last=False)

    def forget_idle(self) -> None:
        """`forget_expired` now (the housekeeping supervisor's sweep)."""
        self.forget_expired(trio.current_time())

    def forget_application(self, application_id: uuid.UUID) -> None:
        """Drop every key of the application: one was created or revoked, or its status changed;
        and every remembered miss (cheap to find again, and a created key must never be one)."""
        self.generation += 1
        self._misses.clear()
        for key_hash in [
            h for h, entry in self._entries.items() if entry.owner.application_id == application_id
        ]:
            del self._entries[key_hash]

    def forget_all(self) -> None:
        self.generation += 1
        self._entries.clear()
        self._misses.clear()
