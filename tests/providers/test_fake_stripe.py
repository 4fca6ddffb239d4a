"""The fake Stripe itself (tests/fake_stripe.py): it must hold payorch to Stripe's documented rules, so
these check it with plain HTTP requests, not through payorch's adapter."""

from __future__ import annotations

import time
from typing import Any

import httpx

from tests import fake_stripe as stripe_fake
from tests.fake_stripe import FakeStripe, parse_form

fake_stripe = stripe_fake.fake_stripe
KEY = "sk_test_fake_0123456789"


def _checkout_form(**change: str) -> dict[str, str]:
    form = {
        "mode": "payment",
        "line_items[0][quantity]": "1",
        "line_items[0][price_data][currency]": "pln",
        "line_items[0][price_data][unit_amount]": "1000",
        "line_items[0][price_data][product_data][name]": "Order 1",
        "success_url": "https://shop.example/ok",
        "expires_at": str(int(time.time()) + 3600),
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
    form = _checkout_form()  # once: `expires_at` is read off the clock, and a replay must be identical
    first = await _post(fake_stripe, "/v1/checkout/sessions", form, **{"Idempotency-Key": "k"})
    replay = await _post(fake_stripe, "/v1/checkout/sessions", form, **{"Idempotency-Key": "k"})
    other = await _post(
        fake_stripe, "/v1/checkout/sessions", form | {"mode": "setup"}, **{"Idempotency-Key": "k"}
    )
    assert first.status_code == replay.status_code == 200
    assert replay.json() == first.json()
    assert replay.headers["Idempotent-Replayed"] == "true"
    assert first.json()["object"] == "checkout.session" and first.json()["id"].startswith("cs_test_")
    assert (other.status_code, other.json()["error"]["type"]) == (400, "idempotency_error")


async def test_checkout_refuses_what_stripe_refuses(fake_stripe: FakeStripe) -> None:
    fake_stripe.accept_key(KEY)
    without_success_url = {k: v for k, v in _checkout_form().items() if k != "success_url"}
    cases = {
        "payment_method_types": _checkout_form(**{"payment_method_types[0]": "card"}),
        "success_url": without_success_url,
        "expires_at": _checkout_form(expires_at=str(int(time.time()) + 600)),
    }
    for param, form in cases.items():
        response = await _post(fake_stripe, "/v1/checkout/sessions", form)
        assert response.status_code == 400, param
        assert response.json()["error"]["param"] == param
