"""The fake Stripe's hosted checkout page, for the tests that drive a real browser through it.

Stripe Checkout is a page of Stripe's (`checkout.stripe.com/c/pay/<id>`) that the customer is sent
to: it shows the amount, takes the card, and keeps the customer there after a decline (the error is
shown on the page, the Checkout Session stays open, `payment_intent.payment_failed` is sent); after
a payment it sends the customer to the session's `success_url` (`{CHECKOUT_SESSION_ID}` replaced by
its id), and its back link goes to `cancel_url`. A session that is no longer open (paid, expired)
takes no payment. Stripe's test cards (docs.stripe.com/testing): `4242424242424242` pays,
`4000000000000002` is declined (`generic_decline`), `4000000000009995` too (`insufficient_funds`);
any other number is refused on the page as incorrect, with no payment attempted.

The fake serves such a page at `/c/pay/<id>` of its own address; a test that sends a browser there
sets `FakeStripe.checkout_host` to the fake's `url`, so Checkout Sessions name it as their `url`.
Events go where the fake keeps them (`FakeStripe.events`), for the test to `deliver`.
"""

from __future__ import annotations

from html import escape
from typing import TYPE_CHECKING, Any

from quart import Blueprint, Response, redirect, request

if TYPE_CHECKING:
    from tests.fake_stripe import FakeStripe

PAYING_CARDS = {"4242424242424242"}
DECLINED_CARDS = {"4000000000000002": "generic_decline", "4000000000009995": "insufficient_funds"}


def hosted_checkout(fake: FakeStripe) -> Blueprint:
    """The page of each of `fake`'s Checkout Sessions, at `/c/pay/<id>`."""
    pages = Blueprint("fake_stripe_checkout", __name__)

    @pages.route("/c/pay/<checkout_id>", methods=["GET", "POST"])
    async def checkout_page(checkout_id: str) -> Response:
        try:
            checkout = fake.checkout(checkout_id)
        except StopIteration:
            return _page("Not found", "<p>This page does not exist.</p>", 404)
        if checkout["status"] != "open":
            return _page("Checkout", "<p>This Checkout Session is no longer active.</p>", 200)
        if request.method == "GET":
            return _page("Checkout", _form(checkout), 200)
        number = "".join((await request.form).get("cardNumber", "").split())
        if number in DECLINED_CARDS:
            fake.decline(checkout_id, DECLINED_CARDS[number])
            return _page("Checkout", _form(checkout, "Your card was declined."), 200)
        if number not in PAYING_CARDS:
            return _page("Checkout", _form(checkout, "Your card number is incorrect."), 200)
        fake.pay(checkout_id)
        success = str(checkout["success_url"]).replace("{CHECKOUT_SESSION_ID}", checkout_id)
        return redirect(success, 303)

    return pages


def _form(checkout: dict[str, Any], error: str | None = None) -> str:
    amount = f"{checkout['amount_total'] / 100:,.2f} {checkout['currency'].upper()}"
    back = f'<p><a href="{escape(checkout["cancel_url"])}">Back</a></p>' if checkout["cancel_url"] else ""
    problem = f'<p role="alert">{escape(error)}</p>' if error else ""
    return (
        f"{back}<p>Pay {escape(amount)}</p>{problem}<form method='post'>"
        "<label for='cardNumber'>Card number</label><input id='cardNumber' name='cardNumber' required>"
        "<label for='cardExpiry'>Expiration (MM / YY)</label>"
        "<input id='cardExpiry' name='cardExpiry' required>"
        "<label for='cardCvc'>CVC</label><input id='cardCvc' name='cardCvc' required>"
        "<button type='submit'>Pay</button></form>"
    )


def _page(title: str, content: str, status: int) -> Response:
    body = (
        f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title>'
        f'<link rel="icon" href="data:,"></head><body><main><h1>{escape(title)}</h1>{content}</main>'
        "</body></html>"
    )
    return Response(body, status, content_type="text/html; charset=utf-8")
