"""The Stripe adapter on its own: amounts and limits, expiry clamping, the translation of Stripe's
signed events, and how Stripe's errors become payorch's (against the fake Stripe, no database)."""

from __future__ import annotations

import json
import math
import time
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import stripe
import trio

from payorch.providers.base import (
    CheckoutClosed,
    CheckoutRequest,
    Credentials,
    CredentialsRejected,
    EventKind,
    EventRejected,
    Limits,
    ProviderError,
    RefundRefused,
    RefundRequest,
)
from payorch.providers.stripe import StripeProvider, StripeRefundRefused
from payorch.providers.stripe.adapter import checkout_expiry, checkout_locale
from payorch.providers.stripe.amounts import MINIMUM_CHARGE, stripe_exponent, to_stripe_amount
from payorch.providers.stripe.events import EVENTS_API_VERSION
from payorch.values.money import Money, currency_exponent
from tests import fake_stripe as stripe_fake
from tests.fake_stripe import FakeStripe, ScriptedFailure, signature_header

pytestmark = pytest.mark.filterwarnings("ignore:Use 'content=<...>':DeprecationWarning")

fake_stripe = stripe_fake.fake_stripe
KEY = Credentials(api_key="sk_test_51Adapter0123456789")
SECRET = "whsec_test_secret_for_parsing"


@pytest.fixture
async def provider(fake_stripe: FakeStripe) -> AsyncIterator[StripeProvider]:
    """The adapter against the fake, retrying once; its connection pool closed afterwards."""
    fake_stripe.accept_key(KEY.api_key)
    adapter = StripeProvider(
        public_base_url="http://payorch.test", api_base=fake_stripe.url, max_network_retries=1
    )
    async with trio.open_nursery() as nursery:
        nursery.start_soon(adapter.keep_connections_until_cancelled)
        yield adapter
        nursery.cancel_scope.cancel()


def _request(
    total_minor: int = 10_000, currency: str = "PLN", method: str = "card", **change: Any
) -> CheckoutRequest:
    fields: dict[str, Any] = {
        "session_id": uuid.uuid4(),
        "application_id": uuid.uuid4(),
        "amount": Money(total_minor, currency),
        "payment_method": method,
        "order_reference": "ORDER-42",
        "customer_email": "buyer@example.com",
        "locale": None,
        "expires_at": datetime.now(UTC) + timedelta(minutes=30),
        "requested_at": datetime.now(UTC),
        "success_url": None,
        "failure_url": None,
    }
    return CheckoutRequest(**(fields | change))


# --- Amounts and limits --------------------------------------------------------------------------------


def test_cards_take_stripes_minimum_up_to_eight_digits() -> None:
    adapter = StripeProvider(public_base_url="http://payorch.test")
    assert adapter.limits("USD", "card") == Limits(50, 99_999_999)
    assert adapter.limits("GBP", "apple_pay") == Limits(30, 99_999_999)
    assert adapter.limits("JPY", "card") == Limits(50, 99_999_999)
    assert adapter.limits("HUF", "card") == Limits(17_500, 99_999_999)


def test_blik_is_pln_only_from_two_zloty_to_fifty_thousand() -> None:
    adapter = StripeProvider(public_base_url="http://payorch.test")
    assert adapter.limits("PLN", "blik") == Limits(200, 5_000_000)
    assert adapter.limits("EUR", "blik") is None


def test_currencies_without_a_documented_minimum_and_unknown_methods_are_not_offered() -> None:
    adapter = StripeProvider(public_base_url="http://payorch.test")
    assert adapter.limits("KRW", "card") is None
    assert adapter.limits("KWD", "card") is None
    assert adapter.limits("USD", "paypal") is None


@pytest.mark.parametrize("currency", sorted(MINIMUM_CHARGE))
def test_every_offered_currency_has_the_same_minor_unit_at_stripe(currency: str) -> None:
    assert stripe_exponent(currency) == currency_exponent(currency)
    assert to_stripe_amount(Money(12_345, currency)) == 12_345


def test_stripe_amounts_follow_stripes_special_cases() -> None:
    assert to_stripe_amount(Money(500, "JPY")) == 500  # zero-decimal
    assert to_stripe_amount(Money(5, "ISK")) == 500  # two decimals at Stripe, whole krónur
    assert to_stripe_amount(Money(1_200, "MGA")) == 12  # zero-decimal at Stripe, two in ISO 4217
    with pytest.raises(ProviderError):
        to_stripe_amount(Money(1_250, "MGA"))


# --- Checkout parameters ----------------------------------------------------------------------------


def test_expiry_within_stripes_range_is_kept() -> None:
    now = time.time()
    wanted = datetime.fromtimestamp(now + 3 * 3600, UTC)
    assert checkout_expiry(wanted, now) == math.ceil(wanted.timestamp())


def test_expiry_sooner_than_30_minutes_is_clamped_up_to_31() -> None:
    now = time.time()
    assert checkout_expiry(datetime.fromtimestamp(now + 60, UTC), now) - now == pytest.approx(31 * 60, abs=1)


def test_expiry_later_than_24_hours_is_clamped_down() -> None:
    now = time.time()
    later = datetime.fromtimestamp(now + 48 * 3600, UTC)
    assert checkout_expiry(later, now) - now == pytest.approx(24 * 3600 - 60, abs=1)


@pytest.mark.parametrize(
    ("locale", "expected"),
    [("pl_PL", "pl"), ("pt_BR", "pt-BR"), ("en_GB", "en-GB"), ("en_US", "en"), ("xx_YY", None), (None, None)],
)
def test_locale_maps_to_checkouts_languages(locale: str | None, expected: str | None) -> None:
    assert checkout_locale(locale) == expected


def test_events_are_registered_in_the_sdks_api_version() -> None:
    assert stripe.api_version == EVENTS_API_VERSION


async def test_without_redirect_urls_stripe_sends_the_customer_back_through_payorch(
    provider: StripeProvider, fake_stripe: FakeStripe
) -> None:
    request = _request()
    await provider.create_checkout(KEY, request, idempotency_key="k")
    sent = fake_stripe.only("POST", "/v1/checkout/sessions")
    back = f"http://payorch.test/checkout/{request.session_id}/return?attempt=1"
    assert (sent.form["success_url"], sent.form["cancel_url"]) == (back, back)
    assert "locale" not in sent.form


async def test_the_same_idempotency_key_gives_the_same_checkout(
    provider: StripeProvider, fake_stripe: FakeStripe
) -> None:
    request = _request()
    first = await provider.create_checkout(KEY, request, idempotency_key="payorch-session-1")
    again = await provider.create_checkout(KEY, request, idempotency_key="payorch-session-1")
    assert first == again
    assert fake_stripe.requests[-1].status == 200


async def test_an_amount_out_of_limits_is_refused_without_asking_stripe(
    provider: StripeProvider, fake_stripe: FakeStripe
) -> None:
    with pytest.raises(ProviderError):
        await provider.create_checkout(KEY, _request(199, method="blik"), idempotency_key="k")
    assert fake_stripe.requests == []


# --- Errors ------------------------------------------------------------------------------------------


async def test_a_restricted_key_without_permission_is_rejected(
    provider: StripeProvider, fake_stripe: FakeStripe
) -> None:
    forbidden = {
        "error": {"type": "invalid_request_error", "message": "The provided key does not have access"}
    }
    fake_stripe.fail_next("GET", "/v1/balance", ScriptedFailure(403, body=forbidden))
    with pytest.raises(CredentialsRejected, match="403"):
        await provider.validate_credentials(Credentials("rk_test_restricted0123"))


async def test_stripe_failing_while_checking_a_key_is_a_provider_error(
    provider: StripeProvider, fake_stripe: FakeStripe
) -> None:
    fake_stripe.fail_next("GET", "/v1/balance", 503, 503)
    with pytest.raises(ProviderError):
        await provider.validate_credentials(KEY)


async def test_rate_limiting_that_persists_is_a_provider_error_after_the_retries(
    provider: StripeProvider, fake_stripe: FakeStripe
) -> None:
    limited = {
        "error": {"type": "invalid_request_error", "code": "rate_limit", "message": "Too many requests"}
    }
    fake_stripe.fail_next("POST", "/v1/checkout/sessions", *[ScriptedFailure(429, body=limited)] * 2)
    with pytest.raises(ProviderError) as raised:
        await provider.create_checkout(KEY, _request(), idempotency_key="k")
    assert not isinstance(raised.value, RefundRefused)
    assert [r.status for r in fake_stripe.requests] == [429, 429]


@pytest.mark.parametrize(
    ("failure", "provider_wide"), [(500, True), (503, True), (400, False), (404, False), (429, False)]
)
async def test_only_stripe_failing_is_a_provider_wide_error(
    provider: StripeProvider, fake_stripe: FakeStripe, failure: int, provider_wide: bool
) -> None:
    fake_stripe.fail_next("POST", "/v1/checkout/sessions", failure, failure)  # the retry too
    with pytest.raises(ProviderError) as raised:
        await provider.create_checkout(KEY, _request(), idempotency_key="k")
    assert raised.value.provider_wide is provider_wide


async def test_a_key_stripe_stopped_accepting_is_an_account_error(
    provider: StripeProvider, fake_stripe: FakeStripe
) -> None:
    fake_stripe.revoke_key(KEY.api_key)
    with pytest.raises(ProviderError, match="rejected the stored key") as raised:
        await provider.create_checkout(KEY, _request(), idempotency_key="k")
    assert not raised.value.provider_wide


async def test_stripe_unreachable_is_a_provider_wide_error() -> None:
    unreachable = StripeProvider(
        public_base_url="http://payorch.test", api_base="http://127.0.0.1:9", max_network_retries=0
    )
    async with trio.open_nursery() as nursery:
        nursery.start_soon(unreachable.keep_connections_until_cancelled)
        with pytest.raises(ProviderError) as raised:
            await unreachable.create_checkout(KEY, _request(), idempotency_key="k")
        nursery.cancel_scope.cancel()
    assert raised.value.provider_wide


async def test_an_amount_stripe_cannot_take_is_an_account_error(provider: StripeProvider) -> None:
    with pytest.raises(ProviderError) as raised:
        await provider.create_checkout(KEY, _request(199, method="blik"), idempotency_key="k")
    assert not raised.value.provider_wide


async def _paid_checkout(provider: StripeProvider, fake: FakeStripe) -> tuple[CheckoutRequest, str]:
    request = _request()
    created = await provider.create_checkout(KEY, request, idempotency_key=f"k-{request.session_id}")
    fake.pay(created.reference)
    return request, created.reference


def _refund_request(checkout: CheckoutRequest, reference: str, minor: int = 1_000) -> RefundRequest:
    return RefundRequest(uuid.uuid4(), checkout.session_id, reference, Money(minor, "PLN"), None)


async def test_a_refund_beyond_what_is_left_is_refused_for_good(
    provider: StripeProvider, fake_stripe: FakeStripe
) -> None:
    checkout, reference = await _paid_checkout(provider, fake_stripe)
    with pytest.raises(StripeRefundRefused, match="amount_too_large"):
        await provider.submit_refund(KEY, _refund_request(checkout, reference, 10_001), idempotency_key="r")


async def test_a_refund_of_an_unknown_or_unpaid_checkout_is_refused_for_good(
    provider: StripeProvider, fake_stripe: FakeStripe
) -> None:
    unpaid = await provider.create_checkout(KEY, _request(), idempotency_key="unpaid")
    for reference in ("cs_test_unknown", unpaid.reference):
        with pytest.raises(StripeRefundRefused):
            await provider.submit_refund(
                KEY, _refund_request(_request(), reference), idempotency_key=reference
            )


async def test_a_refund_with_a_rejected_key_or_a_failing_stripe_is_retried_later(
    provider: StripeProvider, fake_stripe: FakeStripe
) -> None:
    checkout, reference = await _paid_checkout(provider, fake_stripe)
    refund = _refund_request(checkout, reference)
    with pytest.raises(ProviderError) as rejected:
        await provider.submit_refund(Credentials("sk_test_rolled_key_000"), refund, idempotency_key="r")
    fake_stripe.fail_next("POST", "/v1/refunds", 500, 500)
    with pytest.raises(ProviderError) as failing:
        await provider.submit_refund(KEY, refund, idempotency_key="r")
    for raised in (rejected, failing):
        assert not isinstance(raised.value, RefundRefused)
    submitted = await provider.submit_refund(KEY, refund, idempotency_key="r")
    assert submitted.reference.startswith("re_")


async def test_a_refund_retried_with_its_key_refunds_once(
    provider: StripeProvider, fake_stripe: FakeStripe
) -> None:
    checkout, reference = await _paid_checkout(provider, fake_stripe)
    refund = _refund_request(checkout, reference)
    first = await provider.submit_refund(KEY, refund, idempotency_key="payorch-refund-1")
    again = await provider.submit_refund(KEY, refund, idempotency_key="payorch-refund-1")
    assert first == again
    assert fake_stripe.requests_to("POST", "/v1/refunds")[-1].answer["id"] == first.reference


# --- Closing a checkout, resolving a dispute --------------------------------------------------------


async def test_closing_an_open_checkout_expires_it_at_stripe(
    provider: StripeProvider, fake_stripe: FakeStripe
) -> None:
    created = await provider.create_checkout(KEY, _request(), idempotency_key="open")
    assert await provider.close_checkout(KEY, created.reference) is CheckoutClosed.CLOSED
    assert fake_stripe.checkout(created.reference)["status"] == "expired"
    assert fake_stripe.events[-1]["type"] == "checkout.session.expired"
    assert await provider.close_checkout(KEY, created.reference) is CheckoutClosed.CLOSED


async def test_closing_a_checkout_the_customer_paid_says_paid(
    provider: StripeProvider, fake_stripe: FakeStripe
) -> None:
    _, reference = await _paid_checkout(provider, fake_stripe)
    assert await provider.close_checkout(KEY, reference) is CheckoutClosed.PAID
    assert fake_stripe.checkout(reference)["status"] == "complete"


async def test_closing_fails_as_a_provider_error_while_stripe_fails_or_knows_no_such_checkout(
    provider: StripeProvider, fake_stripe: FakeStripe
) -> None:
    created = await provider.create_checkout(KEY, _request(), idempotency_key="failing")
    fake_stripe.fail_next("POST", f"/v1/checkout/sessions/{created.reference}/expire", 500, 500)
    with pytest.raises(ProviderError):
        await provider.close_checkout(KEY, created.reference)
    assert fake_stripe.checkout(created.reference)["status"] == "open"
    with pytest.raises(ProviderError):
        await provider.close_checkout(KEY, "cs_test_unknown")


async def test_a_lost_dispute_is_resolved_to_its_session_through_the_payment_intent(
    provider: StripeProvider, fake_stripe: FakeStripe
) -> None:
    checkout, reference = await _paid_checkout(provider, fake_stripe)
    intent = fake_stripe.checkout(reference)["payment_intent"]
    event = _parse("charge.dispute.closed", {"id": "dp_1", "status": "lost", "payment_intent": intent})
    (resolved,) = await provider.resolve_event(KEY, event)
    assert (resolved.kind, resolved.session_id) == (EventKind.DISPUTE_LOST, checkout.session_id)
    assert len(fake_stripe.requests_to("GET", f"/v1/payment_intents/{intent}")) == 1


async def test_resolving_leaves_events_that_need_no_lookup_or_name_a_payment_stripe_does_not_know(
    provider: StripeProvider, fake_stripe: FakeStripe
) -> None:
    tagged = _parse("checkout.session.completed", {"id": "cs_1", "client_reference_id": str(SESSION)})
    unknown = _parse("charge.dispute.closed", {"id": "dp_1", "status": "lost", "payment_intent": "pi_x"})
    assert await provider.resolve_event(KEY, tagged) == [tagged]
    assert await provider.resolve_event(KEY, unknown) == [unknown]
    assert [r.path for r in fake_stripe.requests] == ["/v1/payment_intents/pi_x"]


async def test_charge_refunded_becomes_the_outcomes_of_the_payments_settled_refunds(
    provider: StripeProvider, fake_stripe: FakeStripe
) -> None:
    checkout, reference = await _paid_checkout(provider, fake_stripe)
    intent = fake_stripe.checkout(reference)["payment_intent"]
    settled, failed, pending = (_refund_request(checkout, reference, 100) for _ in range(3))
    for refund in (settled, failed, pending):
        await provider.submit_refund(KEY, refund, idempotency_key=str(refund.refund_id))
    settled_id, failed_id, _ = [r.answer["id"] for r in fake_stripe.requests_to("POST", "/v1/refunds")]
    fake_stripe.settle_refund(settled_id)
    fake_stripe.settle_refund(failed_id, "failed", "expired_or_canceled_card")
    event = _parse("charge.refunded", {"id": "ch_1", "object": "charge", "payment_intent": intent})
    assert (event.kind, event.payment_reference) == (EventKind.REFUNDS_CHANGED, intent)
    outcomes = sorted(await provider.resolve_event(KEY, event), key=lambda o: o.kind.value)
    assert [(o.id, o.kind, o.refund_id, o.session_id, o.reason) for o in outcomes] == [
        (
            f"{event.id}/{failed_id}",
            EventKind.REFUND_FAILED,
            failed.refund_id,
            checkout.session_id,
            "EXPIRED_OR_CANCELED_CARD",
        ),
        (
            f"{event.id}/{settled_id}",
            EventKind.REFUND_SUCCEEDED,
            settled.refund_id,
            checkout.session_id,
            None,
        ),
    ]
    sent = fake_stripe.only("GET", "/v1/refunds")
    assert sent.query == {"payment_intent": intent, "limit": "100"}


async def test_resolving_fails_as_a_provider_error_while_stripe_fails(
    provider: StripeProvider, fake_stripe: FakeStripe
) -> None:
    fake_stripe.fail_next("GET", "/v1/payment_intents/pi_1", 500, 500)
    event = _parse("charge.dispute.closed", {"id": "dp_1", "status": "lost", "payment_intent": "pi_1"})
    with pytest.raises(ProviderError):
        await provider.resolve_event(KEY, event)


async def test_registering_survives_a_failure_to_delete_an_older_endpoint(
    provider: StripeProvider, fake_stripe: FakeStripe
) -> None:
    url = "http://payorch.test/api/v1/provider-events/stripe/app"
    await provider.register_webhook(KEY, url)
    fake_stripe.fail_next("DELETE", "/v1/webhook_endpoints/", 500, 500)
    registration = await provider.register_webhook(KEY, url)
    assert registration.secret.startswith("whsec_")
    assert [e["id"] for e in fake_stripe.endpoints(KEY.api_key)][-1] == registration.reference


# --- Events ------------------------------------------------------------------------------------------


def _signed(event_type: str, found: dict[str, Any], secret: str = SECRET) -> tuple[dict[str, str], bytes]:
    body = json.dumps(
        {"id": f"evt_{uuid.uuid4().hex}", "object": "event", "type": event_type, "data": {"object": found}}
    )
    return {"stripe-signature": signature_header(secret, body.encode(), int(time.time()))}, body.encode()


def _parse(event_type: str, found: dict[str, Any]) -> Any:
    headers, body = _signed(event_type, found)
    return StripeProvider(public_base_url="http://payorch.test").parse_event(headers, body, SECRET)


SESSION = uuid.uuid4()
REFUND = uuid.uuid4()


def test_a_paid_checkout_is_a_payment_success_for_its_client_reference() -> None:
    event = _parse(
        "checkout.session.completed",
        {"id": "cs_1", "client_reference_id": str(SESSION), "payment_status": "paid"},
    )
    assert (event.kind, event.session_id, event.checkout_reference) == (
        EventKind.PAYMENT_SUCCEEDED,
        SESSION,
        "cs_1",
    )


def test_the_session_comes_from_metadata_without_a_client_reference() -> None:
    found = {"id": "cs_1", "payment_status": "paid", "metadata": {"payorch_session_id": str(SESSION)}}
    assert _parse("checkout.session.async_payment_succeeded", found).session_id == SESSION


def test_a_completed_checkout_still_unpaid_waits_for_its_async_outcome() -> None:
    found = {"id": "cs_1", "client_reference_id": str(SESSION), "payment_status": "unpaid"}
    assert _parse("checkout.session.completed", found).kind is EventKind.IGNORED


@pytest.mark.parametrize(
    ("event_type", "kind", "reason"),
    [
        ("checkout.session.async_payment_succeeded", EventKind.PAYMENT_SUCCEEDED, None),
        ("checkout.session.async_payment_failed", EventKind.PAYMENT_DECLINED, "PAYMENT_FAILED"),
        ("checkout.session.expired", EventKind.CHECKOUT_EXPIRED, None),
    ],
)
def test_checkout_outcomes(event_type: str, kind: EventKind, reason: str | None) -> None:
    event = _parse(event_type, {"id": "cs_1", "client_reference_id": str(SESSION)})
    assert (event.kind, event.session_id, event.reason) == (kind, SESSION, reason)


def test_a_declined_attempt_carries_the_decline_reason() -> None:
    found = {
        "id": "pi_1",
        "metadata": {"payorch_session_id": str(SESSION)},
        "last_payment_error": {"code": "card_declined", "decline_code": "insufficient_funds"},
    }
    event = _parse("payment_intent.payment_failed", found)
    assert (event.kind, event.session_id, event.reason) == (
        EventKind.PAYMENT_DECLINED,
        SESSION,
        "INSUFFICIENT_FUNDS",
    )


@pytest.mark.parametrize(
    ("status", "failure_reason", "kind", "reason"),
    [
        ("succeeded", None, EventKind.REFUND_SUCCEEDED, None),
        ("failed", "lost_or_stolen_card", EventKind.REFUND_FAILED, "LOST_OR_STOLEN_CARD"),
        ("failed", "expired_or_canceled_card", EventKind.REFUND_FAILED, "EXPIRED_OR_CANCELED_CARD"),
        ("failed", "unknown", EventKind.REFUND_FAILED, "PAYMENT_FAILED"),
        ("canceled", None, EventKind.REFUND_FAILED, "PAYMENT_FAILED"),
        ("pending", None, EventKind.IGNORED, None),
        ("requires_action", None, EventKind.IGNORED, None),
    ],
)
def test_refund_outcomes(
    status: str, failure_reason: str | None, kind: EventKind, reason: str | None
) -> None:
    found = {
        "id": "re_1",
        "status": status,
        "failure_reason": failure_reason,
        "metadata": {"payorch_refund_id": str(REFUND), "payorch_session_id": str(SESSION)},
    }
    for event_type in ("refund.created", "refund.updated", "refund.failed"):
        event = _parse(event_type, found)
        assert (event.kind, event.reason) == (kind, reason)
        if kind is not EventKind.IGNORED:
            assert (event.refund_id, event.session_id) == (REFUND, SESSION)


def test_a_lost_dispute_names_its_payment_intent_for_resolving_later() -> None:
    bare = _parse(
        "charge.dispute.closed", {"id": "dp_1", "status": "lost", "payment_intent": "pi_1", "metadata": {}}
    )
    assert (bare.kind, bare.session_id, bare.payment_reference) == (EventKind.DISPUTE_LOST, None, "pi_1")
    tagged = {"id": "dp_1", "status": "lost", "metadata": {"payorch_session_id": str(SESSION)}}
    assert _parse("charge.dispute.closed", tagged).session_id == SESSION
    assert _parse("charge.dispute.closed", {"id": "dp_1", "status": "won"}).kind is EventKind.IGNORED


def test_events_of_other_integrations_on_the_account_carry_no_payorch_ids() -> None:
    event = _parse(
        "checkout.session.completed",
        {"id": "cs_1", "client_reference_id": "cart-42", "payment_status": "paid"},
    )
    assert (event.kind, event.session_id) == (EventKind.PAYMENT_SUCCEEDED, None)
    assert _parse("customer.created", {"id": "cus_1"}).kind is EventKind.IGNORED


@pytest.mark.parametrize(
    "tamper",
    ["no header", "wrong secret", "stale", "changed body", "not utf-8"],
)
def test_events_that_are_not_authentic_are_rejected(tamper: str) -> None:
    adapter = StripeProvider(public_base_url="http://payorch.test")
    headers, body = _signed("checkout.session.completed", {"id": "cs_1"})
    if tamper == "no header":
        headers = {}
    elif tamper == "wrong secret":
        headers, body = _signed("checkout.session.completed", {"id": "cs_1"}, secret="whsec_other")
    elif tamper == "stale":
        headers = {"Stripe-Signature": signature_header(SECRET, body, int(time.time()) - 301)}
    elif tamper == "changed body":
        body = body.replace(b"cs_1", b"cs_2")
    else:
        body = b"\xff" + body
        headers = {"Stripe-Signature": signature_header(SECRET, body, int(time.time()))}
    with pytest.raises(EventRejected):
        adapter.parse_event(headers, body, SECRET)


def test_a_signed_body_that_is_not_an_event_is_rejected() -> None:
    body = b'{"hello": "world"}'
    headers = {"Stripe-Signature": signature_header(SECRET, body, int(time.time()))}
    with pytest.raises(EventRejected, match="not a Stripe event"):
        StripeProvider(public_base_url="http://payorch.test").parse_event(headers, body, SECRET)


@pytest.mark.parametrize(
    "header", [f"t={'9' * 400},v1=00", f"t={'9' * 5000},v1=00", "t=\u00b2,v1=00", "t", ",,,", "v1=00"]
)
def test_a_stripe_signature_header_that_does_not_parse_is_rejected(header: str) -> None:
    _, body = _signed("checkout.session.completed", {"id": "cs_1"})
    with pytest.raises(EventRejected):
        StripeProvider(public_base_url="http://payorch.test").parse_event(
            {"Stripe-Signature": header}, body, SECRET
        )
