"""What an application's actor keeps between messages, so a command needs no read before it acts.

Today that is the application's active provider configurations. They are read from the database
when first needed and forgotten when they change: in this process at once (the route that changed
them calls `ActorRegistry.forget_application` after its commit), in every other process as soon as
PostgreSQL delivers the notification a change of `provider_configs` sends on commit. While no
listener hears those notifications (`trusted()` False), nothing is kept: every command reads.

A read that started before a `forget` cannot put back what was forgotten (`generation`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from payorch.storage.provider_configs import ProviderConfig


@dataclass
class HotState:
    trusted: Callable[[], bool]
    generation: int = 0
    _provider_configs: tuple[ProviderConfig, ...] | None = field(default=None, repr=False)

    def provider_configs(self) -> tuple[ProviderConfig, ...] | None:
        """The active provider configurations as last read, or None when they must be read."""
        return self._provider_configs if self.trusted() else None

    def keep_provider_configs(self, configs: tuple[ProviderConfig, ...], generation: int) -> None:
        """Keep `configs`, read when `generation` was current, unless the state was forgotten since."""
        if self.trusted() and generation == self.generation:
            self._provider_configs = configs

    def forget(self) -> None:
        self.generation += 1
        self._provider_configs = None
