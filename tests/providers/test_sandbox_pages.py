"""The sandbox's hosted checkout page, through payorch's app: what it shows, and each test input's outcome."""

from __future__ import annotations

from datetime import timedelta
from typing import Any, cast
from urllib.parse import urlsplit

import pytest

from payorch.config import ProviderSettings, SandboxSettings, Settings
from payorch.http.services import PayorchApp
from payorch.providers.base import Credentials
from payorch.providers.sandbox import SandboxProvider
from payorch.storage.database import Database
from tests.helpers import Client
from tests.providers.helpers import checkout_request, data_of, deliveries_of, events_of, new_checkout

DISPUTE_DELAY_MS = 750


@pytest.fixture
def settings(settings: Settings) -> Settings:
    """The test settings, with a dispute delay of its own: the app's sandbox must take it from here."""
    sandbox = SandboxSettings(dispute_delay_ms=DISPUTE_DELAY_MS)
    return settings.model_copy(update={"providers": ProviderSettings(sandbox=sandbox)})


@pytest.fixture
def provider(app: PayorchApp) -> SandboxProvider:
    """The sandbox as the app's catalogue has it (enabled by default)."""
    return cast(SandboxProvider, app.services.context.providers.get("sandbox"))


async def _checkout_path(provider: SandboxProvider, credentials: Credentials, **request: Any) -> str:
    _, checkout_id = await new_checkout(provider, credentials, **request)
    return f"/sandbox/checkout/{checkout_id}"


def _checkout_id(path: str) -> str:
    return path.rsplit("/", 1)[1]


async def _text(response: Any) -> str:
    return str(await response.get_data(as_text=True))


# The page


async def test_checkout_url_is_served_by_the_app(
    client: Client, provider: SandboxProvider, credentials: Credentials, settings: Settings
) -> None:
    created = await provider.create_checkout(credentials, checkout_request(), idempotency_key="k1")
    assert created.url.startswith(f"{settings.server.public_base_url}/sandbox/checkout/")
    assert (await client.get(urlsplit(created.url).path)).status_code == 200


async def test_the_checkout_page_cannot_be_framed_by_another_site(
    client: Client, provider: SandboxProvider, credentials: Credentials
) -> None:
    path = await _checkout_path(provider, credentials)
    for response in (
        await client.get(path),
        await client.post(path, form={"card_number": "4000000000000002"}),
    ):
        assert "frame-ancestors 'none'" in response.headers["Content-Security-Policy"]
        assert response.headers["X-Frame-Options"] == "DENY"


async def test_card_checkout_page_shows_amount_order_and_test_data(
    client: Client, provider: SandboxProvider, credentials: Credentials
) -> None:
    path = await _checkout_path(provider, credentials, amount="1234.50", order_reference="ORDER-<7>")
    response = await client.get(path)
    assert response.status_code == 200
    assert response.content_type == "text/html; charset=utf-8"
    page = await _text(response)
    assert "1,234.50 PLN" in page
    assert "ORDER-&lt;7&gt;" in page  # escaped, never raw HTML
    assert 'name="card_number"' in page
    assert "<script" not in page
    for value in ("4242424242424242", "4000000000000002", "4000000000009995", "4000000000005126"):
        assert value in page
    assert "4000000000000259" in page and "777123" in page


async def test_blik_checkout_page_asks_for_a_blik_code(
    client: Client, provider: SandboxProvider, credentials: Credentials
) -> None:
    path = await _checkout_path(provider, credentials, method="blik", amount="49.99")
    page = await _text(await client.get(path))
    assert "49.99 PLN" in page
    assert 'name="blik_code"' in page and 'name="card_number"' not in page
    assert "777123" in page


async def test_amount_is_shown_in_the_currency_s_own_decimals(
    client: Client, provider: SandboxProvider, credentials: Credentials
) -> None:
    path = await _checkout_path(provider, credentials, amount="5000", currency="JPY")
    assert "5,000 JPY" in await _text(await client.get(path))


async def test_unknown_checkout_is_a_404_page(client: Client) -> None:
    response = await client.get("/sandbox/checkout/cs_sbx_nonexistent")
    assert response.status_code == 404
    assert "No such checkout" in await _text(response)
    assert (
        await client.post("/sandbox/checkout/cs_sbx_nonexistent", form={"card_number": "1"})
    ).status_code == 404


# Outcomes of the test data


@pytest.mark.parametrize(
    ("method", "field", "entry", "status", "event_type", "failure_code"),
    [
        ("card", "card_number", "4242424242424242", 200, "checkout.paid", None),
        ("card", "card_number", "4000000000000002", 402, "checkout.payment_failed", "card_declined"),
        ("card", "card_number", "4000000000009995", 402, "checkout.payment_failed", "insufficient_funds"),
        ("card", "card_number", "4000000000005126", 200, "checkout.paid", None),
        ("card", "card_number", "4000000000000259", 200, "checkout.paid", None),
        ("card", "card_number", "4111111111111111", 402, "checkout.payment_failed", "card_declined"),
        ("apple_pay", "card_number", "4242424242424242", 200, "checkout.paid", None),
        ("blik", "blik_code", "777123", 200, "checkout.paid", None),
        ("blik", "blik_code", "123456", 402, "checkout.payment_failed", "payment_failed"),
    ],
)
async def test_each_test_input_gives_its_outcome_and_queues_its_event(
    client: Client,
    provider: SandboxProvider,
    credentials: Credentials,
    db: Database,
    method: str,
    field: str,
    entry: str,
    status: int,
    event_type: str,
    failure_code: str | None,
) -> None:
    path = await _checkout_path(provider, credentials, method=method)
    response = await client.post(path, form={field: entry})
    assert response.status_code == status
    checkout = await provider.checkout(_checkout_id(path))
    assert checkout is not None
    assert checkout.status == ("paid" if status == 200 else "open")
    first = (await events_of(db, checkout.id))[0]
    assert first.type == event_type
    data = data_of(first)
    assert data["checkout_id"] == checkout.id
    assert data["client_reference"] == checkout.client_reference
    assert data.get("failure_code") == failure_code


async def test_card_number_with_spaces_is_accepted(
    client: Client, provider: SandboxProvider, credentials: Credentials
) -> None:
    path = await _checkout_path(provider, credentials)
    response = await client.post(path, form={"card_number": " 4242 4242 4242 4242 "})
    assert response.status_code == 200
    assert "succeeded" in await _text(response)


async def test_declined_checkout_stays_open_for_another_try(
    client: Client, provider: SandboxProvider, credentials: Credentials, db: Database
) -> None:
    path = await _checkout_path(provider, credentials)
    declined = await client.post(path, form={"card_number": "4000000000000002"})
    assert declined.status_code == 402
    assert 'name="card_number"' in await _text(declined)  # the form again
    assert (await client.post(path, form={"card_number": "4242424242424242"})).status_code == 200
    types = [event.type for event in await events_of(db, _checkout_id(path))]
    assert types == ["checkout.payment_failed", "checkout.paid"]


async def test_paid_checkout_cannot_be_paid_again(
    client: Client, provider: SandboxProvider, credentials: Credentials, db: Database
) -> None:
    path = await _checkout_path(provider, credentials)
    assert (await client.post(path, form={"card_number": "4242424242424242"})).status_code == 200
    again = await client.post(path, form={"card_number": "4242424242424242"})
    assert again.status_code == 409
    assert "paid" in await _text(again)
    assert len(await events_of(db, _checkout_id(path))) == 1


async def test_paid_checkout_page_shows_it_is_paid_without_a_form(
    client: Client, provider: SandboxProvider, credentials: Credentials
) -> None:
    path = await _checkout_path(provider, credentials)
    await client.post(path, form={"card_number": "4242424242424242"})
    response = await client.get(path)
    assert response.status_code == 200
    assert "<form" not in await _text(response)


async def test_expired_checkout_cannot_be_paid(
    client: Client, provider: SandboxProvider, credentials: Credentials, db: Database
) -> None:
    path = await _checkout_path(provider, credentials, expires_in=timedelta(seconds=-1))
    assert (await client.get(path)).status_code == 410
    response = await client.post(path, form={"card_number": "4242424242424242"})
    assert response.status_code == 410
    assert "expired" in await _text(response)
    assert await events_of(db, _checkout_id(path)) == []


async def test_missing_card_number_is_a_400_page_with_the_form(
    client: Client, provider: SandboxProvider, credentials: Credentials, db: Database
) -> None:
    path = await _checkout_path(provider, credentials)
    response = await client.post(path, form={"card_number": "   "})
    assert response.status_code == 400
    assert 'name="card_number"' in await _text(response)
    assert await events_of(db, _checkout_id(path)) == []


# Redirects


# With the merchant's URLs given, the customer goes back through payorch's return route, which sends
# them on to those URLs (tests/providers/test_recovery_way_back.py, tests/http/test_checkout_flow.py).


async def test_success_redirects_303_to_payorchs_return_route(
    client: Client, provider: SandboxProvider, credentials: Credentials, settings: Settings
) -> None:
    made, checkout_id = await new_checkout(
        provider,
        credentials,
        success_url="https://shop.example/ok?o=1",
        failure_url="https://shop.example/ko",
    )
    response = await client.post(f"/sandbox/checkout/{checkout_id}", form={"card_number": "4242424242424242"})
    assert response.status_code == 303
    assert response.headers["Location"] == (
        f"{settings.server.public_base_url}/checkout/{made.session_id}/return?attempt=1"
    )


async def test_decline_redirects_303_to_payorchs_return_route(
    client: Client, provider: SandboxProvider, credentials: Credentials, settings: Settings
) -> None:
    made, checkout_id = await new_checkout(
        provider, credentials, success_url="https://shop.example/ok", failure_url="https://shop.example/ko"
    )
    response = await client.post(f"/sandbox/checkout/{checkout_id}", form={"card_number": "4000000000009995"})
    assert response.status_code == 303
    assert response.headers["Location"] == (
        f"{settings.server.public_base_url}/checkout/{made.session_id}/return?attempt=1"
    )


# Events that follow a payment


async def test_lost_dispute_is_due_dispute_delay_after_the_payment(
    client: Client, provider: SandboxProvider, credentials: Credentials, db: Database
) -> None:
    path = await _checkout_path(provider, credentials)
    await client.post(path, form={"card_number": "4000 0000 0000 0259"})
    checkout = await provider.checkout(_checkout_id(path))
    assert checkout is not None and checkout.paid_at is not None
    paid, dispute = await events_of(db, checkout.id)
    assert (paid.type, dispute.type) == ("checkout.paid", "dispute.lost")
    assert paid.deliver_at == checkout.paid_at
    assert dispute.deliver_at - checkout.paid_at == timedelta(milliseconds=DISPUTE_DELAY_MS)
    assert data_of(dispute)["dispute_id"].startswith("dp_sbx_")


async def test_an_event_is_queued_for_every_endpoint_of_the_account(
    client: Client, provider: SandboxProvider, credentials: Credentials, db: Database
) -> None:
    first = await provider.register_webhook(credentials, "http://payorch.test/a")
    second = await provider.register_webhook(credentials, "http://payorch.test/b")
    await provider.register_webhook(Credentials(api_key="sk_sandbox_someone_else"), "http://payorch.test/c")
    path = await _checkout_path(provider, credentials)
    await client.post(path, form={"card_number": "4242424242424242"})
    (event,) = await events_of(db, _checkout_id(path))
    deliveries = await deliveries_of(db, event.id)
    assert {delivery.endpoint_id for delivery in deliveries} == {first.reference, second.reference}
    # Still queued: the runtime's sandbox loop may already have made an attempt (the event is due at
    # once), but none of these addresses answers, so none is delivered, and none is given up so soon.
    assert all(delivery.delivered_at is None and delivery.given_up_at is None for delivery in deliveries)
