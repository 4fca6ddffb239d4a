"""The one interface every payment provider adapter implements.

An adapter turns payorch's requests into the provider's API calls and the provider's events into
payorch's `ProviderEvent`s. Nothing outside `providers/` knows a provider's wire format.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeGuard, runtime_checkable

from payorch.storage.database_thread import on_database_thread
from payorch.values.money import Money
from payorch.values.statuses import FailureReason

if TYPE_CHECKING:
    from collections.abc import Sequence

    from payorch.storage.database import Connection
    from payorch.storage.idempotency_keys import ClaimTerms
    from payorch.storage.sessions import AnsweredSession


class ProviderError(Exception):
    """The provider failed or could not be reached: counts against the account's health; try another.

    `provider_wide` says the failure is the provider's own (unreachable, a 5xx): it also counts toward
    the provider's circuit (docs/routing.md). Anything about one account's call (its key rejected,
    a 4xx, its rate limit, a request the provider will not take) is not."""

    def __init__(self, message: str = "", *, provider_wide: bool = False) -> None:
        super().__init__(message)
        self.provider_wide = provider_wide


class RefundRefused(ProviderError):
    """The provider will never accept this refund (not a passing fault): it fails for good."""


class CredentialsRejected(Exception):
    """The provider says the credentials are not valid (a 401 from it). `fields` names the linking
    request's credential fields at fault, for a provider whose credentials are several fields
    (`TakesCredentialFields`): the API then answers 400 naming them."""

    def __init__(self, message: str = "", *, fields: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.fields = fields


class EventRejected(Exception):
    """An inbound event is not authentic (bad signature) or cannot be understood."""


@dataclass(frozen=True)
class Limits:
    """Amounts a provider accepts in one currency, in minor units (inclusive)."""

    min_minor: int
    max_minor: int


@dataclass(frozen=True)
class CheckoutRequest:
    session_id: uuid.UUID
    application_id: uuid.UUID
    amount: Money
    payment_method: str
    order_reference: str
    customer_email: str
    locale: str | None
    expires_at: datetime
    # When payorch asked (the moment `expires_at` counts from). A provider derives any other time it
    # sends from this, never from its own clock, so that asking again with the same idempotency
    # key sends the same parameters.
    requested_at: datetime
    success_url: str | None
    failure_url: str | None
    order_items: list[dict[str, Any]] = field(default_factory=list)
    attempt: int = 1  # the session's attempt this checkout is for (1: the one the create opens)


@dataclass(frozen=True)
class CheckoutCreated:
    reference: str  # the provider's id of its checkout
    url: str  # where the customer pays


@dataclass(frozen=True)
class WebhookRegistration:
    reference: str  # the provider's id of the endpoint
    secret: str  # what the provider signs its events to us with


@dataclass(frozen=True)
class RefundRequest:
    refund_id: uuid.UUID
    session_id: uuid.UUID
    payment_reference: str  # the provider's id of the paid checkout
    amount: Money
    reason: str | None


@dataclass(frozen=True)
class RefundSubmitted:
    reference: str  # the provider's id of the refund


class CheckoutClosed(enum.Enum):
    """What the provider says when payorch closes its checkout (`Provider.close_checkout`)."""

    CLOSED = "closed"  # nobody can pay it any more, and nobody did
    PAID = "paid"  # the customer paid before it closed: the payment stands


@dataclass(frozen=True)
class CheckoutState:
    """What a provider says of one of its checkouts when the customer comes back from it
    (`ReportsCheckoutState`): paid, its payment still processing, or its last decline (the
    provider's code, and payorch's reason)."""

    paid: bool
    decline_code: str | None = None  # None: not declined (still open, or paid)
    decline_reason: FailureReason | None = None
    # The customer's payment is under way and not final yet (BLIK waiting for the customer's bank,
    # a bank transfer): it may still be paid, so no other attempt may open.
    processing: bool = False


class EventKind(enum.Enum):
    PAYMENT_SUCCEEDED = "payment_succeeded"
    PAYMENT_DECLINED = "payment_declined"
    CHECKOUT_EXPIRED = "checkout_expired"
    DISPUTE_LOST = "dispute_lost"
    REFUNDS_CHANGED = (
        "refunds_changed"  # some refunds of `payment_reference` moved on: which, resolve_event finds
    )
    # The provider names one of its objects that changed and nothing more (Mollie's classic webhook):
    # what changed, resolve_event reads with the stored credentials.
    PROVIDER_OBJECT_CHANGED = "provider_object_changed"
    REFUND_SUCCEEDED = "refund_succeeded"
    REFUND_FAILED = "refund_failed"
    IGNORED = "ignored"  # authentic, but nothing payorch acts on


@dataclass(frozen=True)
class ProviderEvent:
    """A provider's event, verified and translated. `session_id` and `refund_id` are payorch's ids
    as the provider echoes them back; `reason` is payorch's failure reason where one applies (the
    provider's own code translated by its adapter).
    `payment_reference` is the provider's id of the payment, for an event that names only that
    (`Provider.resolve_event` finds payorch's session from it)."""

    id: str
    kind: EventKind
    session_id: uuid.UUID | None = None
    refund_id: uuid.UUID | None = None
    checkout_reference: str | None = None
    reason: FailureReason | None = None
    payment_reference: str | None = None
    # The provider's id of the refund, for an event that names a refund only so (PayU's refund
    # notification): `resolve_event` finds payorch's refund id from it.
    refund_reference: str | None = None


def refuse_outside_limits(provider: str, limits: Limits | None, request: CheckoutRequest) -> None:
    """`ProviderError` (routing counts it and tries the next provider) unless `limits`, the
    provider's for the request's currency and method, take the request's amount."""
    if limits is None or not limits.min_minor <= request.amount.minor <= limits.max_minor:
        raise ProviderError(
            f"{provider} does not take {request.payment_method} payments of "
            f"{request.amount.minor} minor units of {request.amount.currency}"
        )


def result_page_url(public_base_url: str, session_id: uuid.UUID, *, cancelled: bool = False) -> str:
    """payorch's own page for the customer coming back from a provider's checkout, for a session
    whose merchant gave no `redirectUrls` (`http/routes/checkout_result.py`)."""
    url = f"{public_base_url.rstrip('/')}/checkout/{session_id}/result"
    return f"{url}?checkout=cancelled" if cancelled else url


def return_url(public_base_url: str, session_id: uuid.UUID, attempt: int) -> str:
    """payorch's return route for a session's `attempt` (`http/routes/checkout_return.py`): where a
    provider that returns through payorch sends the customer back after paying or failing to pay,
    and payorch reads the attempt's state and sends them on."""
    return f"{public_base_url.rstrip('/')}/checkout/{session_id}/return?attempt={attempt}"


def provider_events_url(public_base_url: str, provider: str, application_id: uuid.UUID) -> str:
    """payorch's endpoint for `provider`'s events about an application's payments
    (`http/routes/provider_events.py`), for a provider told where to call with each payment (Mollie)."""
    return f"{public_base_url.rstrip('/')}/api/v1/provider-events/{provider}/{application_id}"


@dataclass(frozen=True)
class Credentials:
    """What payorch stores sealed for one linked account: a provider's API key, or, for a provider
    whose credentials are several fields (`TakesCredentialFields`), its own encoding of them."""

    api_key: str


@runtime_checkable
class TakesCredentialFields(Protocol):
    """A provider linked with several named credentials (PayU: `posId`, `clientId`...) instead of
    one `apiKey`. The linking request's `credentials` carry them; the provider checks their form,
    encodes them into the one sealed `Credentials`, and says how they are fingerprinted."""

    # Each credential field the linking request must carry, with its form in words (the console
    # shows it by the field).
    credential_fields: Mapping[str, str]

    def credentials_from(self, fields: Mapping[str, str]) -> Credentials:
        """The credentials `fields` give; `CredentialsRejected` naming each field that is missing
        or not of the provider's form (nothing asked of the provider)."""
        ...

    def fingerprint(self, credentials: Credentials) -> str:
        """Enough of `credentials` to recognise them, never to use them."""
        ...


# How a provider's events reach payorch: to an endpoint payorch registers with the provider when
# a key is linked, signed with a secret the provider gives (`registered_endpoint`), or to the URL
# payorch names in each payment it creates, unsigned, so payorch reads the object back with the
# merchant's key before it believes anything (`per_payment_url`), or signed with a key the
# merchant links with the account (`signed_per_payment_url`: PayU's second key).
EventDelivery = Literal["registered_endpoint", "per_payment_url", "signed_per_payment_url"]


class Provider(Protocol):
    """A payment provider adapter. Methods that talk to the provider raise `ProviderError` when it
    fails or times out, so routing can count it and cascade to the next candidate."""

    name: str
    display_name: str
    payment_methods: frozenset[str]
    event_delivery: EventDelivery
    # The API key it takes, in words, for whoever links it (the console shows it by the key field).
    key_format: str

    def limits(self, currency: str, payment_method: str) -> Limits | None:
        """The amounts accepted for `payment_method` in `currency`; None if not accepted at all."""
        ...

    async def validate_credentials(self, credentials: Credentials) -> None:
        """Raise `CredentialsRejected` unless the provider accepts `credentials`."""
        ...

    async def register_webhook(self, credentials: Credentials, url: str) -> WebhookRegistration:
        """Ask the provider to send its events for this account to `url`."""
        ...

    async def create_checkout(
        self, credentials: Credentials, request: CheckoutRequest, *, idempotency_key: str
    ) -> CheckoutCreated:
        """Create the provider's hosted checkout; retried with the same key, it makes only one."""
        ...

    async def submit_refund(
        self, credentials: Credentials, request: RefundRequest, *, idempotency_key: str
    ) -> RefundSubmitted:
        """Ask the provider to refund; retried with the same key, it refunds only once."""
        ...

    async def close_checkout(self, credentials: Credentials, reference: str) -> CheckoutClosed:
        """Close the checkout `reference` so the customer can no longer pay it: payorch expired its
        session. `PAID` when the customer paid it first; calling it again answers the same."""
        ...

    def parse_event(self, headers: Mapping[str, str], body: bytes, secret: str) -> ProviderEvent:
        """Verify and translate an inbound event; `EventRejected` when it is not authentic."""
        ...

    async def resolve_event(self, credentials: Credentials, event: ProviderEvent) -> list[ProviderEvent]:
        """The events `event` stands for, with the payorch ids it names only through the provider's
        objects (looked up with a call to the provider): `[event]` when nothing needs looking up,
        several when it reports on several objects (each with an id of its own), none when they
        are nothing of payorch's."""
        ...


@runtime_checkable
class ReportsCheckoutState(Protocol):
    """A provider that says at once, when the customer comes back, whether its checkout is paid or
    was declined and with which code (the sandbox from payorch's database; Stripe and Mollie from
    their APIs). payorch opens a next attempt (docs/routing.md "Recovery") only after a decline a
    provider reported so."""

    async def checkout_state(self, credentials: Credentials, reference: str) -> CheckoutState:
        """The checkout `reference`'s state now; `ProviderError` for one the account does not have."""
        ...


@dataclass(frozen=True)
class CheckoutToStore:
    """A checkout a `CheckoutInDatabase` provider would create, not stored yet."""

    created: CheckoutCreated  # what `create_checkout` answers for it
    row: Any  # the provider's own record of it, for its `store_with_sessions`


# A checkout to store, with its session and its request's fingerprint (its Idempotency-Key's).
CheckoutToClaim = tuple[CheckoutToStore, "AnsweredSession", bytes]


@runtime_checkable
class CheckoutInDatabase(Protocol):
    """A provider whose checkouts live in payorch's own database (the sandbox): payorch stores each
    checkout with the session routed to it and its Idempotency-Key's answer in one statement, which
    claims the key too, the sessions of a batch in one round trip, all or none
    (`engine.payments.checkout`). A retry after a failure finds nothing half done."""

    def checkout_to_store(
        self, credentials: Credentials, request: CheckoutRequest, *, idempotency_key: str
    ) -> CheckoutToStore:
        """The checkout `create_checkout` would create, and what it would answer, without storing
        anything; `ProviderError` as `create_checkout` raises it before it stores (a request
        outside the provider's limits)."""
        ...

    @on_database_thread
    async def store_with_sessions(
        self, conn: Connection, stored: Sequence[tuple[CheckoutToStore, AnsweredSession]]
    ) -> None:
        """Store each checkout with its session and the session's key's answer (run on the
        database's event loop: no Trio, no I/O but `conn`): one round trip, all or none. Fails,
        storing nothing, when a checkout's idempotency key was used before; `create_checkout` then
        answers with the checkout made with it."""
        ...

    @on_database_thread
    async def claim_and_store_with_sessions(
        self, conn: Connection, stored: Sequence[CheckoutToClaim], terms: ClaimTerms
    ) -> None:
        """As `store_with_sessions`, each session's Idempotency-Key (its request's fingerprint the
        third of each triple) claimed on `terms` in the same round trip and transaction. Fails,
        storing and claiming nothing, when a key was seen before
        (`storage.sessions.claim_was_not_fresh`)."""
        ...

    @on_database_thread
    async def claim_and_store_together(
        self, conn: Connection, batches: Sequence[tuple[Sequence[CheckoutToClaim], ClaimTerms]]
    ) -> None:
        """`claim_and_store_with_sessions` for the batches of several applications at once, each
        with its claim terms (`storage.together`): one round trip and one transaction, all or none."""
        ...


def keeps_checkouts_in_database(provider: object) -> TypeGuard[CheckoutInDatabase]:
    """Whether `provider` is a `CheckoutInDatabase`: asked of its class once, not of the provider at
    every create (`isinstance` with a Protocol looks up each of its members, about 10 us)."""
    kind = type(provider)
    known = _KINDS_IN_DATABASE.get(kind)
    if known is None:
        known = _KINDS_IN_DATABASE[kind] = issubclass(kind, CheckoutInDatabase)
    return known


# Each provider class asked so far: a handful, the catalogue's.
_KINDS_IN_DATABASE: dict[type, bool] = {}
