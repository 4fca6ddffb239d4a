"""The fake Stripe itself (tests/fake_stripe.py): it must hold payorch to Stripe's documented rules, so
these check it with plain HTTP requests, not through payorch's adapter."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from tests.fake_stripe import FakeStripe, open_fake_stripe, parse_form

KEY = "sk_test_fake_0123456789"
NOW = int(time.time())  # Stripe's clock, stopped here for these tests: each answer is known to the second


@pytest.fixture
async def fake_stripe() -> AsyncIterator[FakeStripe]:
    """A running fake Stripe whose clock stands still at NOW."""
    async with open_fake_stripe(clock=lambda: NOW) as fake:
        yield fake


def _checkout_form(**change: str) -> dict[str, str]:
    form = {
        "mode": "payment",
        "line_items[0][quantity]": "1",
        "line_items[0][price_data][currency]": "pln",
        "line_items[0][price_data][unit_amount]": "1000",
        "line_items[0][price_data][product_data][name]": "Order 1",
        "success_url": "https://shop.example/ok",
        "expires_at": str(NOW + 3600),
    }
    return form | change


async def _post(
    fake: FakeStripe, path: str, form: dict[str, str], key: str = KEY, **headers: str
) -> httpx.Response:
    async with httpx.AsyncClient(base_url=fake.url) as client:
        return await client.post(path, data=form, headers={"Authorization": f"Bearer {key}", **headers})


def test_nested_form_keys_become_objects_and_lists() -> None:
    parsed: dict[str, Any] = parse_form(
        "a[b][0][c]=1&a[b][1][c]=2&metadata[k]=v&events[0]=x&events[1]=y&plain=%5Bz%5D"
    )
    assert parsed == {
        "a": {"b": [{"c": "1"}, {"c": "2"}]},
        "metadata": {"k": "v"},
        "events": ["x", "y"],
        "plain": "[z]",
    }


async def test_an_unknown_key_is_401_in_stripes_error_shape(fake_stripe: FakeStripe) -> None:
    response = await _post(fake_stripe, "/v1/checkout/sessions", _checkout_form(), key="sk_test_nobody_1234")
    assert response.status_code == 401
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["message"].startswith("Invalid API Key provided: sk_test_****1234")


async def test_the_same_idempotency_key_replays_and_other_parameters_are_an_idempotency_error(
    fake_stripe: FakeStripe,
) -> None:
    fake_stripe.accept_key(KEY)
    form = _checkout_form()
    first = await _post(fake_stripe, "/v1/checkout/sessions", form, **{"Idempotency-Key": "k"})
    replay = await _post(fake_stripe, "/v1/checkout/sessions", form, **{"Idempotency-Key": "k"})
    other = await _post(
        fake_stripe, "/v1/checkout/sessions", form | {"mode": "setup"}, **{"Idempotency-Key": "k"}
    )
    assert first.status_code == replay.status_code == 200
    assert replay.content == first.content
    assert replay.headers["Idempotent-Replayed"] == "true"
    assert "Idempotent-Replayed" not in first.headers
    assert (first.json()["created"], first.json()["expires_at"]) == (NOW, NOW + 3600)
    assert first.json()["object"] == "checkout.session" and first.json()["id"].startswith("cs_test_")
    assert (other.status_code, other.json()["error"]["type"]) == (400, "idempotency_error")


async def test_checkout_refuses_what_stripe_refuses(fake_stripe: FakeStripe) -> None:
    fake_stripe.accept_key(KEY)
    without_success_url = {k: v for k, v in _checkout_form().items() if k != "success_url"}
    cases = {
        "payment_method_types": _checkout_form(**{"payment_method_types[0]": "card"}),
        "success_url": without_success_url,
        "expires_at": _checkout_form(expires_at=str(NOW + 30 * 60 - 1)),
    }
    for param, form in cases.items():
        response = await _post(fake_stripe, "/v1/checkout/sessions", form)
        assert response.status_code == 400, param
        assert response.json()["error"]["param"] == param


async def test_a_replay_is_the_first_answer_even_after_the_object_changed(fake_stripe: FakeStripe) -> None:
    fake_stripe.accept_key(KEY)
    checkout = (await _post(fake_stripe, "/v1/checkout/sessions", _checkout_form())).json()
    intent = fake_stripe.pay(checkout["id"])["data"]["object"]["payment_intent"]
    form = {"payment_intent": intent, "amount": "400"}
    first = await _post(fake_stripe, "/v1/refunds", form, **{"Idempotency-Key": "refund-1"})
    fake_stripe.settle_refund(first.json()["id"])
    replay = await _post(fake_stripe, "/v1/refunds", form, **{"Idempotency-Key": "refund-1"})
    assert (first.status_code, first.json()["status"]) == (200, "pending")
    assert (replay.status_code, replay.content) == (200, first.content)
    assert replay.headers["Idempotent-Replayed"] == "true"
    async with httpx.AsyncClient(base_url=fake_stripe.url) as client:
        listed = await client.get(
            "/v1/refunds", params={"payment_intent": intent}, headers={"Authorization": f"Bearer {KEY}"}
        )
    assert [refund["status"] for refund in listed.json()["data"]] == ["succeeded"]  # one refund, settled
