"""The sandbox's hosted checkout page: where the customer (or a developer, or a test) pays.

    GET  /sandbox/checkout/<id>   the amount, the order, a form, and the test data
    POST /sandbox/checkout/<id>   form field `card_number` (card, apple_pay) or `blik_code` (blik)

After a POST: 303 to the checkout's success or failure URL when it has one, else a result page (200
paid, 402 declined). The adapter gives a checkout payorch's return route as both when the merchant
gave `redirectUrls` (`providers.base.return_url`): payorch reads the outcome there and sends the
customer on, to the merchant or to a next attempt's checkout. Unknown checkout 404, already paid
409, expired (or closed) 410, missing field 400. Plain HTML with inline style only: no script, no
external asset, works in any browser and with curl.
"""

from __future__ import annotations

from datetime import datetime
from html import escape

from quart import Blueprint, Quart, Response, current_app, request

from payorch.providers.sandbox import simulator
from payorch.providers.sandbox.adapter import SandboxProvider
from payorch.storage.sandbox import SandboxCheckout
from payorch.values.html import formatted_amount, html_page, see_other

blueprint = Blueprint("sandbox_pages", __name__, url_prefix="/sandbox")

_METHOD_NAMES = {"card": "Card", "apple_pay": "Apple Pay (test card)", "blik": "BLIK"}
_FIELD_LABELS = {simulator.CARD_FIELD: "Card number", simulator.BLIK_FIELD: "BLIK code"}


_EXTENSION = "payorch.sandbox"


def serve_checkout_pages(app: Quart, sandbox: SandboxProvider) -> None:
    """Serve `sandbox`'s checkout pages on `app`. The runtime, which builds both, calls it when the
    sandbox is enabled; the pages know nothing of the rest of the HTTP app."""
    app.extensions[_EXTENSION] = sandbox
    app.register_blueprint(blueprint)


def _provider() -> SandboxProvider | None:
    provider = current_app.extensions.get(_EXTENSION)
    return provider if isinstance(provider, SandboxProvider) else None


def _html(title: str, content: str, status: int) -> Response:
    return html_page(title, content, status, badge="Sandbox: test mode, no real money")


def _summary(checkout: SandboxCheckout) -> str:
    method = _METHOD_NAMES.get(checkout.payment_method, checkout.payment_method)
    return (
        f"<dl><dt>Amount</dt><dd>{escape(formatted_amount(checkout.amount_minor, checkout.currency))}</dd>"
        f"<dt>Order</dt><dd>{escape(checkout.order_reference)}</dd>"
        f"<dt>Payment method</dt><dd>{escape(method)}</dd>"
        f"<dt>Checkout</dt><dd><code>{escape(checkout.id)}</code></dd></dl>"
    )


def _form(checkout: SandboxCheckout, *, error: str | None = None) -> str:
    field = simulator.FIELD_OF_METHOD[checkout.payment_method]
    numeric = 'inputmode="numeric" autocomplete="cc-number"' if field == simulator.CARD_FIELD else ""
    problem = f'<p class="error">{escape(error)}</p>' if error else ""
    amount = escape(formatted_amount(checkout.amount_minor, checkout.currency))
    return (
        f'<form method="post">{problem}<label for="{field}">{_FIELD_LABELS[field]}</label>'
        f'<input id="{field}" name="{field}" {numeric} required autofocus> '
        f'<button type="submit">Pay {amount}</button></form>'
    )


def _test_data() -> str:
    rows = "".join(
        f"<tr><td>{'Card' if item.kind == 'card' else 'BLIK code'}</td>"
        f"<td><code>{escape(item.value)}</code></td><td>{escape(item.description)}</td></tr>"
        for item in simulator.TEST_DATA
    )
    return (
        "<h2>Test data</h2><p>Card numbers may contain spaces. Card and Apple Pay checkouts take a "
        "card number, BLIK checkouts a BLIK code.</p>"
        f"<table><tr><th>Kind</th><th>Enter</th><th>Outcome</th></tr>{rows}</table>"
    )


def _not_found() -> Response:
    return _html("No such checkout", "<p>This checkout does not exist.</p>", 404)


def _closed(checkout: SandboxCheckout, now: datetime, *, status_on_open: int) -> Response | None:
    """The page for a checkout that can no longer be paid; None while it can."""
    if checkout.status == "paid":
        return _html("Already paid", f"{_summary(checkout)}<p>This checkout is paid.</p>", status_on_open)
    if checkout.expired(now):
        return _html("Checkout expired", f"{_summary(checkout)}<p>This checkout has expired.</p>", 410)
    return None


@blueprint.get("/checkout/<checkout_id>")
async def show_checkout(checkout_id: str) -> Response:
    """The checkout page: amount, order, the payment form and the test data."""
    provider = _provider()
    checkout = await provider.checkout(checkout_id) if provider else None
    if provider is None or checkout is None:
        return _not_found()
    closed = _closed(checkout, provider.clock.now(), status_on_open=200)
    if closed is not None:
        return closed
    return _html("Sandbox checkout", _summary(checkout) + _form(checkout) + _test_data(), 200)


@blueprint.post("/checkout/<checkout_id>")
async def pay_checkout(checkout_id: str) -> Response:
    """Pay with the submitted card number or BLIK code; the outcome follows the test data."""
    provider = _provider()
    checkout = await provider.checkout(checkout_id) if provider else None
    if provider is None or checkout is None:
        return _not_found()
    closed = _closed(checkout, provider.clock.now(), status_on_open=409)
    if closed is not None:
        return closed
    field = simulator.FIELD_OF_METHOD[checkout.payment_method]
    entry = (await request.form).get(field, "")
    if not simulator.normalised_entry(entry):
        content = _summary(checkout) + _form(checkout, error=f"Enter a {_FIELD_LABELS[field].lower()}.")
        return _html("Sandbox checkout", content + _test_data(), 400)

    result = await provider.pay(checkout_id, entry)
    status = result.status
    if status is simulator.PaymentStatus.NOT_FOUND or result.checkout is None:
        return _not_found()
    checkout = result.checkout
    if status is simulator.PaymentStatus.PAID:
        if checkout.success_url:
            return see_other(checkout.success_url)
        return _html(
            "Payment succeeded", _summary(checkout) + "<p>Thank you: the payment succeeded.</p>", 200
        )
    if status is simulator.PaymentStatus.DECLINED:
        if checkout.failure_url:
            return see_other(checkout.failure_url)
        reason = escape(str(result.failure_code).upper())
        content = f"{_summary(checkout)}<p>The payment was declined (<code>{reason}</code>). Try again:</p>"
        return _html("Payment declined", content + _form(checkout) + _test_data(), 402)
    # Paid or expired between the page's read and the payment's lock.
    closed = _closed(checkout, provider.clock.now(), status_on_open=409)
    return closed if closed is not None else _not_found()
