"""Provider configurations recently read to check an inbound provider event's signature, by
application and provider: a provider's events, and a stranger's forged ones, are checked against
the event secret without a database read each.

What an application has (its configuration) and what it has not (no configuration, or a link not
finished) are remembered alike, for `ttl_s`, and go away:
- in this process, at once: the operations that finish a link or a key change, or set payment
  methods, call `forget_application` after their transaction commits;
- in every process, as soon as PostgreSQL delivers the notification every write of
  `provider_configs` sends on commit (a trigger, `storage.application_changes`, whose `keep_fresh`
  listens for it);
- after `ttl_s` at the latest, a last resort should a notification ever be lost.

While `keep_fresh` is not listening, the cache answers nothing and every event reads the database.
A read that started before a forget cannot put back what was forgotten (`generation`). At most
`max_entries` are held, the least recently used dropped first: a stranger's events for many
applications cost a database read each, as without the cache, at the per-address pace
(`limits.provider_events_per_address_per_second`), and never more memory.
"""

from __future__ import annotations

import uuid
from collections import OrderedDict
from dataclasses import dataclass

import trio

from payorch.storage.provider_configs import ProviderConfig

DEFAULT_MAX_ENTRIES = 10_000


@dataclass(frozen=True, slots=True)
class Remembered:
    config: ProviderConfig | None  # None: the application has no such configuration
    cached_at: float


class ProviderConfigCache:
    """Each application's configuration of each provider, or its absence, for at most `ttl_s`
    seconds (trio's clock), at most `max_entries` of them. `ttl_s` 0 caches nothing."""

    def __init__(self, ttl_s: float, max_entries: int = DEFAULT_MAX_ENTRIES) -> None:
        self.ttl_s = ttl_s
        self.max_entries = max_entries
        self.listening = False  # set by `keep_fresh` while it hears every change
        self.generation = 0  # moves on with every forget: a read older than that is not kept
        self._entries: OrderedDict[tuple[uuid.UUID, str], Remembered] = OrderedDict()
        self._providers: set[str] = set()  # the names entries were kept under: a forget tries each

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, application_id: uuid.UUID, provider: str, now: float) -> Remembered | None:
        """What is remembered of the application's configuration of `provider` and still fresh;
        None when it must be read from the database."""
        if not self.listening:
            return None
        key = (application_id, provider)
        entry = self._entries.get(key)
        if entry is None:
            return None
        if now - entry.cached_at >= self.ttl_s:
            del self._entries[key]
            return None
        self._entries.move_to_end(key)
        return entry

    def put(
        self,
        application_id: uuid.UUID,
        provider: str,
        config: ProviderConfig | None,
        now: float,
        generation: int,
    ) -> None:
        """Remember `config` (None: there is none), read from the database when `generation` was
        current, unless something was forgotten since (the read may predate a change)."""
        if not self.listening or self.ttl_s <= 0 or generation != self.generation:
            return
        key = (application_id, provider)
        self._providers.add(provider)
        self._entries[key] = Remembered(config, now)
        self._entries.move_to_end(key)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)

    def forget_expired(self, now: float) -> None:
        """Drop every entry older than `ttl_s` (they are dropped when looked up too; this is for
        applications whose events stopped)."""
        for key in [key for key, entry in self._entries.items() if now - entry.cached_at >= self.ttl_s]:
            del self._entries[key]

    def forget_idle(self) -> None:
        """`forget_expired` now (the housekeeping supervisor's sweep)."""
        self.forget_expired(trio.current_time())

    def forget_application(self, application_id: uuid.UUID) -> None:
        """Drop every configuration of the application, found or missing: one was written."""
        self.generation += 1
        for provider in self._providers:
            self._entries.pop((application_id, provider), None)

    def forget_all(self) -> None:
        self.generation += 1
        self._entries.clear()
