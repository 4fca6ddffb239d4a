"""The routing decision: each route type's order, the objectives, exploration, elimination,
providers that are not eligible, and provider-call health applied after the decision."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from payorch.engine.provider_health import ProviderAccount, ProviderHealth
from payorch.engine.routing.decision import Decision, RankedProvider, decide, plan_decided_route
from payorch.engine.routing.document import RoutingDocument, SessionFacts, parse_routing_document
from payorch.engine.routing.success_rates import RoutingSettings, SegmentFigures, SuccessRates
from payorch.values.errors import NoProviderAvailable, ProviderUnavailable
from payorch.values.money import Money

CATALOGUE = frozenset({"mollie", "sandbox", "stripe"})
ALL = ["mollie", "sandbox", "stripe"]  # eligible providers, by name as routing lists them
NO_EXPLORATION = RoutingSettings(exploration=0.0)
EUR_100 = Money(10_000, "EUR")
SESSION_IDS = [f"00000000-0000-4000-8000-{n:012d}" for n in range(10_000)]


def document(**raw: Any) -> RoutingDocument:
    return parse_routing_document(raw, CATALOGUE)


def steady(rate: float, count: int = 200) -> str:
    return "".join("s" if int((n + 1) * rate) > int(n * rate) else "f" for n in range(count))


def learned(method: str = "card", currency: str = "EUR", **rates: float) -> SuccessRates:
    """Rates learned from a full window of outcomes at each given rate."""
    rows = [SegmentFigures(provider, method, currency, steady(rate)) for provider, rate in rates.items()]
    return SuccessRates.from_rows(rows, RoutingSettings())


def session(session_id: str = "session-1", amount: Money = EUR_100, method: str = "card") -> SessionFacts:
    return SessionFacts(method, amount, "DE", session_id)


def decided(
    doc: RoutingDocument,
    rates: SuccessRates,
    eligible: list[str] = ALL,
    settings: RoutingSettings = NO_EXPLORATION,
    facts: SessionFacts | None = None,
) -> Decision:
    return decide(doc, facts or session(), eligible, rates, settings)


def providers(decision: Decision) -> list[tuple[str, bool, str]]:
    return [(place.provider, place.eligible, place.reason) for place in decision.ranking]


GOOD = learned(stripe=0.9, mollie=0.8, sandbox=0.7)


# Rules and their route types


def test_priority_route_keeps_its_order_over_eligible_providers() -> None:
    doc = document(rules=[{"name": "eu", "route": {"type": "priority", "providers": ["sandbox", "mollie"]}}])
    decision = decided(doc, GOOD)
    assert (decision.rule, decision.route_type, decision.reason) == ("eu", "priority", "rule")
    assert providers(decision) == [("sandbox", True, "rule"), ("mollie", True, "rule")]
    assert decision.order == ["sandbox", "mollie"]


def test_provider_not_eligible_is_listed_last_and_never_tried() -> None:
    doc = document(rules=[{"name": "eu", "route": {"type": "priority", "providers": ["stripe", "mollie"]}}])
    decision = decided(doc, GOOD, eligible=["mollie", "sandbox"])
    assert providers(decision) == [("mollie", True, "rule"), ("stripe", False, "not_eligible")]
    assert decision.order == ["mollie"]


def test_split_route_puts_the_assigned_provider_first() -> None:
    doc = document(
        rules=[{"name": "eur-split", "route": {"type": "split", "weights": {"stripe": 70, "mollie": 30}}}]
    )
    firsts: Counter[str] = Counter()
    for sid in SESSION_IDS[:2000]:
        decision = decided(doc, GOOD, facts=session(sid))
        assert (decision.rule, decision.route_type, decision.reason) == ("eur-split", "split", "split")
        assert sorted(decision.order) == ["mollie", "stripe"]
        firsts[decision.order[0]] += 1
    assert 1300 <= firsts["stripe"] <= 1500


def test_no_rule_matching_routes_by_the_default() -> None:
    doc = document(
        rules=[
            {
                "name": "pln",
                "when": {"currencies": ["PLN"]},
                "route": {"type": "priority", "providers": ["sandbox"]},
            }
        ],
        default={"type": "priority", "providers": ["mollie", "stripe"]},
    )
    decision = decided(doc, GOOD)
    assert (decision.rule, decision.route_type, decision.reason) == (None, "priority", "rule")
    assert decision.order == ["mollie", "stripe"]


def test_default_default_is_dynamic() -> None:
    decision = decided(RoutingDocument(), GOOD)
    assert (decision.rule, decision.route_type, decision.reason) == (None, "dynamic", "dynamic")


def test_dynamic_route_with_providers_ranks_only_those() -> None:
    doc = document(default={"type": "dynamic", "providers": ["sandbox", "mollie"]})
    assert providers(decided(doc, GOOD)) == [("mollie", True, "dynamic"), ("sandbox", True, "dynamic")]


def test_route_without_eligible_provider_leaves_none_to_try() -> None:
    doc = document(default={"type": "priority", "providers": ["stripe"]})
    decision = decided(doc, GOOD, eligible=["mollie"])
    assert decision.order == []
    assert providers(decision) == [("stripe", False, "not_eligible")]


# Scoring and the objectives


def test_higher_approval_wins_under_objective_approval() -> None:
    decision = decided(RoutingDocument(), GOOD)
    assert decision.order == ["stripe", "mollie", "sandbox"]
    scores = [place.score for place in decision.ranking]
    assert scores == sorted(scores, reverse=True)
    assert all(0 <= score <= 1 and round(score, 4) == score for score in scores)


def test_score_is_the_learned_rate_with_its_uncertainty() -> None:
    estimate = GOOD.estimate("stripe", "card", "EUR")
    assert decided(RoutingDocument(), GOOD).ranking[0].score == round(estimate.upper, 4)
    assert estimate.rate < estimate.upper


def test_objective_net_picks_the_cheaper_provider_when_approval_is_equal() -> None:
    rates = learned(stripe=0.85, mollie=0.85)
    fees = {"stripe": {"percent": "2.9", "fixed": {"EUR": "0.25"}}, "mollie": {"percent": "1.8"}}
    assert (
        decided(document(fees=fees, objective="approval"), rates, ["mollie", "stripe"]).order[0] == "mollie"
    )
    assert decided(document(fees=fees, objective="net"), rates, ["mollie", "stripe"]).order[0] == "mollie"
    fees["mollie"] = {"percent": "2.9", "fixed": {"EUR": "0.30"}}
    assert decided(document(fees=fees, objective="net"), rates, ["mollie", "stripe"]).order == [
        "stripe",
        "mollie",
    ]


def test_objective_net_weighs_approval_against_the_fee() -> None:
    # stripe approves a little more, but its fee on 10 EUR costs more than the approvals it adds.
    rates = learned(stripe=0.86, mollie=0.85)
    fees = {"stripe": {"percent": "1.4", "fixed": {"EUR": "0.50"}}, "mollie": {"percent": "1.4"}}
    small = session(amount=Money(1000, "EUR"))
    large = session(amount=Money(1_000_000, "EUR"))
    assert (
        decided(document(fees=fees, objective="net"), rates, ["mollie", "stripe"], facts=small).order[0]
        == "mollie"
    )
    assert (
        decided(document(fees=fees, objective="net"), rates, ["mollie", "stripe"], facts=large).order[0]
        == "stripe"
    )
    assert decided(document(fees=fees), rates, ["mollie", "stripe"], facts=small).order[0] == "stripe"


def test_net_score_is_the_rate_times_the_share_the_fee_leaves() -> None:
    rates = learned(stripe=0.9)
    doc = document(fees={"stripe": {"percent": "10"}}, objective="net")
    upper = rates.estimate("stripe", "card", "EUR").upper
    assert decided(doc, rates, ["stripe"]).ranking[0].score == round(upper * 0.9, 4)


def test_equal_scores_go_by_name() -> None:
    rates = learned(stripe=0.8, mollie=0.8, sandbox=0.8)
    assert decided(RoutingDocument(), rates).order == ["mollie", "sandbox", "stripe"]


# Elimination


def test_provider_below_the_threshold_comes_after_every_other() -> None:
    rates = learned(stripe=0.9, mollie=0.1, sandbox=0.3)
    decision = decided(RoutingDocument(), rates)
    assert providers(decision) == [
        ("stripe", True, "dynamic"),
        ("sandbox", True, "dynamic"),
        ("mollie", True, "eliminated"),
    ]


def test_elimination_threshold_is_a_setting() -> None:
    rates = learned(stripe=0.9, sandbox=0.3)
    settings = RoutingSettings(exploration=0.0, elimination_threshold=0.5)
    assert providers(decided(RoutingDocument(), rates, settings=settings))[-1] == (
        "sandbox",
        True,
        "eliminated",
    )


def test_eliminated_provider_ranks_last_even_where_its_fee_would_win() -> None:
    rates = learned(stripe=0.3, mollie=0.15)
    doc = document(fees={"stripe": {"percent": "60"}}, objective="net")
    decision = decided(doc, rates, ["mollie", "stripe"])
    assert providers(decision) == [("stripe", True, "dynamic"), ("mollie", True, "eliminated")]


def test_nobody_is_set_aside_when_every_provider_is_below_the_threshold() -> None:
    rates = learned(stripe=0.15, mollie=0.1)
    assert providers(decided(RoutingDocument(), rates, ["mollie", "stripe"])) == [
        ("stripe", True, "dynamic"),
        ("mollie", True, "dynamic"),
    ]


def test_merchants_priority_is_followed_whatever_the_rates() -> None:
    rates = learned(stripe=0.9, mollie=0.05)
    doc = document(default={"type": "priority", "providers": ["mollie", "stripe"]})
    assert decided(doc, rates, settings=RoutingSettings()).order == ["mollie", "stripe"]


# Exploration


def explorations(rates: SuccessRates, settings: RoutingSettings, eligible: list[str] = ALL) -> Counter[str]:
    """By provider, the sessions exploration sent first to it, over SESSION_IDS."""
    found: Counter[str] = Counter()
    for sid in SESSION_IDS:
        decision = decided(RoutingDocument(), rates, eligible, settings, session(sid))
        if decision.reason == "exploration":
            assert decision.ranking[0].reason == "exploration"
            found[decision.order[0]] += 1
    return found


def test_exploration_sends_its_share_to_the_providers_that_do_not_lead() -> None:
    found = explorations(GOOD, RoutingSettings(exploration=0.05))
    assert 400 <= found.total() <= 600  # 5% of 10,000
    assert set(found) == {"mollie", "sandbox"}
    assert abs(found["mollie"] - found["sandbox"]) <= 0.3 * found.total()


def test_exploration_share_is_a_setting() -> None:
    assert explorations(GOOD, RoutingSettings(exploration=0.0)).total() == 0
    assert 1800 <= explorations(GOOD, RoutingSettings(exploration=0.2)).total() <= 2200


def test_explored_provider_goes_first_and_the_others_keep_their_order() -> None:
    settings = RoutingSettings(exploration=0.05)
    for sid in SESSION_IDS[:500]:
        decision = decided(RoutingDocument(), GOOD, settings=settings, facts=session(sid))
        if decision.reason == "exploration":
            explored = decision.order[0]
            assert decision.order[1:] == [
                name for name in ("stripe", "mollie", "sandbox") if name != explored
            ]


def test_exploration_may_pick_an_eliminated_provider() -> None:
    rates = learned(stripe=0.9, mollie=0.05)
    found = explorations(rates, RoutingSettings(exploration=0.05), ["mollie", "stripe"])
    assert set(found) == {"mollie"}


def test_exploration_never_touches_rules_or_splits() -> None:
    doc = document(default={"type": "priority", "providers": ["sandbox", "stripe"]})
    for sid in SESSION_IDS[:1000]:
        decision = decided(doc, GOOD, settings=RoutingSettings(exploration=0.5), facts=session(sid))
        assert decision.reason == "rule"


def test_same_session_is_always_decided_the_same_way() -> None:
    settings = RoutingSettings(exploration=0.3)
    for sid in SESSION_IDS[:300]:
        assert decided(RoutingDocument(), GOOD, settings=settings, facts=session(sid)) == decided(
            RoutingDocument(), GOOD, settings=settings, facts=session(sid)
        )


# Provider-call health after the decision


def accounts(*names: str) -> dict[str, ProviderAccount]:
    return {name: ProviderAccount(name, "shop") for name in names}


def test_health_drops_providers_with_an_open_circuit_and_keeps_the_order() -> None:
    health = ProviderHealth()
    decision = decided(RoutingDocument(), GOOD)
    for _ in range(health.policy.failure_threshold):
        health.record_failure(ProviderAccount("stripe", "shop"), 0.1, 0.0, provider_wide=False)
    planned = plan_decided_route(decision, accounts(*ALL), health, now=1.0)
    assert [name for name, _ in planned] == ["mollie", "sandbox"]
    assert planned[0][1] == decision.ranking[1].score


def test_the_cascade_tries_the_decisions_first_until_its_circuit_opens_then_the_next() -> None:
    health = ProviderHealth()
    decision = decided(RoutingDocument(), GOOD)  # stripe first
    tried: list[str] = []
    for now in range(5):  # the caller's loop: stripe always fails, the next one works
        for name, _ in plan_decided_route(decision, accounts(*ALL), health, float(now)):
            tried.append(name)
            if name == "stripe":
                health.record_failure(ProviderAccount(name, "shop"), 0.1, float(now), provider_wide=False)
                continue
            health.record_success(ProviderAccount(name, "shop"), 0.1, float(now))
            break
    threshold = health.policy.failure_threshold
    second = decision.ranking[1].provider
    assert tried == ["stripe", second] * threshold + [second] * (5 - threshold)


def test_every_circuit_open_is_provider_unavailable() -> None:
    health = ProviderHealth()
    decision = decided(RoutingDocument(), learned(stripe=0.9), ["stripe"])
    for _ in range(health.policy.failure_threshold):
        health.record_failure(ProviderAccount("stripe", "shop"), 0.1, 0.0, provider_wide=False)
    with pytest.raises(ProviderUnavailable):
        plan_decided_route(decision, accounts("stripe"), health, now=1.0)


def test_decision_without_eligible_provider_is_no_provider_available() -> None:
    doc = document(rules=[{"name": "stripe-only", "route": {"type": "priority", "providers": ["stripe"]}}])
    with pytest.raises(NoProviderAvailable, match="routing rule 'stripe-only'"):
        plan_decided_route(decided(doc, GOOD, eligible=["mollie"]), accounts("mollie"), ProviderHealth(), 0.0)
    with pytest.raises(NoProviderAvailable):
        plan_decided_route(decided(RoutingDocument(), GOOD, eligible=[]), {}, ProviderHealth(), 0.0)


def test_ranked_provider_is_what_the_evaluate_call_lists() -> None:
    place = decided(RoutingDocument(), GOOD).ranking[0]
    assert place == RankedProvider("stripe", place.score, True, "dynamic")
