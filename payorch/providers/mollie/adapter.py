"""`MollieProvider`: payorch's adapter for Mollie (the `Provider` interface), on Mollie's official
Python SDK (`mollie-api-python`).

- Linking lists one payment (the cheapest call that needs a valid API key). Mollie's Webhooks API
  (next-gen webhooks) takes an organization access token, never an API key, and carries no payment
  status changes: payorch gives Mollie its endpoint with each payment instead (`webhookUrl`), so
  linking registers nothing at Mollie (`WEBHOOK_PER_PAYMENT`).
- A checkout is a Mollie payment on Mollie's hosted checkout (`_links.checkout.href`), with the
  method chosen (`amounts.MOLLIE_METHODS`), payorch's ids in its metadata, and payorch's endpoint as
  its `webhookUrl`.
- Mollie's webhook names the payment only (`events`): `resolve_event` reads the payment, its refunds
  and chargebacks with the stored key, and what it reads is what payorch applies.
- A refund is a Mollie refund of the payment (Refunds API), tagged with payorch's refund id.
- When payorch expires a session it cancels the Mollie payment where Mollie allows it
  (`isCancelable`), so the customer cannot pay after the merchant was told `session.expired`.
- What Mollie settled (settlements, their payments, refunds, chargebacks and costs) is read for
  reconciliation with the organization access token an account may be linked with besides its API
  key (`credentials`, `settlements`); without one, reading raises `OrganizationTokenMissing`.
- Mollie sends the customer back after any final status (`redirectUrl`, `cancelUrl` when they
  cancel): both are payorch's return route (`providers.base.return_url`), where `checkout_state`
  reads the payment (`events.payment_state`).

The SDK is synchronous (`requests`): each operation runs in a worker thread, at most
`max_concurrent_calls` at once and a quarter of those for one account (`threads`), and is abandoned
when payorch's deadline cancels it (the thread finishes within the SDK's own timeout, `timeout_s`,
holding its places until then). Every call that changes something carries the idempotency key
payorch derives from its own ids, so an abandoned call that reached Mollie and the retry that
follows make one payment, one refund. Mollie's errors become `ProviderError` (routing counts it and
cascades), `RefundRefused` or `CredentialsRejected` as the interface says; messages carry Mollie's
reason, never the key.
"""

from __future__ import annotations

import logging
import math
from collections.abc import AsyncIterator, Callable, Mapping
from datetime import date
from functools import partial
from typing import Any, Final, TypeVar, cast

import trio
from mollie.api.client import Client
from mollie.api.error import (
    ConflictError,
    Error,
    IdentifierError,
    NotFoundError,
    RequestError,
    RequestSetupError,
    ResponseError,
    ResponseHandlingError,
    UnauthorizedError,
)
from mollie.api.resources.chargebacks import PaymentChargebacks
from mollie.api.resources.refunds import PaymentRefunds

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
from payorch.providers.mollie import settlements
from payorch.providers.mollie.amounts import MOLLIE_METHODS, PAYMENT_METHODS, mollie_limits, to_mollie_amount
from payorch.providers.mollie.credentials import (
    API_KEY,
    CREDENTIAL_FIELDS,
    KEY_FORMAT,
    MollieAccount,
    account_from_fields,
    opened,
)
from payorch.providers.mollie.events import (
    chargeback_outcome,
    has_link,
    parse_webhook,
    payment_outcome,
    payment_state,
    refund_outcome,
)
from payorch.providers.mollie.threads import AccountThreads
from payorch.providers.settlements import (
    PageReads,
    Payout,
    SettledItem,
    SettlementsBusy,
    ask_once,
    retry_after_s,
)
from payorch.values.secretbox import key_fingerprint

log = logging.getLogger("payorch.providers.mollie")
T = TypeVar("T")

# What linking registers: nothing at Mollie; each payment carries payorch's endpoint as `webhookUrl`.
WEBHOOK_PER_PAYMENT: Final = "webhookUrl per payment"
_DESCRIPTION_MAX: Final = 255  # Mollie's limit on a payment's description
_LIST_LIMIT: Final = 250  # Mollie's largest page of refunds or chargebacks
# The locales Mollie's checkout speaks (create-payment `locale`); payorch's are the same `xx_YY` form.
_LOCALES: Final = frozenset(
    "en_US en_GB nl_NL nl_BE de_DE de_AT de_CH fr_FR fr_BE es_ES ca_ES pt_PT it_IT nb_NO sv_SE fi_FI "  # noqa: SIM905
    "da_DK is_IS hu_HU pl_PL lv_LV lt_LT".split()
)
_PAID: Final = frozenset({"paid", "authorized"})
_CLOSED: Final = frozenset({"canceled", "expired", "failed"})


class MollieRefundRefused(RefundRefused):
    """Mollie refused the refund for good (unknown or unpaid payment, more than is left...)."""


def cancel_key(payment_reference: str) -> str:
    """The Idempotency-Key of cancelling a payment at expiry: one cancellation however often asked."""
    return f"payorch-cancel-{payment_reference}"


class MollieProvider:
    """Mollie, implementing `payorch.providers.base.Provider`. Each call authenticates with the
    linked account's API key, in a client of its own."""

    name = "mollie"
    display_name = "Mollie"
    event_delivery: EventDelivery = "per_payment_url"
    key_format = KEY_FORMAT
    payment_methods = PAYMENT_METHODS
    credential_fields = CREDENTIAL_FIELDS
    settlement_lag_days = settlements.SETTLEMENT_LAG_DAYS

    def __init__(
        self,
        *,
        public_base_url: str,
        api_base: str = "",
        timeout_s: float = 10.0,
        max_concurrent_calls: int = 16,
    ) -> None:
        self._public_base_url = public_base_url.rstrip("/")
        self._api_base = api_base
        # The SDK takes whole seconds (connect and read); payorch's deadlines are usually shorter.
        self._timeout_s = max(1, math.ceil(timeout_s))
        # A quarter of the threads at most for one account: a merchant whose calls pile up waits on
        # its own share, never on the others' (`threads`).
        self._threads = AccountThreads(max_concurrent_calls, per_account=max(1, max_concurrent_calls // 4))

    # TakesCredentialFields: the API key, and optionally an organization access token

    def credentials_from(self, fields: Mapping[str, str]) -> Credentials:
        """See `credentials.account_from_fields`: an API key alone is sealed as it always was."""
        return account_from_fields(fields).sealed_form()

    def fingerprint(self, credentials: Credentials) -> str:
        """The API key's fingerprint, as for any key."""
        return key_fingerprint(opened(credentials).api_key)

    # The Provider interface

    def limits(self, currency: str, payment_method: str) -> Limits | None:
        """See `amounts`; None for a method or currency payorch does not offer on Mollie."""
        return mollie_limits(currency, payment_method)

    async def validate_credentials(self, credentials: Credentials) -> None:
        """List one payment: the cheapest call that needs a valid API key. `CredentialsRejected`
        with Mollie's reason when it answers 401, or when the key is not a Mollie API key at all."""
        account = opened(credentials)
        if not API_KEY.fullmatch(account.api_key):
            raise CredentialsRejected("Mollie API keys start with live_ or test_")
        try:
            await self._run(credentials, lambda client: client.payments.list(limit=1))
        except UnauthorizedError as error:
            raise CredentialsRejected(f"Mollie answered 401: {_reason(error)}") from None
        except Error as error:
            raise _unavailable("check the key", error) from error
        if account.organization_token is None:
            return
        try:  # the token's scopes: it reads settlements
            await self._run(credentials, lambda client: client.settlements.list(limit=1), organization=True)
        except ResponseError as error:
            if error.status in (401, 403):
                raise CredentialsRejected(
                    f"Mollie answered {error.status} for the organization access token: {_reason(error)}",
                    fields=("organizationToken",),
                ) from None
            raise _unavailable("check the organization access token", error) from error
        except Error as error:
            raise _unavailable("check the organization access token", error) from error

    async def register_webhook(self, credentials: Credentials, url: str) -> WebhookRegistration:
        """Nothing to register: Mollie's Webhooks API does not take API keys, so each payment names
        payorch's endpoint (`provider_events_url`, the same as `url`) as its `webhookUrl`. Mollie's
        classic webhook is unsigned: there is no secret, its calls are checked by reading the payment."""
        return WebhookRegistration(reference=WEBHOOK_PER_PAYMENT, secret="")

    async def create_checkout(
        self, credentials: Credentials, request: CheckoutRequest, *, idempotency_key: str
    ) -> CheckoutCreated:
        """Create a Mollie payment; `idempotency_key` is its `Idempotency-Key`, so a retry (or a call
        abandoned by a timeout, then retried) gets the same payment. Any failure is a `ProviderError`:
        routing counts it and tries the next provider."""
        refuse_outside_limits("Mollie", self.limits(request.amount.currency, request.payment_method), request)
        params = self._payment_params(request)
        try:
            payment = await self._run(
                credentials,
                lambda client: dict(client.payments.create(params, idempotency_key=idempotency_key)),
            )
        except Error as error:
            raise _unavailable("create the payment", error) from error
        reference, url = payment.get("id"), _link(payment, "checkout")
        if not isinstance(reference, str) or url is None:
            raise ProviderError(f"Mollie created payment {reference} without a checkout link")
        return CheckoutCreated(reference=reference, url=url)

    async def submit_refund(
        self, credentials: Credentials, request: RefundRequest, *, idempotency_key: str
    ) -> RefundSubmitted:
        """Refund the payment through Mollie's Refunds API; `idempotency_key` makes a retry refund
        only once. `MollieRefundRefused` when Mollie will never accept it (400, 404, 422: unknown or
        unpaid payment, more than is left); `ProviderError` when it failed or could not be reached."""
        params = {
            "amount": to_mollie_amount(request.amount),
            "metadata": {
                "payorch_refund_id": str(request.refund_id),
                "payorch_session_id": str(request.session_id),
            },
        }

        def refund(client: Client) -> dict[str, Any]:
            payment = client.payments.get(request.payment_reference)
            return dict(PaymentRefunds(client, payment).create(params, idempotency_key=idempotency_key))

        try:
            created = await self._run(credentials, refund)
        except IdentifierError:
            raise MollieRefundRefused(f"{request.payment_reference} is not a Mollie payment") from None
        except ResponseError as error:
            if error.status in (400, 404, 422):
                raise MollieRefundRefused(f"Mollie refused the refund: {_described(error)}") from None
            raise _unavailable("refund", error) from error
        except Error as error:
            raise _unavailable("refund", error) from error
        reference = created.get("id")
        if not isinstance(reference, str):
            raise ProviderError("Mollie answered the refund without its id")
        return RefundSubmitted(reference=reference)

    async def close_checkout(self, credentials: Credentials, reference: str) -> CheckoutClosed:
        """Cancel the payment `reference`. Mollie cancels only a payment it says `isCancelable`; for
        any other the payment's status says whether it was paid. A payment that is still open and
        may not be cancelled is a `ProviderError`: it expires at Mollie by itself, and a payment made
        before then still succeeds the session (`engine.payments.expiry`)."""

        def close(client: Client) -> str:
            try:
                payment: Mapping[str, Any] = client.payments.delete(
                    reference, idempotency_key=cancel_key(reference)
                )
            except ResponseError as error:
                if error.status != 422:  # 422: Mollie does not allow cancelling it (any more)
                    raise
                payment = client.payments.get(reference)
            return str(payment.get("status"))

        try:
            status = await self._run(credentials, close)
        except Error as error:
            raise _unavailable("cancel the payment", error) from error
        if status in _PAID:
            return CheckoutClosed.PAID
        if status in _CLOSED:
            return CheckoutClosed.CLOSED
        raise ProviderError(f"Mollie does not allow cancelling payment {reference} ({status})")

    async def checkout_state(self, credentials: Credentials, reference: str) -> CheckoutState:
        """The payment `reference` as its customer comes back (`ReportsCheckoutState`,
        `events.payment_state`). `ProviderError` when Mollie cannot be asked or the key cannot
        read the payment."""
        try:
            payment = await self._run(credentials, lambda client: client.payments.get(reference))
        except Error as error:
            raise _unavailable("read the payment", error) from error
        return payment_state(payment)

    def parse_event(self, headers: Mapping[str, str], body: bytes, secret: str) -> ProviderEvent:
        """The payment a webhook call names (`events.parse_webhook`); nothing in it is trusted: the
        call is unsigned (`secret` is empty), and `resolve_event` reads the payment from Mollie."""
        return parse_webhook(body)

    async def resolve_event(self, credentials: Credentials, event: ProviderEvent) -> list[ProviderEvent]:
        """What the payment a webhook names says, read from Mollie with the stored key: its final
        status, its refunds' outcomes, its chargebacks (`events`). A payment the key cannot read
        (a forged id, another account's) is nothing of payorch's: no events. `ProviderError` when
        Mollie cannot be asked (payorch answers 502 and Mollie calls again)."""
        reference = event.payment_reference
        if event.kind is not EventKind.PROVIDER_OBJECT_CHANGED or reference is None:
            return [event]

        def read(client: Client) -> list[ProviderEvent]:
            payment = client.payments.get(reference)
            found = [payment_outcome(payment)]
            if has_link(payment, "refunds"):
                refunds = PaymentRefunds(client, payment).list(limit=_LIST_LIMIT)
                found += [refund_outcome(payment, r) for r in _embedded(refunds, "refunds")]
            if has_link(payment, "chargebacks"):
                chargebacks = PaymentChargebacks(client, payment).list(limit=_LIST_LIMIT)
                found += [chargeback_outcome(payment, c) for c in _embedded(chargebacks, "chargebacks")]
            return [each for each in found if each is not None]

        try:
            return await self._run(credentials, read)
        except (NotFoundError, IdentifierError):
            return []
        except Error as error:
            raise _unavailable("read the payment its webhook names", error) from error

    # What Mollie settled (`providers.settlements`, `settlements`)

    async def settled_items(
        self, credentials: Credentials, first: date, last: date, reads: PageReads = ask_once
    ) -> AsyncIterator[SettledItem]:
        """The payments, refunds, chargebacks and costs of every settlement paid out on the UTC days
        `first` to `last`, each page read through `reads`. `OrganizationTokenMissing` for an account
        linked without one; `SettlementsBusy` for a page Mollie answered 429 or 5xx (or not at all),
        `ProviderError` for any other failure."""
        async for payout in self.payouts(credentials, first, last, reads):
            async for item in self.payout_items(credentials, payout, reads):
                yield item

    async def payouts(
        self, credentials: Credentials, first: date, last: date, reads: PageReads = ask_once
    ) -> AsyncIterator[Payout]:
        """The settlements paid out on the UTC days `first` to `last`, newest first; errors as above."""
        cursor: str | None = None
        while True:
            found, cursor = await self._read_settlements(
                credentials,
                "list the settlements",
                partial(settlements.settlements_page, cursor=cursor),
                reads,
            )
            for each in found:
                payout = settlements.payout(each)
                if payout is not None and first <= payout.arrives_on <= last:
                    yield payout
            if cursor is None or settlements.is_older(found, first):
                return

    async def payout_items(
        self, credentials: Credentials, payout: Payout, reads: PageReads = ask_once
    ) -> AsyncIterator[SettledItem]:
        """The payments, refunds and chargebacks the settlement `payout` carried, and its costs."""
        for which, (_, name, kind) in enumerate(settlements.ITEM_LISTS):
            cursor: str | None = None
            while True:
                found, cursor = await self._read_settlements(
                    credentials,
                    f"list the settlement's {name}",
                    partial(
                        settlements.items_page, settlement_id=payout.payout_id, which=which, cursor=cursor
                    ),
                    reads,
                )
                for each in found:
                    yield settlements.settled_item(each, kind, payout)
                if cursor is None:
                    break
        settled = await self._read_settlements(
            credentials,
            "read the settlement",
            lambda client: settlements.settlement(client, payout.payout_id),
            reads,
        )
        for item in settlements.cost_items(settled, payout):
            yield item

    async def _read_settlements(
        self, credentials: Credentials, action: str, work: Callable[[Client], T], reads: PageReads
    ) -> T:
        """`work` with the account's organization access token, asked once per try of `reads`:
        `SettlementsBusy` for a 429 (with its `Retry-After`), a 5xx or no answer, any other error of
        Mollie's as `ProviderError`."""
        if opened(credentials).organization_token is None:
            raise settlements.OrganizationTokenMissing()

        async def once() -> T:
            answered = settlements.RetryAfter()
            try:
                return await self._run(credentials, answered.remembered(work), organization=True)
            except Error as error:
                if _busy(error):
                    raise SettlementsBusy(
                        f"Mollie could not {action}: {_described(error)}",
                        retry_after_s=retry_after_s(answered.value),
                        provider_wide=_provider_wide(error),
                    ) from error
                raise _unavailable(action, error) from error

        return await reads(once)

    # The SDK, off the Trio thread

    async def _run(
        self, credentials: Credentials, work: Callable[[Client], T], *, organization: bool = False
    ) -> T:
        """`work(client)` in a worker thread, with a client of its own for `credentials` (their
        organization access token when `organization`, else their API key); abandoned (left to
        finish within the SDK's timeout) when the caller is cancelled."""
        account = opened(credentials)
        if not API_KEY.fullmatch(account.api_key):
            raise ProviderError("the stored key is not a Mollie API key")
        api_base, timeout_s = self._api_base, self._timeout_s

        def in_thread() -> T:
            client = Client(api_endpoint=api_base, timeout=timeout_s, retry=0)
            _authenticate(client, account, organization)
            try:
                return work(client)
            finally:
                session = getattr(client, "_client", None)  # created by the first request
                if session is not None:
                    session.close()

        # Trio takes any "CapacityLimiter-like object" (acquire/release_on_behalf_of); its type says
        # CapacityLimiter only.
        limiter = cast(trio.CapacityLimiter, self._threads.limiter(account.api_key))
        return await trio.to_thread.run_sync(in_thread, abandon_on_cancel=True, limiter=limiter)

    def _payment_params(self, request: CheckoutRequest) -> dict[str, Any]:
        back = return_url(self._public_base_url, request.session_id, request.attempt)
        params: dict[str, Any] = {
            "amount": to_mollie_amount(request.amount),
            "description": f"Order {request.order_reference}"[:_DESCRIPTION_MAX],
            "method": MOLLIE_METHODS[request.payment_method],
            # Back through payorch after any final status: it reads the payment there and sends the
            # customer on (the merchant's URLs, or payorch's result page) or to the next attempt.
            "redirectUrl": back,
            "cancelUrl": back,
            "webhookUrl": provider_events_url(self._public_base_url, self.name, request.application_id),
            "metadata": {
                "payorch_session_id": str(request.session_id),
                "payorch_application_id": str(request.application_id),
            },
        }
        if request.locale in _LOCALES:
            params["locale"] = request.locale
        return params


def _authenticate(client: Client, account: MollieAccount, organization: bool) -> None:
    if organization and account.organization_token is not None:
        client.set_access_token(account.organization_token)
    else:
        client.set_api_key(account.api_key)


def _embedded(listing: Mapping[str, Any], name: str) -> list[Mapping[str, Any]]:
    """The objects of a Mollie list (HAL `_embedded`), read as the plain dict the SDK's list is."""
    embedded = dict.get(listing, "_embedded") if isinstance(listing, dict) else listing.get("_embedded")
    items = embedded.get(name) if isinstance(embedded, dict) else None
    return [item for item in items if isinstance(item, dict)] if isinstance(items, list) else []


def _link(found: Mapping[str, Any], name: str) -> str | None:
    links = found.get("_links")
    link = links.get(name) if isinstance(links, dict) else None
    href = link.get("href") if isinstance(link, dict) else None
    return href if isinstance(href, str) else None


def _reason(error: Error) -> str:
    """Mollie's `detail` (or the SDK's description of what failed), first line, bounded."""
    text = str(error).strip()
    return text.splitlines()[0][:300] if text else type(error).__name__


def _described(error: Error) -> str:
    """Mollie's status and reason, for logs and error details; never the key."""
    if isinstance(error, ResponseError):
        return f"{error.status} {type(error).__name__}: {_reason(error)}"
    if isinstance(error, ResponseHandlingError):
        return "an answer that is not Mollie's JSON"
    return f"{type(error).__name__}: {_reason(error)}"


def _unavailable(action: str, error: Error) -> ProviderError:
    if isinstance(error, UnauthorizedError):
        return ProviderError(f"Mollie rejected the stored key, could not {action}: {_described(error)}")
    if isinstance(error, ConflictError):
        return ProviderError(f"Mollie is still working on the same request, could not {action}")
    return ProviderError(
        f"Mollie could not {action}: {_described(error)}", provider_wide=_provider_wide(error)
    )


def _busy(error: Error) -> bool:
    """A 429, a 5xx or no answer at all: worth asking again later."""
    if isinstance(error, ResponseError):
        return error.status is None or int(error.status) == 429 or int(error.status) >= 500
    return isinstance(error, RequestError) and not isinstance(error, RequestSetupError)


def _provider_wide(error: Error) -> bool:
    """Mollie unreachable, answering 5xx or something that is not its JSON: Mollie's failure. A 4xx
    (a 429 included) or a request the SDK refused to send is about the account or the request alone
    (docs/routing.md)."""
    if isinstance(error, ResponseError):
        return error.status is None or int(error.status) >= 500
    if isinstance(error, RequestSetupError):
        return False
    return isinstance(error, RequestError | ResponseHandlingError)
