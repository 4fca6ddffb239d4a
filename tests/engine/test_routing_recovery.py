"""The recovery policy and the decline table (engine/routing/recovery.py): a hard decline is never
retried whatever the policy says, `maxAttempts` is honoured, a session never gets the same provider
twice, and a document without `recovery` gives one attempt; the table agrees with the providers'
own translations of their codes."""

from __future__ import annotations

from typing import Any

import pytest

from payorch.engine.routing.decision import Decision, RankedProvider
from payorch.engine.routing.document import RoutingDocument, document_json, parse_routing_document
from payorch.engine.routing.recovery import (
    DECLINE_CODE_SOURCES,
    DECLINE_CODES,
    DEFAULT_POLICY,
    PlannedAttempt,
    RecoveryPolicy,
    RetryVerdict,
    is_hard_decline,
    may_retry,
    planned_attempts,
    retry_verdict,
)
from payorch.providers.mollie import events as mollie_events
from payorch.providers.sandbox import adapter as sandbox_adapter
from payorch.providers.sandbox import simulator
from payorch.providers.stripe import events as stripe_events
from payorch.values.statuses import FailureReason, RoutingReason

KNOWN = ("sandbox", "stripe", "mollie")
EVERY_REASON_EVERY_CODE = RecoveryPolicy(max_attempts=5, retry_on=tuple(FailureReason), never_retry=())


def decision(*providers: str, reason: Any = "rule", not_eligible: tuple[str, ...] = ()) -> Decision:
    ranking = [RankedProvider(name, 0.5, True, reason) for name in providers]
    ranking += [RankedProvider(name, 0.5, False, "not_eligible") for name in not_eligible]
    return Decision(None, "priority", reason, tuple(ranking))


def hard_codes() -> list[tuple[str, str]]:
    return [
        (provider, code)
        for provider, codes in DECLINE_CODES.items()
        for code, entry in codes.items()
        if entry.hard
    ]


@pytest.mark.parametrize(("provider", "code"), hard_codes())
def test_a_hard_decline_is_never_retried_whatever_the_policy(provider: str, code: str) -> None:
    reason = DECLINE_CODES[provider][code].reason
    assert retry_verdict(EVERY_REASON_EVERY_CODE, 1, reason, provider, code) is RetryVerdict.HARD_DECLINE


def test_the_hard_declines_the_policy_names_are_in_every_providers_table() -> None:
    hard = {(provider, code) for provider, code in hard_codes()}
    for expected in (
        ("stripe", "lost_card"),
        ("stripe", "stolen_card"),
        ("stripe", "fraudulent"),
        ("stripe", "pickup_card"),
        ("stripe", "invalid_account"),
        ("stripe", "incorrect_number"),
        ("stripe", "revocation_of_authorization"),
        ("mollie", "possible_fraud"),
        ("mollie", "invalid_card_number"),
        ("sandbox", "lost_or_stolen_card"),
    ):
        assert expected in hard


def test_a_lost_or_stolen_card_is_hard_whatever_its_code() -> None:
    assert is_hard_decline("stripe", None, FailureReason.LOST_OR_STOLEN_CARD)
    assert is_hard_decline("stripe", "generic_decline", FailureReason.LOST_OR_STOLEN_CARD)


def test_a_code_hard_at_one_provider_is_hard_at_a_provider_that_does_not_list_it() -> None:
    assert is_hard_decline("sandbox", "fraudulent", FailureReason.PAYMENT_FAILED)
    assert not is_hard_decline("sandbox", "do_not_honor", FailureReason.PAYMENT_FAILED)


def test_a_code_is_hard_or_soft_at_every_provider_alike() -> None:
    seen: dict[str, bool] = {}
    for codes in DECLINE_CODES.values():
        for code, entry in codes.items():
            assert seen.setdefault(code, entry.hard) == entry.hard, code


def test_every_providers_table_says_where_it_comes_from() -> None:
    assert set(DECLINE_CODE_SOURCES) == set(DECLINE_CODES)


def test_soft_declines_are_retried_until_max_attempts() -> None:
    policy = RecoveryPolicy(max_attempts=3)
    declined = (FailureReason.CARD_DECLINED, "stripe", "generic_decline")
    assert may_retry(policy, 1, *declined)
    assert may_retry(policy, 2, *declined)
    assert retry_verdict(policy, 3, *declined) is RetryVerdict.LAST_ATTEMPT


def test_the_default_policy_is_one_attempt_and_retries_nothing() -> None:
    assert DEFAULT_POLICY.max_attempts == 1
    assert retry_verdict(DEFAULT_POLICY, 1, FailureReason.CARD_DECLINED, "sandbox", "card_declined") is (
        RetryVerdict.LAST_ATTEMPT
    )
    assert RoutingDocument().recovery_policy == DEFAULT_POLICY
    assert parse_routing_document({}, KNOWN).recovery_policy == DEFAULT_POLICY


def test_a_reason_left_out_of_retry_on_is_not_retried() -> None:
    policy = RecoveryPolicy(max_attempts=2, retry_on=(FailureReason.INSUFFICIENT_FUNDS,))
    verdict = retry_verdict(policy, 1, FailureReason.CARD_DECLINED, "sandbox", "card_declined")
    assert verdict is RetryVerdict.REASON_NOT_RETRIED
    assert may_retry(policy, 1, FailureReason.INSUFFICIENT_FUNDS, "sandbox", "insufficient_funds")


def test_a_code_in_never_retry_is_not_retried() -> None:
    policy = RecoveryPolicy(max_attempts=2, never_retry=("do_not_honor",))
    verdict = retry_verdict(policy, 1, FailureReason.PAYMENT_FAILED, "stripe", "do_not_honor")
    assert verdict is RetryVerdict.CODE_NEVER_RETRIED
    assert may_retry(policy, 1, FailureReason.PAYMENT_FAILED, "stripe", "try_again_later")


def test_attempts_follow_the_decisions_order_up_to_max_attempts() -> None:
    policy = RecoveryPolicy(max_attempts=2)
    assert planned_attempts(decision("stripe", "sandbox", "mollie"), policy) == (
        PlannedAttempt("stripe", RoutingReason.RULE),
        PlannedAttempt("sandbox", RoutingReason.RECOVERY),
    )


def test_the_default_policy_plans_one_attempt() -> None:
    assert planned_attempts(decision("stripe", "sandbox"), DEFAULT_POLICY) == (
        PlannedAttempt("stripe", RoutingReason.RULE),
    )


def test_attempts_never_go_to_a_provider_already_tried_nor_beyond_max_attempts() -> None:
    policy = RecoveryPolicy(max_attempts=3)
    three = decision("stripe", "sandbox", "mollie")
    assert planned_attempts(three, policy, tried=("stripe",)) == (
        PlannedAttempt("sandbox", RoutingReason.RECOVERY),
        PlannedAttempt("mollie", RoutingReason.RECOVERY),
    )
    assert planned_attempts(three, policy, tried=("sandbox",)) == (
        PlannedAttempt("stripe", RoutingReason.RECOVERY),
        PlannedAttempt("mollie", RoutingReason.RECOVERY),
    )
    assert planned_attempts(three, policy, tried=("stripe", "sandbox", "mollie")) == ()
    assert (
        planned_attempts(decision("stripe", "sandbox", "mollie", "adyen"), policy, tried=("a", "b", "c"))
        == ()
    )


def test_a_session_never_gets_the_same_provider_twice() -> None:
    policy = RecoveryPolicy(max_attempts=5)
    providers = [
        attempt.provider for attempt in planned_attempts(decision("stripe", "sandbox", "stripe"), policy)
    ]
    assert providers == ["stripe", "sandbox"]


def test_attempts_skip_providers_not_eligible_or_unavailable() -> None:
    policy = RecoveryPolicy(max_attempts=3)
    found = planned_attempts(
        decision("stripe", "sandbox", "mollie", not_eligible=("adyen",)), policy, unavailable=("stripe",)
    )
    assert found == (
        PlannedAttempt("sandbox", RoutingReason.CASCADE),
        PlannedAttempt("mollie", RoutingReason.RECOVERY),
    )


def test_the_first_attempt_keeps_the_decisions_reason() -> None:
    policy = RecoveryPolicy(max_attempts=2)
    found = planned_attempts(decision("stripe", "sandbox", reason="exploration"), policy)
    assert [attempt.reason for attempt in found] == [RoutingReason.EXPLORATION, RoutingReason.RECOVERY]


def test_a_documents_recovery_is_parsed_and_written_back_whole() -> None:
    sent = {"recovery": {"maxAttempts": 3, "neverRetry": ["do_not_honor"]}}
    document = parse_routing_document(sent, KNOWN)
    assert document.recovery_policy == RecoveryPolicy(max_attempts=3, never_retry=("do_not_honor",))
    written = document_json(document)["recovery"]
    assert written == {
        "maxAttempts": 3,
        "retryOn": ["CARD_DECLINED", "INSUFFICIENT_FUNDS", "EXPIRED_OR_CANCELED_CARD", "PAYMENT_FAILED"],
        "neverRetry": ["do_not_honor"],
    }
    assert parse_routing_document(document_json(document), KNOWN) == document


def test_a_document_without_recovery_writes_none() -> None:
    assert "recovery" not in document_json(parse_routing_document({"objective": "net"}, KNOWN))


def test_stripes_codes_translate_as_stripes_events_translate_them() -> None:
    for code, entry in DECLINE_CODES["stripe"].items():
        intent = {"last_payment_error": {"decline_code": code}, "metadata": {}}
        event = stripe_events._payment_failed("evt_1", intent)
        assert event.reason is entry.reason, code


def test_mollies_codes_translate_as_mollies_events_and_way_back_translate_them() -> None:
    for code, entry in DECLINE_CODES["mollie"].items():
        payment = {"id": "tr_1", "status": "failed", "details": {"failureReason": code}}
        event = mollie_events.payment_outcome(payment)
        assert event is not None and event.reason is entry.reason, code
        assert mollie_events.payment_state(payment).decline_reason is entry.reason, code


def test_the_sandboxs_codes_are_every_failure_code_it_has_translated_as_its_adapter_does() -> None:
    codes = {simulator.CARD_DECLINED, simulator.INSUFFICIENT_FUNDS, simulator.LOST_OR_STOLEN_CARD}
    codes.add(simulator.PAYMENT_FAILED)
    assert set(DECLINE_CODES["sandbox"]) == codes
    for code, entry in DECLINE_CODES["sandbox"].items():
        assert sandbox_adapter._REASON_OF_CODE[code] is entry.reason
