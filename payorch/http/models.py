"""Request bodies and query strings, as pydantic models: the single source of their shapes.

Bodies are strict (no `"true"` for `true`, no `"5"` for `5`) and refuse unknown fields, so a typo
in an integration is a 400 rather than a silently ignored value.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from decimal import Context, Decimal, Inexact, InvalidOperation
from typing import Annotated, Any, Literal, Self

from babel import Locale
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    GetJsonSchemaHandler,
    StringConstraints,
    ValidationError,
    WithJsonSchema,
    field_validator,
    model_validator,
)
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema, InitErrorDetails, PydanticCustomError

from payorch.engine.accounts.identifiers import canonical_identifier
from payorch.engine.accounts.passwords import PASSWORD_MAX_LENGTH, PASSWORD_MIN_LENGTH, password_weakness
from payorch.engine.body_types import EVENT_TYPES, MONEY_SCHEMA
from payorch.engine.payments.refund_rules import RefundReason
from payorch.engine.routing.backtest import MAX_DAYS, MAX_SESSIONS
from payorch.engine.routing.document import MAX_DOCUMENT_BYTES
from payorch.http.jsonio import first_unstorable_text
from payorch.jsonexact import dumps_exact
from payorch.values.emails import Email
from payorch.values.money import known_currencies
from payorch.values.pagination import DEFAULT_LIMIT, DEFAULT_PAGE, MAX_LIMIT, MAX_PAGE, PageRequest
from payorch.values.roles import RoleName
from payorch.values.web_urls import redirect_url_problem, website_url_problem

Text = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=255)]
Name = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=100)]


def _url_check(problem_of: Callable[[str], str | None]) -> AfterValidator:
    def check(value: str) -> str:
        problem = problem_of(value)
        if problem is not None:
            raise ValueError(problem)
        return value

    return AfterValidator(check)


# URLs are not trimmed: the URL checked is the URL stored, and later sent in a Location header.
WebUrl = Annotated[str, StringConstraints(min_length=1, max_length=2048), _url_check(website_url_problem)]
RedirectUrl = Annotated[
    str, StringConstraints(min_length=1, max_length=2048), _url_check(redirect_url_problem)
]


def _refuse_unstorable_text(value: object) -> object:
    """PostgreSQL text and jsonb cannot hold NUL (U+0000) or lone surrogates: refuse them here (400),
    not in the database (500). Bodies are checked as they are parsed (`http/jsonio.py`); this is the
    same check for query strings, which are not JSON."""
    problem = first_unstorable_text(value)
    if problem is not None:
        raise ValueError(problem.message)
    return value


FREE_FORM_MAX_BYTES = 16 * 1024  # serialized as compact JSON, UTF-8
FREE_FORM_MAX_ENTRIES = 1000  # object members and array items, at every depth


def _bounded_free_form(value: object) -> object:
    """An object of any JSON a merchant keeps with us (an application's `description`) is bounded:
    entries are counted first, stopping at the bound, so that a huge one costs little to refuse."""
    if not isinstance(value, dict):
        return value  # not an object: the type's own validation refuses it
    entries = 0
    pending: list[object] = [value]
    while pending:
        item = pending.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
        for child in children:
            entries += 1
            if entries > FREE_FORM_MAX_ENTRIES:
                raise ValueError(f"must hold at most {FREE_FORM_MAX_ENTRIES} members and items in all")
            pending.append(child)
    if len(dumps_exact(value).encode()) > FREE_FORM_MAX_BYTES:
        raise ValueError(f"must take at most {FREE_FORM_MAX_BYTES} bytes as JSON")
    return value


FreeFormObject = Annotated[dict[str, Any], BeforeValidator(_bounded_free_form)]


# Every model's validator is built when it is first used (`defer_build`), not at import: building all
# of them took a quarter of `payorch serve`'s start (0.3 to 0.5 s of CPU in each process, worker, and
# command the tests start); a request of each kind pays its model's few milliseconds once per process,
# as long as its route validates through `http/validation.py`'s decorators (quart-schema's own would
# build the model again at every request).


class Body(BaseModel):
    """A JSON request body. Its text was checked as it was parsed (`http/jsonio.py`): no NUL, no lone
    surrogate, bounded depth and numbers."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True, defer_build=True)


class Query(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    @field_validator("*", mode="after")
    @classmethod
    def _storable_text(cls, value: object) -> object:
        return _refuse_unstorable_text(value)


class RegisteredAddress(Body):
    line1: Text
    line2: Annotated[str, StringConstraints(strip_whitespace=True, max_length=255)] | None = None
    city: Text
    state: Text
    postalCode: Text
    country: Text


def _canonical_text(value: object) -> object:
    return canonical_identifier(value) if isinstance(value, str) else value


# Identifiers that must be unique are kept in canonical form (no invisible characters, NFKC), so
# the database's unique indexes compare what a reader sees: `REG\u200b-1` is `REG-1`.
Identifier = Annotated[str, BeforeValidator(_canonical_text), StringConstraints(min_length=1, max_length=100)]
IdentifierEmail = Annotated[Email, BeforeValidator(_canonical_text)]


def _not_weak(password: str) -> str:
    weakness = password_weakness(password)
    if weakness is not None:
        raise ValueError(weakness)
    return password


NewPassword = Annotated[
    str, Field(min_length=PASSWORD_MIN_LENGTH, max_length=PASSWORD_MAX_LENGTH), AfterValidator(_not_weak)
]


class Organization(Body):
    legalBusinessName: Text
    companyRegistrationNumber: Identifier
    registeredAddress: RegisteredAddress
    companyWebsite: WebUrl
    industry: Text
    sector: Text
    contactPersonFirstName: Text
    contactPersonLastName: Text
    contactPersonEmail: Email


class Admin(Body):
    email: IdentifierEmail
    password: NewPassword
    firstName: Text
    lastName: Text


class SignupRequest(Body):
    organization: Organization
    admin: Admin


class SignupQuery(Query):
    token: str = ""


class LoginRequest(Body):
    email: Annotated[str, BeforeValidator(_canonical_text), StringConstraints(min_length=1, max_length=320)]
    password: Annotated[str, StringConstraints(min_length=1, max_length=256)]


class UserInviteRequest(Body):
    email: IdentifierEmail
    role: RoleName


class UserRoleRequest(Body):
    role: RoleName


class UserSignupRequest(Body):
    firstName: Text
    lastName: Text
    password: NewPassword


class ApplicationCreateRequest(Body):
    name: Name
    description: FreeFormObject | None = None


class ApplicationStatusRequest(Body):
    isEnabled: bool


class ApiKeyCreateRequest(Body):
    description: Annotated[str, StringConstraints(strip_whitespace=True, max_length=255)] = ""


def _whole_number_text(maximum: int) -> BeforeValidator:
    """Query text for a whole number up to `maximum`: digits only, and never more digits than
    `maximum` has (leading zeros aside), so that no huge number is ever built from the text."""

    def check(value: object) -> object:
        if isinstance(value, str):
            if not re.fullmatch(r"[0-9]+", value):
                raise ValueError("must be a whole number written with digits only")
            if len(value.lstrip("0")) > len(str(maximum)):
                raise ValueError(f"must be at most {maximum}")
        return value

    return BeforeValidator(check)


class PageQuery(Query):
    page: Annotated[int, _whole_number_text(MAX_PAGE), Field(ge=1, le=MAX_PAGE)] = DEFAULT_PAGE
    limit: Annotated[int, _whole_number_text(MAX_LIMIT), Field(ge=1, le=MAX_LIMIT)] = DEFAULT_LIMIT

    @property
    def page_request(self) -> PageRequest:
        return PageRequest(page=self.page, limit=self.limit)


class ApplicationListQuery(PageQuery):
    include: Literal["apiKeys"] | None = None


# --- Money and sessions ------------------------------------------------------------------------

_MAX_AMOUNT = Decimal(10) ** 15  # far above any real payment, far below what storage holds


def _json_number(value: object) -> object:
    """A JSON number as an exact Decimal: ints and decimals pass, anything else (strings, booleans,
    floats that did not come from our exact JSON parser) is refused."""
    if isinstance(value, bool) or not isinstance(value, int | Decimal):
        raise ValueError("must be a JSON number")
    number = Decimal(value)
    if not number.is_finite() or abs(number) >= _MAX_AMOUNT:
        raise ValueError("is out of range")
    return number


class JsonNumber:
    """JSON-schema marker for an amount (a Decimal) that travels as a JSON number (schema only, no
    validation), described as every amount is (`engine.body_types.MONEY_SCHEMA`: a decimal in major
    units, a multiple of the smallest minor unit).

    pydantic describes a Decimal as "number or string" when validating and "string" when
    serializing; ours is a number both ways. Put it after any `Field` constraint, so that pydantic's
    raw `gt`/`ge`/`lt`/`le` become JSON Schema's (exclusive) minimum and maximum.
    """

    BOUNDS = {"gt": "exclusiveMinimum", "ge": "minimum", "lt": "exclusiveMaximum", "le": "maximum"}

    def __init__(self, below: Decimal | None = None) -> None:
        self.below = below  # documents a bound enforced by a validator as exclusiveMaximum

    def __get_pydantic_json_schema__(
        self, core_schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        schema = dict(handler(core_schema))
        for branch in schema.pop("anyOf", []):
            if branch.get("type") == "number":
                schema.update(branch)
        schema.pop("pattern", None)
        schema.update(MONEY_SCHEMA)
        for raw, keyword in self.BOUNDS.items():
            if raw in schema:
                bound = Decimal(schema.pop(raw))
                schema[keyword] = int(bound) if bound == bound.to_integral_value() else float(bound)
        if self.below is not None and "exclusiveMaximum" not in schema and "maximum" not in schema:
            schema["exclusiveMaximum"] = int(self.below)
        return schema


JSON_NUMBER = JsonNumber()
Amount = Annotated[Decimal, BeforeValidator(_json_number), JsonNumber(below=_MAX_AMOUNT)]
NonNegativeAmount = Annotated[Amount, Field(ge=0), JSON_NUMBER]


def _known_currencies(schema: dict[str, Any]) -> None:
    schema["enum"] = list(known_currencies())


CurrencyCode = Annotated[
    str,
    StringConstraints(pattern=r"^[A-Z]{3}$"),
    Field(
        description="The ISO 4217 code of a currency (listed); the X-codes of precious metals, funds, "
        "testing and no currency are refused, as are other funds and units of account.",
        json_schema_extra=_known_currencies,
    ),
]
_COUNTRIES = frozenset(
    str(code) for code in Locale("en").territories if len(str(code)) == 2 and str(code).isalpha()
)


def _iso_country(value: str) -> str:
    if value not in _COUNTRIES:
        raise ValueError("must be an ISO 3166-1 alpha-2 country code, e.g. PL")
    return value


CountryCode = Annotated[str, StringConstraints(pattern=r"^[A-Z]{2}$"), AfterValidator(_iso_country)]
OptionalText = Annotated[str, StringConstraints(strip_whitespace=True, max_length=255)] | None


# Exact sums of amounts any currency can hold (at most 19 digits); anything longer is inexact here.
_EXACT_SUMS = Context(prec=40, traps=[Inexact, InvalidOperation])


class SessionAmount(Body):
    total: Annotated[Amount, Field(gt=0), JSON_NUMBER]
    shipping: NonNegativeAmount = Decimal(0)
    tax: NonNegativeAmount = Decimal(0)

    @model_validator(mode="after")
    def _total_covers_shipping_and_tax(self) -> Self:
        """The total is what the customer pays, shipping and tax included: it cannot be less."""
        try:
            included = _EXACT_SUMS.add(self.shipping, self.tax)
        except Inexact:
            return self  # more digits than any currency has: refused by the currency's decimals
        if self.total < included:
            # Raised as a ValidationError of its own, the error keeps this location: `details`
            # names `amount.total`, not the whole `amount`.
            raise ValidationError.from_exception_data(
                type(self).__name__,
                [
                    InitErrorDetails(
                        type=PydanticCustomError(
                            "total_below_shipping_and_tax",
                            "must be at least shipping + tax ({included})",
                            {"included": str(included)},
                        ),
                        loc=("total",),
                        input=self.total,
                    )
                ],
            )
        return self


class Address(Body):
    line1: Text
    line2: OptionalText = None
    city: Text
    state: OptionalText = None
    postalCode: Text
    country: CountryCode


class Customer(Body):
    email: Email
    firstName: OptionalText = None
    lastName: OptionalText = None
    phone: Annotated[str, StringConstraints(strip_whitespace=True, max_length=32)] | None = None
    billingAddress: Address | None = None
    shippingAddress: Address | None = None


class OrderItem(Body):
    name: Text
    sku: OptionalText = None
    quantity: Annotated[int, Field(ge=1, le=1_000_000)]
    unitPrice: NonNegativeAmount


class ShippingInfo(Body):
    type: OptionalText = None
    method: OptionalText = None


class RedirectUrls(Body):
    success: RedirectUrl | None = None
    failure: RedirectUrl | None = None


# The interface's shape of a new session (camelCase, as API.md writes it), not payorch's: the route
# turns it into a `storage.sessions.SessionDraft`, the one definition of what a session is made of.
# (A comment, not a docstring: a docstring would be the document's description of the body.)
class SessionCreateRequest(Body):
    applicationId: Annotated[
        uuid.UUID | None,
        Field(
            description="The application to create the session for. Required with an access token "
            "(bearerAuth): 400 without it. With an API key (apiKeyAuth) it may be left out, the key's "
            "application is meant; when given, it must be the key's (403 otherwise)."
        ),
    ] = None
    orderReference: Text
    paymentMethod: Annotated[str, StringConstraints(min_length=1, max_length=50)]
    currency: CurrencyCode
    locale: Annotated[str, StringConstraints(pattern=r"^[a-z]{2}_[A-Z]{2}$")] | None = None
    amount: SessionAmount
    orderItems: Annotated[list[OrderItem], Field(max_length=500)] | None = None
    customer: Customer
    shipping: ShippingInfo | None = None
    additionalInformation: (
        Annotated[dict[Text, Annotated[str, StringConstraints(max_length=1000)]], Field(max_length=50)] | None
    ) = None
    redirectUrls: RedirectUrls | None = None

    @field_validator("applicationId", mode="before")
    @classmethod
    def _uuid_text(cls, value: object) -> object:
        # Strict mode wants a UUID object; JSON carries text.
        if isinstance(value, str):
            try:
                return uuid.UUID(value)
            except ValueError:
                raise ValueError("must be a UUID") from None
        return value


class PaymentMethodsQuery(Query):
    currency: CurrencyCode
    amount: Annotated[
        str,
        StringConstraints(pattern=r"^\d{1,15}(\.\d{1,10})?$"),
        Field(
            description="A decimal string in major units, with at most as many decimals as the "
            "currency's minor unit allows."
        ),
    ]
    applicationId: Annotated[
        uuid.UUID | None,
        Field(
            description="Required with an access token (bearerAuth): 400 without it. With an API key "
            "it may be left out; when given, it must be the key's application (403 otherwise)."
        ),
    ] = None


# --- Providers ---------------------------------------------------------------------------------


CredentialValue = Annotated[str, StringConstraints(min_length=1, max_length=500)]


class ProviderCredentials(Body):
    """A provider's API key (`apiKey`), or for PayU the five values of a point of sale (each
    required for PayU, and only for it); for Mollie, optionally an organization access token
    besides the key (`organizationToken`: reconciliation reads settlements with it)."""

    apiKey: CredentialValue | None = None
    organizationToken: CredentialValue | None = None
    posId: CredentialValue | None = None
    clientId: CredentialValue | None = None
    clientSecret: CredentialValue | None = None
    secondKey: CredentialValue | None = None
    environment: Literal["sandbox", "production"] | None = None


PaymentMethods = Annotated[
    list[Annotated[str, StringConstraints(min_length=1, max_length=50)]], Field(min_length=1, max_length=20)
]


class ProviderLinkRequest(Body):
    name: Name
    paymentMethods: PaymentMethods
    credentials: ProviderCredentials


class ProviderApiKeyRequest(ProviderCredentials):
    """The new credentials of a linked provider, as `ProviderCredentials`."""


class ProviderPaymentMethodsRequest(Body):
    paymentMethods: PaymentMethods


# --- Refunds -----------------------------------------------------------------------------------


class RefundLineItem(Body):
    name: Text
    sku: OptionalText = None
    quantity: Annotated[int, Field(ge=1, le=1_000_000)]
    unitPrice: NonNegativeAmount


class RefundCreateRequest(Body):
    amount: Annotated[Amount, Field(ge=Decimal("0.01")), JSON_NUMBER] | None = None
    reason: RefundReason | None = None
    lineItems: Annotated[list[RefundLineItem], Field(max_length=500)] | None = None


# --- Webhooks ----------------------------------------------------------------------------------

WebhookUrl = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=2048)]
# The names are checked by the route (`routes.webhooks`), which names every unknown one; the document
# lists the names it takes, and that the list may not be empty.
EventNames = Annotated[
    list[
        Annotated[
            str,
            StringConstraints(max_length=100),
            WithJsonSchema({"type": "string", "enum": list(EVENT_TYPES)}),
        ]
    ],
    Field(max_length=20, json_schema_extra={"minItems": 1}),
]


class WebhookCreateRequest(Body):
    url: WebhookUrl
    subscribedEvents: EventNames | None = None


class WebhookUpdateRequest(Body):
    url: WebhookUrl | None = None
    isActive: bool | None = None
    subscribedEvents: EventNames | None = None


# --- Routing -----------------------------------------------------------------------------------


# The body of `PUT .../routing`, for the document only: the route reads the JSON itself and
# `engine.routing.document.parse_routing_document` checks it, naming every problem (an empty or
# duplicate rule name, weights not summing to 100, ...), which a model would stop at the first of.
# So the values are described here and typed loosely. (Comments, not a docstring: a docstring
# would be the document's description of the body.)
class RoutingDocumentUpdate(Body):
    rules: Annotated[
        Any,
        Field(
            description="at most 100 rules, each `{name, when?, route}`, the first matching decides; "
            "`when` holds `paymentMethods`, `currencies`, `countries` (lists) and `amount` "
            "(`{min?, max?}` in major units, inclusive: amounts of each of the rule's `currencies`, "
            "which a rule with `amount` names)"
        ),
    ] = None
    default: Annotated[
        Any,
        Field(
            description="the route when no rule matches: `{type: priority, providers}`, `{type: split, "
            "weights}` (whole numbers summing to 100) or `{type: dynamic, providers?}`; dynamic if left out"
        ),
    ] = None
    fees: Annotated[
        Any,
        Field(
            description="by provider: `{percent, fixed: {currency: amount}, methods?: {method: {percent, "
            'fixed}}}`, decimals as strings ("1.40"); a fee for a payment method replaces the '
            "provider's for its payments"
        ),
    ] = None
    objective: Annotated[Any, Field(description="`approval` (the default) or `net` (of fees)")] = None
    recovery: Annotated[
        Any,
        Field(
            description="`{maxAttempts: 1..5, retryOn?: [failure reasons], neverRetry?: [decline codes]}`: "
            "a declined attempt is followed by the next provider's; hard declines never are. "
            "Left out: one attempt"
        ),
    ] = None
    version: Annotated[Any, Field(description="ignored: a document read may be sent back as it is")] = None
    updatedAt: Annotated[Any, Field(description="ignored, as `version`")] = None


def _bounded_document(value: object) -> object:
    if value is not None and len(dumps_exact(value).encode()) > MAX_DOCUMENT_BYTES:
        raise ValueError(f"a routing document takes at most {MAX_DOCUMENT_BYTES} bytes as JSON")
    return value


# A session create body, and optionally a routing document to try instead of the stored one
# (`POST .../routing/evaluate`). The document is checked by the route, every problem named. Its size
# is bounded by the body's (the route's `MAX_EVALUATE_BYTES`, before it is read): it is not written
# out again to be measured, which cost as much as parsing it (nothing of it is stored).
class RoutingEvaluateRequest(SessionCreateRequest):
    applicationId: Annotated[
        uuid.UUID | None,
        Field(description="May be left out: the path names the application; another one is 403."),
    ] = None
    routing: Annotated[
        dict[str, Any] | None,
        Field(
            description="a routing document to try instead of the stored one, in the form of "
            "PUT .../routing; its problems are named under `routing.`"
        ),
    ] = None


# A routing document to replay over the application's last sessions (`POST .../routing/backtest`),
# and how far back. The document is checked by the route, every problem named under `routing.`.
class RoutingBacktestRequest(Body):
    routing: Annotated[
        dict[str, Any],
        BeforeValidator(_bounded_document),
        Field(
            description="the candidate routing document, in the form of PUT .../routing; its problems "
            "are named under `routing.`"
        ),
    ]
    days: Annotated[
        int,
        Field(
            ge=1, le=MAX_DAYS, description=f"replay the sessions of the last `days` days (1 to {MAX_DAYS})"
        ),
    ] = MAX_DAYS
    limit: Annotated[
        int,
        Field(
            ge=1,
            le=MAX_SESSIONS,
            description=f"replay at most this many of them, the newest (1 to {MAX_SESSIONS})",
        ),
    ] = MAX_SESSIONS
