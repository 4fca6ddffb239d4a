"""Provider-call health: which providers may take a checkout (eligibility), and which of them can be
called now (a circuit breaker per account and per provider, docs/routing.md "Who owns a failure").
The order they are tried in is the routing decision's (`engine.routing.decision`); the health score
kept here is shown in the metrics and orders nothing.

Pure code. Time comes in as `now`, monotonic seconds (`trio.current_time()` in the service), so tests
control it. The formula, its default numbers and the circuit breaker are explained in docs/routing.md.
"""

from __future__ import annotations

import enum
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field
from typing import Protocol

from payorch.values.money import Money


@dataclass(frozen=True)
class RoutingPolicy:
    """The numbers routing runs on (docs/routing.md explains each); `ValueError` when inconsistent."""

    success_weight: float = 0.6
    latency_weight: float = 0.2
    health_weight: float = 0.2
    latency_reference_s: float = 1.0  # the smoothed latency whose latency score is 0.5
    smoothing: float = 0.2  # EWMA weight of the newest outcome
    memory_half_life_s: float = 600.0  # evidence this old counts half; it fades toward the prior
    failure_threshold: int = 3  # consecutive failures that open the circuit
    cooldown_s: float = 30.0  # open time after the first trip; doubles after each failed probe
    max_cooldown_s: float = 600.0
    probe_timeout_s: float = 30.0  # a probe whose outcome is not recorded by then is handed out again
    # The provider-wide circuit opens when provider-wide failures (unreachable, 5xx, timeouts) came
    # from at least this many distinct accounts, each within the window, with no success between.
    provider_wide_accounts: int = 3
    provider_wide_window_s: float = 60.0
    max_accounts: int = 10_000  # accounts whose health is kept; the least recently used is forgotten

    def __post_init__(self) -> None:
        weights = (self.success_weight, self.latency_weight, self.health_weight)
        if min(weights) < 0 or abs(sum(weights) - 1) > 1e-9:
            raise ValueError("routing weights must be non-negative and sum to 1")
        if not 0 < self.smoothing <= 1:
            raise ValueError("smoothing must lie in (0, 1]")
        if min(self.failure_threshold, self.provider_wide_accounts, self.max_accounts) < 1:
            raise ValueError("failure_threshold, provider_wide_accounts and max_accounts must be at least 1")
        durations = (
            self.latency_reference_s,
            self.memory_half_life_s,
            self.cooldown_s,
            self.probe_timeout_s,
            self.provider_wide_window_s,
        )
        if min(durations) <= 0:
            raise ValueError(
                "latency reference, half-life, cool-down, probe timeout and window must be positive"
            )
        if self.max_cooldown_s < self.cooldown_s:
            raise ValueError("max_cooldown_s must be at least cooldown_s")


@dataclass(frozen=True, order=True, slots=True)
class ProviderAccount:
    """One linked account at a provider: what health is kept per. `account` is an opaque id of the
    linked configuration and the key it holds (`engine.context.account_of`); never a secret."""

    provider: str
    account: str


class RoutableConfig(Protocol):
    """What routing reads of a provider configuration (storage records fit as they are)."""

    @property
    def provider(self) -> str: ...
    @property
    def is_active(self) -> bool: ...
    @property
    def payment_methods(self) -> Collection[str]: ...


def eligible_providers(
    configs: Iterable[RoutableConfig],
    accepts: Callable[[str, str, Money], bool],
    payment_method: str,
    amount: Money,
) -> list[str]:
    """The providers of active `configs` enabling `payment_method` for which
    `accepts(provider, payment_method, amount)` holds (currency and amount limits), each once, by name."""
    names = {c.provider for c in configs if c.is_active and payment_method in c.payment_methods}
    return [name for name in sorted(names) if accepts(name, payment_method, amount)]


class Circuit(enum.StrEnum):
    CLOSED = "closed"  # routable
    OPEN = "open"  # cooling down: not routable
    HALF_OPEN = "half_open"  # cooled down: one probe at a time


@dataclass(frozen=True)
class ProviderFigures:
    """The health of one account, or of a provider as a whole, as routing currently sees it, for
    metrics and debugging."""

    score: float
    success_rate: float  # smoothed, faded toward the prior by age
    latency_s: float | None  # smoothed creation latency; None before any was observed
    consecutive_failures: int
    circuit: Circuit
    reopens_at: float | None  # while open: when a probe becomes due


@dataclass(slots=True)
class _Record:
    success: float = 1.0  # EWMA of outcomes (1 success, 0 failure) as of `observed_at`
    latency_s: float | None = None  # EWMA of creation times
    observed_at: float | None = None
    consecutive_failures: int = 0
    trips: int = 0  # times the circuit opened since it last closed
    open_until: float | None = None  # None: circuit closed; otherwise open, half-open from then on
    probe_until: float | None = None  # a probe is out until then


@dataclass(slots=True)
class _ProviderRecord(_Record):
    # The accounts with a provider-wide failure since the last success of any account, each with
    # the time of its latest; never more than `provider_wide_accounts` (that many open the circuit).
    failing: dict[str, float] = field(default_factory=dict)


class ProviderHealth:
    """Outcomes of provider calls, in memory. One per process, used from one thread.

    Health is kept per account (`ProviderAccount`): every failure of an account's call counts for
    that account only, and opens its circuit, which takes the provider away from that account alone.
    A provider-wide failure (`provider_wide`: unreachable, 5xx, timeout) also counts for the provider
    as a whole, whose circuit opens only when such failures came from `provider_wide_accounts`
    distinct accounts with no success of any account between: one account cannot open it.
    At most `max_accounts` accounts are kept, the least recently used forgotten first."""

    def __init__(self, policy: RoutingPolicy | None = None) -> None:
        self.policy = policy or RoutingPolicy()
        self._accounts: OrderedDict[ProviderAccount, _Record] = OrderedDict()
        self._providers: dict[str, _ProviderRecord] = {}

    def record_success(self, key: ProviderAccount, latency_s: float, now: float) -> None:
        """Count a successful call of `key`'s that took `latency_s`. A half-open circuit (the
        account's, the provider's) closes; the provider's run of failing accounts ends."""
        latency_s = max(0.0, latency_s)
        self._succeed(self._account(key), latency_s, now)
        provider = self._providers.setdefault(key.provider, _ProviderRecord())
        self._succeed(provider, latency_s, now)
        provider.failing.clear()

    def record_failure(
        self, key: ProviderAccount, latency_s: float, now: float, *, provider_wide: bool
    ) -> None:
        """Count a failed call of `key`'s. Its account's circuit opens after `failure_threshold`
        failures in a row, and reopens, with a longer cool-down, when a half-open probe fails. A
        `provider_wide` failure also counts for the provider (see the class); one that is not says
        nothing about the provider, and frees the provider's probe if one was out."""
        latency_s = max(0.0, latency_s)
        self._fail(self._account(key), latency_s, now)
        provider = self._providers.setdefault(key.provider, _ProviderRecord())
        if not provider_wide:
            provider.probe_until = None  # this call may have been the probe: it showed nothing
            return
        self._observe_failure(provider, latency_s, now)
        if provider.open_until is not None:
            if now >= provider.open_until:
                self._open(provider, now)
            return
        window_start = now - self.policy.provider_wide_window_s
        for account, at in list(provider.failing.items()):
            if at < window_start:
                del provider.failing[account]
        provider.failing.pop(key.account, None)
        provider.failing[key.account] = now
        if (
            len(provider.failing) >= self.policy.provider_wide_accounts
            and provider.consecutive_failures >= self.policy.failure_threshold
        ):
            self._open(provider, now)
            provider.failing.clear()

    def is_available(self, key: ProviderAccount, now: float) -> bool:
        """True while both circuits, the account's and the provider's, are closed; False while either
        is open. A cooled-down (half-open) circuit admits exactly one caller, the probe, until its
        outcome is recorded or `probe_timeout_s` passes without one."""
        record = self._accounts.get(key)
        if record is not None:
            self._accounts.move_to_end(key)
        provider = self._providers.get(key.provider)
        if not (self._admits(record, now) and self._admits(provider, now)):
            return False
        for found in (record, provider):
            if found is not None and found.open_until is not None:
                found.probe_until = now + self.policy.probe_timeout_s
        return True

    def admits(self, key: ProviderAccount, now: float) -> bool:
        """Whether `is_available` would say True now, handing out no probe: for a route shown
        rather than tried (`POST .../routing/evaluate`)."""
        return self._admits(self._accounts.get(key), now) and self._admits(
            self._providers.get(key.provider), now
        )

    def score(self, key: ProviderAccount, now: float) -> float:
        """The account's score in [0, 1], from its own calls; an account never seen scores 1
        (docs/routing.md)."""
        return self._score(self._accounts.get(key) or _Record(), now)

    def creation_figures(self, key: ProviderAccount, now: float) -> tuple[float, float]:
        """The account's smoothed share of successful calls and their smoothed time in seconds,
        both faded toward an account never seen (1 and 0): what its checkout creations cost the
        routing score (`engine.routing.decision.creation_factor`)."""
        record = self._accounts.get(key) or _Record()
        weight = self._weight(record, now)
        return 1 - weight * (1 - record.success), weight * (record.latency_s or 0.0)

    def snapshot(self, now: float) -> dict[str, ProviderFigures]:
        """The figures of every provider as a whole (successes and provider-wide failures of all its
        accounts), by name. Hands out no probe."""
        return {name: self._figures(record, now) for name, record in sorted(self._providers.items())}

    def accounts_not_closed(self, now: float) -> dict[str, int]:
        """By provider: how many of its accounts have an open or half-open circuit."""
        counts: dict[str, int] = {}
        for key, record in self._accounts.items():
            if record.open_until is not None:
                counts[key.provider] = counts.get(key.provider, 0) + 1
        return counts

    def _account(self, key: ProviderAccount) -> _Record:
        record = self._accounts.get(key)
        if record is None:
            record = self._accounts[key] = _Record()
            while len(self._accounts) > self.policy.max_accounts:
                self._accounts.popitem(last=False)
        else:
            self._accounts.move_to_end(key)
        return record

    def _admits(self, record: _Record | None, now: float) -> bool:
        if record is None or record.open_until is None:
            return True
        return now >= record.open_until and (record.probe_until is None or now >= record.probe_until)

    def _succeed(self, record: _Record, latency_s: float, now: float) -> None:
        self._observe(record, 1.0, latency_s, now)
        record.consecutive_failures = 0
        if record.open_until is not None and now >= record.open_until:
            record.open_until = record.probe_until = None
            record.trips = 0

    def _fail(self, record: _Record, latency_s: float, now: float) -> None:
        self._observe_failure(record, latency_s, now)
        if record.open_until is None:
            if record.consecutive_failures >= self.policy.failure_threshold:
                self._open(record, now)
        elif now >= record.open_until:
            self._open(record, now)

    def _observe_failure(self, record: _Record, latency_s: float, now: float) -> None:
        # A failure's duration only says the call took at least that long: it may raise the
        # latency estimate, never lower it (a refused connection says nothing about speed).
        slower = record.latency_s is None or latency_s > record.latency_s
        self._observe(record, 0.0, latency_s if slower else None, now)
        record.consecutive_failures += 1

    def _score(self, record: _Record, now: float) -> float:
        policy = self.policy
        weight = self._weight(record, now)
        success = 1 - weight * (1 - record.success)
        latency = 1.0
        if record.latency_s is not None:
            reference = policy.latency_reference_s
            latency = 1 - weight * (1 - reference / (reference + record.latency_s))
        health = 0.0
        if record.open_until is None:
            health = 1 - weight * min(1.0, record.consecutive_failures / policy.failure_threshold)
        total = (
            policy.success_weight * success + policy.latency_weight * latency + policy.health_weight * health
        )
        return min(1.0, max(0.0, total))

    def _figures(self, record: _Record, now: float) -> ProviderFigures:
        circuit = Circuit.CLOSED
        if record.open_until is not None:
            circuit = Circuit.OPEN if now < record.open_until else Circuit.HALF_OPEN
        return ProviderFigures(
            score=self._score(record, now),
            success_rate=1 - self._weight(record, now) * (1 - record.success),
            latency_s=record.latency_s,
            consecutive_failures=record.consecutive_failures,
            circuit=circuit,
            reopens_at=record.open_until if circuit is Circuit.OPEN else None,
        )

    def _weight(self, record: _Record, now: float) -> float:
        """How much the recorded figures still count: 1 when fresh, halving every half-life."""
        if record.observed_at is None:
            return 0.0
        age = max(0.0, now - record.observed_at)
        return float(0.5 ** (age / self.policy.memory_half_life_s))

    def _observe(self, record: _Record, outcome: float, latency_s: float | None, now: float) -> None:
        alpha = self.policy.smoothing
        weight = self._weight(record, now)
        belief = 1 - weight * (1 - record.success)  # the success rate faded toward the prior 1
        record.success = belief + alpha * (outcome - belief)
        if latency_s is not None:
            if record.latency_s is None:
                record.latency_s = latency_s
            else:
                # Fresh figures move by `alpha`; forgotten ones are replaced by the new sample.
                step = 1 - weight * (1 - alpha)
                record.latency_s += step * (latency_s - record.latency_s)
        record.observed_at = now

    def _open(self, record: _Record, now: float) -> None:
        policy = self.policy
        record.trips += 1
        cooldown = policy.cooldown_s * 2 ** min(record.trips - 1, 32)
        record.open_until = now + min(cooldown, policy.max_cooldown_s)
        record.probe_until = None
