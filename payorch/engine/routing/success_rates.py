"""Success rates learned from payment outcomes, per provider and segment (docs/routing.md).

Pure code. A session's outcome at the provider that created its checkout is the first of these to
happen to it (`engine.payments.states.first_outcome`): the payment succeeds (success), the provider
declines an attempt (failure), or the checkout expires unpaid (abandonment: a failure that weighs
`abandonment_weight`, since the customer may simply have left). A success counts 1 success and 1
attempt, a failure 0 and 1, an abandonment 0 and `abandonment_weight`.

The evidence is a sliding window: the last `window` outcomes recorded for each provider, payment
method and currency (a *segment*). The storage layer reads them from PostgreSQL in batches, each
segment as a `SegmentFigures` row holding its outcome codes newest first (one `string_agg` over
the segment's newest `window` outcomes); `OutcomeWindow` keeps the same rows in memory (the
routing-quality benchmark and the tests use it). `SuccessRates.from_rows` works out every rate
once per batch, so a routing decision only looks them up.

How a segment's rate is worked out:

1. **The recent run.** A provider can change at once (an outage, its recovery), and a plain
   window mixing before and after takes most of a window of new outcomes to show it: for a
   provider that gets only the exploration share, thousands of sessions. So the rate counts the
   newest outcomes back to the last clear change. The run starts with the newest `FIRST_RUN`
   outcomes and grows one older outcome at a time until the 10 or the 20 outcomes just older than
   it (`BLOCKS`) differ from it by more than `CHANGE_Z` standard errors (a two-proportion z-test);
   it then ends where, within the next 20, that difference is widest: where the change happened.
   A run that ended is split again where its newer and older parts differ most, while they differ
   by more than `CHANGE_Z`: a provider back after an outage has its newest outcomes, the
   outage's failures, then its good past, and a block straddling the first two can hide the
   newer change. A provider that keeps its level (the z-test at 4 standard errors rarely cuts a
   steady window: about 3% of windows, mostly far back) uses its whole window; one that
   failed every payment and approves again is judged on its outcomes since.
2. **The rate.** The run's weighted successes and attempts with a Beta(1, 1) prior:
   (successes + 1) / (attempts + 2), so 0.5 before any evidence, never exactly 0 or 1. Dynamic
   routing ranks by `upper`, the rate plus `OPTIMISM` (1) standard deviation of that Beta: a
   provider with few outcomes since a change (one back from an outage, a new one) is ranked on
   what it may be, gets sessions, and is confirmed or dropped within a batch, where a rate alone
   would leave it to the exploration share (a few percent of sessions) for hundreds of sessions.
   With 200 outcomes the bonus is about 0.025 for every provider alike.
3. **Fallback.** A segment with fewer than `min_outcomes` outcomes in its window has too little
   evidence of its own: the rate is the provider's for the payment method (its windows in every
   currency together), then the provider's over every segment, each used once it holds
   `min_outcomes` outcomes; with fewer still, the provider's few outcomes with the prior.

Why this method: `bench/routing.py` drives it through three drifting providers and a 2,000-session
outage. With a plain window (no run, ranked by the rate) the recovered provider stayed behind for
6,600 to 7,600 of its segment's sessions, or for good, at 97.4-97.6% of the oracle's approvals
(three worlds); the run alone brought that to 66-1,035 sessions, and ranking on `upper` as well
to about 200: over 25 simulated worlds, a median of 196 sessions and 48 of 50 recoveries within
500 (the slowest 539 and 1,459), at 98.5% of the oracle's approvals on average, 97.9% at worst.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from itertools import accumulate
from typing import Literal

from payorch.values.statuses import Outcome  # defined there: the database's CHECK is written from it

FIRST_RUN = 5  # the newest outcomes, always in the run
BLOCKS = (10, 20)  # the run stops where this many older outcomes differ from it
CHANGE_Z = 4.0  # a block this many standard errors away from the run ends it
PRIOR_SUCCESSES, PRIOR_ATTEMPTS = 1.0, 2.0  # Beta(1, 1): 0.5 with two pseudo-outcomes
OPTIMISM = 1.0  # standard deviations of its rate a provider is ranked above its rate


@dataclass(frozen=True)
class RoutingSettings:
    """The numbers learned routing runs on (`[routing]` in config.toml); `ValueError` when
    inconsistent."""

    window: int = 200  # outcomes kept per provider, payment method and currency
    exploration: float = 0.05  # share of dynamic sessions sent to a provider that does not lead
    elimination_threshold: float = 0.2  # a rate below this is set aside (docs/routing.md)
    abandonment_weight: float = 0.5  # what an expired, unpaid checkout weighs as a failure
    min_outcomes: int = 20  # outcomes a segment needs before its own rate is used

    def __post_init__(self) -> None:
        if self.window < 1 or self.min_outcomes < 1:
            raise ValueError("window and min_outcomes must be at least 1")
        for name in ("exploration", "elimination_threshold", "abandonment_weight"):
            if not 0 <= getattr(self, name) <= 1:
                raise ValueError(f"{name} must lie within [0, 1]")


@dataclass(frozen=True)
class SegmentFigures:
    """The last outcomes of one provider for one payment method and currency: `outcomes` holds
    their `Outcome` codes, newest first (at most `RoutingSettings.window` of them count)."""

    provider: str
    payment_method: str
    currency: str
    outcomes: str

    @property
    def count(self) -> int:
        return len(self.outcomes)


Level = Literal["segment", "method", "provider", "prior"]


@dataclass(frozen=True)
class Estimate:
    """A provider's learned success rate for a segment: `rate` in (0, 1), from the `outcomes` of the
    `level` it fell back to (`prior`: fewer than `min_outcomes` anywhere, the provider's own few),
    and `upper`, the rate plus `OPTIMISM` standard deviations of it: what dynamic routing ranks by."""

    rate: float
    outcomes: int
    level: Level
    upper: float


@dataclass
class _Evidence:
    successes: float = 0.0  # of the recent runs
    attempts: float = 0.0
    count: int = 0  # outcomes in the windows

    def add(self, other: _Evidence) -> None:
        self.successes += other.successes
        self.attempts += other.attempts
        self.count += other.count

    def estimate(self, level: Level) -> Estimate:
        return _estimate(self.successes, self.attempts, self.count, level)


def _estimate(successes: float, attempts: float, count: int, level: Level) -> Estimate:
    """The Beta posterior's mean, and its mean plus `OPTIMISM` standard deviations."""
    total = attempts + PRIOR_ATTEMPTS
    rate = (successes + PRIOR_SUCCESSES) / total
    deviation = math.sqrt(rate * (1 - rate) / (total + 1))
    return Estimate(rate, count, level, min(1.0, rate + OPTIMISM * deviation))


def _z_squared(successes: float, attempts: float, other_successes: float, other_attempts: float) -> float:
    """The square of the two-proportion z-test's statistic: how far apart the two rates lie."""
    if attempts <= 0 or other_attempts <= 0:
        return 0.0
    pooled = (successes + other_successes) / (attempts + other_attempts)
    variance = pooled * (1 - pooled) * (1 / attempts + 1 / other_attempts)
    if variance <= 0:
        return 0.0
    gap = successes / attempts - other_successes / other_attempts
    return gap * gap / variance


def recent_run(outcomes: str, abandonment_weight: float) -> tuple[float, float]:
    """The weighted successes and attempts of the newest `outcomes` back to the last clear change
    (see the module's docstring)."""
    weight: dict[str, float] = {
        Outcome.SUCCESS: 1.0,
        Outcome.FAILURE: 1.0,
        Outcome.ABANDONMENT: abandonment_weight,
    }
    # successes[k], attempts[k]: of the newest k outcomes.
    successes = list(accumulate((code == Outcome.SUCCESS for code in outcomes), initial=0))
    attempts = list(accumulate((weight.get(code, 0.0) for code in outcomes), initial=0.0))
    count = len(outcomes)
    first = _first_change(successes, attempts, count)
    if first is None:
        return float(successes[count]), attempts[count]

    def apart(split: int, end: int) -> float:
        """How far the newest `split` outcomes lie from the next ones up to `end`."""
        return _z_squared(
            successes[split],
            attempts[split],
            successes[end] - successes[split],
            attempts[end] - attempts[split],
        )

    widest = BLOCKS[-1]
    # The blocks begin to overlap the change near `run`: it lies where they stand furthest apart.
    run = max(
        range(max(FIRST_RUN, first - widest // 4), min(count, first + widest)),
        key=lambda split: max(apart(split, min(count, split + block)) for block in BLOCKS),
    )
    while True:  # a newer change inside the run (see the module's docstring)
        newer = max(range(FIRST_RUN, run), key=lambda split: apart(split, run), default=None)
        if newer is None or apart(newer, run) <= CHANGE_Z * CHANGE_Z:
            return float(successes[run]), attempts[run]
        run = newer


def _first_change(successes: list[int], attempts: list[float], count: int) -> int | None:
    """The first run length (in steps: one outcome at a time near the newest, where a change
    matters most, a quarter block further back) whose next `BLOCKS` differ from it; None if none.
    The z-test written out: this loop is most of what building the rates costs."""
    limit = CHANGE_Z * CHANGE_Z
    near = 3 * BLOCKS[-1]
    step = BLOCKS[-1] // 4
    run = min(FIRST_RUN, count)
    while run < count:
        run_successes, run_attempts = successes[run], attempts[run]
        for block in BLOCKS:
            end = run + block if run + block < count else count
            block_attempts = attempts[end] - run_attempts
            if run_attempts <= 0 or block_attempts <= 0:
                continue
            block_successes = successes[end] - run_successes
            pooled = (run_successes + block_successes) / (run_attempts + block_attempts)
            gap = run_successes / run_attempts - block_successes / block_attempts
            if gap * gap > limit * pooled * (1 - pooled) * (1 / run_attempts + 1 / block_attempts):
                return run
        run += 1 if run < near else step
    return None


PRIOR = _estimate(0.0, 0.0, 0, "prior")


class SuccessRates:
    """Every learned rate of one application, worked out once from its rows (`from_rows`). Read
    only: a new batch of rows makes a new `SuccessRates`."""

    def __init__(
        self,
        segments: Mapping[tuple[str, str, str], Estimate],
        methods: Mapping[tuple[str, str], Estimate],
        providers: Mapping[str, Estimate],
        runs: Mapping[tuple[str, float], tuple[float, float]] | None = None,
    ) -> None:
        self._segments = segments
        self._methods = methods
        self._providers = providers
        self._runs = runs or {}  # recent runs by outcomes and abandonment weight, for the next batch

    @classmethod
    def from_rows(
        cls, rows: Iterable[SegmentFigures], settings: RoutingSettings, previous: SuccessRates | None = None
    ) -> SuccessRates:
        """The rates of `rows` (one per provider, payment method and currency), by the module's
        method. Outcomes beyond `settings.window` in a row are left out. A row whose outcomes have
        not changed since `previous` (the rates of the batch before) reuses its recent run."""
        segments: dict[tuple[str, str, str], _Evidence] = {}
        methods: dict[tuple[str, str], _Evidence] = {}
        providers: dict[str, _Evidence] = {}
        known = {} if previous is None else previous._runs
        runs: dict[tuple[str, float], tuple[float, float]] = {}
        for row in rows:
            outcomes = row.outcomes[: settings.window]
            key = (outcomes, settings.abandonment_weight)
            run = known.get(key) or runs.get(key) or recent_run(outcomes, settings.abandonment_weight)
            runs[key] = run
            successes, attempts = run
            evidence = _Evidence(successes, attempts, len(outcomes))
            segments.setdefault((row.provider, row.payment_method, row.currency), _Evidence()).add(evidence)
            methods.setdefault((row.provider, row.payment_method), _Evidence()).add(evidence)
            providers.setdefault(row.provider, _Evidence()).add(evidence)
        enough = settings.min_outcomes
        provider_rates = {
            name: found.estimate("provider" if found.count >= enough else "prior")
            for name, found in providers.items()
        }
        method_rates = {
            key: found.estimate("method") if found.count >= enough else provider_rates[key[0]]
            for key, found in methods.items()
        }
        segment_rates = {
            key: found.estimate("segment") if found.count >= enough else method_rates[key[:2]]
            for key, found in segments.items()
        }
        return cls(segment_rates, method_rates, provider_rates, runs)

    def estimate(self, provider: str, payment_method: str, currency: str) -> Estimate:
        """The rate of `provider` for sessions of `payment_method` in `currency`, fallen back as the
        module's docstring says; `PRIOR` for a provider without any outcome."""
        found = self._segments.get((provider, payment_method, currency))
        if found is None:
            found = self._methods.get((provider, payment_method)) or self._providers.get(provider, PRIOR)
        return found

    def segments(self) -> dict[tuple[str, str, str], Estimate]:
        """Every segment with outcomes and its estimate, by (provider, payment method, currency)."""
        return dict(self._segments)


class OutcomeWindow:
    """The last `window` outcomes of each segment, in memory: what the storage layer reads from
    PostgreSQL, for the benchmark's simulation and the tests."""

    def __init__(self, window: int) -> None:
        self.window = window
        self._outcomes: dict[tuple[str, str, str], deque[Outcome]] = {}

    def record(self, provider: str, payment_method: str, currency: str, outcome: Outcome) -> None:
        key = (provider, payment_method, currency)
        found = self._outcomes.get(key)
        if found is None:
            found = self._outcomes[key] = deque(maxlen=self.window)
        found.appendleft(outcome)

    def rows(self) -> list[SegmentFigures]:
        """One row per segment with an outcome, newest outcomes first."""
        return [
            SegmentFigures(provider, method, currency, "".join(outcomes))
            for (provider, method, currency), outcomes in sorted(self._outcomes.items())
        ]
