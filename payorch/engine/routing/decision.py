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
  orders as rate x (amount - fee) does). A provider whose rate is below `elimination_threshold`
  is set aside: it comes after every other, in score order (unless all are below it: then none is
  set aside), so it is only tried when the others fail to create the checkout. Reason `dynamic`; but with
  probability `exploration` (drawn from the session's id) a provider other than the leader, set
  aside or not, is picked uniformly (also from the id) and goes first: reason `exploration`.
  Without it, a provider that falls behind would never be seen to recover.
Exploration and elimination apply to dynamic routes only: a merchant's priority or split is
followed as written. A provider that a route names but that is not eligible for the session
appears in the ranking with `eligible` False and is never tried.
"""

from __future__ import annotations

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
from payorch.engine.routing.success_rates import RoutingSettings, SuccessRates
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


@dataclass(frozen=True)
class Decision:
    """The ranking of one session: the eligible providers in the order to try them, then those the
    route names that are not eligible. `rule` is the matching rule's name (None: the document's
    default route); `reason` says how the first provider came first."""

    rule: str | None
    route_type: RouteType
    reason: DecisionReason
    ranking: tuple[RankedProvider, ...]

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
) -> Decision:
    """How to route the session of `facts`, given the providers `eligible` for it (by name). A
    ranking without an eligible provider means the route has none for this session (the caller
    answers 422, `NO_PROVIDER_AVAILABLE`, as `plan_decided_route` does)."""
    rule = matching_rule(document, facts)
    route = document.default if rule is None else rule.route
    named = route_providers(route)
    usable = set(eligible)
    missing = [] if named is None else [name for name in named if name not in usable]
    rule_name = None if rule is None else rule.name
    if isinstance(route, PriorityRoute):
        order = [name for name in route.providers if name in usable]
        places = [_place(name, document, facts, rates, "rule") for name in order]
        reason: DecisionReason = "rule"
    elif isinstance(route, SplitRoute):
        order = split_order(route, usable, facts)
        places = [_place(name, document, facts, rates, "split") for name in order]
        reason = "split"
    else:
        candidates = eligible if route.providers is None else [p for p in route.providers if p in usable]
        places, reason = _dynamic(candidates, document, facts, rates, settings)
    places += [_place(name, document, facts, rates, "not_eligible", eligible=False) for name in missing]
    return Decision(rule_name, route.type, reason, tuple(places))


def _rate_and_score(
    provider: str, document: RoutingDocument, facts: SessionFacts, rates: SuccessRates
) -> tuple[float, float]:
    """The provider's learned rate, and its score: the rate, or (objective net) the rate times the
    share of the amount the fee leaves."""
    estimate = rates.estimate(provider, facts.payment_method, facts.amount.currency)
    if document.objective == "approval":
        return estimate.rate, estimate.upper
    fee = document.fees.get(provider)
    if fee is None or facts.amount.minor <= 0:
        return estimate.rate, estimate.upper
    return estimate.rate, estimate.upper * fee.share_left(facts.amount)


def _place(
    provider: str,
    document: RoutingDocument,
    facts: SessionFacts,
    rates: SuccessRates,
    reason: PlaceReason,
    *,
    eligible: bool = True,
) -> RankedProvider:
    score = _rate_and_score(provider, document, facts, rates)[1]
    return RankedProvider(provider, _shown(score), eligible, reason)


def _shown(score: float) -> float:
    return round(max(0.0, score), 4)


def _dynamic(
    candidates: Sequence[str],
    document: RoutingDocument,
    facts: SessionFacts,
    rates: SuccessRates,
    settings: RoutingSettings,
) -> tuple[list[RankedProvider], DecisionReason]:
    # (-score to 4 decimals, name, rate, score shown): sorting orders best first, equal scores by name.
    ranked = []
    for name in candidates:
        rate, score = _rate_and_score(name, document, facts, rates)
        rounded = round(score, 4)
        ranked.append((-rounded, name, rate, max(0.0, rounded)))
    ranked.sort()
    threshold = settings.elimination_threshold
    kept = [item for item in ranked if item[2] >= threshold]
    set_aside = [item for item in ranked if item[2] < threshold] if kept else []
    order = kept + set_aside if kept else ranked
    places = [RankedProvider(name, shown, True, "dynamic") for _, name, _, shown in kept or ranked]
    places += [RankedProvider(name, shown, True, "eliminated") for _, name, _, shown in set_aside]
    draws = facts.draws
    if len(order) > 1 and draws.exploration < settings.exploration:
        index = 1 + draws.pick % (len(order) - 1)
        explored = places.pop(index)
        places.insert(0, RankedProvider(explored.provider, explored.score, True, "exploration"))
        return places, "exploration"
    return places, "dynamic"


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
