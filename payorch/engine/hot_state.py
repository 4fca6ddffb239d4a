"""What an application's actor keeps between messages, so a command needs no read before it acts.

Today that is the application's active provider configurations and its routing document in force.
They are read from the database when first needed and forgotten when they change: in this process
at once (the route that changed them calls `ActorRegistry.forget_application` after its commit),
in every other process as soon as PostgreSQL delivers the notification a change of
`provider_configs` or a new version of `routing_documents` sends on commit. While no listener
hears those notifications (`trusted()` False), nothing is kept: every command reads.

A read that started before a `forget` cannot put back what was forgotten (`generation`).

It also keeps the application's success rates, learned from payment outcomes. No notification
tells of a new outcome: they are read again in batches, once they are older than the setting
`routing.refresh_s` (monotonic seconds), so they are kept whether or not a listener hears, and a
`forget` leaves them. The fees reconciliation observed are read and kept with them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from payorch.engine.routing.document import RoutingDocument
from payorch.engine.routing.observed_fees import NO_OBSERVED_FEES, ObservedFees
from payorch.engine.routing.success_rates import SuccessRates
from payorch.storage.provider_configs import ProviderConfig


@dataclass(frozen=True)
class RoutingInForce:
    """The application's routing document in force, and its version (0: it never stored one, and
    the default document routes its sessions)."""

    document: RoutingDocument
    version: int


DEFAULT_ROUTING = RoutingInForce(RoutingDocument(), 0)


@dataclass
class HotState:
    trusted: Callable[[], bool]
    generation: int = 0
    _provider_configs: tuple[ProviderConfig, ...] | None = field(default=None, repr=False)
    _routing: RoutingInForce | None = field(default=None, repr=False)
    _rates: SuccessRates | None = field(default=None, repr=False)
    _rates_read_at: float = field(default=0.0, repr=False)  # monotonic time the rates were read at
    _observed_fees: ObservedFees = field(default=NO_OBSERVED_FEES, repr=False)  # read with the rates

    def provider_configs(self) -> tuple[ProviderConfig, ...] | None:
        """The active provider configurations as last read, or None when they must be read."""
        return self._provider_configs if self.trusted() else None

    def keep_provider_configs(self, configs: tuple[ProviderConfig, ...], generation: int) -> None:
        """Keep `configs`, read when `generation` was current, unless the state was forgotten since."""
        if self.trusted() and generation == self.generation:
            self._provider_configs = configs

    def routing(self) -> RoutingInForce | None:
        """The routing document in force as last read, or None when it must be read."""
        return self._routing if self.trusted() else None

    def keep_routing(self, routing: RoutingInForce, generation: int) -> None:
        """Keep `routing`, read when `generation` was current, unless the state was forgotten since."""
        if self.trusted() and generation == self.generation:
            self._routing = routing

    def rates(self) -> SuccessRates | None:
        """The success rates as last read (None before the first read), however old."""
        return self._rates

    def rates_due(self, now: float, refresh_s: float) -> bool:
        """Whether the rates must be read (again) at `now`: never read, or read `refresh_s` ago."""
        return self._rates is None or now - self._rates_read_at >= refresh_s

    def keep_rates(
        self, rates: SuccessRates, read_at: float, observed_fees: ObservedFees = NO_OBSERVED_FEES
    ) -> None:
        """Keep `rates` and `observed_fees`, read at `read_at`, unless newer ones are kept already."""
        if self._rates is None or read_at >= self._rates_read_at:
            self._rates, self._rates_read_at = rates, read_at
            self._observed_fees = observed_fees

    def observed_fees(self) -> ObservedFees:
        """The observed fees read with the rates (none before the first read)."""
        return self._observed_fees

    def forget(self) -> None:
        self.generation += 1
        self._provider_configs = None
        self._routing = None
