"""The response bodies only the HTTP routes build: one closed `TypedDict` each, the type its builder
returns (`application_body`, `webhook_body`, ...) or a route's literal answer is checked against,
and the shape the OpenAPI document (`http.openapi`) shows. Bodies the engine builds (sessions,
refunds, events) have theirs beside their builders in `engine.payments.records` and
`engine.payments.refund_rules`.

Keys that are sometimes absent (never null) are `NotRequired`.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Annotated, Any, Literal, NotRequired

from pydantic import Field, StringConstraints, WithJsonSchema, with_config
from typing_extensions import TypedDict  # pydantic needs this one on Python < 3.12

from payorch.engine.body_types import CLOSED, EventType, MajorUnits, Timestamp, Uuid, listed
from payorch.engine.routing.decision import PlaceReason
from payorch.engine.routing.document import Objective, RouteType
from payorch.engine.routing.observed_fees import FeeSource
from payorch.engine.routing.recovery import DECLINE_CODE, MAX_ATTEMPTS, RETRYABLE_REASONS
from payorch.http.models import Organization
from payorch.providers.base import EventDelivery
from payorch.storage.applications import ApiKeyStatus
from payorch.values.statuses import DeliveryStatus, RoutingReason, WebhookTestStatus

# --- Common -------------------------------------------------------------------------------------


@with_config(CLOSED)
class Empty(TypedDict):
    """Done: an empty object."""


# --- Accounts -----------------------------------------------------------------------------------


@with_config(CLOSED)
class AdminProfile(TypedDict):
    email: str
    firstName: str
    lastName: str


@with_config(CLOSED)
class SignupResponse(TypedDict):
    """The merchant was created: the signup body again, without the password."""

    organization: Organization
    admin: AdminProfile


@with_config(CLOSED)
class LoginResponse(TypedDict):
    """An access token (JWT) for `Authorization: Bearer`."""

    accessToken: str
    tokenType: Literal["Bearer"]
    expiresIn: Annotated[int, Field(description="lifetime of the token in seconds")]


# --- Applications and API keys ------------------------------------------------------------------

# A key's `status` (`ApiKeyStatus`) is defined in `storage.applications`, which derives it.


@with_config(CLOSED)
class ApiKeySummary(TypedDict):
    """An API key, without the key."""

    id: Uuid
    keyPrefix: Annotated[str, Field(description="the first 12 characters of the key")]
    description: str
    status: ApiKeyStatus
    createdAt: Timestamp


@with_config(CLOSED)
class ApiKeyCreated(ApiKeySummary):
    """The new API key: `key` is shown in this answer only."""

    key: Annotated[str, StringConstraints(pattern=r"^sk_[0-9A-Za-z]{40}$")]


@with_config(CLOSED)
class Application(TypedDict):
    """An application of the merchant."""

    id: Uuid
    name: str
    description: dict[str, Any] | None
    isEnabled: bool
    createdAt: Timestamp
    apiKeys: NotRequired[
        Annotated[list[ApiKeySummary], Field(description="only when listed with include=apiKeys")]
    ]


# --- Providers ----------------------------------------------------------------------------------


@with_config(CLOSED)
class ProviderCatalogueEntry(TypedDict):
    name: str
    displayName: str
    paymentMethods: list[str]
    eventDelivery: Annotated[
        EventDelivery,
        Field(
            description="how the provider's events reach payorch: `registered_endpoint`, an endpoint "
            "payorch registers with the provider when a key is linked (signed events); "
            "`per_payment_url`, the URL payorch names in each payment (payorch reads the payment "
            "back with the linked key before applying anything); `signed_per_payment_url`, the URL "
            "payorch names in each payment, signed with a key linked with the account (PayU's second "
            "key). Nothing to set up any way."
        ),
    ]


@with_config(CLOSED)
class ProviderConfig(TypedDict):
    """A provider linked to an application."""

    applicationId: Uuid
    provider: str
    isActive: bool
    paymentMethods: list[str]
    keyFingerprint: Annotated[
        str, Field(description="first 8 and last 4 characters of the provider API key, `...` between")
    ]
    createdAt: Timestamp
    updatedAt: Timestamp


@with_config(CLOSED)
class ProviderEventReceived(TypedDict):
    """The event was verified; `applied` is false for a redelivered or irrelevant event."""

    received: Literal[True]
    applied: bool


# --- Payment methods ----------------------------------------------------------------------------

# Why the list of payment methods is empty or short.
PaymentMethodWarning = Literal[
    "NO_ACTIVE_PROVIDER_CONNECTIONS", "CURRENCY_NOT_SUPPORTED", "AMOUNT_OUT_OF_RANGE"
]


@with_config(CLOSED)
class PaymentMethodList(TypedDict):
    """The payment methods available now; `warnings` say why the list is empty or short."""

    paymentMethods: list[str]
    warnings: NotRequired[list[PaymentMethodWarning]]


# --- Routing ------------------------------------------------------------------------------------

ProviderNames = list[str]


@with_config(CLOSED)
class RoutingRoute(TypedDict):
    """A route: `priority` tries `providers` in order; `split` assigns each session by integer
    `weights` summing to 100; `dynamic` ranks by learned success, over `providers` when given."""

    type: RouteType
    providers: NotRequired[ProviderNames]
    weights: NotRequired[dict[str, Annotated[int, Field(ge=0, le=100)]]]


@with_config(CLOSED)
class RoutingAmountRange(TypedDict):
    """Amounts in major units, both bounds inclusive."""

    min: NotRequired[MajorUnits]
    max: NotRequired[MajorUnits]


@with_config(CLOSED)
class RoutingConditions(TypedDict):
    """Every condition given must hold; a list holds when any of its values does."""

    paymentMethods: NotRequired[list[str]]
    currencies: NotRequired[list[str]]
    amount: NotRequired[RoutingAmountRange]
    countries: NotRequired[
        Annotated[list[str], Field(description="the customer's billing country (ISO 3166-1 alpha-2)")]
    ]


@with_config(CLOSED)
class RoutingRule(TypedDict):
    name: str
    when: NotRequired[RoutingConditions]
    route: RoutingRoute


@with_config(CLOSED)
class RoutingMethodFee(TypedDict):
    """A provider's fee for one payment method: `percent` of the amount plus `fixed` by currency
    (major units), as decimal strings."""

    percent: str
    fixed: dict[str, str]


@with_config(CLOSED)
class RoutingFee(TypedDict):
    """`percent` of the amount plus `fixed` by currency (major units), as decimal strings; `methods`,
    when written, the provider's fee for a payment method, which replaces this one for it."""

    percent: str
    fixed: dict[str, str]
    methods: NotRequired[dict[str, RoutingMethodFee]]


@with_config(CLOSED)
class RoutingRecovery(TypedDict):
    """The recovery policy (docs/routing.md "Recovery"): at most `maxAttempts` attempts per session,
    a declined one followed by the next provider only when its failure reason is one of `retryOn`
    and its provider's code none of `neverRetry`; hard declines never. Left out: one attempt."""

    maxAttempts: Annotated[int, Field(ge=1, le=MAX_ATTEMPTS)]
    retryOn: list[Annotated[str, WithJsonSchema({"enum": list(RETRYABLE_REASONS), "type": "string"})]]
    neverRetry: list[Annotated[str, Field(pattern=f"^{DECLINE_CODE.pattern}$")]]


@with_config(CLOSED)
class RoutingDocument(TypedDict):
    """The application's routing document in force (docs/routing.md); `version` 0 and `updatedAt`
    null: none was ever stored, and this default routes every session dynamically."""

    rules: list[RoutingRule]
    default: RoutingRoute
    fees: dict[str, RoutingFee]
    objective: Objective
    version: Annotated[int, Field(ge=0)]
    updatedAt: Timestamp | None
    recovery: NotRequired[RoutingRecovery]


@with_config(CLOSED)
class RoutingVersion(TypedDict):
    """One kept version of the application's routing document: `updatedAt`, when it was stored, and
    `updatedBy`, the id of the user who stored it (null: stored before payorch kept it)."""

    version: Annotated[int, Field(ge=1)]
    updatedAt: Timestamp
    updatedBy: Uuid | None


@with_config(CLOSED)
class RoutingAttempt(TypedDict):
    """One attempt the session would get: its provider, and why (the decision's reason for the
    first, `cascade` when the decision's first provider cannot be tried now, `recovery` after)."""

    provider: str
    reason: Annotated[RoutingReason, listed(RoutingReason)]


@with_config(CLOSED)
class WeighedFee(TypedDict):
    """The fee a provider's score weighed under objective net, and whose it is: `document`, the
    routing document's fee of the provider (its fee for the payment method when written), or
    `observed`, the fee reconciliation observed for the payment's method and currency
    (docs/reconciliation.md, "Observed fees"). `percent` of the amount plus `fixed` by currency
    (major units), as decimal strings."""

    source: FeeSource
    percent: str
    fixed: dict[str, str]


@with_config(CLOSED)
class RankedProvider(TypedDict):
    """One provider's place in the ranking, and why it holds it: `rule`, `split` or `dynamic` (the
    route put it there), `exploration` (sent first so its figures stay fresh), `eliminated` (its
    success rate is below the elimination threshold: tried after every other), `not_eligible`
    (the route names it, but it cannot take this session: never tried). `fee`, under objective
    net, is the fee its score weighed; left out when none was (no fee given nor observed)."""

    provider: str
    score: Annotated[Decimal, WithJsonSchema({"type": "number", "minimum": 0, "maximum": 1})]
    eligible: bool
    reason: PlaceReason
    fee: NotRequired[WeighedFee]


@with_config(CLOSED)
class RoutingEvaluation(TypedDict):
    """How the session would be routed now. `version` is null for a document tried in the request;
    `selectedProvider` is the provider a create would try first, null when none can be tried."""

    rule: Annotated[str | None, Field(description="the matching rule's name; null: the default route")]
    routeType: RouteType
    version: Annotated[int, Field(ge=0)] | None
    selectedProvider: str | None
    ranking: list[RankedProvider]
    attempts: list[RoutingAttempt]


Ratio = Annotated[Decimal, WithJsonSchema({"type": "number", "minimum": 0, "maximum": 1})]
SignedRatio = Annotated[Decimal, WithJsonSchema({"type": "number", "minimum": -1, "maximum": 1})]
Count = Annotated[int, Field(ge=0)]


@with_config(CLOSED)
class BacktestProvider(TypedDict):
    """One provider in a backtest: `actual` sessions went there, the candidate sends `candidate`
    there first, the document in force, replayed the same way, `baseline`; of its actual sessions,
    `outcomes` were paid, declined or expired, `succeeded` paid; `approval` is `succeeded /
    outcomes` (4 decimals), null without outcomes."""

    provider: str
    actual: Count
    candidate: Count
    baseline: Count
    outcomes: Count
    succeeded: Count
    approval: Ratio | None


@with_config(CLOSED)
class BacktestRule(TypedDict):
    """One rule of the candidate (`rule` null: its default route): the sessions it matches, those
    whose first provider it changes from the document in force's, those it can route to no
    provider (a create would be 422)."""

    rule: str | None
    sessions: Count
    changed: Count
    unroutable: Count


@with_config(CLOSED)
class BacktestEstimate(TypedDict):
    """Over the same `sessions` (those with an outcome): the approval observed (`actual`), and the
    doubly robust estimates of the candidate's (`candidate`) and of the document in force's,
    replayed the same way (`baseline`); `change`, candidate less baseline, with its 95% interval
    (`changeLow`, `changeHigh`: null under two sessions); `effectiveSessions`, how many sessions'
    own outcomes the candidate's estimate rests on. `unestimated`: sessions with an outcome left
    out, sent to a provider with too few outcomes to tell. Null without sessions."""

    sessions: Count
    actual: Ratio | None
    candidate: Ratio | None
    unestimated: Count
    baseline: Ratio | None
    change: SignedRatio | None
    changeLow: SignedRatio | None
    changeHigh: SignedRatio | None
    effectiveSessions: Count


@with_config(CLOSED)
class BacktestRecovery(TypedDict):
    """What the candidate's recovery policy would have changed, among the sessions it sends first
    where their first attempt went (docs/routing.md, "Recovery in a backtest"): `retried`, first
    declines it follows with another attempt, of which the history shows `recovered` (paid at a
    next attempt where the candidate's went) or `notRecovered`, or cannot tell (`unknown`: the
    candidate's next provider is not the one the history tried next); `noLongerRetried`, sessions
    the history retried and it would not (`noLongerRecovered` of them paid at a next attempt);
    `declinedWithoutCode`, declined first attempts it may retry whose decline code the history did
    not keep: whether it would, and what it would get, the history cannot tell."""

    retried: Count
    recovered: Count
    notRecovered: Count
    unknown: Count
    noLongerRetried: Count
    noLongerRecovered: Count
    declinedWithoutCode: Count


# `from` is a Python keyword: the two keys of the window are declared in TypedDict's functional form.
_BacktestWindow = TypedDict(
    "_BacktestWindow",
    {
        "from": Annotated[
            Timestamp,
            Field(description="the window's start; when `limited`, the oldest replayed session's creation"),
        ],
        "to": Annotated[Timestamp, Field(description="the window's end: when the backtest ran")],
    },
)


@with_config(CLOSED)
class RoutingBacktest(_BacktestWindow):
    """The candidate document replayed over the application's sessions created from `from` to
    `to`, routed on the providers linked now and the success rates learned now, beside the document
    in force replayed the same way (docs/routing.md, "Backtest"): per provider, the sessions that
    went there against those each document would send there first, with the approval each showed."""

    limited: Annotated[
        bool, Field(description="the window held more sessions than `limit`: only the newest were replayed")
    ]
    sessions: Annotated[Count, Field(description="sessions replayed")]
    inForceVersion: Annotated[
        Count, Field(description="the version of the document in force replayed beside it (0: the default)")
    ]
    changed: Annotated[
        Count,
        Field(description="sessions the candidate sends first elsewhere than the document in force does"),
    ]
    unroutable: Annotated[Count, Field(description="sessions the candidate routes to no provider")]
    withoutOutcome: Annotated[Count, Field(description="sessions still open: no outcome yet")]
    withoutCountry: Annotated[
        Count, Field(description="sessions without a billing country: no `countries` condition matches them")
    ]
    estimatedApproval: BacktestEstimate
    recovery: BacktestRecovery
    providers: list[BacktestProvider]
    rules: list[BacktestRule]


# --- Webhooks -----------------------------------------------------------------------------------

WebhookTestStatusField = Annotated[WebhookTestStatus, listed(WebhookTestStatus)]
SigningSecret = Annotated[str, StringConstraints(pattern=r"^whsec_")]


@with_config(CLOSED)
class WebhookConfig(TypedDict):
    """A webhook configuration (its signing secret is never shown again)."""

    id: Uuid
    url: str
    isActive: bool
    keyFingerprint: Annotated[str, Field(description="`sha256:` and the first 16 hex digits of the secret")]
    subscribedEvents: list[EventType]
    lastTestAt: Timestamp | None
    lastTestStatus: WebhookTestStatusField | None
    createdAt: Timestamp
    updatedAt: Annotated[Timestamp | None, Field(description="null until the first change")]


@with_config(CLOSED)
class WebhookConfigCreated(WebhookConfig):
    """The new webhook configuration, with its `signingSecret`: shown in this answer only."""

    signingSecret: SigningSecret


@with_config(CLOSED)
class SecretRotated(TypedDict):
    """The new signing secret, shown this once; the old one keeps signing for a while."""

    keyFingerprint: str
    signingSecret: SigningSecret


@with_config(CLOSED)
class WebhookTestResult(TypedDict):
    """How the endpoint answered the `webhook.test` event; null status and body: no answer, and
    `error` says why (payorch's field beside the interface's, null when the endpoint answered)."""

    success: bool
    httpStatusCode: int | None
    responseBody: Annotated[str, StringConstraints(max_length=4096)] | None
    latencyMs: Annotated[int, Field(ge=0)]
    deliveredAt: Timestamp
    error: Annotated[str, StringConstraints(max_length=500)] | None


@with_config(CLOSED)
class DeliveryAttempt(TypedDict):
    attemptedAt: Timestamp
    httpStatusCode: int | None
    error: str | None
    latencyMs: int


@with_config(CLOSED)
class DeliveryState(TypedDict):
    """What every delivery record says: the event, the status, and why it waits."""

    id: Uuid
    eventId: str
    eventType: str
    status: Annotated[DeliveryStatus, listed(DeliveryStatus)]
    attempts: Annotated[int, Field(ge=0)]
    nextAttemptAt: Timestamp | None
    lastAttemptAt: Timestamp | None
    lastStatusCode: int | None
    lastError: str | None
    deliveredAt: Timestamp | None
    createdAt: Timestamp
    waitsForEventId: Annotated[
        str | None,
        Field(
            description="a PENDING delivery held behind its session's earlier event to this endpoint, "
            "still PENDING: that event's id (a session's events reach an endpoint in order); else null"
        ),
    ]
    waitsForDeliveryId: Annotated[
        Uuid | None, Field(description="the delivery of the event in `waitsForEventId`; else null")
    ]
    waitReason: Annotated[
        str | None,
        Field(
            description="why a PENDING delivery waits, in words: held behind an earlier event of the "
            "same session, its next attempt and when, or being sent now; null when DELIVERED or FAILED"
        ),
    ]


@with_config(CLOSED)
class Delivery(DeliveryState):
    """One event sent to a webhook endpoint, and every attempt."""

    attemptLog: list[DeliveryAttempt]


@with_config(CLOSED)
class HeaderField(TypedDict):
    name: str
    value: str


@with_config(CLOSED)
class DeliveryAttemptDetails(TypedDict):
    """One attempt as it went out and came back. Its headers and body excerpt are kept
    `webhooks.attempt_details_retention_days`, then null, with `detailsRemovedAt`."""

    number: Annotated[int, Field(ge=1, description="1 for the delivery's first attempt")]
    attemptedAt: Timestamp
    httpStatusCode: int | None
    error: Annotated[str | None, Field(description="why there was no answer (DNS, refused, TLS, timeout...)")]
    latencyMs: int
    requestHeaders: Annotated[
        list[HeaderField] | None,
        Field(description="the headers payorch set, the signature among them (never a secret)"),
    ]
    responseHeaders: Annotated[
        list[HeaderField] | None,
        Field(description="the receiver's headers in order: at most 50, each value cut to 1000 characters"),
    ]
    responseBody: Annotated[
        str | None, Field(description="the first 4096 bytes of the receiver's body, as text")
    ]
    detailsRemovedAt: Timestamp | None


@with_config(CLOSED)
class DeliveryDetails(DeliveryState):
    """One delivery in detail: the event's body, as every attempt sent it, and its latest attempts."""

    webhookId: Uuid
    sessionId: Uuid | None
    requestBody: Annotated[str, Field(description="the body every attempt sent, byte for byte (UTF-8)")]
    attemptLog: Annotated[
        list[DeliveryAttemptDetails], Field(description="the latest 50 attempts, oldest first")
    ]
    olderAttempts: Annotated[int, Field(ge=0, description="attempts before those of `attemptLog`")]


@with_config(CLOSED)
class DeliveryRetry(TypedDict):
    """The delivery is queued to be sent again now."""

    id: str
    status: Literal[DeliveryStatus.PENDING]


# --- Operations ---------------------------------------------------------------------------------


@with_config(CLOSED)
class Health(TypedDict):
    """The process is up."""

    status: Literal["ok"]


@with_config(CLOSED)
class ReadinessChecks(TypedDict):
    database: bool
    supervisors: bool
    node: bool  # this process holds its node identity: other processes do not take its claims


@with_config(CLOSED)
class Readiness(TypedDict):
    """Whether the database answers, every supervisor runs and the process holds its node identity."""

    status: Literal["ok", "unavailable"]
    checks: ReadinessChecks
