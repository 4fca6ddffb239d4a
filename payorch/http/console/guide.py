"""The way through an application's first hour: what is done and what comes next, and a test payment
taken from the console.

The steps after creating an application are an API key, a linked provider, a webhook endpoint and a
first session; each is done when the application has one (an active key, an active provider, any
webhook configuration, any session), read with the API's own list operations, so nothing is kept
about them. The pages that create each thing show the next step; the application's overview shows
them all while one remains.

A test payment is a session created by the operation behind `POST /api/v1/sessions`
(`operations.sessions.create_session`), as an access token creates one (`applicationId` in the
body): the same checks of the application, the same validation (`SessionCreateRequest`, then the
operation's), the same Idempotency-Key rules and the same routing, by the application's actor. Its
Idempotency-Key was put in the form when the page was rendered, so the same form sent twice (a
double click, a reload) creates one session and opens the same checkout. The overview's "Try a
test payment" button posts it (`POST /console/applications/<id>/test-payment`, in
`applications.py`).
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from quart import url_for

from payorch.engine.idempotency import MAX_KEY_LENGTH
from payorch.http.auth import Principal, application_for
from payorch.http.console.kit import api_status, text_fields, validated
from payorch.http.models import SessionCreateRequest
from payorch.http.operations import applications, providers, sessions, webhooks
from payorch.http.services import services
from payorch.storage.provider_configs import ProviderConfig
from payorch.values import errors as domain
from payorch.values.pagination import MAX_LIMIT, PageRequest

SANDBOX = "sandbox"
TEST_AMOUNT = Decimal("10.00")
TEST_CURRENCY = "PLN"  # every payment method of the sandbox takes it (BLIK takes no other)
TEST_PRICE = f"{TEST_AMOUNT:f} {TEST_CURRENCY}"
# The method a test payment is made with: the first of these the linked sandbox enables.
TEST_METHODS = ("card", "blik", "apple_pay")
TEST_CUSTOMER = {"email": "customer@example.com", "firstName": "Test", "lastName": "Customer"}
TEST_ORDER_PREFIX = "console-test-"
KEY_FIELD = "idempotency_key"
_FIRST = PageRequest(1, 1)  # whether a list holds anything: its total


@dataclass(frozen=True)
class Step:
    """One step of the way: what to do, why, where it is done, and whether it is done."""

    name: str  # "key", "provider", "webhook", "payment"
    title: str
    why: str
    url: str
    done: bool


@dataclass(frozen=True)
class Progress:
    """An application's steps, in order, and its sandbox link when it is linked and active (a test
    payment can be taken from the console then)."""

    steps: list[Step]
    sandbox: ProviderConfig | None

    @property
    def next(self) -> Step | None:
        """The first step not done; None once all are."""
        return next((step for step in self.steps if not step.done), None)

    @property
    def test_method(self) -> str | None:
        """The payment method a test payment is made with; None without an active sandbox."""
        if self.sandbox is None:
            return None
        return next((method for method in TEST_METHODS if method in self.sandbox.payment_methods), None)


async def progress_of(principal: Principal, application_id: str) -> Progress:
    """Where the application is on its way, read with the API's list operations (another merchant's
    application: their `NotFound`/`NotPermitted`)."""
    running = services()
    keys, _ = await applications.list_api_keys(running, principal, application_id, PageRequest(1, MAX_LIMIT))
    configs, _ = await providers.list_provider_configs(
        running, principal, application_id, PageRequest(1, MAX_LIMIT)
    )
    _, webhook_count = await webhooks.list_webhooks(running, principal, application_id, _FIRST)
    _, session_count = await sessions.list_sessions(running, principal, application_id, _FIRST)
    sandbox = next((c for c in configs if c.provider == SANDBOX and c.is_active), None)
    overview = url_for("console.application", application_id=application_id)
    payment_why = (
        f"A session of {TEST_PRICE}, paid on the sandbox's checkout page with its test data."
        if sandbox is not None
        else "Link the sandbox to take one from here; or create a session with POST /api/v1/sessions."
    )
    steps = [
        Step(
            "key",
            "Create an API key",
            "Your server authenticates to payorch's API with it.",
            f"{overview}#create-key",
            any(key.status == "active" for key in keys),
        ),
        Step(
            "provider",
            "Link a provider",
            "The sandbox takes test payments with a key you make up, no account needed.",
            url_for("console.providers", application_id=application_id, _anchor="link"),
            any(config.is_active for config in configs),
        ),
        Step(
            "webhook",
            "Add a webhook endpoint",
            "payorch tells your server there when a payment succeeds or a refund completes.",
            url_for("console.webhooks", application_id=application_id, _anchor="create"),
            webhook_count > 0,
        ),
        Step(
            "payment",
            "Try a test payment",
            payment_why,
            f"{overview}#try"
            if sandbox is not None
            else url_for("console.providers", application_id=application_id, _anchor="link"),
            session_count > 0,
        ),
    ]
    return Progress(steps, sandbox)


def new_test_key() -> str:
    """A new Idempotency-Key for a rendered test payment form: that form, sent again, is the same
    payment."""
    return secrets.token_urlsafe(24)


class TestPaymentRefused(Exception):
    """Why the session of a test payment was not created, with the status the API answers it with."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


def test_session_body(application_id: str, key: str, method: str) -> dict[str, Any]:
    """The body `POST /api/v1/sessions` would take for the test payment the form with `key` asks for
    (the same key, the same body: a resend replays)."""
    return {
        "applicationId": application_id,
        "orderReference": TEST_ORDER_PREFIX + key[:12],
        "paymentMethod": method,
        "currency": TEST_CURRENCY,
        "amount": {"total": TEST_AMOUNT},
        "customer": dict(TEST_CUSTOMER),
    }


def here(checkout_url: str) -> str:
    """Where to send the admin's browser for `checkout_url`: a page of payorch itself (the sandbox's
    checkout) as a path, so that it opens on the host the console is reached at, whatever
    `server.public_base_url` names; a provider's page as it is."""
    base = services().context.settings.server.public_base_url.rstrip("/")
    return checkout_url[len(base) :] if checkout_url.startswith(f"{base}/") else checkout_url


async def create_test_session(principal: Principal, application_id: str, form: Mapping[str, str]) -> str:
    """Create the session of the test payment the form asks for (its Idempotency-Key in
    `idempotency_key`) and answer its checkout URL; the answer of the first session made with that
    key when the form was sent before. `TestPaymentRefused` when there is nothing to try it with or
    the session is not created; `InvalidInput` for a form that did not come from its page."""
    application = await application_for(principal, application_id)  # another merchant's: 404 first
    key = text_fields(form, (KEY_FIELD,))[KEY_FIELD]
    if not 0 < len(key) <= MAX_KEY_LENGTH:
        raise domain.InvalidInput(
            "this form was not sent from its page: open the application's page and try from there"
        )
    try:  # the create's check of the application, before looking for what to try it with
        await sessions.session_application(principal, application.id)
    except domain.NotPermitted as refused:  # disabled: the API's create refuses it so (403)
        raise TestPaymentRefused(f"{refused.message}: enable it to take payments", 403) from None
    method = (await progress_of(principal, application_id)).test_method
    if method is None:
        raise TestPaymentRefused("link the sandbox, with a payment method, to try a test payment", 409)
    body = test_session_body(str(application.id), key, method)
    data = validated(SessionCreateRequest, body)
    try:
        answer = await sessions.create_session(services(), principal, key, body, data)
    except domain.IdempotencyKeyInProgress:
        raise TestPaymentRefused(
            "this form was already sent and its session is being created: open Sessions to find it", 409
        ) from None
    except (domain.CodedError, domain.ProviderUnavailable) as error:
        raise TestPaymentRefused(
            f"no session was created: {error.message}", api_status(error) or 500
        ) from None
    return str(answer.body["checkoutUrl"])
