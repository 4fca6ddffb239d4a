"""The backtest's replay, without a database: each past session decided by the candidate document
and counted per provider and per rule, the approval each provider showed, and the candidate's
estimated approval beside the one observed."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from payorch.engine.routing.backtest import (
    EstimatedApproval,
    ProviderTally,
    Replay,
    Replayer,
    RuleTally,
)
from payorch.engine.routing.document import SessionFacts, SplitRoute, parse_routing_document, split_order
from payorch.engine.routing.success_rates import RoutingSettings, SegmentFigures, SuccessRates
from payorch.storage.routing_history import PastSession
from payorch.values.money import Money
from payorch.values.statuses import Outcome

CATALOGUE = frozenset({"mollie", "sandbox", "stripe"})
NO_EVIDENCE = SuccessRates({}, {}, {})
S, F, A = Outcome.SUCCESS, Outcome.FAILURE, Outcome.ABANDONMENT


@dataclass(frozen=True)
class Link:
    provider: str
    payment_methods: tuple[str, ...] = ("card", "blik")
    is_active: bool = True


LINKED = [Link("mollie"), Link("stripe")]


def takes_everything(name: str, method: str, amount: Money) -> bool:
    return True


def takes_no_blik_at_mollie(name: str, method: str, amount: Money) -> bool:
    return not (name == "mollie" and method == "blik")


def past(
    number: int,
    provider: str,
    outcome: Outcome | None,
    *,
    method: str = "card",
    currency: str = "EUR",
    country: str | None = "DE",
) -> PastSession:
    return PastSession(
        f"00000000-0000-4000-8000-{number:012d}", method, 10_000, currency, country, provider, outcome
    )


def sessions(provider: str, outcomes: str, *, first: int = 0, **kinds: Any) -> list[PastSession]:
    """One session at `provider` per letter of `outcomes` (`s`, `f`, `a`; `-` for none yet)."""
    return [
        past(first + n, provider, None if code == "-" else Outcome(code), **kinds)
        for n, code in enumerate(outcomes)
    ]


def replayed(
    raw: dict[str, Any],
    history: Iterable[PastSession],
    *,
    rates: SuccessRates = NO_EVIDENCE,
    min_outcomes: int = 1,
    accepts: Callable[[str, str, Money], bool] = takes_everything,
) -> Replay:
    settings = RoutingSettings(exploration=0.0, min_outcomes=min_outcomes)
    replayer = Replayer(parse_routing_document(raw, CATALOGUE), LINKED, accepts, rates, settings)
    replayer.replay(history)
    return replayer.result()


def tallies(replay: Replay) -> dict[str, tuple[int, int, int, int]]:
    return {t.provider: (t.actual, t.candidate, t.outcomes, t.succeeded) for t in replay.providers}


def priority(*providers: str) -> dict[str, Any]:
    return {"default": {"type": "priority", "providers": list(providers)}}


def test_each_provider_counts_the_sessions_it_took_and_the_approval_they_showed() -> None:
    history = sessions("stripe", "ssf-") + sessions("mollie", "sa", first=10)
    replay = replayed(priority("stripe", "mollie"), history)
    assert replay.providers == (
        ProviderTally("mollie", actual=2, candidate=0, outcomes=2, succeeded=1),
        ProviderTally("stripe", actual=4, candidate=6, outcomes=3, succeeded=2),
    )
    assert [t.approval for t in replay.providers] == [Fraction(1, 2), Fraction(2, 3)]
    assert (replay.sessions, replay.changed, replay.unroutable, replay.without_outcome) == (6, 2, 0, 1)


def test_the_document_that_routed_the_sessions_changes_nothing_and_estimates_what_happened() -> None:
    history = sessions("stripe", "ssfa")
    replay = replayed(priority("stripe"), history)
    assert replay.changed == 0
    assert tallies(replay) == {"stripe": (4, 4, 4, 2)}
    assert replay.estimated == EstimatedApproval(4, Fraction(1, 2), Fraction(1, 2), 0)


def test_a_priority_rule_moves_the_sessions_it_matches_and_only_those() -> None:
    history = sessions("stripe", "ss", currency="PLN") + sessions("stripe", "sf", first=10)
    rule = {
        "name": "pln-mollie",
        "when": {"currencies": ["PLN"]},
        "route": {"type": "priority", "providers": ["mollie"]},
    }
    replay = replayed({"rules": [rule], **priority("stripe")}, history + sessions("mollie", "s", first=20))
    assert tallies(replay) == {"mollie": (1, 2, 1, 1), "stripe": (4, 3, 4, 3)}
    assert replay.rules == (
        RuleTally("pln-mollie", sessions=2, changed=2, unroutable=0),
        RuleTally(None, sessions=3, changed=1, unroutable=0),
    )


def test_a_moved_session_counts_at_the_approval_its_new_provider_showed_on_its_segment() -> None:
    # Mollie paid 3 of 4 EUR card sessions; Stripe 1 of 4. Moving Stripe's four to Mollie counts
    # each at 3/4; Mollie's own keep their outcomes.
    history = sessions("stripe", "sfff") + sessions("mollie", "sssf", first=10)
    replay = replayed(priority("mollie"), history)
    assert replay.estimated == EstimatedApproval(8, Fraction(4, 8), Fraction(3 + 4 * Fraction(3, 4), 8), 0)
    assert replay.changed == 4


def test_a_segment_with_too_few_outcomes_falls_back_to_the_method_then_the_provider() -> None:
    # At min_outcomes 2, Mollie has too few PLN card outcomes (1): its card sessions in every
    # currency are used (4 of 5 paid). It has too few BLIK outcomes (1) too: all its sessions are
    # (4 of 6 paid). Its own sessions keep their outcomes (4 paid of 6).
    mollie = sessions("mollie", "sssf", first=10) + sessions("mollie", "s", first=20, currency="PLN")
    mollie += sessions("mollie", "f", first=30, method="blik", currency="PLN")
    card = replayed(priority("mollie"), mollie + sessions("stripe", "f", currency="PLN"), min_outcomes=2)
    assert card.estimated.candidate == (4 + Fraction(4, 5)) / 7
    stripe_blik = sessions("stripe", "f", method="blik", currency="PLN")
    blik = replayed(priority("mollie"), mollie + stripe_blik, min_outcomes=2)
    assert blik.estimated.candidate == (4 + Fraction(4, 6)) / 7


def test_a_session_moved_to_a_provider_without_enough_outcomes_is_left_out_of_the_estimate() -> None:
    history = sessions("stripe", "sf") + sessions("mollie", "s", first=10)
    replay = replayed(priority("mollie"), history, min_outcomes=2)
    # Mollie's one outcome is too few to estimate Stripe's two sessions there: only its own is left.
    assert replay.estimated == EstimatedApproval(1, Fraction(1), Fraction(1), unestimated=2)


def test_a_session_the_candidate_routes_nowhere_is_unroutable_and_counts_as_not_paid() -> None:
    history = sessions("stripe", "ss", method="blik", currency="PLN") + sessions("stripe", "s", first=10)
    history += sessions("mollie", "s", first=20)
    replay = replayed(priority("mollie"), history, accepts=takes_no_blik_at_mollie)
    assert (replay.unroutable, replay.changed) == (2, 1)
    assert tallies(replay) == {"mollie": (1, 2, 1, 1), "stripe": (3, 0, 3, 3)}
    assert replay.rules == (RuleTally(None, sessions=4, changed=1, unroutable=2),)
    # Paid: all 4 as they went; by the candidate, the card session moved to Mollie at its 1/1 and
    # Mollie's own, but not the 2 BLIK sessions it could not route.
    assert replay.estimated == EstimatedApproval(4, Fraction(1), Fraction(2, 4), 0)


def test_the_candidate_routes_on_the_providers_linked_now() -> None:
    history = sessions("sandbox", "ss")  # the sandbox took them, and is linked no more
    replay = replayed(priority("sandbox", "stripe"), history)
    assert tallies(replay) == {"sandbox": (2, 0, 2, 2), "stripe": (0, 2, 0, 0)}
    assert replay.estimated == EstimatedApproval(0, None, None, unestimated=2)


def test_a_countries_condition_never_matches_a_session_without_a_billing_country() -> None:
    history = sessions("stripe", "ss", country=None) + sessions("stripe", "s", first=10, country="PL")
    rule = {
        "name": "poland",
        "when": {"countries": ["PL"]},
        "route": {"type": "priority", "providers": ["mollie"]},
    }
    replay = replayed({"rules": [rule], **priority("stripe")}, history)
    assert replay.without_country == 2
    assert [(t.rule, t.sessions) for t in replay.rules] == [("poland", 1), (None, 2)]


def test_a_split_assigns_each_session_as_it_assigns_a_session_of_that_id_when_created() -> None:
    history = sessions("stripe", "s" * 200)
    replay = replayed({"default": {"type": "split", "weights": {"stripe": 70, "mollie": 30}}}, history)
    route = SplitRoute((("stripe", 70), ("mollie", 30)))
    expected = sum(
        split_order(
            route, {"stripe", "mollie"}, SessionFacts("card", Money(10_000, "EUR"), "DE", s.session_id)
        )[0]
        == "mollie"
        for s in history
    )
    assert tallies(replay)["mollie"][1] == expected
    assert 40 <= expected <= 80


def test_a_dynamic_route_ranks_by_the_learned_rates_it_is_given() -> None:
    rows = [
        SegmentFigures("mollie", "card", "EUR", "s" * 100),
        SegmentFigures("stripe", "card", "EUR", "sf" * 50),
    ]
    rates = SuccessRates.from_rows(rows, RoutingSettings())
    replay = replayed({}, sessions("stripe", "sf" * 5), rates=rates)
    assert tallies(replay)["mollie"][1] == 10
    assert [(t.rule, t.sessions, t.changed) for t in replay.rules] == [(None, 10, 10)]


def test_batches_replayed_one_after_another_count_as_one() -> None:
    history = sessions("stripe", "ssf-a") + sessions("mollie", "sf", first=10)
    settings = RoutingSettings(exploration=0.0, min_outcomes=1)
    replayer = Replayer(
        parse_routing_document(priority("mollie"), CATALOGUE), LINKED, takes_everything, NO_EVIDENCE, settings
    )
    replayer.replay(history[:3])
    replayer.replay(history[3:])
    assert replayer.result() == replayed(priority("mollie"), history)
