"""Success rates learned from payment outcomes, per provider and segment (docs/routing.md).

Pure code. Each payment attempt has one outcome at its provider, its final one whatever the order
its events arrived in (`storage.routing_outcomes`): paid (success), else declined (failure), else
ended with no verdict, a cancel or an expiry (abandonment: a failure that weighs
`abandonment_weight`, since the customer may simply have left). A success counts 1 success and 1
attempt, a failure 0 and 1, an abandonment 0 and `abandonment_weight`.

The evidence is a sliding window: the outcomes of the last `window` attempts of each provider,
payment method and currency (a *segment*), in the order their sessions were created (an
abandonment, known only at expiry, takes its session's place, not its arrival's). The storage
layer reads them from PostgreSQL in batches, each segment as a `SegmentFigures` row holding its
outcome codes newest first (one `string_agg` over the segment's newest `window` outcomes);
`OutcomeWindow` keeps the same rows in memory (the routing-quality benchmark and the tests use it).
`SuccessRates.from_rows` works out every rate once per batch, so a routing decision only looks
them up.

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
   failed every payment and approves again is judged on its outcomes since. A rate below its
   whole window's says it `fell` (an outage, perhaps ending: exploration probes it more).
2. **The rate, shrunk toward its parent.** The run's weighted successes and attempts on a Beta(1,
   1) prior and `min_outcomes` (20) pseudo-outcomes at the parent's rate, a weight that shrinks
   in proportion as the segment's window fills and is gone with `window` (200) outcomes:
   (successes + k x parent + 1) / (attempts + k + 2), k = 20 x (1 - outcomes / 200). The parent
   of a segment is the provider's rate for the payment method (its windows in every currency
   together), whose parent is the provider's over every segment, whose parent is the application's
   providers' together (Beta(1, 1) alone: 0.5 before any outcome). So a thin segment leans on its
   parent and moves to its own rate as it fills, with no switch at a count; a new provider starts
   at the application's rate, as likely as its others' to approve, with the uncertainty of 20
   outcomes, where a bare Beta(1, 1) (0.5) left it to the exploration share. A full window is its
   own rate, as before. Dynamic routing ranks by `upper`, the rate plus `OPTIMISM` (1) standard
   deviation: a provider with few outcomes since a change (one back from an outage, a new one) is
   ranked on what it may be, gets sessions, and is confirmed or dropped within a batch. With 200
   outcomes the bonus is about 0.025 for every provider alike.

Why this method: `bench/routing.py` drives it through three drifting providers and a 2,000-session
outage. With a plain window (no run, ranked by the rate) the recovered provider stayed behind for
6,600 to 7,600 of its segment's sessions, or for good, at 97.4-97.6% of the oracle's approvals
(three worlds); the run alone brought that to 66-1,035 sessions, and ranking on `upper` as well
to about 200. With the window by creation, the parent's shrinkage and exploration scaled with
uncertainty (`engine.routing.decision`), over 13 simulated worlds: 98.7% of the oracle's approvals
on average, 98.3% at worst; the recovered provider leads again after a median of 160 sessions, 23
of 26 recoveries within 500 (the slowest 574, 738 and 827); in the steady world of 0.90, 0.50 and
0.15, 0.887 to 0.893 approved (a fixed 5% spread evenly got 0.871).
"""

from __future__ import annotations

import math
from bisect import insort
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
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
    # The least share of dynamic sessions sent first to each provider that does not lead and is not
    # set aside; more while it may be better than the leader (`engine.routing.decision`).
    exploration: float = 0.01
    elimination_threshold: float = 0.2  # a rate below this is set aside (docs/routing.md)
    abandonment_weight: float = 0.5  # what an expired, unpaid checkout weighs as a failure
    # The parent's weight, in outcomes, in the rate of a segment with no window of its own yet: a
    # thin segment is shrunk toward its parent's rate (see the module's docstring).
    min_outcomes: int = 20

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
    """A provider's learned success rate for a segment: `rate` in (0, 1), resting mostly on the
    `outcomes` of `level` (the segment, else the nearest level above it with `min_outcomes`
    outcomes; `prior`: fewer than that anywhere), and `upper`, the rate plus `OPTIMISM` standard
    deviations of it: what dynamic routing ranks by. `deviation` is that standard deviation;
    `evidence` the weighted attempts behind the rate, a parent's pseudo-outcomes included;
    `fell` says the rate is below what the whole window showed: its recent run began at a drop (an
    outage), so it may come back."""

    rate: float
    outcomes: int
    level: Level
    upper: float
    deviation: float = 0.0
    fell: bool = False
    evidence: float = 0.0  # the weighted attempts it rests on, its parent's share included


@dataclass
class _Evidence:
    successes: float = 0.0  # of the recent runs
    attempts: float = 0.0
    count: int = 0  # outcomes in the windows
    window_successes: float = 0.0  # of the whole windows
    window_attempts: float = 0.0

    def add(self, other: _Evidence) -> None:
        self.successes += other.successes
        self.attempts += other.attempts
        self.count += other.count
        self.window_successes += other.window_successes
        self.window_attempts += other.window_attempts

    def estimate(self) -> Estimate:
        """The Beta(1, 1) posterior of the recent runs alone."""
        return _estimate(self.successes, self.attempts, self.count, "prior")

    def shrunk(self, parent: Estimate, settings: RoutingSettings, level: Level) -> Estimate:
        """This level's estimate with a prior centred on `parent`'s rate, weighing `min_outcomes`
        outcomes while the windows are empty and nothing once they hold `window` outcomes; never
        more than the parent knows beyond this level's own outcomes (which it holds too, and
        which must not count twice): a parent that knows nothing else lends nothing."""
        thin = max(0.0, 1.0 - self.count / settings.window)
        weight = min(settings.min_outcomes * thin, max(0.0, parent.evidence - self.attempts))
        estimate = _estimate(self.successes, self.attempts, self.count, level, parent.rate, weight)
        window_rate = (self.window_successes + PRIOR_SUCCESSES) / (self.window_attempts + PRIOR_ATTEMPTS)
        if self.attempts < self.window_attempts and estimate.rate < window_rate:
            return replace(estimate, fell=True)
        return estimate


def _estimate(
    successes: float,
    attempts: float,
    count: int,
    level: Level,
    centre: float = 0.5,
    weight: float = 0.0,
) -> Estimate:
    """The Beta posterior's mean and standard deviation, and its mean plus `OPTIMISM` of them: a
    Beta(1, 1) and `weight` pseudo-outcomes at rate `centre`, then the evidence."""
    total = attempts + weight + PRIOR_ATTEMPTS
    rate = (successes + weight * centre + PRIOR_SUCCESSES) / total
    deviation = math.sqrt(rate * (1 - rate) / (total + 1))
    upper = min(1.0, rate + OPTIMISM * deviation)
    return Estimate(rate, count, level, upper, deviation, evidence=attempts + weight)


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
    return _runs(outcomes, abandonment_weight)[0]


def _runs(outcomes: str, abandonment_weight: float) -> tuple[tuple[float, float], tuple[float, float]]:
    """The recent run's weighted successes and attempts, and the whole window's."""
    weight: dict[str, float] = {
        Outcome.SUCCESS: 1.0,
        Outcome.FAILURE: 1.0,
        Outcome.ABANDONMENT: abandonment_weight,
    }
    # successes[k], attempts[k]: of the newest k outcomes.
    successes = list(accumulate((code == Outcome.SUCCESS for code in outcomes), initial=0))
    attempts = list(accumulate((weight.get(code, 0.0) for code in outcomes), initial=0.0))
    count = len(outcomes)
    whole = float(successes[count]), attempts[count]
    first = _first_change(successes, attempts, count)
    if first is None:
        return whole, whole

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
            return (float(successes[run]), attempts[run]), whole
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
_Runs = tuple[tuple[float, float], tuple[float, float]]  # the recent run's and the whole window's


class SuccessRates:
    """Every learned rate of one application, worked out once from its rows (`from_rows`). Read
    only: a new batch of rows makes a new `SuccessRates`."""

    def __init__(
        self,
        segments: Mapping[tuple[str, str, str], Estimate],
        methods: Mapping[tuple[str, str], Estimate],
        providers: Mapping[str, Estimate],
        runs: Mapping[tuple[str, float], _Runs] | None = None,
        unknown: Estimate = PRIOR,
        settings: RoutingSettings | None = None,
    ) -> None:
        self._segments = segments
        self._methods = methods
        self._providers = providers
        self._runs = runs or {}  # recent runs by outcomes and abandonment weight, for the next batch
        self._unknown = unknown  # a provider without outcomes: the application's providers' rate
        self._settings = settings or RoutingSettings()

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
        application = _Evidence()
        known = {} if previous is None else previous._runs
        runs: dict[tuple[str, float], _Runs] = {}
        for row in rows:
            outcomes = row.outcomes[: settings.window]
            key = (outcomes, settings.abandonment_weight)
            found = known.get(key) or runs.get(key) or _runs(outcomes, settings.abandonment_weight)
            runs[key] = found
            (successes, attempts), (window_successes, window_attempts) = found
            evidence = _Evidence(successes, attempts, len(outcomes), window_successes, window_attempts)
            segments.setdefault((row.provider, row.payment_method, row.currency), _Evidence()).add(evidence)
            methods.setdefault((row.provider, row.payment_method), _Evidence()).add(evidence)
            providers.setdefault(row.provider, _Evidence()).add(evidence)
            application.add(evidence)
        root = application.estimate()
        unknown = _Evidence().shrunk(root, settings, "prior")
        provider_rates = {name: found.shrunk(root, settings, "provider") for name, found in providers.items()}
        method_rates = {
            key: found.shrunk(provider_rates[key[0]], settings, "method") for key, found in methods.items()
        }
        segment_rates = {
            key: found.shrunk(method_rates[key[:2]], settings, "segment") for key, found in segments.items()
        }
        enough = settings.min_outcomes
        # Which level each estimate rests on, for the reader: its own with `min_outcomes`, else the
        # nearest above it that has them.
        provider_rates = {
            name: _resting_on(found, providers[name].count, enough, None)
            for name, found in provider_rates.items()
        }
        method_rates = {
            key: _resting_on(found, methods[key].count, enough, provider_rates[key[0]])
            for key, found in method_rates.items()
        }
        segment_rates = {
            key: _resting_on(found, segments[key].count, enough, method_rates[key[:2]])
            for key, found in segment_rates.items()
        }
        return cls(segment_rates, method_rates, provider_rates, runs, unknown, settings)

    def estimate(self, provider: str, payment_method: str, currency: str) -> Estimate:
        """The rate of `provider` for sessions of `payment_method` in `currency`, shrunk toward its
        parents as the module's docstring says; for a segment (or a provider) without outcomes, its
        parent's rate with the parent's uncertainty widened."""
        found = self._segments.get((provider, payment_method, currency))
        if found is not None:
            return found
        parent = self._methods.get((provider, payment_method))
        if parent is None:
            parent = self._providers.get(provider)
            if parent is None:
                return self._unknown
            parent = self._below(parent)
        return self._below(parent)

    def _below(self, parent: Estimate) -> Estimate:
        """The estimate of a level without outcomes of its own under `parent`: its rate, less sure."""
        found = _Evidence().shrunk(parent, self._settings, parent.level)
        return replace(found, outcomes=parent.outcomes, fell=parent.fell)

    def segments(self) -> dict[tuple[str, str, str], Estimate]:
        """Every segment with outcomes and its estimate, by (provider, payment method, currency)."""
        return dict(self._segments)


def _resting_on(estimate: Estimate, count: int, enough: int, parent: Estimate | None) -> Estimate:
    """`estimate` labelled with the level whose outcomes it rests on: its own once it has `enough`,
    else `parent`'s (its level and count), else the prior's with its own few."""
    if count >= enough:
        return estimate
    if parent is None:
        return replace(estimate, level="prior")
    return replace(estimate, level=parent.level, outcomes=parent.outcomes)


class OutcomeWindow:
    """The last `window` outcomes of each segment by their sessions' creation, in memory: what the
    storage layer reads from PostgreSQL, for the benchmark's simulation and the tests."""

    def __init__(self, window: int) -> None:
        self.window = window
        # Per segment, (created, arrival, outcome) oldest first: at most `window` of the newest.
        self._outcomes: dict[tuple[str, str, str], list[tuple[float, int, Outcome]]] = {}
        self._arrivals = 0

    def record(
        self,
        provider: str,
        payment_method: str,
        currency: str,
        outcome: Outcome,
        created: float | None = None,
    ) -> None:
        """Record `outcome` of a session created at `created` (any increasing measure; None: now,
        after every session recorded so far): it takes its place by creation, however late it came."""
        self._arrivals += 1
        key = (provider, payment_method, currency)
        found = self._outcomes.setdefault(key, [])
        when = float("inf") if created is None else created
        insort(found, (when, self._arrivals, outcome))
        if len(found) > self.window:
            del found[0]

    def rows(self) -> list[SegmentFigures]:
        """One row per segment with an outcome, newest outcomes first."""
        return [
            SegmentFigures(provider, method, currency, "".join(outcome for *_, outcome in reversed(outcomes)))
            for (provider, method, currency), outcomes in sorted(self._outcomes.items())
        ]
