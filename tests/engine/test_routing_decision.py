"""The routing decision: each route type's order, the objectives, what checkout creations cost a
score, exploration (its chances scaled with uncertainty, known for every session), elimination,
providers that are not eligible, and provider-call health applied after the decision."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from payorch.engine.provider_health import ProviderAccount, ProviderHealth
from payorch.engine.routing.decision import (
    ELIMINATED_PROBE,
    EXPLORATION_CAP,
    FALLEN_PROBE,
    MAX_EXPLORATION,
    CreationFigures,
    Decision,
    RankedProvider,
    creation_factor,
    decide,
    exploration_chance,
    plan_decided_route,
)
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


# Checkout creations and new providers


def test_a_provider_whose_checkout_creations_fail_scores_lower() -> None:
    rates = learned(stripe=0.9, mollie=0.9)
    failing = {"stripe": CreationFigures(success_rate=0.6, latency_s=0.3)}
    decision = decide(RoutingDocument(), session(), ["mollie", "stripe"], rates, NO_EXPLORATION, failing)
    assert decision.order == ["mollie", "stripe"]
    mollie, stripe = decision.ranking
    assert stripe.score == round(mollie.score * creation_factor(failing["stripe"]), 4)
    assert creation_factor(failing["stripe"]) == pytest.approx((1 - 0.25 * 0.4) * (1 - 0.005 * 0.3))


def test_a_provider_whose_checkout_creation_is_slow_scores_lower_up_to_the_timeout() -> None:
    rates = learned(stripe=0.9, mollie=0.9)
    slow = {"mollie": CreationFigures(1.0, latency_s=3.0), "stripe": CreationFigures(1.0, latency_s=0.2)}
    decision = decide(RoutingDocument(), session(), ["mollie", "stripe"], rates, NO_EXPLORATION, slow)
    assert decision.order == ["stripe", "mollie"]
    assert creation_factor(CreationFigures(1.0, 3.0)) == pytest.approx(0.985)
    assert creation_factor(CreationFigures(1.0, 60.0)) == creation_factor(CreationFigures(1.0, 10.0)) == 0.95
    assert creation_factor(None) == creation_factor(CreationFigures(1.0, 0.0)) == 1.0


def test_a_new_provider_is_ranked_on_the_applications_rate_not_on_half() -> None:
    rates = learned(stripe=0.9)
    decision = decided(RoutingDocument(), rates, ["mollie", "stripe"])
    # Centred on the application's 0.90 with the weight of 20 outcomes, it may well be better: tried.
    assert decision.order == ["mollie", "stripe"]
    assert rates.estimate("mollie", "card", "EUR").rate > 0.85


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


def test_providers_far_behind_are_explored_at_the_floor_each() -> None:
    settings = RoutingSettings(exploration=0.01)
    decision = decided(RoutingDocument(), GOOD, settings=settings)
    assert decision.exploration == (("mollie", 0.01), ("sandbox", 0.01))
    found = explorations(GOOD, settings)
    assert 60 <= found["mollie"] <= 140 and 60 <= found["sandbox"] <= 140  # 1% of 10,000 each


def test_exploration_grows_with_the_chance_a_provider_is_better_than_the_leader() -> None:
    settings = RoutingSettings(exploration=0.01)
    shares = {
        gap: dict(
            decided(
                RoutingDocument(), learned(stripe=0.9, mollie=0.9 - gap), ["mollie", "stripe"], settings
            ).exploration
        )["mollie"]
        for gap in (0.2, 0.06, 0.05, 0.01)
    }
    assert shares[0.2] == 0.01  # surely worse: the floor
    assert 0.01 < shares[0.06] < shares[0.05] < EXPLORATION_CAP  # 200 outcomes each: some doubt
    assert shares[0.01] == EXPLORATION_CAP  # as good as the leader, as far as anyone knows


def test_exploration_shares_add_up_to_at_most_half_the_sessions() -> None:
    decision = decided(RoutingDocument(), GOOD, settings=RoutingSettings(exploration=1.0))
    assert dict(decision.exploration) == pytest.approx(
        {"mollie": MAX_EXPLORATION / 2, "sandbox": MAX_EXPLORATION / 2}
    )


def test_exploration_zero_explores_nothing() -> None:
    assert explorations(GOOD, NO_EXPLORATION).total() == 0
    assert decided(RoutingDocument(), GOOD).exploration == ()
    rates = learned(stripe=0.9, mollie=0.05)
    assert explorations(rates, NO_EXPLORATION, ["mollie", "stripe"]).total() == 0


def test_a_set_aside_provider_is_probed_at_a_small_fixed_rate() -> None:
    rates = learned(stripe=0.9, mollie=0.05)
    settings = RoutingSettings(exploration=0.05)
    decision = decided(RoutingDocument(), rates, ["mollie", "stripe"], settings)
    assert decision.exploration == (("mollie", ELIMINATED_PROBE),)
    assert 20 <= explorations(rates, settings, ["mollie", "stripe"])["mollie"] <= 90  # 0.5% of 10,000


def test_a_provider_set_aside_after_its_rate_fell_is_probed_more_it_may_come_back() -> None:
    outage = "f" * 20 + steady(0.9, 180)  # newest first: 20 declines after a good window
    rates = SuccessRates.from_rows(
        [
            SegmentFigures("stripe", "card", "EUR", steady(0.9)),
            SegmentFigures("mollie", "card", "EUR", outage),
        ],
        RoutingSettings(),
    )
    assert providers(decided(RoutingDocument(), rates, ["mollie", "stripe"]))[-1] == (
        "mollie",
        True,
        "eliminated",
    )
    decision = decided(RoutingDocument(), rates, ["mollie", "stripe"], RoutingSettings(exploration=0.01))
    assert decision.exploration == (("mollie", FALLEN_PROBE),)


def test_the_exploration_chance_each_session_had_is_known_and_followed() -> None:
    rates = learned(stripe=0.9, mollie=0.88, sandbox=0.05)
    settings = RoutingSettings(exploration=0.01)
    eligible = ["mollie", "sandbox", "stripe"]
    first = decided(RoutingDocument(), rates, eligible, settings)
    chances = {name: exploration_chance(first, name) for name in eligible}
    assert chances["stripe"] == 0.0 and chances["sandbox"] == ELIMINATED_PROBE
    assert 0.01 < chances["mollie"] <= EXPLORATION_CAP
    found = explorations(rates, settings, eligible)
    for name in ("mollie", "sandbox"):
        expected = chances[name] * len(SESSION_IDS)
        assert abs(found[name] - expected) <= 4 * (expected**0.5) + 5
    priority = document(default={"type": "priority", "providers": ["mollie", "stripe"]})
    assert exploration_chance(decided(priority, rates, eligible, settings), "stripe") == 0.0


def test_explored_provider_goes_first_and_the_others_keep_their_order() -> None:
    settings = RoutingSettings(exploration=0.05)
    for sid in SESSION_IDS[:500]:
        decision = decided(RoutingDocument(), GOOD, settings=settings, facts=session(sid))
        if decision.reason == "exploration":
            explored = decision.order[0]
            assert decision.order[1:] == [
                name for name in ("stripe", "mollie", "sandbox") if name != explored
            ]


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
