"""What a candidate's recovery policy would have changed, as far as the history tells: the
sessions it retries and what the history shows of them, those it would no longer retry, and those
the history cannot tell (docs/routing.md, "Backtest", "Recovery in a backtest")."""

from __future__ import annotations

from typing import Any

from payorch.engine.routing.backtest import RecoveryTally, Replayer
from payorch.engine.routing.backtest_recovery import RecoveryCounter
from payorch.engine.routing.document import parse_routing_document
from payorch.engine.routing.recovery import RecoveryPolicy
from payorch.engine.routing.success_rates import RoutingSettings, SuccessRates
from payorch.storage.routing_history import PastAttempt, PastSession
from payorch.values.statuses import FailureReason, Outcome
from tests.engine.test_routing_backtest import Link

CATALOGUE = frozenset({"mollie", "sandbox", "stripe"})
TWO = RecoveryPolicy(max_attempts=2)


def declined_with(provider: str, reason: FailureReason, code: str) -> PastAttempt:
    """An attempt at `provider` declined with `reason` and the provider's `code`, followed by another."""
    return PastAttempt(provider, paid=False, declined=True, failure_reason=reason, provider_code=code)


DECLINED = declined_with("stripe", FailureReason.CARD_DECLINED, "card_declined")


def session(number: int, *attempts: PastAttempt, outcome: Outcome | None = None) -> PastSession:
    """A session whose attempts were `attempts` (its first at Stripe unless said), or, given none, a
    single attempt at Stripe with `outcome`."""
    first = attempts[0].provider if attempts else "stripe"
    if attempts:
        outcome = Outcome.SUCCESS if attempts[0].paid else Outcome.FAILURE
    return PastSession(
        f"00000000-0000-4000-8000-{number:012d}",
        "card",
        10_000,
        "EUR",
        "DE",
        first,
        outcome,
        attempts=attempts,
    )


def paid_at(provider: str) -> PastAttempt:
    return PastAttempt(provider, paid=True, declined=False)


def declined_at(provider: str) -> PastAttempt:
    return PastAttempt(provider, paid=False, declined=True)


def counted(planned: list[str], policy: RecoveryPolicy, *history: PastSession) -> RecoveryTally:
    counter = RecoveryCounter()
    for past in history:
        counter.count(past, planned, policy)
    return counter.result()


def test_a_decline_the_history_recovered_where_the_candidate_goes_next_is_recovered() -> None:
    tally = counted(["stripe", "mollie"], TWO, session(1, DECLINED, paid_at("mollie")))
    assert tally == RecoveryTally(retried=1, recovered=1)


def test_a_decline_retried_where_the_history_was_declined_again_is_not_recovered() -> None:
    tally = counted(["stripe", "mollie"], TWO, session(1, DECLINED, declined_at("mollie")))
    assert tally == RecoveryTally(retried=1, not_recovered=1)


def test_a_retry_at_another_provider_than_the_historys_next_is_unknown() -> None:
    tally = counted(["stripe", "sandbox", "mollie"], TWO, session(1, DECLINED, paid_at("mollie")))
    assert tally == RecoveryTally(retried=1, unknown=1)


def test_a_decline_the_history_did_not_retry_has_no_code_and_cannot_be_told() -> None:
    tally = counted(["stripe", "mollie"], TWO, session(1, outcome=Outcome.FAILURE))
    assert tally == RecoveryTally(declined_without_code=1)
    # With one attempt the candidate retries nothing: nothing to tell.
    assert counted(["stripe"], RecoveryPolicy(), session(1, outcome=Outcome.FAILURE)) == RecoveryTally()


def test_a_stricter_policy_no_longer_retries_what_the_history_recovered() -> None:
    history = session(1, DECLINED, paid_at("mollie"))
    never = RecoveryPolicy(max_attempts=2, never_retry=("card_declined",))
    assert counted(["stripe", "mollie"], never, history) == RecoveryTally(
        no_longer_retried=1, no_longer_recovered=1
    )
    assert counted(["stripe"], RecoveryPolicy(), history) == RecoveryTally(
        no_longer_retried=1, no_longer_recovered=1
    )


def test_a_hard_decline_is_never_retried_whatever_the_policy() -> None:
    lost = declined_with("stripe", FailureReason.LOST_OR_STOLEN_CARD, "lost_card")
    tally = counted(["stripe", "mollie"], TWO, session(1, lost, declined_at("mollie")))
    assert tally == RecoveryTally(no_longer_retried=1)


def test_sessions_paid_abandoned_or_sent_elsewhere_first_are_not_counted() -> None:
    paid = session(1, outcome=Outcome.SUCCESS)
    abandoned = session(2, outcome=Outcome.ABANDONMENT)
    elsewhere = session(
        3, declined_with("mollie", FailureReason.CARD_DECLINED, "card_declined"), paid_at("stripe")
    )
    assert counted(["stripe", "mollie"], TWO, paid, abandoned, elsewhere) == RecoveryTally()


def test_a_backtest_counts_its_candidates_recovery_over_the_history() -> None:
    raw: dict[str, Any] = {
        "default": {"type": "priority", "providers": ["stripe", "mollie"]},
        "recovery": {"maxAttempts": 2},
    }
    candidate = parse_routing_document(raw, CATALOGUE)
    replayer = Replayer(
        candidate,
        [Link("mollie"), Link("stripe")],
        lambda name, method, amount: True,
        SuccessRates({}, {}, {}),
        RoutingSettings(exploration=0.0, min_outcomes=1),
        in_force=candidate,
    )
    replayer.replay([session(1, DECLINED, paid_at("mollie")), session(2, outcome=Outcome.FAILURE)])
    assert replayer.result().recovery == RecoveryTally(retried=1, recovered=1, declined_without_code=1)
