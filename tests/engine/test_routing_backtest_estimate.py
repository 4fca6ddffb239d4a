"""The chances a backtest weighs sessions by: the chance a replayed decision gives each provider of
being first, and the chance a session's own provider had when the document in force then decided
it (docs/routing.md, "Backtest", "How the approvals are estimated")."""

from __future__ import annotations

from typing import Any

import pytest

from payorch.engine.routing.backtest_estimate import CHANCE_DIGITS, Chance, first_chances, logged_chance
from payorch.engine.routing.decision import Decision, decide
from payorch.engine.routing.document import RoutingDocument, SessionFacts, parse_routing_document
from payorch.engine.routing.success_rates import RoutingSettings, SuccessRates
from payorch.values.money import Money
from payorch.values.statuses import RoutingReason

CATALOGUE = frozenset({"mollie", "sandbox", "stripe"})
ELIGIBLE = ["mollie", "sandbox", "stripe"]
FACTS = SessionFacts("card", Money(10_000, "EUR"), "DE", "00000000-0000-4000-8000-000000000001")
SPLIT = {"default": {"type": "split", "weights": {"stripe": 70, "mollie": 20, "sandbox": 10}}}


def document(raw: dict[str, Any]) -> RoutingDocument:
    return parse_routing_document(raw, CATALOGUE)


def decided(raw: dict[str, Any], exploration: float, eligible: list[str] = ELIGIBLE) -> Decision:
    settings = RoutingSettings(exploration=exploration)
    return decide(document(raw), FACTS, eligible, SuccessRates({}, {}, {}), settings)


def chances(raw: dict[str, Any], exploration: float, eligible: list[str] = ELIGIBLE) -> tuple[Chance, ...]:
    return first_chances(decided(raw, exploration, eligible), document(raw))


def test_a_priority_route_sends_a_session_to_its_first_eligible_provider_surely() -> None:
    raw = {"default": {"type": "priority", "providers": ["mollie", "stripe"]}}
    assert chances(raw, 0.05, ["stripe"]) == (Chance("stripe", 1.0, False),)


def test_a_split_gives_each_eligible_provider_its_weight_over_theirs() -> None:
    assert chances(SPLIT, 0.05) == (
        Chance("mollie", 0.2, False),
        Chance("sandbox", 0.1, False),
        Chance("stripe", 0.7, False),
    )
    assert chances(SPLIT, 0.05, ["mollie", "stripe"]) == (
        Chance("mollie", pytest.approx(2 / 9), False),
        Chance("stripe", pytest.approx(7 / 9), False),
    )


def test_a_dynamic_route_gives_the_others_explorations_shares_and_its_leader_the_rest() -> None:
    decision = decided({}, 0.06)
    shares = {name: round(share, CHANCE_DIGITS) for name, share in decision.exploration}
    assert sorted(shares) == ["sandbox", "stripe"]  # without evidence, the leader is first by name
    assert all(share >= 0.06 for share in shares.values())
    assert chances({}, 0.06) == (
        Chance("mollie", pytest.approx(1 - sum(shares.values())), False),
        Chance("sandbox", shares["sandbox"], True),
        Chance("stripe", shares["stripe"], True),
    )
    assert chances({}, 0.0) == (Chance("mollie", 1.0, False),)


def test_a_route_with_no_eligible_provider_gives_no_chance() -> None:
    raw = {"default": {"type": "priority", "providers": ["mollie"]}}
    assert chances(raw, 0.05, ["stripe"]) == ()


def logged(provider: str, reason: RoutingReason | None, raw: dict[str, Any], **kinds: Any) -> float:
    decision = decided(raw, kinds.get("exploration", 0.06), kinds.get("eligible", ELIGIBLE))
    return logged_chance(provider, reason, decision, document(raw), 0.06)


def test_a_sessions_own_provider_had_the_chance_its_stored_reason_says() -> None:
    shares = {name: round(share, CHANCE_DIGITS) for name, share in decided({}, 0.06).exploration}
    assert logged("mollie", RoutingReason.DYNAMIC, {}) == pytest.approx(1 - sum(shares.values()))
    assert logged("sandbox", RoutingReason.EXPLORATION, {}) == shares["sandbox"]
    # Explored then, leading now: the least share exploration gives.
    assert logged("mollie", RoutingReason.EXPLORATION, {}) == 0.06
    for reason in (RoutingReason.RULE, RoutingReason.CASCADE, None):
        assert logged("stripe", reason, {}) == 1.0


def test_a_split_session_had_its_providers_weight_over_the_eligible_ones() -> None:
    assert logged("mollie", RoutingReason.SPLIT, SPLIT) == 0.2
    assert logged("mollie", RoutingReason.SPLIT, SPLIT, eligible=["mollie"]) == 1.0
    # A provider no longer linked still had its weight among those linked now.
    assert logged("sandbox", RoutingReason.SPLIT, SPLIT, eligible=["mollie", "stripe"]) == 0.1


def test_a_session_whose_deciding_document_is_unknown_is_taken_as_surely_sent() -> None:
    assert logged_chance("sandbox", RoutingReason.EXPLORATION, None, None, 0.06) == 1.0
