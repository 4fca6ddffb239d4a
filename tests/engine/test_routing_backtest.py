"""The backtest's replay, without a database: each past session decided by the candidate document
and by the document in force, counted per provider and per rule, the approval each provider showed,
and the doubly robust estimates of both documents' approval beside the one observed. (The chances
and the estimator alone: tests/engine/test_routing_backtest_estimate.py; recovery's counts:
tests/engine/test_routing_backtest_recovery.py.)"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import pytest

from payorch.engine.routing.backtest import (
    EstimatedApproval,
    ProviderTally,
    Replay,
    Replayer,
    RuleTally,
)
from payorch.engine.routing.document import (
    RoutingDocument,
    SessionFacts,
    SplitRoute,
    parse_routing_document,
    split_order,
)
from payorch.engine.routing.success_rates import RoutingSettings, SegmentFigures, SuccessRates
from payorch.storage.routing_history import PastSession
from payorch.values.money import Money
from payorch.values.statuses import Outcome, RoutingReason

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
    version: int | None = None,
    reason: RoutingReason | None = None,
) -> PastSession:
    return PastSession(
        session_id(number), method, 10_000, currency, country, provider, outcome, version, reason
    )


def session_id(number: int) -> str:
    return f"00000000-0000-4000-8000-{number:012d}"


def sessions(provider: str, outcomes: str, *, first: int = 0, **kinds: Any) -> list[PastSession]:
    """One session at `provider` per letter of `outcomes` (`s`, `f`, `a`; `-` for none yet)."""
    return [
        past(first + n, provider, None if code == "-" else Outcome(code), **kinds)
        for n, code in enumerate(outcomes)
    ]


def document(raw: dict[str, Any]) -> RoutingDocument:
    return parse_routing_document(raw, CATALOGUE)


def replayed(
    raw: dict[str, Any],
    history: Iterable[PastSession],
    *,
    in_force: dict[str, Any] | None = None,
    rates: SuccessRates = NO_EVIDENCE,
    min_outcomes: int = 1,
    exploration: float = 0.0,
    accepts: Callable[[str, str, Money], bool] = takes_everything,
    decided_by: dict[int, RoutingDocument] | None = None,
) -> Replay:
    """`raw` replayed over `history` beside `in_force` (`raw` itself when not given)."""
    settings = RoutingSettings(exploration=exploration, min_outcomes=min_outcomes)
    replayer = Replayer(
        document(raw),
        LINKED,
        accepts,
        rates,
        settings,
        in_force=document(raw if in_force is None else in_force),
        decided_by=decided_by,
    )
    replayer.replay(history)
    return replayer.result()


def tallies(replay: Replay) -> dict[str, tuple[int, int, int, int]]:
    return {t.provider: (t.actual, t.candidate, t.outcomes, t.succeeded) for t in replay.providers}


def baselines(replay: Replay) -> dict[str, int]:
    return {t.provider: t.baseline for t in replay.providers}


def priority(*providers: str) -> dict[str, Any]:
    return {"default": {"type": "priority", "providers": list(providers)}}


def test_each_provider_counts_the_sessions_it_took_the_candidates_and_the_document_in_forces() -> None:
    history = sessions("stripe", "ssf-") + sessions("mollie", "sa", first=10)
    replay = replayed(priority("stripe", "mollie"), history, in_force=priority("mollie"))
    assert replay.providers == (
        ProviderTally("mollie", actual=2, candidate=0, outcomes=2, succeeded=1, baseline=6),
        ProviderTally("stripe", actual=4, candidate=6, outcomes=3, succeeded=2, baseline=0),
    )
    assert [t.approval for t in replay.providers] == [Fraction(1, 2), Fraction(2, 3)]
    # Changed from what the document in force does with them, not from where they went.
    assert (replay.sessions, replay.changed, replay.unroutable, replay.without_outcome) == (6, 6, 0, 1)


def test_the_document_in_force_changes_nothing_and_estimates_what_happened() -> None:
    history = sessions("stripe", "ssfa")
    replay = replayed(priority("stripe"), history)
    assert replay.changed == 0
    assert tallies(replay) == {"stripe": (4, 4, 4, 2)}
    assert replay.estimated == EstimatedApproval(
        4, Fraction(1, 2), 0.5, 0, baseline=0.5, change=0.0, low=0.0, high=0.0, effective_sessions=4
    )


def test_a_priority_rule_moves_the_sessions_it_matches_and_only_those() -> None:
    history = sessions("stripe", "ss", currency="PLN") + sessions("stripe", "sf", first=10)
    rule = {
        "name": "pln-mollie",
        "when": {"currencies": ["PLN"]},
        "route": {"type": "priority", "providers": ["mollie"]},
    }
    history += sessions("mollie", "s", first=20)
    replay = replayed({"rules": [rule], **priority("stripe")}, history, in_force=priority("stripe"))
    assert tallies(replay) == {"mollie": (1, 2, 1, 1), "stripe": (4, 3, 4, 3)}
    # Mollie's own session goes to Stripe by both documents: not changed, wherever it went.
    assert replay.rules == (
        RuleTally("pln-mollie", sessions=2, changed=2, unroutable=0),
        RuleTally(None, sessions=3, changed=0, unroutable=0),
    )


def test_a_candidate_is_estimated_against_the_document_in_force_with_the_changes_interval() -> None:
    # Mollie paid 3 of 4 EUR card sessions; Stripe 1 of 4, each by a priority: no chance to weigh.
    # The candidate keeps Mollie's own (their outcomes) and counts Stripe's at Mollie's 3/4; the
    # document in force the other way round.
    history = sessions("stripe", "sfff") + sessions("mollie", "sssf", first=10)
    replay = replayed(priority("mollie"), history, in_force=priority("stripe"))
    estimated = replay.estimated
    assert (estimated.sessions, estimated.actual, estimated.unestimated) == (8, Fraction(1, 2), 0)
    assert (estimated.candidate, estimated.baseline, estimated.change) == (0.75, 0.25, 0.5)
    # Per session, candidate less baseline: six at 3/4, two at -1/4.
    half = 1.959964 * ((6 * 0.25**2 + 2 * 0.75**2) / 7 / 8) ** 0.5
    assert estimated.low == pytest.approx(0.5 - half)
    assert estimated.high == pytest.approx(0.5 + half)
    assert estimated.effective_sessions == 4  # Mollie's own: their outcomes count as they are
    assert replay.changed == 8


def test_a_segment_with_too_few_outcomes_falls_back_to_the_method_then_the_provider() -> None:
    # At min_outcomes 2, Mollie has too few PLN card outcomes (1): its card sessions in every
    # currency are used (4 of 5 paid). It has too few BLIK outcomes (1) too: all its sessions are
    # (4 of 6 paid). Its own sessions keep their outcomes (4 paid of 6).
    mollie = sessions("mollie", "sssf", first=10) + sessions("mollie", "s", first=20, currency="PLN")
    mollie += sessions("mollie", "f", first=30, method="blik", currency="PLN")
    card = replayed(priority("mollie"), mollie + sessions("stripe", "f", currency="PLN"), min_outcomes=2)
    assert card.estimated.candidate == pytest.approx((4 + 4 / 5) / 7)
    stripe_blik = sessions("stripe", "f", method="blik", currency="PLN")
    blik = replayed(priority("mollie"), mollie + stripe_blik, min_outcomes=2)
    assert blik.estimated.candidate == pytest.approx((4 + 4 / 6) / 7)


def test_a_session_sent_to_a_provider_without_enough_outcomes_is_left_out_of_the_estimate() -> None:
    history = sessions("stripe", "sf") + sessions("mollie", "s", first=10)
    replay = replayed(priority("mollie"), history, min_outcomes=2)
    # Mollie's one outcome is too few to estimate Stripe's two sessions there: only its own is left,
    # which needs no estimate (its outcome is there).
    assert replay.estimated == EstimatedApproval(
        1, Fraction(1), 1.0, unestimated=2, baseline=1.0, change=0.0, effective_sessions=1
    )


def test_a_session_the_candidate_routes_nowhere_is_unroutable_and_counts_as_not_paid() -> None:
    history = sessions("stripe", "ss", method="blik", currency="PLN") + sessions("stripe", "s", first=10)
    history += sessions("mollie", "s", first=20)
    replay = replayed(
        priority("mollie"), history, in_force=priority("stripe"), accepts=takes_no_blik_at_mollie
    )
    assert (replay.unroutable, replay.changed) == (2, 2)
    assert tallies(replay) == {"mollie": (1, 2, 1, 1), "stripe": (3, 0, 3, 3)}
    assert replay.rules == (RuleTally(None, sessions=4, changed=2, unroutable=2),)
    # All 4 paid as they went, and by the document in force; by the candidate, the two card
    # sessions at Mollie's 1/1, but not the 2 BLIK sessions it could not route.
    estimated = replay.estimated
    assert (estimated.actual, estimated.candidate, estimated.baseline) == (Fraction(1), 0.5, 1.0)
    assert estimated.change == -0.5


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


def mollie_leads() -> SuccessRates:
    """Learned rates by which Mollie leads on EUR cards."""
    rows = [
        SegmentFigures("mollie", "card", "EUR", "s" * 100),
        SegmentFigures("stripe", "card", "EUR", "sf" * 50),
    ]
    return SuccessRates.from_rows(rows, RoutingSettings())


def test_a_dynamic_route_ranks_by_the_learned_rates_it_is_given() -> None:
    replay = replayed({}, sessions("stripe", "sf" * 5), in_force=priority("stripe"), rates=mollie_leads())
    assert tallies(replay)["mollie"][1] == 10
    assert [(t.rule, t.sessions, t.changed) for t in replay.rules] == [(None, 10, 10)]


def test_the_dynamic_document_in_force_backtested_changes_nothing_though_the_rates_moved_on() -> None:
    # Created under a dynamic default while Stripe led (a few explored at Mollie); Mollie leads now.
    # Replayed on today's rates, the document sends nearly all of them to Mollie: against what
    # happened that would look like a gain, against itself it is none.
    stripe = [
        past(n, "stripe", Outcome("sf"[n % 2]), version=1, reason=RoutingReason.DYNAMIC) for n in range(40)
    ]
    mollie = [
        past(100 + n, "mollie", Outcome.SUCCESS, version=1, reason=RoutingReason.EXPLORATION)
        for n in range(4)
    ]
    replay = replayed(
        {}, stripe + mollie, rates=mollie_leads(), exploration=0.05, decided_by={1: document({})}
    )
    assert replay.changed == 0
    assert baselines(replay) == {t.provider: t.candidate for t in replay.providers}
    assert tallies(replay)["mollie"][1] > 40  # where it sends them now: not where they went
    estimated = replay.estimated
    assert estimated.change == 0.0
    assert estimated.low is not None and estimated.high is not None
    assert estimated.low <= 0.0 <= estimated.high
    assert estimated.candidate == estimated.baseline


SPLIT = {"default": {"type": "split", "weights": {"stripe": 50, "mollie": 50}}}


def split_history(count: int) -> list[PastSession]:
    """`count` sessions assigned by `SPLIT` by their ids, as creates assigned them: Mollie paid 9
    in 10, Stripe 1 in 2."""
    route = SplitRoute((("stripe", 50), ("mollie", 50)))
    history = []
    for n in range(count):
        facts = SessionFacts("card", Money(10_000, "EUR"), "DE", session_id(n))
        provider = split_order(route, {"stripe", "mollie"}, facts)[0]
        paid = n % 10 != 0 if provider == "mollie" else n % 2 == 0
        outcome = Outcome.SUCCESS if paid else Outcome.FAILURE
        history.append(past(n, provider, outcome, version=1, reason=RoutingReason.SPLIT))
    return history


def test_a_candidate_better_than_a_split_in_force_shows_a_change_whose_interval_excludes_nothing() -> None:
    history = split_history(400)
    replay = replayed(priority("mollie"), history, in_force=SPLIT, decided_by={1: document(SPLIT)})
    approval = {t.provider: float(t.approval or 0) for t in replay.providers}
    estimated = replay.estimated
    # The split gave each session a 1/2 chance at Mollie: Mollie's own outcomes, weighed by it,
    # estimate the candidate; the split's is half of each provider's.
    assert estimated.candidate == pytest.approx(approval["mollie"])
    assert estimated.baseline == pytest.approx((approval["mollie"] + approval["stripe"]) / 2)
    assert estimated.low is not None and estimated.low > 0
    assert estimated.effective_sessions == tallies(replay)["mollie"][0]


def test_the_split_in_force_backtested_changes_nothing() -> None:
    replay = replayed(SPLIT, split_history(200), decided_by={1: document(SPLIT)})
    assert replay.changed == 0
    assert (replay.estimated.change, replay.estimated.low, replay.estimated.high) == (0.0, 0.0, 0.0)


def test_batches_replayed_one_after_another_count_as_one() -> None:
    history = sessions("stripe", "ssf-a") + sessions("mollie", "sf", first=10)
    settings = RoutingSettings(exploration=0.0, min_outcomes=1)
    replayer = Replayer(
        document(priority("mollie")),
        LINKED,
        takes_everything,
        NO_EVIDENCE,
        settings,
        in_force=document(priority("stripe")),
    )
    replayer.replay(history[:3])
    replayer.replay(history[3:])
    assert replayer.result() == replayed(priority("mollie"), history, in_force=priority("stripe"))
