"""Routing: which providers may take a checkout, and in which order to try them.

Pure code. Time comes in as `now`, monotonic seconds (`trio.current_time()` in the service), so tests
control it. The formula, its default numbers and the circuit breaker are explained in docs/routing.md.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from payorch.values.errors import NoProviderAvailable, ProviderUnavailable
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

    def __post_init__(self) -> None:
        weights = (self.success_weight, self.latency_weight, self.health_weight)
        if min(weights) < 0 or abs(sum(weights) - 1) > 1e-9:
            raise ValueError("routing weights must be non-negative and sum to 1")
        if not 0 < self.smoothing <= 1:
            raise ValueError("smoothing must lie in (0, 1]")
        if self.failure_threshold < 1:
            raise ValueError("failure_threshold must be at least 1")
        durations = (self.latency_reference_s, self.memory_half_life_s, self.cooldown_s, self.probe_timeout_s)
        if min(durations) <= 0:
            raise ValueError("latency reference, half-life, cool-down and probe timeout must be positive")
        if self.max_cooldown_s < self.cooldown_s:
            raise ValueError("max_cooldown_s must be at least cooldown_s")


class RoutableConfig(Protocol):
    """What routing reads of a provider configuration (storage records fit as they are)."""

    @property
    def provider(self) -> str: ...
    @property
    def is_active(self) -> bool: ...
    @property
    def payment_methods(self) -> Collection[str]: ...


@dataclass(frozen=True)
class ConfigView:
    """A provider configuration as routing sees it."""

    provider: str
    is_active: bool
    payment_methods: frozenset[str]


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
    """One provider's health as routing currently sees it, for metrics and debugging."""

    score: float
    success_rate: float  # smoothed, faded toward the prior by age
    latency_s: float | None  # smoothed creation latency; None before any was observed
    consecutive_failures: int
    circuit: Circuit
    reopens_at: float | None  # while open: when a probe becomes due


@dataclass
class _Record:
    success: float = 1.0  # EWMA of outcomes (1 success, 0 failure) as of `observed_at`
    latency_s: float | None = None  # EWMA of creation times
    observed_at: float | None = None
    consecutive_failures: int = 0
    trips: int = 0  # times the circuit opened since it last closed
    open_until: float | None = None  # None: circuit closed; otherwise open, half-open from then on
    probe_until: float | None = None  # a probe is out until then


class ProviderHealth:
    """Outcomes of provider calls, per provider, in memory. One per process, used from one thread."""

    def __init__(self, policy: RoutingPolicy | None = None) -> None:
        self.policy = policy or RoutingPolicy()
        self._records: dict[str, _Record] = {}

    def record_success(self, provider: str, latency_s: float, now: float) -> None:
        """Count a successful call that took `latency_s`. If the circuit is half-open, it closes."""
        record = self._records.setdefault(provider, _Record())
        self._observe(record, 1.0, max(0.0, latency_s), now)
        record.consecutive_failures = 0
        if record.open_until is not None and now >= record.open_until:
            record.open_until = record.probe_until = None
            record.trips = 0

    def record_failure(self, provider: str, latency_s: float, now: float) -> None:
        """Count a failed call. The circuit opens after `failure_threshold` failures in a row, and
        reopens, with a longer cool-down, when a half-open probe fails."""
        record = self._records.setdefault(provider, _Record())
        latency_s = max(0.0, latency_s)
        # A failure's duration only says the call took at least that long: it may raise the
        # latency estimate, never lower it (a refused connection says nothing about speed).
        slower = record.latency_s is None or latency_s > record.latency_s
        self._observe(record, 0.0, latency_s if slower else None, now)
        record.consecutive_failures += 1
        if record.open_until is None:
            if record.consecutive_failures >= self.policy.failure_threshold:
                self._open(record, now)
        elif now >= record.open_until:
            self._open(record, now)

    def is_available(self, provider: str, now: float) -> bool:
        """True while the circuit is closed; False while it is open. Once cooled down (half-open),
        True for exactly one caller, the probe, until its outcome is recorded or `probe_timeout_s`
        passes without one."""
        record = self._records.get(provider)
        if record is None or record.open_until is None:
            return True
        if now < record.open_until or (record.probe_until is not None and now < record.probe_until):
            return False
        record.probe_until = now + self.policy.probe_timeout_s
        return True

    def score(self, provider: str, now: float) -> float:
        """The provider's score in [0, 1]; a provider never seen scores 1 (docs/routing.md)."""
        policy = self.policy
        record = self._records.get(provider) or _Record()
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

    def snapshot(self, now: float) -> dict[str, ProviderFigures]:
        """The figures of every provider with a recorded outcome, by name. Hands out no probe."""
        figures: dict[str, ProviderFigures] = {}
        for provider, record in sorted(self._records.items()):
            circuit = Circuit.CLOSED
            if record.open_until is not None:
                circuit = Circuit.OPEN if now < record.open_until else Circuit.HALF_OPEN
            figures[provider] = ProviderFigures(
                score=self.score(provider, now),
                success_rate=1 - self._weight(record, now) * (1 - record.success),
                latency_s=record.latency_s,
                consecutive_failures=record.consecutive_failures,
                circuit=circuit,
                reopens_at=record.open_until if circuit is Circuit.OPEN else None,
            )
        return figures

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


def rank(candidates: Iterable[str], health: ProviderHealth, now: float) -> list[tuple[str, float]]:
    """The available `candidates` (closed circuits, and a due probe, which this hands out) with
    their scores rounded to 4 decimals (the API's `routing.score`), best first, equal scores by name.
    Open circuits are left out."""
    available = [
        (name, round(health.score(name, now), 4))
        for name in dict.fromkeys(candidates)
        if health.is_available(name, now)
    ]
    return sorted(available, key=lambda candidate: (-candidate[1], candidate[0]))


def plan_route(eligible: Sequence[str], health: ProviderHealth, now: float) -> list[tuple[str, float]]:
    """The providers to try in turn, best first: `rank` of `eligible`. `NoProviderAvailable` (422)
    when nothing is eligible; `ProviderUnavailable` (502) when every eligible circuit is open."""
    if not eligible:
        raise NoProviderAvailable("no active provider configuration accepts this payment method and amount")
    ranked = rank(eligible, health, now)
    if not ranked:
        raise ProviderUnavailable("every eligible payment provider is failing: retry later")
    return ranked
