"""`SandboxProvider`: payorch's adapter for the built-in simulated provider.

The sandbox lives in-process but is treated like any external provider: payorch reaches it only
through this adapter, it keeps its own tables (`storage.sandbox`), and it reports outcomes
asynchronously as signed events POSTed to the endpoints registered with it (`sender.py`).

Accepted amounts, inclusive:
- `card` and `apple_pay`: every ISO 4217 currency, from 1 minor unit up to one million major units
  less one minor unit (999,999.99 USD, 999,999 JPY, 999,999.999 KWD);
- `blik`: PLN only, from 0.01 PLN up to 50,000.00 PLN.

Sandbox API keys are `sk_sandbox_` followed by at least 8 of `A-Z a-z 0-9 _`; the sandbox account
is the SHA-256 hex of the key, so applications linked with one key share one account.
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import date
from typing import Any

import asyncpg

from payorch.config import SandboxFees
from payorch.providers.base import (
    CheckoutClosed,
    CheckoutCreated,
    CheckoutRequest,
    CheckoutState,
    CheckoutToClaim,
    CheckoutToStore,
    Credentials,
    CredentialsRejected,
    EventDelivery,
    EventKind,
    EventRejected,
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
from payorch.providers.sandbox import simulator
from payorch.providers.sandbox.settlements import SandboxSettlements
from payorch.providers.sandbox.signing import SignatureInvalid, new_signing_secret, verify_signature
from payorch.providers.settlements import PageReads, Payout, SettledItem, ask_once
from payorch.storage import sandbox as store
from payorch.storage.database import Connection, Database
from payorch.storage.database_thread import on_database_thread
from payorch.storage.failures import StorageFailure, storage_failure
from payorch.storage.idempotency_keys import ClaimTerms
from payorch.storage.sessions import AnsweredSession
from payorch.values.clock import SYSTEM_CLOCK, Clock
from payorch.values.money import UnknownCurrency, currency_exponent
from payorch.values.secretbox import SecretBox
from payorch.values.statuses import FailureReason

_API_KEY = re.compile(r"sk_sandbox_[A-Za-z0-9_]{8,}")
_CARD_MAX_MAJOR = 1_000_000  # exclusive: the largest amount is one minor unit less
_BLIK_LIMITS = Limits(min_minor=1, max_minor=5_000_000)  # 0.01 to 50,000.00 PLN

_KIND_OF_EVENT: dict[str, EventKind] = {
    simulator.EventType.CHECKOUT_PAID: EventKind.PAYMENT_SUCCEEDED,
    simulator.EventType.CHECKOUT_PAYMENT_FAILED: EventKind.PAYMENT_DECLINED,
    simulator.EventType.DISPUTE_LOST: EventKind.DISPUTE_LOST,
    simulator.EventType.REFUND_SUCCEEDED: EventKind.REFUND_SUCCEEDED,
    simulator.EventType.REFUND_FAILED: EventKind.REFUND_FAILED,
}
# The sandbox's failure codes -> payorch's failure reasons; a code not listed here is PAYMENT_FAILED.
_REASON_OF_CODE = {
    simulator.CARD_DECLINED: FailureReason.CARD_DECLINED,
    simulator.INSUFFICIENT_FUNDS: FailureReason.INSUFFICIENT_FUNDS,
    simulator.LOST_OR_STOLEN_CARD: FailureReason.LOST_OR_STOLEN_CARD,
    simulator.PAYMENT_FAILED: FailureReason.PAYMENT_FAILED,
}


class SandboxRefundRefused(RefundRefused):
    """The sandbox refused a refund (unknown or unpaid checkout, or beyond the amount paid)."""


def sandbox_account(credentials: Credentials) -> str:
    """The sandbox account `credentials` belong to; `CredentialsRejected` unless they look like a
    sandbox API key."""
    if not _API_KEY.fullmatch(credentials.api_key):
        raise CredentialsRejected("sandbox API keys are sk_sandbox_ and at least 8 of A-Z a-z 0-9 _")
    return hashlib.sha256(credentials.api_key.encode()).hexdigest()


@contextmanager
def _unavailable_as_provider_error() -> Iterator[None]:
    """The sandbox's database failing is the provider failing: callers count it and move on. But
    for one failure: the sandbox's database is payorch's own, and when that database is unavailable
    (no primary during a failover, a connection lost), the error is raised as it is: the request
    fails as any unit of work on it does (503, a retry succeeds), and the sandbox's routing health is
    not blamed for it (a circuit opened then would refuse its sessions long after the database is
    back)."""
    try:
        yield
    except (asyncpg.PostgresError, asyncpg.InterfaceError, OSError) as exc:
        if storage_failure(exc) is StorageFailure.UNAVAILABLE:
            raise
        raise ProviderError(f"sandbox unavailable: {type(exc).__name__}", provider_wide=True) from exc


class SandboxProvider:
    """The simulated provider, implementing `payorch.providers.base.Provider`."""

    name = "sandbox"
    display_name = "Sandbox (test mode)"
    event_delivery: EventDelivery = "registered_endpoint"
    key_format = (
        "sk_sandbox_ followed by 8 or more letters, digits or _, such as sk_sandbox_webshop1. Any such "
        "key works, there is nothing to sign up for; applications linked with the same key share one "
        "sandbox account."
    )
    payment_methods = frozenset({"card", "blik", "apple_pay"})

    def __init__(
        self,
        db: Database,
        secrets: SecretBox,
        *,
        public_base_url: str,
        refund_delay_ms: int = 500,
        dispute_delay_ms: int = 2000,
        settlement_lag_days: int = 1,
        settlement_fees: SandboxFees | None = None,
        clock: Clock = SYSTEM_CLOCK,
    ) -> None:
        self.clock = clock  # the sandbox's time is payorch's: its checkouts expire with the sessions
        self.settlement_lag_days = settlement_lag_days
        self.settlements = SandboxSettlements(
            db, clock, settlement_lag_days, settlement_fees or SandboxFees()
        )
        self._db = db
        self._secrets = secrets
        self._public_base_url = public_base_url.rstrip("/")
        self._refund_delay_ms = refund_delay_ms
        self._dispute_delay_ms = dispute_delay_ms

    # The Provider interface

    def limits(self, currency: str, payment_method: str) -> Limits | None:
        """See the module docstring; None for a method or currency the sandbox does not take."""
        if payment_method == "blik":
            return _BLIK_LIMITS if currency == "PLN" else None
        if payment_method not in self.payment_methods:
            return None
        try:
            exponent = currency_exponent(currency)
        except UnknownCurrency:
            return None
        return Limits(min_minor=1, max_minor=_CARD_MAX_MAJOR * 10**exponent - 1)

    async def validate_credentials(self, credentials: Credentials) -> None:
        """Accept any key of the sandbox's format: the sandbox opens an account for every such key."""
        sandbox_account(credentials)

    async def register_webhook(self, credentials: Credentials, url: str) -> WebhookRegistration:
        """Send the account's events to `url`, signed with a fresh secret (stored sealed). Registering
        the same URL again keeps the endpoint and replaces its secret."""
        account = sandbox_account(credentials)
        secret = new_signing_secret()
        with _unavailable_as_provider_error():
            endpoint_id = await self._db.transaction(
                store.save_webhook_endpoint,
                endpoint_id=simulator.new_id("we_sbx_"),
                account=account,
                url=url,
                sealed_secret=self._secrets.seal(secret),
                now=self.clock.now(),
            )
        return WebhookRegistration(reference=endpoint_id, secret=secret)

    async def create_checkout(
        self, credentials: Credentials, request: CheckoutRequest, *, idempotency_key: str
    ) -> CheckoutCreated:
        """Open a hosted checkout; the same key gives back the same checkout (`ProviderError` if the
        key was used for another session or amount)."""
        new = self._new_checkout(credentials, request, idempotency_key)
        with _unavailable_as_provider_error():
            checkout, _ = await self._db.autocommit(
                store.insert_checkout, new, now=self.clock.now()
            )  # one statement
        return self._created(new, checkout)

    def checkout_to_store(
        self, credentials: Credentials, request: CheckoutRequest, *, idempotency_key: str
    ) -> CheckoutToStore:
        """The checkout `create_checkout` would make, not stored (`CheckoutInDatabase`)."""
        new = self._new_checkout(credentials, request, idempotency_key)
        return CheckoutToStore(self._answer(new.id), new)

    @on_database_thread
    async def store_with_sessions(
        self, conn: Connection, stored: Sequence[tuple[CheckoutToStore, AnsweredSession]]
    ) -> None:
        """Store the checkouts with their sessions in one round trip (`CheckoutInDatabase`)."""
        rows = [(checkout.row, answered) for checkout, answered in stored]
        await store.insert_checkouts_with_sessions(conn, rows, now=self.clock.now())

    @on_database_thread
    async def claim_and_store_with_sessions(
        self, conn: Connection, stored: Sequence[CheckoutToClaim], terms: ClaimTerms
    ) -> None:
        """Claim the sessions' keys and store the checkouts with their sessions, in one round trip
        (`CheckoutInDatabase`)."""
        rows = [(checkout.row, answered, fingerprint) for checkout, answered, fingerprint in stored]
        await store.insert_checkouts_with_claimed_sessions(conn, rows, terms)

    @on_database_thread
    async def claim_and_store_together(
        self, conn: Connection, batches: Sequence[tuple[Sequence[CheckoutToClaim], ClaimTerms]]
    ) -> None:
        """`claim_and_store_with_sessions` for the batches of several applications, in one round
        trip (`CheckoutInDatabase`)."""
        rows = [
            ([(checkout.row, answered, fingerprint) for checkout, answered, fingerprint in stored], terms)
            for stored, terms in batches
        ]
        await store.insert_checkouts_with_claimed_sessions_together(conn, rows)

    def _new_checkout(
        self, credentials: Credentials, request: CheckoutRequest, idempotency_key: str
    ) -> store.NewCheckout:
        account = sandbox_account(credentials)
        refuse_outside_limits(
            "sandbox", self.limits(request.amount.currency, request.payment_method), request
        )
        # The customer goes back through payorch (which reads the outcome and sends them on) when
        # there is somewhere to go back to; else the checkout's own page shows the outcome.
        back = request.success_url or request.failure_url
        way_back = return_url(self._public_base_url, request.session_id, request.attempt) if back else None
        return store.NewCheckout(
            id=simulator.new_id("cs_sbx_"),
            account=account,
            idempotency_key=idempotency_key,
            amount_minor=request.amount.minor,
            currency=request.amount.currency,
            payment_method=request.payment_method,
            order_reference=request.order_reference,
            customer_email=request.customer_email,
            client_reference=str(request.session_id),
            application_id=request.application_id,
            success_url=way_back,
            failure_url=way_back,
            expires_at=request.expires_at,
        )

    def _created(self, new: store.NewCheckout, checkout: store.SandboxCheckout) -> CheckoutCreated:
        if (checkout.client_reference, checkout.amount_minor, checkout.currency) != (
            new.client_reference,
            new.amount_minor,
            new.currency,
        ):
            raise ProviderError("sandbox: idempotency key already used for another checkout")
        return self._answer(checkout.id)

    def _answer(self, checkout_id: str) -> CheckoutCreated:
        return CheckoutCreated(reference=checkout_id, url=self.checkout_url(checkout_id))

    async def submit_refund(
        self, credentials: Credentials, request: RefundRequest, *, idempotency_key: str
    ) -> RefundSubmitted:
        """Refund a paid checkout; its outcome event follows after `refund_delay_ms`. The same key
        refunds only once. `SandboxRefundRefused` (a `ProviderError`) for a checkout that is unknown
        to the account or not paid, or when refunds would exceed what was paid."""
        order = simulator.RefundOrder(
            account=sandbox_account(credentials),
            idempotency_key=idempotency_key,
            checkout_id=request.payment_reference,
            amount_minor=request.amount.minor,
            currency=request.amount.currency,
            client_reference=str(request.refund_id),
            reason=request.reason,
        )
        try:
            with _unavailable_as_provider_error():
                refund = await self._db.transaction(
                    simulator.refund_checkout,
                    order,
                    refund_delay_ms=self._refund_delay_ms,
                    now=self.clock.now(),
                )
        except simulator.RefundRefused as exc:
            raise SandboxRefundRefused(f"sandbox refused the refund: {exc}") from None
        return RefundSubmitted(reference=refund.id)

    async def close_checkout(self, credentials: Credentials, reference: str) -> CheckoutClosed:
        """Expire the checkout now unless it is paid (after a payment of it under way); `ProviderError`
        for a checkout the account does not have."""
        account = sandbox_account(credentials)
        with _unavailable_as_provider_error():
            checkout = await self._db.transaction(
                store.close_checkout, account, reference, now=self.clock.now()
            )
        if checkout is None:
            raise ProviderError(f"sandbox: no checkout {reference!r} in this account")
        return CheckoutClosed.PAID if checkout.status == "paid" else CheckoutClosed.CLOSED

    async def checkout_state(self, credentials: Credentials, reference: str) -> CheckoutState:
        """Whether the account's checkout is paid, else its latest decline (`ReportsCheckoutState`);
        `ProviderError` for a checkout the account does not have."""
        account = sandbox_account(credentials)
        with _unavailable_as_provider_error():
            checkout = await self._db.autocommit(store.get_checkout, reference)
            if checkout is None or checkout.account != account:
                raise ProviderError(f"sandbox: no checkout {reference!r} in this account")
            if checkout.status == "paid":
                return CheckoutState(paid=True)
            code = await self._db.autocommit(store.last_failure_code, reference)
        if code is None:
            return CheckoutState(paid=False)
        return CheckoutState(paid=False, decline_code=code, decline_reason=_REASON_OF_CODE.get(code))

    def parse_event(self, headers: Mapping[str, str], body: bytes, secret: str) -> ProviderEvent:
        """Verify the `Sandbox-Signature` of `body` (300 s tolerance) and translate the event;
        `EventRejected` when it is not authentic or not a sandbox event."""
        try:
            verify_signature(headers, body, secret, now=self.clock.now().timestamp())
        except SignatureInvalid as exc:
            raise EventRejected(str(exc)) from None
        try:
            event = json.loads(body)
            event_id, event_type, data = event["id"], event["type"], event["data"]
            if not isinstance(event_id, str) or not isinstance(event_type, str) or not isinstance(data, dict):
                raise TypeError("id and type must be strings, data an object")
            kind = _KIND_OF_EVENT.get(event_type)
            if kind is None:
                return ProviderEvent(id=event_id, kind=EventKind.IGNORED)
            return ProviderEvent(
                id=event_id,
                kind=kind,
                session_id=_uuid_or_none(data.get("client_reference")),
                refund_id=_uuid_or_none(data.get("refund_client_reference")),
                checkout_reference=_str_or_none(data.get("checkout_id")),
                reason=_reason(kind, data.get("failure_code")),
            )
        except (ValueError, KeyError, TypeError) as exc:  # JSONDecodeError and bad UUIDs are ValueErrors
            raise EventRejected(f"not a sandbox event: {exc}") from None

    async def resolve_event(self, credentials: Credentials, event: ProviderEvent) -> list[ProviderEvent]:
        """Sandbox events carry payorch's ids themselves: nothing to look up."""
        return [event]

    # What it settled (`providers.settlements.ReportsSettlements`; `settlements.py` says how)

    def settled_items(
        self, credentials: Credentials, first: date, last: date, reads: PageReads = ask_once
    ) -> AsyncIterator[SettledItem]:
        """Every item the account settled on the UTC days `first` to `last` (read from payorch's own
        database: no page is ever busy, `reads` is not needed)."""
        return self.settlements.items(sandbox_account(credentials), first, last)

    def payouts(
        self, credentials: Credentials, first: date, last: date, reads: PageReads = ask_once
    ) -> AsyncIterator[Payout]:
        """Every payout of the account arriving on the UTC days `first` to `last`."""
        return self.settlements.payouts(sandbox_account(credentials), first, last)

    # The sandbox's own side, for its checkout page

    def checkout_url(self, checkout_id: str) -> str:
        return f"{self._public_base_url}/sandbox/checkout/{checkout_id}"

    async def checkout(self, checkout_id: str) -> store.SandboxCheckout | None:
        """The checkout as the page shows it; None when there is no such checkout."""
        return await self._db.autocommit(store.get_checkout, checkout_id)

    async def pay(self, checkout_id: str, entry: str) -> simulator.PaymentResult:
        """Pay the checkout with a card number or BLIK code, as its page's form does."""
        return await self._db.transaction(
            simulator.pay_checkout,
            checkout_id,
            entry,
            dispute_delay_ms=self._dispute_delay_ms,
            now=self.clock.now(),
        )


def _str_or_none(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise TypeError("expected a string")
    return value


def _uuid_or_none(value: Any) -> uuid.UUID | None:
    text = _str_or_none(value)
    return uuid.UUID(text) if text is not None else None


def _reason(kind: EventKind, failure_code: Any) -> FailureReason | None:
    if kind not in (EventKind.PAYMENT_DECLINED, EventKind.REFUND_FAILED):
        return None
    code = _str_or_none(failure_code)
    return _REASON_OF_CODE.get(code or "", FailureReason.PAYMENT_FAILED)
