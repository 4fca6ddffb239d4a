"""`PayuProvider`: payorch's adapter for PayU (the `Provider` interface), on `client.PayuClient`, a
small typed client of payorch's own over httpx (PayU publishes no Python SDK; docs/providers.md).

- Linking takes the POS's five credentials (`credentials`), checks them by asking PayU for an OAuth
  token, and registers nothing at PayU: each order names payorch's endpoint as its `notifyUrl`,
  and PayU signs its notifications with the POS's second key, which payorch keeps as the
  configuration's event secret.
- A checkout is a PayU order on PayU's hosted page (`redirectUri`), for the session's total in
  minor units, with the method preselected where PayU allows it (`methods`), the customer's e-mail
  and the order items, `validityTime` up to the session's expiry, `continueUrl` payorch's way back
  (`providers.base.return_url`) and `extOrderId` derived from the session and attempt
  (`notifications.order_ext_id`). PayU refuses a second order with the same `extOrderId`
  (`ERROR_ORDER_NOT_UNIQUE`): a create retried after payorch lost PayU's answer (a crash) finds
  the order by its `extOrderId`; one paid or being paid is the session's checkout, one nobody saw
  (still `NEW`: payorch never answered its address) is cancelled and the next order placed under
  the next `extOrderId`, so the session has one payable order at PayU.
- Notifications (`notifications`) are verified with the second key and carry the order or the
  refund; a refund named only by PayU's `refundId` is looked up among the order's refunds.
- A refund is a PayU refund of the order with `extRefundId` = payorch's refund id: PayU refunds one
  `extRefundId` once, so a resubmitted refund is one refund at PayU.
- When payorch expires a session it cancels the order (`DELETE`), so the customer cannot pay after
  the merchant was told `session.expired`; a `COMPLETED` order stays paid.

PayU's errors become `ProviderError` (routing counts it and cascades), `RefundRefused` or
`CredentialsRejected` as the interface says; messages carry PayU's status codes, never a secret.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import replace
from decimal import Decimal
from typing import Any, Final

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
    provider_events_url,
    refuse_outside_limits,
    return_url,
)
from payorch.providers.payu.client import PayuApiError, PayuClient, validity_seconds
from payorch.providers.payu.credentials import (
    CREDENTIAL_FIELDS,
    PayuAccount,
    account_from_fields,
    opened,
)
from payorch.providers.payu.methods import PAYMENT_METHODS, PAYU_METHODS, payu_limits
from payorch.providers.payu.notifications import (
    order_ext_id,
    order_state,
    parse_notification,
    refund_id_of,
    verify,
)
from payorch.values.money import Money

log = logging.getLogger("payorch.providers.payu")

# What linking registers: nothing at PayU; each order carries payorch's endpoint as `notifyUrl`.
NOTIFY_URL_PER_ORDER: Final = "notifyUrl per order"
# Orders placed for one attempt at most: the first, and one after each order a lost answer left.
MAX_PLACINGS: Final = 3
_DESCRIPTION_MAX: Final = 255
# payorch does not see the customer's address (the merchant's server creates the session) and
# PayU requires one: the documented placeholder for a server-side order.
_CUSTOMER_IP: Final = "127.0.0.1"
_BEING_PAID: Final = frozenset({"COMPLETED", "PENDING", "WAITING_FOR_CONFIRMATION"})
# PayU's page languages (`buyer.language`); payorch's `pl_PL` becomes `pl`.
_LANGUAGES: Final = frozenset("pl en cs de es fr hu it lt lv pt ro ru sk sl uk bg el hr et sv".split())  # noqa: SIM905


class PayuRefundRefused(RefundRefused):
    """PayU refused the refund for good (unknown or unpaid order, more than is left...)."""


class PayuProvider:
    """PayU, implementing `payorch.providers.base.Provider` and `TakesCredentialFields`."""

    name = "payu"
    display_name = "PayU"
    event_delivery: EventDelivery = "signed_per_payment_url"
    key_format = (
        "Five values of one PayU point of sale (POS): posId, clientId, clientSecret, secondKey, environment."
    )
    payment_methods = PAYMENT_METHODS
    credential_fields = CREDENTIAL_FIELDS

    def __init__(self, *, public_base_url: str, api_base: str = "", timeout_s: float = 10.0) -> None:
        self._public_base_url = public_base_url.rstrip("/")
        self._client = PayuClient(api_base=api_base, timeout_s=timeout_s)

    async def keep_connections_until_cancelled(self) -> None:
        """Run for as long as the service does; close the connection pool when cancelled."""
        try:
            await trio.sleep_forever()
        finally:
            with trio.CancelScope(shield=True):
                await self._client.aclose()

    # TakesCredentialFields

    def credentials_from(self, fields: Mapping[str, str]) -> Credentials:
        """See `credentials.account_from_fields`."""
        return account_from_fields(fields).sealed_form()

    def fingerprint(self, credentials: Credentials) -> str:
        """The POS id and the client secret's last four characters."""
        return opened(credentials).fingerprint()

    # The Provider interface

    def limits(self, currency: str, payment_method: str) -> Limits | None:
        """See `methods`; None for a method or currency payorch does not offer on PayU."""
        return payu_limits(currency, payment_method)

    async def validate_credentials(self, credentials: Credentials) -> None:
        """Ask PayU for a token with the client id and secret (kept for the account's next calls).
        `CredentialsRejected` naming `clientId` and `clientSecret` when PayU answers 401."""
        account = _account(credentials, rejected=True)
        try:
            await self._client.fetch_token(account)
        except PayuApiError as error:
            if error.status in (400, 401):
                raise CredentialsRejected(
                    f"PayU refused the client id and secret ({error.code})",
                    fields=("clientId", "clientSecret"),
                ) from None
            raise _unavailable("check the credentials", error) from None

    async def register_webhook(self, credentials: Credentials, url: str) -> WebhookRegistration:
        """Nothing to register: each order names payorch's endpoint (`url`) as its `notifyUrl`.
        The secret PayU's notifications are checked with is the POS's second key."""
        return WebhookRegistration(reference=NOTIFY_URL_PER_ORDER, secret=_account(credentials).second_key)

    async def create_checkout(
        self, credentials: Credentials, request: CheckoutRequest, *, idempotency_key: str
    ) -> CheckoutCreated:
        """Place a PayU order for the request (the module's docstring: `extOrderId` makes a retry
        find the order a lost answer left). Any failure is a `ProviderError`."""
        refuse_outside_limits("PayU", self.limits(request.amount.currency, request.payment_method), request)
        account = _account(credentials)
        for placing in range(1, MAX_PLACINGS + 1):
            ext_order_id = order_ext_id(request.session_id, request.attempt, placing)
            try:
                answer = await self._client.create_order(account, self._order(account, request, ext_order_id))
            except PayuApiError as error:
                if error.code != "ERROR_ORDER_NOT_UNIQUE":
                    raise _unavailable("place the order", error) from None
                found = await self._placed_before(account, request, ext_order_id)
                if found is not None:
                    return found
                continue
            order_id, url = answer.get("orderId"), answer.get("redirectUri")
            if not isinstance(order_id, str) or not isinstance(url, str):
                raise ProviderError("PayU placed an order without its orderId or redirectUri")
            return CheckoutCreated(reference=order_id, url=url)
        raise ProviderError(f"PayU refused {MAX_PLACINGS} orders of the attempt as placed before")

    async def submit_refund(
        self, credentials: Credentials, request: RefundRequest, *, idempotency_key: str
    ) -> RefundSubmitted:
        """Refund the order with `extRefundId` = payorch's refund id (PayU refunds one
        `extRefundId` once). `PayuRefundRefused` when PayU will never accept it (a 4xx other than
        401 and 429: unknown or unpaid order, more than is left); `ProviderError` otherwise."""
        account = _account(credentials)
        refund = {
            "description": f"Refund {request.refund_id}",
            "amount": str(request.amount.minor),
            "currencyCode": request.amount.currency,
            "extRefundId": str(request.refund_id),
        }
        try:
            answer = await self._client.refund(account, request.payment_reference, refund)
        except PayuApiError as error:
            if error.status is not None and 400 <= error.status < 500 and error.status not in (401, 429):
                raise PayuRefundRefused(f"PayU refused the refund: {error}") from None
            raise _unavailable("refund", error) from None
        created = answer.get("refund")
        reference = created.get("refundId") if isinstance(created, dict) else None
        if not isinstance(reference, str):
            raise ProviderError("PayU answered the refund without its refundId")
        return RefundSubmitted(reference=reference)

    async def close_checkout(self, credentials: Credentials, reference: str) -> CheckoutClosed:
        """Cancel the order `reference`. PayU refuses to cancel a `COMPLETED` order: the order's
        status then says it was paid. An order neither cancelled nor paid is a `ProviderError`."""
        account = _account(credentials)
        try:
            await self._client.cancel_order(account, reference)
        except PayuApiError as error:
            if error.status is None or error.status >= 500 or error.status in (401, 429):
                raise _unavailable("cancel the order", error) from None
        else:
            return CheckoutClosed.CLOSED
        try:
            order = await self._client.order(account, reference)
        except PayuApiError as error:
            raise _unavailable("read the order it could not cancel", error) from None
        status = order.get("status") if order is not None else None
        if status == "COMPLETED":
            return CheckoutClosed.PAID
        if status == "CANCELED":
            return CheckoutClosed.CLOSED
        raise ProviderError(f"PayU does not allow cancelling order {reference} ({status})")

    async def checkout_state(self, credentials: Credentials, reference: str) -> CheckoutState:
        """The order `reference` as its customer comes back (`notifications.order_state`).
        `ProviderError` when PayU cannot be asked or the account does not have the order."""
        try:
            order = await self._client.order(_account(credentials), reference)
        except PayuApiError as error:
            raise _unavailable("read the order", error) from None
        if order is None:
            raise ProviderError(f"PayU does not know order {reference}")
        return order_state(order)

    def parse_event(self, headers: Mapping[str, str], body: bytes, secret: str) -> ProviderEvent:
        """Check `OpenPayu-Signature` with the second key (`secret`), then read the notification."""
        verify(headers, body, secret)
        return parse_notification(body)

    async def resolve_event(self, credentials: Credentials, event: ProviderEvent) -> list[ProviderEvent]:
        """`[event]`, except for a refund notification naming PayU's `refundId` only: payorch's
        refund id is then the `extRefundId` of that refund among the order's (none: not payorch's)."""
        order_id, refund_reference = event.payment_reference, event.refund_reference
        if event.refund_id is not None or order_id is None or refund_reference is None:
            return [event]
        if event.kind not in (EventKind.REFUND_SUCCEEDED, EventKind.REFUND_FAILED):
            return [event]
        try:
            refunds = await self._client.refunds(_account(credentials), order_id)
        except PayuApiError as error:
            if error.status == 404:
                return []
            raise _unavailable("read the order's refunds", error) from None
        refund_id = refund_id_of(refunds, refund_reference)
        return [] if refund_id is None else [replace(event, refund_id=refund_id)]

    # PayU's side

    async def _placed_before(
        self, account: PayuAccount, request: CheckoutRequest, ext_order_id: str
    ) -> CheckoutCreated | None:
        """The order placed before under `ext_order_id` when it is paid or being paid (the session's
        checkout: the customer goes through payorch's way back); None once an order nobody saw is
        cancelled, so that the next `extOrderId` may be placed."""
        try:
            found = await self._client.order_by_ext_id(account, ext_order_id)
            if found is None or not isinstance(found.get("orderId"), str):
                raise ProviderError(f"PayU refused {ext_order_id} as placed before but does not show it")
            order_id, status = found["orderId"], found.get("status")
            if status in _BEING_PAID:
                back = return_url(self._public_base_url, request.session_id, request.attempt)
                return CheckoutCreated(reference=order_id, url=back)
            if status != "CANCELED":
                await self._client.cancel_order(account, order_id)
        except PayuApiError as error:
            raise _unavailable("find the order placed before", error) from None
        log.info(
            "cancelled a PayU order whose answer was lost; placing the next", extra={"orderId": order_id}
        )
        return None

    def _order(self, account: PayuAccount, request: CheckoutRequest, ext_order_id: str) -> dict[str, Any]:
        total = str(request.amount.minor)
        description = f"Order {request.order_reference}"[:_DESCRIPTION_MAX]
        order: dict[str, Any] = {
            "extOrderId": ext_order_id,
            "notifyUrl": provider_events_url(self._public_base_url, self.name, request.application_id),
            # Back through payorch: it reads the order there and sends the customer on (the
            # merchant's URLs, payorch's result page) or to the next attempt's checkout.
            "continueUrl": return_url(self._public_base_url, request.session_id, request.attempt),
            "customerIp": _CUSTOMER_IP,
            "merchantPosId": account.pos_id,
            "description": description,
            "currencyCode": request.amount.currency,
            "totalAmount": total,
            "validityTime": str(
                validity_seconds(request.expires_at.timestamp(), request.requested_at.timestamp())
            ),
            "products": _products(request) or [{"name": description, "unitPrice": total, "quantity": "1"}],
        }
        buyer: dict[str, str] = {}
        if request.customer_email:
            buyer["email"] = request.customer_email
        language = (request.locale or "").partition("_")[0]
        if language in _LANGUAGES:
            buyer["language"] = language
        if buyer:
            order["buyer"] = buyer
        method = PAYU_METHODS.get(request.payment_method)
        if method is not None:
            order["payMethods"] = {"payMethod": {"type": "PBL", "value": method}}
        return order


def _products(request: CheckoutRequest) -> list[dict[str, str]]:
    """The session's order items as PayU's products (unit prices in minor units)."""
    products = []
    for item in request.order_items:
        try:
            price = Money.from_major(Decimal(str(item["unitPrice"])), request.amount.currency)
            products.append(
                {
                    "name": str(item["name"])[:255],
                    "unitPrice": str(price.minor),
                    "quantity": str(item["quantity"]),
                }
            )
        except (KeyError, ArithmeticError, ValueError):
            return []
    return products


def _account(credentials: Credentials, *, rejected: bool = False) -> PayuAccount:
    """The PayU account `credentials` hold; `ProviderError` (`CredentialsRejected` when `rejected`)
    for anything else."""
    try:
        return opened(credentials)
    except ValueError as error:
        if rejected:
            raise CredentialsRejected(str(error)) from None
        raise ProviderError(str(error)) from None


def _unavailable(action: str, error: PayuApiError) -> ProviderError:
    if error.status == 401:
        return ProviderError(f"PayU refused the stored credentials, could not {action}: {error}")
    return ProviderError(f"PayU could not {action}: {error}", provider_wide=error.provider_wide)
