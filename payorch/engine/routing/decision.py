"""The routing decision: which providers a session's checkout is tried at, in which order, and why.

Pure code. `decide` applies the application's routing document (`engine.routing.document`) and its
learned success rates (`engine.routing.success_rates`) to one session's facts and the providers eligible
for it (`engine.provider_health.eligible_providers`). It orders; it calls nothing. Provider-call
health (`engine.provider_health.ProviderHealth`: circuit breakers per account and per provider) then
decides which of them can be called now: `plan_decided_route` keeps the decision's order and drops
the providers whose circuit is open. Health never reorders: a provider the merchant put first is
tried first while its circuit is closed.

How each route type orders (docs/routing.md):
- `priority`: the route's providers in its order. Reason `rule`.
- `split`: the provider the session is assigned to by weight, then the others heaviest first.
  Reason `split`.
- `dynamic`: by score, best first, equal scores (to 4 decimals) by name. The score is the learned
  success rate's optimistic bound (`Estimate.upper`: the rate plus one standard deviation, so a
  provider with few outcomes since a change is tried) under objective `approval`; under `net`,
  that times the share of the amount the provider's fee leaves ((amount - fee) / amount, which
  orders as rate x (amount - fee) does; the document's fee, else the one reconciliation observed,
  `engine.routing.observed_fees`); either way times `creation_factor`, what the account's
  checkout creations cost (their failures and their time, from provider-call health). A provider
  whose rate is below `elimination_threshold` is set aside: it comes after every other, in score
  order (unless all are below it: then none is set aside), so it is only tried when the others
  fail to create the checkout. Reason `dynamic`; but each provider other than the leader may be
  explored, sent first for reason `exploration`, with a chance of its own (`exploration_shares`):
  the chance it is better than the leader, at least `exploration`; set aside, a small fixed
  probe (`ELIMINATED_PROBE`, `FALLEN_PROBE` for one whose rate fell from a good window: an outage
  that may end). The draw comes from the session's id, so the same session is always routed the
  same way and the chance it had is known (`Decision.exploration`, `exploration_chance`).
  Without it, a provider that falls behind would never be seen to recover.
Exploration and elimination apply to dynamic routes only: a merchant's priority or split is
followed as written. A provider that a route names but that is not eligible for the session
appears in the ranking with `eligible` False and is never tried.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, NamedTuple

from payorch.engine.provider_health import ProviderAccount, ProviderHealth
from payorch.engine.routing.document import (
    PriorityRoute,
    RouteType,
    RoutingDocument,
    SessionFacts,
    SplitRoute,
    matching_rule,
    route_providers,
    split_order,
)
from payorch.engine.routing.observed_fees import NO_OBSERVED_FEES, FeeInForce, ObservedFees, fee_in_force
from payorch.engine.routing.success_rates import Estimate, RoutingSettings, SuccessRates
from payorch.values.errors import NoProviderAvailable, ProviderUnavailable

DecisionReason = Literal["rule", "split", "dynamic", "exploration"]
# Why a provider holds its place in the ranking: the route put it there (`rule`, `split`,
# `dynamic`), exploration put it first, its rate is below the elimination threshold, or it is not
# eligible for this session.
PlaceReason = Literal["rule", "split", "dynamic", "exploration", "eliminated", "not_eligible"]


class RankedProvider(NamedTuple):
    """One provider's place in a decision's ranking (a named tuple: built for every provider of
    every decision, so it is cheap to make)."""

    provider: str
    score: float  # in [0, 1], 4 decimals: the learned rate, or its share net of fees (objective net)
    eligible: bool
    reason: PlaceReason
    fee: FeeInForce | None = None  # objective net: the fee its score weighed, and whose it is


@dataclass(frozen=True)
class Decision:
    """The ranking of one session: the eligible providers in the order to try them, then those the
    route names that are not eligible. `rule` is the matching rule's name (None: the document's
    default route); `reason` says how the first provider came first."""

    rule: str | None
    route_type: RouteType
    reason: DecisionReason
    ranking: tuple[RankedProvider, ...]
    # A dynamic route's providers that do not lead, each with the chance exploration had of
    # sending the session first to it (`exploration_shares`); the leader's is 1 - their sum.
    exploration: tuple[tuple[str, float], ...] = ()

    @property
    def order(self) -> list[str]:
        """The eligible providers, in the order to try them."""
        return [place.provider for place in self.ranking if place.eligible]


def decide(
    document: RoutingDocument,
    facts: SessionFacts,
    eligible: Sequence[str],
    rates: SuccessRates,
    settings: RoutingSettings,
    creation: Mapping[str, CreationFigures] | None = None,
    observed_fees: ObservedFees = NO_OBSERVED_FEES,
) -> Decision:
    """How to route the session of `facts`, given the providers `eligible` for it (by name) and
    `creation`, what each one's checkout creations cost for this application (None, or a provider
    left out: nothing known, no cost), and `observed_fees`, the fees reconciliation observed,
    which objective net weighs for a provider the document gives no fee (`fee_in_force`). A
    ranking without an eligible provider means the route has none for this session (the caller
    answers 422, `NO_PROVIDER_AVAILABLE`, as `plan_decided_route` does)."""
    scoring = _Scoring(document, facts, rates, creation or {}, observed_fees)
    rule = matching_rule(document, facts)
    route = document.default if rule is None else rule.route
    named = route_providers(route)
    usable = set(eligible)
    missing = [] if named is None else [name for name in named if name not in usable]
    rule_name = None if rule is None else rule.name
    explored: tuple[tuple[str, float], ...] = ()
    if isinstance(route, PriorityRoute):
        order = [name for name in route.providers if name in usable]
        places = [scoring.place(name, "rule") for name in order]
        reason: DecisionReason = "rule"
    elif isinstance(route, SplitRoute):
        order = split_order(route, usable, facts)
        places = [scoring.place(name, "split") for name in order]
        reason = "split"
    else:
        candidates = eligible if route.providers is None else [p for p in route.providers if p in usable]
        places, reason, explored = _dynamic(candidates, scoring, facts, settings)
    places += [scoring.place(name, "not_eligible", eligible=False) for name in missing]
    return Decision(rule_name, route.type, reason, tuple(places), explored)


# What a checkout creation costs a provider's score (`creation_factor`): a failed creation is
# rescued by the cascade, at the cost of the customer's wait, so failing every creation weighs a
# quarter of the score; each second a creation takes costs half a percent, up to the creation
# timeout's 10 s (5%): a customer kept waiting before the provider's page opens leaves more often.
CREATION_FAILURE_WEIGHT = 0.25
LATENCY_COST_PER_S = 0.005
LATENCY_COST_CAP_S = 10.0
# Exploration's chances (`exploration_shares`): a provider's share follows its chance of being
# better than the leader up to `EXPLORATION_CAP` (beyond it, the optimistic ranking is what tries a
# provider that may lead), and all of them together take at most `MAX_EXPLORATION` of sessions.
EXPLORATION_CAP = 0.1
MAX_EXPLORATION = 0.5
ELIMINATED_PROBE = 0.005  # a provider set aside, steadily below the threshold
FALLEN_PROBE = 0.05  # a provider set aside after its rate fell (an outage): it may come back


@dataclass(frozen=True)
class CreationFigures:
    """How one provider account's checkout creations went (provider-call health,
    `ProviderHealth.creation_figures`): the smoothed share that succeeded and their smoothed time."""

    success_rate: float  # in [0, 1]; 1 before any
    latency_s: float  # 0 before any


def creation_factor(figures: CreationFigures | None) -> float:
    """What a provider's checkout creations leave of its score, in (0, 1]: see the constants."""
    if figures is None:
        return 1.0
    failing = CREATION_FAILURE_WEIGHT * (1.0 - min(1.0, max(0.0, figures.success_rate)))
    slow = LATENCY_COST_PER_S * min(LATENCY_COST_CAP_S, max(0.0, figures.latency_s))
    return (1.0 - failing) * (1.0 - slow)


class _Scored(NamedTuple):
    provider: str
    estimate: Estimate
    factor: float  # the share of the fee (objective net) times the creation factor
    score: float  # the estimate's upper bound times `factor`
    fee: FeeInForce | None  # the fee weighed (objective net), if any


@dataclass(frozen=True)
class _Scoring:
    document: RoutingDocument
    facts: SessionFacts
    rates: SuccessRates
    creation: Mapping[str, CreationFigures]
    observed_fees: ObservedFees

    def scored(self, provider: str) -> _Scored:
        """The provider's learned estimate and its score: the optimistic bound, times (objective
        net) the share of the amount the fee leaves, times what its creations cost."""
        facts = self.facts
        estimate = self.rates.estimate(provider, facts.payment_method, facts.amount.currency)
        factor = creation_factor(self.creation.get(provider))
        if self.document.objective == "net" and facts.amount.minor > 0:
            used = fee_in_force(
                self.document, self.observed_fees, provider, facts.payment_method, facts.amount.currency
            )
            if used is not None:
                factor *= used.fee.share_left(facts.amount)
        else:
            used = None
        return _Scored(provider, estimate, factor, estimate.upper * factor, used)

    def place(self, provider: str, reason: PlaceReason, *, eligible: bool = True) -> RankedProvider:
        scored = self.scored(provider)
        return RankedProvider(provider, _shown(scored.score), eligible, reason, scored.fee)


def _shown(score: float) -> float:
    return round(max(0.0, score), 4)


def _dynamic(
    candidates: Sequence[str], scoring: _Scoring, facts: SessionFacts, settings: RoutingSettings
) -> tuple[list[RankedProvider], DecisionReason, tuple[tuple[str, float], ...]]:
    # (-score to 4 decimals, name): sorting orders best first, equal scores by name.
    scored = sorted(
        (scoring.scored(name) for name in candidates), key=lambda s: (-round(s.score, 4), s.provider)
    )
    threshold = settings.elimination_threshold
    kept = [item for item in scored if item.estimate.rate >= threshold]
    set_aside = [item for item in scored if item.estimate.rate < threshold] if kept else []
    order = kept + set_aside if kept else scored
    places = [
        RankedProvider(item.provider, _shown(item.score), True, "dynamic", item.fee)
        for item in kept or scored
    ]
    places += [
        RankedProvider(item.provider, _shown(item.score), True, "eliminated", item.fee) for item in set_aside
    ]
    shares = exploration_shares(order, {item.provider for item in set_aside}, settings)
    draw, reached = facts.draws.exploration, 0.0
    for index, (_, share) in enumerate(shares, start=1):
        reached += share
        if draw < reached:
            explored = places.pop(index)
            places.insert(0, explored._replace(reason="exploration"))
            return places, "exploration", shares
    return places, "dynamic", shares


def exploration_shares(
    order: Sequence[_Scored], set_aside: set[str], settings: RoutingSettings
) -> tuple[tuple[str, float], ...]:
    """Each provider of `order` after its leader, in that order, with the chance exploration sends
    the session first to it: set aside, `FALLEN_PROBE` if its rate fell from a better window
    (an outage) else `ELIMINATED_PROBE`; otherwise the chance it is better than the leader
    (`_chance_better`, at most `EXPLORATION_CAP`), at least `settings.exploration`. Together at
    most `MAX_EXPLORATION` (scaled down in proportion beyond it); none at all when
    `settings.exploration` is 0."""
    if len(order) < 2 or settings.exploration <= 0:
        return ()
    leader = order[0]
    shares = []
    for item in order[1:]:
        if item.provider in set_aside:
            share = FALLEN_PROBE if item.estimate.fell else ELIMINATED_PROBE
        else:
            share = max(settings.exploration, min(EXPLORATION_CAP, _chance_better(item, leader)))
        shares.append((item.provider, share))
    total = sum(share for _, share in shares)
    if total > MAX_EXPLORATION:
        shares = [(name, share * MAX_EXPLORATION / total) for name, share in shares]
    return tuple(shares)


def _chance_better(item: _Scored, leader: _Scored) -> float:
    """The chance `item`'s rate (times its factor) is above the leader's, their posteriors taken as
    normal: how uncertain the leader's lead is."""
    gap = item.estimate.rate * item.factor - leader.estimate.rate * leader.factor
    spread = math.hypot(item.estimate.deviation * item.factor, leader.estimate.deviation * leader.factor)
    if spread <= 0:
        return 1.0 if gap > 0 else 0.0
    return 0.5 * math.erfc(-gap / (spread * math.sqrt(2)))


def exploration_chance(decision: Decision, provider: str) -> float:
    """The chance the session of `decision` had of being sent first to `provider` by exploration:
    known for every session, since its draw comes from its id (0 for the leader, and for a
    priority or split route)."""
    return dict(decision.exploration).get(provider, 0.0)


def plan_decided_route(
    decision: Decision, accounts: Mapping[str, ProviderAccount], health: ProviderHealth, now: float
) -> list[tuple[str, float]]:
    """The providers to try in turn with their scores: the decision's order, without those whose
    account (`accounts`, by provider name, one for each eligible provider) or provider has an open
    circuit; a due probe is handed out. `NoProviderAvailable` (422) when the
    decision has no eligible provider; `ProviderUnavailable` (502) when every one has an open
    circuit."""
    places = [place for place in decision.ranking if place.eligible]
    if not places:
        if decision.ranking:  # the route names providers, none of them eligible
            where = "the default route" if decision.rule is None else f"routing rule {decision.rule!r}"
            raise NoProviderAvailable(f"no provider of {where} accepts this payment method and amount")
        raise NoProviderAvailable("no active provider configuration accepts this payment method and amount")
    available = [
        (place.provider, place.score)
        for place in places
        if health.is_available(accounts[place.provider], now)
    ]
    if not available:
        raise ProviderUnavailable("every eligible payment provider is failing: retry later")
    return available
