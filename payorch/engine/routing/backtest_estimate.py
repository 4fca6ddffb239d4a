"""The approvals a backtest estimates (docs/routing.md, "Backtest"): a doubly robust estimate of the
approval of a routing document's first choices over past sessions, from the chances each session
had of being sent where it went.

Pure code. payorch draws a session's split and exploration from its id (`document.session_draws`),
so the chance a document gave each provider of being a session's first is known:

- a priority route: its first eligible provider, surely;
- a split: each eligible provider its weight over theirs;
- a dynamic route: every provider that does not lead its exploration share (`Decision.exploration`,
  from the chance it beats the leader, between the floor and the cap), the leader the rest.

`first_chances` reads them off a replayed decision; `logged_chance` gives the chance the session's
own first provider had under the document that decided it, by the reason stored with it (a rule or
a cascade: surely; a split: its weight; dynamic: the leader's share; exploration: one other's).

`DoublyRobust` then estimates, over the sessions with an outcome, a document's approval as the mean
of, per session, what a model of each provider's approval gives for the document's chances
(`ObservedApprovals`: what each provider showed on the session's payment method and currency in
the window, falling back as learned rates do), corrected by the session's own outcome weighted by
the chance the document gives its provider over the chance it had: Σ π(a)·q(a) + π(o)/p(o)·(paid -
q(o)). Where the history chose at random (splits, exploration) the correction makes the estimate
unbiased whatever the model; where the document sends a session where the history never could have
(a priority that changed), only the model speaks. The candidate and the document in force are
estimated on the same sessions, with the same model, and the change between them comes with a 95%
interval from the spread of the per-session differences. A document whose figures are the in-force
one's has the same values session by session: a change of 0.

Only counts are kept between batches: sessions that share their segment, provider, outcome and
chances are one `kind` with a count, so memory follows the kinds of session, not their number.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import NamedTuple

from payorch.engine.routing.decision import Decision
from payorch.engine.routing.document import Route, RoutingDocument, SplitRoute
from payorch.values.statuses import RoutingReason

Z_95 = 1.959964  # the normal quantile of a two-sided 95% interval
CHANCE_DIGITS = 4  # a dynamic route's chances are counted to this many decimals, as scores are shown


class Chance(NamedTuple):
    """The chance a document gives `provider` of being a session's first; `explored`: only by
    exploration (a dynamic route's provider that does not lead)."""

    provider: str
    chance: float
    explored: bool


Chances = tuple[Chance, ...]  # by provider name; empty: the document routes the session nowhere


def _route_of(document: RoutingDocument, rule: str | None) -> Route:
    if rule is not None:
        for candidate in document.rules:
            if candidate.name == rule:
                return candidate.route
    return document.default


def _leader(decision: Decision) -> str:
    """A dynamic decision's leader: first, unless exploration put another before it."""
    order = decision.order
    return order[1] if decision.reason == "exploration" and len(order) > 1 else order[0]


def _shares(decision: Decision) -> dict[str, float]:
    """A dynamic decision's exploration shares, to `CHANCE_DIGITS` decimals: sessions whose chances
    are the same to that precision are counted as one kind (a share follows the learned rates and,
    under objective `net`, the amount's fee), so the kinds stay few."""
    return {name: round(share, CHANCE_DIGITS) for name, share in decision.exploration}


def _split_weights(decision: Decision, document: RoutingDocument, also: str = "") -> dict[str, int]:
    """The weights of the split route `decision` followed, over its eligible providers (and `also`)."""
    route = _route_of(document, decision.rule)
    if not isinstance(route, SplitRoute):
        return {}
    usable = {*decision.order, also}
    return {name: weight for name, weight in route.weights if name in usable and weight}


def first_chances(decision: Decision, document: RoutingDocument) -> Chances:
    """The chance `decision` (of `document`) gave each eligible provider of being first (see the
    module's docstring)."""
    order = decision.order
    if not order:
        return ()
    if decision.route_type == "split":
        weights = _split_weights(decision, document)
        total = sum(weights.values())
        if total:
            return tuple(Chance(name, weights[name] / total, False) for name in sorted(weights))
    elif decision.route_type == "dynamic" and decision.exploration:
        shares = _shares(decision)
        chances = [Chance(name, share, True) for name, share in shares.items() if share > 0]
        chances.append(Chance(_leader(decision), 1 - sum(shares.values()), False))
        return tuple(sorted(chances))
    return (Chance(order[0], 1.0, False),)


def logged_chance(
    provider: str,
    reason: RoutingReason | None,
    decision: Decision | None,
    document: RoutingDocument | None,
    floor: float,
) -> float:
    """The chance `provider` had of being first for a session when `document` decided it for
    `reason`, read off `decision`, that document's decision of the session replayed now (None, or
    `reason` None: not known). 1 where it was sure (a rule, a cascade) or where what decided is not
    known; for a provider exploration sent the session to that does not trail the leader now,
    `floor`, the least share exploration gives a provider not set aside."""
    if decision is None or document is None or not decision.order:
        return 1.0
    if reason is RoutingReason.SPLIT and decision.route_type == "split":
        weights = _split_weights(decision, document, provider)
        total, own = sum(weights.values()), weights.get(provider, 0)
        return own / total if total and own else 1.0
    if reason in (RoutingReason.DYNAMIC, RoutingReason.EXPLORATION) and decision.route_type == "dynamic":
        shares = _shares(decision)
        if not shares:
            return 1.0
        if reason is RoutingReason.DYNAMIC:
            return 1 - sum(shares.values())
        found = shares.get(provider, 0.0)
        return found if found > 0 else (floor if floor > 0 else 1.0)
    return 1.0


class Seen:
    """Outcomes and successes of one group of sessions."""

    __slots__ = ("outcomes", "succeeded")

    def __init__(self) -> None:
        self.outcomes = 0
        self.succeeded = 0

    def add(self, outcomes: int, succeeded: int) -> None:
        self.outcomes += outcomes
        self.succeeded += succeeded


class ObservedApprovals:
    """The approval each provider showed on the replayed sessions, by segment, falling back to its
    payment method, then to the provider, while a level has fewer than `min_outcomes` outcomes
    (`of`); and every provider's together (`pooled`), the same way down to all sessions."""

    def __init__(self, segments: Mapping[tuple[str, str, str], Seen], min_outcomes: int) -> None:
        self._min = min_outcomes
        self._segments = segments
        self._methods: dict[tuple[str, str], Seen] = {}
        self._providers: dict[str, Seen] = {}
        self._pooled: dict[tuple[str, str], Seen] = {}
        self._pooled_methods: dict[str, Seen] = {}
        self._all = Seen()
        for (provider, method, currency), seen in segments.items():
            for found in (
                self._methods.setdefault((provider, method), Seen()),
                self._providers.setdefault(provider, Seen()),
                self._pooled.setdefault((method, currency), Seen()),
                self._pooled_methods.setdefault(method, Seen()),
                self._all,
            ):
                found.add(seen.outcomes, seen.succeeded)

    def _first_enough(self, levels: Sequence[Seen | None]) -> Fraction | None:
        for seen in levels:
            if seen is not None and seen.outcomes >= self._min:
                return Fraction(seen.succeeded, seen.outcomes)
        return None

    def of(self, provider: str, method: str, currency: str) -> Fraction | None:
        """The approval to count a session of this segment at `provider`; None without enough outcomes."""
        return self._first_enough(
            (
                self._segments.get((provider, method, currency)),
                self._methods.get((provider, method)),
                self._providers.get(provider),
            )
        )

    def pooled(self, method: str, currency: str) -> Fraction:
        """Every provider's approval on the segment, falling back to the method, then to every
        session (0 without any)."""
        found = self._first_enough((self._pooled.get((method, currency)), self._pooled_methods.get(method)))
        if found is not None:
            return found
        return Fraction(self._all.succeeded, self._all.outcomes) if self._all.outcomes else Fraction(0)


@dataclass(frozen=True)
class EstimatedApproval:
    """Over the same `sessions` (those with an outcome that could be estimated): the approval
    observed (`actual`), and the doubly robust estimates of the candidate's and of the document in
    force's (`baseline`), the `change` between them with its 95% interval (`low`, `high`: None
    with fewer than two sessions) and the candidate's effective sample size (`effective_sessions`:
    how many sessions' own outcomes its estimate rests on, the rest being the model's). None when
    there are no sessions. `unestimated`: sessions with an outcome left out, sent (by either
    document) to a provider with too few outcomes to tell."""

    sessions: int
    actual: Fraction | None
    candidate: float | None
    unestimated: int
    baseline: float | None = None
    change: float | None = None
    low: float | None = None
    high: float | None = None
    effective_sessions: int = 0


class _Kind(NamedTuple):
    method: str
    currency: str
    provider: str  # where the session went first
    paid: bool
    logged: float  # the chance it had of going there
    candidate: Chances
    baseline: Chances


class DoublyRobust:
    """The candidate's and the document in force's estimated approvals over sessions `add`ed one
    by one (see the module's docstring)."""

    def __init__(self) -> None:
        self._kinds: Counter[_Kind] = Counter()

    def add(
        self,
        method: str,
        currency: str,
        provider: str,
        paid: bool,
        logged: float,
        candidate: Chances,
        baseline: Chances,
    ) -> None:
        """Count one session with an outcome: its segment, first provider, whether it was paid there,
        the chance it had of going there, and the candidate's and the baseline's chances."""
        self._kinds[_Kind(method, currency, provider, paid, logged, candidate, baseline)] += 1

    def result(self, approvals: ObservedApprovals) -> EstimatedApproval:
        """The estimates, with `approvals` the model."""
        sessions = unestimated = paid = 0
        total_c = total_b = total_d = squares_d = weights = weight_squares = 0.0
        for kind, count in self._kinds.items():
            candidate = _value(kind, kind.candidate, approvals)
            baseline = _value(kind, kind.baseline, approvals)
            if candidate is None or baseline is None:
                unestimated += count
                continue
            sessions += count
            paid += count * kind.paid
            (value_c, weight), (value_b, _) = candidate, baseline
            total_c += count * value_c
            total_b += count * value_b
            total_d += count * (value_c - value_b)
            squares_d += count * (value_c - value_b) ** 2
            weights += count * weight
            weight_squares += count * weight**2
        if not sessions:
            return EstimatedApproval(0, None, None, unestimated)
        change = min(1.0, max(-1.0, total_d / sessions))
        low = high = None
        if sessions > 1:
            variance = max(0.0, (squares_d - sessions * change**2) / (sessions - 1))
            half = Z_95 * math.sqrt(variance / sessions)
            low, high = max(-1.0, change - half), min(1.0, change + half)
        return EstimatedApproval(
            sessions=sessions,
            actual=Fraction(paid, sessions),
            candidate=_within(total_c / sessions),
            unestimated=unestimated,
            baseline=_within(total_b / sessions),
            change=change,
            low=low,
            high=high,
            effective_sessions=int(weights**2 / weight_squares + 1e-9) if weight_squares else 0,
        )


def _within(value: float) -> float:
    return min(1.0, max(0.0, value))


def _value(kind: _Kind, chances: Chances, approvals: ObservedApprovals) -> tuple[float, float] | None:
    """One session's doubly robust value under `chances`, and the weight of its own outcome in it
    (the chance `chances` give its provider over the chance it had); None when it rests on a
    provider without an estimate: one the document sends it to by its own choice (not only by
    exploration), whose approval the value cannot do without."""
    if not chances:
        return 0.0, 0.0  # routed nowhere: not paid
    own = next((c.chance for c in chances if c.provider == kind.provider), 0.0)
    weight = own / kind.logged
    value = weight * kind.paid
    for provider, chance, explored in chances:
        # What the model's figure for `provider` weighs in the value: its chance, less the weight
        # of the session's own outcome where it went (there the outcome itself speaks).
        coefficient = chance - (weight if provider == kind.provider else 0.0)
        if coefficient == 0:
            continue
        found = approvals.of(provider, kind.method, kind.currency)
        if found is None:
            if not explored:
                return None
            found = approvals.pooled(kind.method, kind.currency)
        value += coefficient * float(found)
    return value, weight
