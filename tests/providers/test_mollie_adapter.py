"""The Mollie adapter on its own against the fake Mollie: idempotent creation, Mollie's error shape,
the webhook body, a failed card payment's reason (its event and the way back alike), what may
still be paid, and amounts as Mollie writes them."""

from __future__ import annotations

from decimal import Decimal

import httpx
import pytest
import trio

from payorch.engine.routing.recovery import RecoveryPolicy, RetryVerdict, retry_verdict
from payorch.providers.base import CheckoutState, Credentials, EventKind, EventRejected, ProviderError
from payorch.providers.mollie import MollieProvider
from payorch.providers.mollie.amounts import mollie_limits, to_mollie_amount
from payorch.providers.mollie.events import payment_state
from payorch.values.money import Money
from payorch.values.statuses import FailureReason
from tests import fake_mollie as mollie_fake
from tests.fake_mollie import FakeMollie, ScriptedFailure
from tests.providers.helpers import checkout_request
from tests.providers.mollie_support import MOLLIE_KEY, PUBLIC_BASE_URL

fake_mollie = mollie_fake.fake_mollie


@pytest.fixture
def mollie(fake_mollie: FakeMollie) -> MollieProvider:
    fake_mollie.accept_key(MOLLIE_KEY)
    return MollieProvider(public_base_url=PUBLIC_BASE_URL, api_base=fake_mollie.url, timeout_s=5)


async def test_creating_twice_with_one_key_makes_one_payment_the_second_answer_replayed(
    mollie: MollieProvider, fake_mollie: FakeMollie
) -> None:
    request = checkout_request()
    first = await mollie.create_checkout(
        Credentials(MOLLIE_KEY), request, idempotency_key="payorch-session-1"
    )
    again = await mollie.create_checkout(
        Credentials(MOLLIE_KEY), request, idempotency_key="payorch-session-1"
    )
    assert first == again
    sent = fake_mollie.requests_to("POST", "/v2/payments")
    assert [r.headers["idempotency-key"] for r in sent] == ["payorch-session-1"] * 2
    assert (sent[1].status, sent[1].answer) == (201, sent[0].answer)  # replayed: the same payment


async def test_a_call_cut_off_by_payorchs_deadline_returns_at_once(
    mollie: MollieProvider, fake_mollie: FakeMollie
) -> None:
    fake_mollie.fail_next("POST", "/v2/payments", ScriptedFailure(status=None, delay_s=3))
    with trio.move_on_after(0.5) as scope:
        await mollie.create_checkout(Credentials(MOLLIE_KEY), checkout_request(), idempotency_key="k")
    assert scope.cancelled_caught


@pytest.mark.parametrize(
    ("failure", "provider_wide"),
    [(500, True), (503, True), (400, False), (422, False), (429, False), (401, False)],
)
async def test_only_mollie_failing_is_a_provider_wide_error(
    mollie: MollieProvider, fake_mollie: FakeMollie, failure: int, provider_wide: bool
) -> None:
    fake_mollie.fail_next("POST", "/v2/payments", failure)
    with pytest.raises(ProviderError) as raised:
        await mollie.create_checkout(Credentials(MOLLIE_KEY), checkout_request(), idempotency_key="k")
    assert raised.value.provider_wide is provider_wide


async def test_mollie_unreachable_is_a_provider_wide_error() -> None:
    unreachable = MollieProvider(public_base_url=PUBLIC_BASE_URL, api_base="http://127.0.0.1:9", timeout_s=5)
    with pytest.raises(ProviderError) as raised:
        await unreachable.create_checkout(Credentials(MOLLIE_KEY), checkout_request(), idempotency_key="k")
    assert raised.value.provider_wide


async def test_a_payment_mollie_will_not_cancel_is_an_account_error(
    mollie: MollieProvider, fake_mollie: FakeMollie
) -> None:
    created = await mollie.create_checkout(Credentials(MOLLIE_KEY), checkout_request(), idempotency_key="k")
    fake_mollie.make_uncancelable(created.reference)
    with pytest.raises(ProviderError) as raised:
        await mollie.close_checkout(Credentials(MOLLIE_KEY), created.reference)
    assert not raised.value.provider_wide


async def test_mollies_errors_are_hal_json_with_status_title_and_detail(fake_mollie: FakeMollie) -> None:
    async with httpx.AsyncClient() as client:
        answer = await client.get(
            f"{fake_mollie.url}/v2/payments", headers={"Authorization": "Bearer test_nobody"}
        )
    assert (answer.status_code, answer.headers["content-type"]) == (401, "application/hal+json")
    body = answer.json()
    assert (body["status"], body["title"]) == (401, "Unauthorized Request")
    assert body["detail"] and body["_links"]["documentation"]["type"] == "text/html"


async def _failed_as(
    mollie: MollieProvider, fake: FakeMollie, failure_reason: str
) -> tuple[FailureReason | None, CheckoutState]:
    """A card payment failed at Mollie with `failure_reason`: the reason its webhook's event carries,
    and its state on the way back."""
    created = await mollie.create_checkout(Credentials(MOLLIE_KEY), checkout_request(), idempotency_key="k")
    fake.fail(created.reference, failure_reason=failure_reason)
    webhook = mollie.parse_event({}, f"id={created.reference}".encode(), "")
    (event,) = await mollie.resolve_event(Credentials(MOLLIE_KEY), webhook)
    assert event.kind is EventKind.PAYMENT_DECLINED
    return event.reason, await mollie.checkout_state(Credentials(MOLLIE_KEY), created.reference)


async def test_insufficient_funds_at_mollie_is_insufficient_funds_and_is_retried(
    mollie: MollieProvider, fake_mollie: FakeMollie
) -> None:
    reason, state = await _failed_as(mollie, fake_mollie, "insufficient_funds")
    assert reason is state.decline_reason is FailureReason.INSUFFICIENT_FUNDS
    assert state.decline_code == "insufficient_funds"
    policy = RecoveryPolicy(max_attempts=2, retry_on=(FailureReason.INSUFFICIENT_FUNDS,))
    assert retry_verdict(policy, 1, reason, "mollie", state.decline_code) is RetryVerdict.RETRY


async def test_possible_fraud_at_mollie_is_never_retried(
    mollie: MollieProvider, fake_mollie: FakeMollie
) -> None:
    reason, state = await _failed_as(mollie, fake_mollie, "possible_fraud")
    assert reason is state.decline_reason is FailureReason.PAYMENT_FAILED
    assert state.decline_code == "possible_fraud"
    policy = RecoveryPolicy(max_attempts=5, retry_on=tuple(FailureReason))
    assert retry_verdict(policy, 1, reason, "mollie", state.decline_code) is RetryVerdict.HARD_DECLINE


@pytest.mark.parametrize("status", ["open", "pending", "authorized"])
def test_a_payment_mollie_may_still_complete_is_processing_on_the_way_back(status: str) -> None:
    assert payment_state({"id": "tr_1", "status": status}) == CheckoutState(paid=False, processing=True)


def test_the_webhook_names_a_payment_and_nothing_else_is_trusted() -> None:
    mollie = MollieProvider(public_base_url=PUBLIC_BASE_URL)
    event = mollie.parse_event({}, b"id=tr_WDqYK6vllg", "")
    assert (event.kind, event.payment_reference) == (EventKind.PROVIDER_OBJECT_CHANGED, "tr_WDqYK6vllg")
    assert mollie.parse_event({}, b"id=ord_1", "").kind is EventKind.IGNORED
    for body in (b"", b'{"id": "tr_1"}', b"id=tr_1&id=tr_2"):
        with pytest.raises(EventRejected):
            mollie.parse_event({}, body, "")


@pytest.mark.parametrize(
    ("amount", "currency", "value"),
    [("100.00", "PLN", "100.00"), ("0.01", "EUR", "0.01"), ("5000", "JPY", "5000"), ("12", "ISK", "12")],
)
def test_amounts_are_written_with_exactly_the_currencys_decimals(
    amount: str, currency: str, value: str
) -> None:
    assert to_mollie_amount(Money.from_major(Decimal(amount), currency)) == {
        "currency": currency,
        "value": value,
    }


def test_blik_is_pln_only_and_cards_take_mollies_currencies() -> None:
    assert mollie_limits("EUR", "blik") is None
    assert mollie_limits("PLN", "blik") is not None
    assert mollie_limits("KWD", "card") is None
    assert mollie_limits("USD", "apple_pay") is not None
