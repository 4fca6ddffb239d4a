"""`StripeProvider`: payorch's adapter for Stripe (the `Provider` interface).

- Linking reads the balance (checks the key) and registers a webhook endpoint (`events`).
- A checkout is a Stripe Checkout Session (hosted page, `mode=payment`) with one line item of the
  session's total; payorch's ids travel as `client_reference_id` and as metadata on the session and
  on its PaymentIntent, so Stripe's events map back to payorch's session.
- A refund is a Stripe Refund of the checkout's PaymentIntent, tagged with payorch's refund id.
- When payorch expires a session it expires the Checkout Session too (Stripe keeps one open for at
  least 30 minutes), so the customer cannot pay after the merchant was told `session.expired`.
- The customer comes back through payorch (`providers.base.return_url`) both ways: Checkout's
  `success_url` after paying and its `cancel_url` when they give up (Checkout keeps them on its page
  after a decline). There `checkout_state` reads the Checkout Session and, when it is unpaid,
  whether its payment is still processing (a delayed notification method: the session `complete`
  and `unpaid` until `checkout.session.async_payment_succeeded` or `_failed`) or else the last
  decline of its PaymentIntent (`last_payment_error`).
- A lost dispute names only its PaymentIntent: `resolve_event` reads payorch's session id from it.
- What Stripe settled (balance transactions, payouts) is read for reconciliation (`settlements`);
  a payment is matched by its PaymentIntent id, which payorch keeps when the checkout is paid.

Every call carries the idempotency key payorch derives from its own ids; the SDK retries network
errors, 409 and 5xx with it, and this adapter retries a 429 (but for the pages of settlements,
which reconciliation asks again itself: `providers.settlements.PageReads`). Stripe's errors become
`ProviderError` (routing counts it and cascades), `RefundRefused` or `CredentialsRejected` as the
interface says.
"""

from __future__ import annotations

import logging
import math
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import replace
from datetime import date, datetime
from functools import partial
from typing import TYPE_CHECKING, Any, Final, Literal, TypeVar, cast

import stripe
import tenacity
import trio

from payorch.providers.base import (
    CheckoutClosed,
    CheckoutCreated,
    CheckoutRequest,
    CheckoutState,
    Credentials,
    CredentialsRejected,
    EventDelivery,
    EventKind,
    Limits,
    ProviderError,
    ProviderEvent,
    RefundRefused,
    RefundRequest,
    RefundSubmitted,
    WebhookRegistration,
    refuse_outside_limits,
    return_url,
)
from payorch.providers.settlements import (
    PageReads,
    Payout,
    SettledItem,
    SettlementsBusy,
    ask_once,
    retry_after_s,
)
from payorch.providers.stripe.amounts import PAYMENT_METHODS, stripe_limits, to_stripe_amount
from payorch.providers.stripe.events import (
    endpoint_params,
    last_decline,
    parse_stripe_event,
    payorch_session_id,
    refund_outcome,
)
from payorch.providers.stripe.settlements import (
    SETTLEMENT_LAG_DAYS,
    PageReader,
    balance_items,
    payout_items,
)
from payorch.providers.stripe.settlements import payouts as stripe_payouts

if TYPE_CHECKING:
    from stripe.params import RefundCreateParams
    from stripe.params.checkout import SessionCreateParams

log = logging.getLogger("payorch.providers.stripe")
T = TypeVar("T")

# Stripe requires a Checkout Session to live 30 min to 24 h; the margin absorbs clock skew and transit.
CHECKOUT_MIN_LIFETIME_S: Final = 30 * 60
CHECKOUT_MAX_LIFETIME_S: Final = 24 * 60 * 60
EXPIRY_MARGIN_S: Final = 60

_REFUND_REASONS: Final[Mapping[str, Literal["duplicate", "fraudulent", "requested_by_customer"]]] = {
    "REQUESTED_BY_CUSTOMER": "requested_by_customer",
    "DUPLICATE": "duplicate",
    "FRAUDULENT": "fraudulent",
}
# Checkout's languages (the SDK's `locale` values); payorch's `pl_PL` becomes `pl`, `pt_BR` `pt-BR`.
_LOCALES: Final = frozenset(
    "bg cs da de el en en-GB es es-419 et fi fil fr fr-CA hi-IN hr hu id it ja ko lt lv ms mt nb nl pl pt "  # noqa: SIM905
    "pt-BR ro ru sk sl sv th tr vi zh zh-HK zh-TW".split()
)


class StripeRefundRefused(RefundRefused):
    """Stripe refused the refund for good (unknown or unpaid checkout, amount beyond what is left...)."""


def checkout_expiry(expires_at: datetime, now: float) -> int:
    """Stripe's `expires_at` for a checkout payorch expires at `expires_at`, asked for at `now` (the
    request's `requested_at`, so that the same request always sends the same value): the same
    instant, clamped into the 30 min - 24 h Stripe allows (with `EXPIRY_MARGIN_S` to spare at both
    ends, which also covers a retry of the same request up to a minute later)."""
    earliest = now + CHECKOUT_MIN_LIFETIME_S + EXPIRY_MARGIN_S
    latest = now + CHECKOUT_MAX_LIFETIME_S - EXPIRY_MARGIN_S
    return math.ceil(min(max(expires_at.timestamp(), earliest), latest))


def checkout_locale(locale: str | None) -> str | None:
    """Checkout's language for payorch's `xx_YY` locale; None (the browser's) when it has none."""
    if not locale:
        return None
    language, _, region = locale.partition("_")
    for candidate in (f"{language}-{region}", language):
        if candidate in _LOCALES:
            return candidate
    return None


class StripeProvider:
    """Stripe, implementing `payorch.providers.base.Provider`. One connection pool for every account;
    each call authenticates with the linked account's secret key."""

    name = "stripe"
    display_name = "Stripe"
    event_delivery: EventDelivery = "registered_endpoint"
    key_format = (
        "A secret key from Stripe's dashboard: sk_test_... in test mode (sk_live_... takes real "
        "payments; a restricted key, rk_..., works too)."
    )
    payment_methods = PAYMENT_METHODS

    def __init__(
        self,
        *,
        public_base_url: str,
        api_base: str = "",
        timeout_s: float = 10.0,
        max_network_retries: int = 2,
    ) -> None:
        self._public_base_url = public_base_url.rstrip("/")
        self._api_base = api_base
        self._max_network_retries = max_network_retries
        self._http = stripe.HTTPXClient(timeout=timeout_s)

    async def keep_connections_until_cancelled(self) -> None:
        """Run for as long as the service does; close the connection pool when cancelled."""
        try:
            await trio.sleep_forever()
        finally:
            with trio.CancelScope(shield=True):
                # The SDK leaves `close_async` unannotated; it closes the httpx.AsyncClient.
                await cast("Callable[[], Awaitable[None]]", self._http.close_async)()

    # The Provider interface

    def limits(self, currency: str, payment_method: str) -> Limits | None:
        """See `amounts`; None for a method or currency payorch does not offer on Stripe."""
        return stripe_limits(currency, payment_method)

    async def validate_credentials(self, credentials: Credentials) -> None:
        """Read the account's balance: the cheapest call that needs a valid secret key.
        `CredentialsRejected` when Stripe answers 401 (or 403: a restricted key that may not)."""
        if not credentials.api_key.startswith(("sk_", "rk_")):
            raise CredentialsRejected("Stripe secret keys start with sk_ (or rk_ for a restricted key)")
        client = self._client(credentials)
        try:
            await self._request(lambda: client.v1.balance.retrieve_async())
        except (stripe.AuthenticationError, stripe.PermissionError) as error:
            raise _rejected(error) from None
        except stripe.StripeError as error:
            raise _unavailable("validate the key", error) from error

    async def register_webhook(self, credentials: Credentials, url: str) -> WebhookRegistration:
        """Create a webhook endpoint for `url` (`events.endpoint_params`); endpoints this account had
        for the same URL before (an earlier link or key) are deleted, as their secrets are gone."""
        client = self._client(credentials)
        try:
            endpoint = await self._request(
                lambda: client.v1.webhook_endpoints.create_async(endpoint_params(url))
            )
        except (stripe.AuthenticationError, stripe.PermissionError) as error:
            raise _rejected(error) from None
        except stripe.StripeError as error:
            raise _unavailable("register the webhook endpoint", error) from error
        if not endpoint.secret:
            raise ProviderError("Stripe created the webhook endpoint without a signing secret")
        await self._delete_other_endpoints(client, url, keep=endpoint.id)
        return WebhookRegistration(reference=endpoint.id, secret=endpoint.secret)

    async def create_checkout(
        self, credentials: Credentials, request: CheckoutRequest, *, idempotency_key: str
    ) -> CheckoutCreated:
        """Create a Checkout Session; `idempotency_key` is its `Idempotency-Key`, so a retry gets the
        same session. Any failure is a `ProviderError`: routing counts it and tries the next provider."""
        refuse_outside_limits("Stripe", self.limits(request.amount.currency, request.payment_method), request)
        client = self._client(credentials)
        params = self._checkout_params(request)
        try:
            session = await self._request(
                lambda: client.v1.checkout.sessions.create_async(params, {"idempotency_key": idempotency_key})
            )
        except stripe.StripeError as error:
            raise _unavailable("create the checkout", error) from error
        if not session.url:
            raise ProviderError(f"Stripe created checkout session {session.id} without a URL")
        return CheckoutCreated(reference=session.id, url=session.url)

    async def submit_refund(
        self, credentials: Credentials, request: RefundRequest, *, idempotency_key: str
    ) -> RefundSubmitted:
        """Refund the checkout's PaymentIntent; `idempotency_key` makes a retry refund only once.
        `StripeRefundRefused` when Stripe will never accept it (4xx: unknown or unpaid checkout, more
        than is left); `ProviderError` when it failed or could not be reached (401 and 429 included)."""
        client = self._client(credentials)
        try:
            checkout = await self._request(
                lambda: client.v1.checkout.sessions.retrieve_async(request.payment_reference)
            )
        except (stripe.InvalidRequestError, stripe.IdempotencyError) as error:
            raise StripeRefundRefused(f"Stripe refused the refund: {_described(error)}") from None
        except stripe.StripeError as error:
            raise _unavailable("find the checkout to refund", error) from error
        payment_intent = checkout.payment_intent
        if payment_intent is None:
            raise StripeRefundRefused(f"Stripe checkout session {checkout.id} has no payment to refund")
        params: RefundCreateParams = {
            "payment_intent": payment_intent if isinstance(payment_intent, str) else payment_intent.id,
            "amount": to_stripe_amount(request.amount),
            "metadata": {
                "payorch_refund_id": str(request.refund_id),
                "payorch_session_id": str(request.session_id),
            },
        }
        reason = _REFUND_REASONS.get(request.reason or "")
        if reason:
            params["reason"] = reason
        try:
            refund = await self._request(
                lambda: client.v1.refunds.create_async(params, {"idempotency_key": idempotency_key})
            )
        except (stripe.InvalidRequestError, stripe.IdempotencyError, stripe.CardError) as error:
            raise StripeRefundRefused(f"Stripe refused the refund: {_described(error)}") from None
        except stripe.StripeError as error:
            raise _unavailable("refund", error) from error
        return RefundSubmitted(reference=refund.id)

    async def close_checkout(self, credentials: Credentials, reference: str) -> CheckoutClosed:
        """Expire the Checkout Session `reference`. Stripe expires only an open one; for any other
        (paid, or expired already) the session as Stripe has it says whether it was paid.
        `ProviderError` when Stripe cannot be reached or does not know the session."""
        client = self._client(credentials)
        try:
            checkout = await self._request(lambda: client.v1.checkout.sessions.expire_async(reference))
        except stripe.InvalidRequestError:  # no longer open
            try:
                checkout = await self._request(lambda: client.v1.checkout.sessions.retrieve_async(reference))
            except stripe.StripeError as error:
                raise _unavailable("read the checkout it could not expire", error) from error
        except stripe.StripeError as error:
            raise _unavailable("expire the checkout", error) from error
        # `complete` but `unpaid` is a delayed payment under way: its outcome still arrives as an event.
        return CheckoutClosed.PAID if checkout.payment_status == "paid" else CheckoutClosed.CLOSED

    async def checkout_state(self, credentials: Credentials, reference: str) -> CheckoutState:
        """The Checkout Session `reference` as the customer comes back from it
        (`ReportsCheckoutState`): paid when its `payment_status` is `paid`; else the last decline of
        its PaymentIntent (`last_payment_error`: the card's `decline_code`), which Checkout keeps
        while the customer stays on its page and after they give up. Processing: a `complete` but
        unpaid session (a delayed method under way) or a PaymentIntent `processing`. None of these
        (nothing was tried): not paid, not declined. `ProviderError` when Stripe cannot be reached
        or does not know the session."""
        client = self._client(credentials)
        try:
            checkout = await self._request(lambda: client.v1.checkout.sessions.retrieve_async(reference))
        except stripe.StripeError as error:
            raise _unavailable("read the checkout", error) from error
        if checkout.payment_status == "paid":
            return CheckoutState(paid=True)
        if checkout.status == "complete":  # unpaid: a delayed method's payment still under way
            return CheckoutState(paid=False, processing=True)
        payment_intent = checkout.payment_intent
        if payment_intent is None:
            return CheckoutState(paid=False)
        intent_id = payment_intent if isinstance(payment_intent, str) else payment_intent.id
        try:
            intent = await self._request(lambda: client.v1.payment_intents.retrieve_async(intent_id))
        except stripe.StripeError as error:
            raise _unavailable("read the checkout's payment", error) from error
        if intent.status == "processing":
            return CheckoutState(paid=False, processing=True)
        declined = last_decline(intent.to_dict())
        if declined is None or declined[0] is None:
            return CheckoutState(paid=False)
        code, reason = declined
        return CheckoutState(paid=False, decline_code=code, decline_reason=reason)

    def parse_event(self, headers: Mapping[str, str], body: bytes, secret: str) -> ProviderEvent:
        """Verify the `Stripe-Signature` of `body` with the SDK (300 s tolerance) and translate the
        event (`events`); `EventRejected` when it is not authentic or not a Stripe event."""
        return parse_stripe_event(headers, body, secret)

    async def resolve_event(self, credentials: Credentials, event: ProviderEvent) -> list[ProviderEvent]:
        """Events that name only a PaymentIntent, completed from Stripe: a dispute gets payorch's
        session id from the PaymentIntent's metadata; `charge.refunded` becomes the outcomes of the
        PaymentIntent's settled refunds. Any other event is returned as it is. `ProviderError` when
        Stripe cannot be asked (payorch answers 502 and Stripe sends the event again)."""
        reference = event.payment_reference
        if reference is None:
            return [event]
        client = self._client(credentials)
        if event.kind is EventKind.REFUNDS_CHANGED:
            try:
                refunds = await self._request(
                    lambda: client.v1.refunds.list_async({"payment_intent": reference, "limit": 100})
                )
            except stripe.InvalidRequestError:  # not a payment of this account: nothing of payorch's
                return []
            except stripe.StripeError as error:
                raise _unavailable("list the payment's refunds", error) from error
            # Each refund's outcome is an event of its own id, so each applies once however often
            # charge.refunded (or refund.updated) reports it.
            outcomes = [refund_outcome(f"{event.id}/{r.id}", r.to_dict()) for r in refunds.data]
            return [o for o in outcomes if o.kind is not EventKind.IGNORED and o.refund_id is not None]
        if event.session_id is not None or event.kind is EventKind.PAYMENT_SUCCEEDED:
            return [event]
        try:
            intent = await self._request(lambda: client.v1.payment_intents.retrieve_async(reference))
        except stripe.InvalidRequestError:  # not a payment of this account: nothing of payorch's
            return [event]
        except stripe.StripeError as error:
            raise _unavailable("read the disputed payment", error) from error
        return [replace(event, session_id=payorch_session_id(intent.metadata.to_dict()))]

    # What Stripe settled (`providers.settlements`, `settlements`)

    settlement_lag_days = SETTLEMENT_LAG_DAYS

    def settled_items(
        self, credentials: Credentials, first: date, last: date, reads: PageReads = ask_once
    ) -> AsyncIterator[SettledItem]:
        """The balance transactions available on the UTC days `first` to `last`, each page read
        through `reads`: `SettlementsBusy` for a page Stripe answered 429 or 5xx (or not at all),
        `ProviderError` for any other failure."""
        action = "list the balance transactions"
        read = self._settlement_pages(credentials, "balance_transactions", action, reads)
        return _reading(action, balance_items(read, first, last))

    def payouts(
        self, credentials: Credentials, first: date, last: date, reads: PageReads = ask_once
    ) -> AsyncIterator[Payout]:
        """The payouts arriving on the UTC days `first` to `last`; errors as above."""
        read = self._settlement_pages(credentials, "payouts", "list the payouts", reads)
        return _reading("list the payouts", stripe_payouts(read, first, last))

    def payout_items(
        self, credentials: Credentials, payout: Payout, reads: PageReads = ask_once
    ) -> AsyncIterator[SettledItem]:
        """The balance transactions `payout` carried; errors as above."""
        action = "list the payout's balance transactions"
        read = self._settlement_pages(credentials, "balance_transactions", action, reads)
        return _reading(action, payout_items(read, payout.payout_id))

    def _settlement_pages(
        self,
        credentials: Credentials,
        listed: Literal["balance_transactions", "payouts"],
        action: str,
        reads: PageReads,
    ) -> PageReader:
        """A reader of one page of a Stripe list, asked once per try of `reads`: the SDK retries
        nothing here (a client with no network retries), so that the caller decides when to ask
        again, and waits for it without holding anything."""
        client = self._client(credentials, network_retries=0)
        list_async = getattr(client.v1, listed).list_async

        async def read_page(params: dict[str, Any]) -> Any:
            async def once() -> Any:
                try:
                    return await list_async(params)
                except stripe.StripeError as error:
                    raise _settlements_failure(action, error) from error

            return await reads(once)

        return read_page

    # Stripe's side

    def _client(self, credentials: Credentials, network_retries: int | None = None) -> stripe.StripeClient:
        return stripe.StripeClient(
            credentials.api_key,
            http_client=self._http,
            base_addresses={"api": self._api_base} if self._api_base else None,
            max_network_retries=self._max_network_retries if network_retries is None else network_retries,
        )

    async def _request(self, call: Callable[[], Awaitable[T]]) -> T:
        """`call()`, again after a 429 (the SDK retries network errors, 409 and 5xx by itself)."""
        async for attempt in tenacity.AsyncRetrying(
            retry=tenacity.retry_if_exception_type(stripe.RateLimitError),
            stop=tenacity.stop_after_attempt(self._max_network_retries + 1),
            wait=tenacity.wait_exponential(multiplier=0.5, max=4.0),
            reraise=True,
        ):
            with attempt:
                return await call()
        raise AssertionError("unreachable: the last attempt's error is re-raised")

    def _checkout_params(self, request: CheckoutRequest) -> SessionCreateParams:
        ids = {
            "payorch_session_id": str(request.session_id),
            "payorch_application_id": str(request.application_id),
        }
        back = return_url(self._public_base_url, request.session_id, request.attempt)
        params: SessionCreateParams = {
            "mode": "payment",
            "line_items": [
                {
                    "quantity": 1,
                    "price_data": {
                        "currency": request.amount.currency.lower(),
                        "unit_amount": to_stripe_amount(request.amount),
                        "product_data": {"name": f"Order {request.order_reference}"},
                    },
                }
            ],
            # Checkout offers Apple Pay inside `card`; since API version 2026-09-30 this parameter
            # replaces `payment_method_types`, which Checkout no longer accepts.
            "allowed_payment_method_types": ["blik" if request.payment_method == "blik" else "card"],
            "client_reference_id": str(request.session_id),
            "metadata": ids,
            "payment_intent_data": {"metadata": ids},
            # Back through payorch both ways: it reads the attempt there and sends the customer on
            # (the merchant's URLs, or payorch's result page) or to the next attempt's checkout.
            "success_url": back,
            "cancel_url": back,
            "expires_at": checkout_expiry(request.expires_at, request.requested_at.timestamp()),
        }
        if request.customer_email:
            params["customer_email"] = request.customer_email
        locale = checkout_locale(request.locale)
        if locale:
            params["locale"] = locale
        return params

    async def _delete_other_endpoints(self, client: stripe.StripeClient, url: str, keep: str) -> None:
        """Delete the account's other endpoints for `url`; a failure is logged, not raised."""
        try:
            endpoints = await self._request(lambda: client.v1.webhook_endpoints.list_async({"limit": 100}))
            for endpoint in endpoints.data:
                if endpoint.url == url and endpoint.id != keep:
                    await self._request(partial(client.v1.webhook_endpoints.delete_async, endpoint.id))
        except stripe.StripeError as error:
            log.warning(
                "could not delete an earlier Stripe webhook endpoint; Stripe disables it once it fails on",
                extra={"url": url, "error": _described(error)},
            )


async def _reading(action: str, found: AsyncIterator[T]) -> AsyncIterator[T]:
    """`found`, with Stripe's errors as `ProviderError`."""
    try:
        async for each in found:
            yield each
    except stripe.StripeError as error:
        raise _unavailable(action, error) from error


def _described(error: stripe.StripeError) -> str:
    """Stripe's status, error code and message, for logs and error details; never the key."""
    status = f"{error.http_status} " if error.http_status else ""
    code = f"{error.code}: " if error.code else ""
    message = str(error).strip().splitlines()[0] if str(error).strip() else ""
    return f"{status}{type(error).__name__}: {code}{message}"


def _rejected(error: stripe.StripeError) -> CredentialsRejected:
    if isinstance(error, stripe.PermissionError):
        return CredentialsRejected(
            "Stripe answered 403: this restricted key may not read the balance or manage webhook endpoints"
        )
    return CredentialsRejected("Stripe answered 401: the secret key is not valid (or was rolled)")


def _unavailable(action: str, error: stripe.StripeError) -> ProviderError:
    if isinstance(error, stripe.AuthenticationError | stripe.PermissionError):
        return ProviderError(f"Stripe rejected the stored key, could not {action}: {_described(error)}")
    return ProviderError(
        f"Stripe could not {action}: {_described(error)}", provider_wide=_provider_wide(error)
    )


def _settlements_failure(action: str, error: stripe.StripeError) -> ProviderError:
    """A page of settlements Stripe did not give: `SettlementsBusy` for a 429 (its `Retry-After`,
    should Stripe send one), a 5xx or no answer; any other error as `_unavailable` says."""
    status = error.http_status
    if status is not None and status != 429 and status < 500:
        return _unavailable(action, error)
    return SettlementsBusy(
        f"Stripe could not {action}: {_described(error)}",
        retry_after_s=retry_after_s(
            next((v for k, v in (error.headers or {}).items() if k.lower() == "retry-after"), None)
        ),
        provider_wide=_provider_wide(error),
    )


def _provider_wide(error: stripe.StripeError) -> bool:
    """Stripe unreachable or answering 5xx: Stripe's failure. A 4xx (a 429 included) is about the
    account or the request alone (docs/routing.md)."""
    if isinstance(error, stripe.AuthenticationError | stripe.PermissionError | stripe.RateLimitError):
        return False
    return error.http_status is None or error.http_status >= 500
