"""A merchant's routing document: its rules, default route, fees and objective (docs/routing.md).

Pure code. `parse_routing_document` turns the JSON the merchant sent into frozen values, or refuses
it with one `InvalidInput` (400 in shape A) that lists every problem as a `details` entry (found
by `engine.routing.validation`); `document_json` gives the same JSON back, what is stored and
answered, and `stored_routing_document` reads a stored one. `matching_rule` finds the rule a
session falls under, and `split_order` assigns a session to a split route's providers by weight,
from its id alone.

The JSON form (numbers arrive as `int` or `Decimal`, never `float`; see `payorch.jsonexact`):

    {"rules": [{"name": "blik-pln",
                "when": {"paymentMethods": ["blik"], "currencies": ["PLN"],
                         "amount": {"min": 0, "max": 5000}, "countries": ["PL"]},
                "route": {"type": "priority", "providers": ["mollie", "stripe"]}}],
     "default": {"type": "dynamic"},
     "fees": {"stripe": {"percent": "1.4", "fixed": {"PLN": "1.00", "EUR": "0.25"}},
              "mollie": {"percent": "1.8", "methods": {"blik": {"percent": "0.9"}}}},
     "objective": "approval",
     "recovery": {"maxAttempts": 2, "retryOn": ["CARD_DECLINED", "INSUFFICIENT_FUNDS"],
                  "neverRetry": ["do_not_honor"]}}

Every key may be left out (or be `null`): no rules, a dynamic default, no fees, objective
`approval`, no recovery (one attempt per session; `engine.routing.recovery`). A provider's fee for a
payment method (`methods`) replaces its fee for the payments in that method (`RoutingDocument.fee_of`).
A split's draw walks its providers by name (`split_order`). A `recovery` given
is written back whole, its `retryOn` and `neverRetry` as parsed (their defaults when left out).
The `version` and `updatedAt` that answers add are ignored, so a document read can be sent back as
it is.
"""

from __future__ import annotations

import functools
import hashlib
import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from fractions import Fraction
from typing import Any, ClassVar, Literal, NamedTuple

from payorch.engine.routing.recovery import DEFAULT_POLICY, RETRYABLE_REASONS, RecoveryPolicy
from payorch.engine.routing.validation import routing_document_problems
from payorch.values.errors import FieldProblem, InvalidInput
from payorch.values.money import Money, currency_exponent
from payorch.values.statuses import FailureReason

MAX_DOCUMENT_BYTES = 64 * 1024  # the HTTP layer refuses a larger body before parsing it
_CANDIDATE_KEYS = 4096  # kinds of session (method, currency, country) whose candidate rules are kept
# The largest part of a fee's ratio a float is given: far beyond any ranking's difference, far below
# float's largest (about 1.8e308), so a stored fee of any size ranks last instead of overflowing.
_LARGEST_FEE_RATIO = Fraction(10) ** 300

RouteType = Literal["priority", "split", "dynamic"]
Objective = Literal["approval", "net"]


@dataclass(frozen=True)
class PriorityRoute:
    """Try `providers` in this order (those not eligible for the session are skipped)."""

    providers: tuple[str, ...]
    type: ClassVar[RouteType] = "priority"


@dataclass(frozen=True)
class SplitRoute:
    """Assign each session to one provider by integer `weights` (summing to 100), walking the
    providers by name whatever order the document wrote them in; the cascade then tries the
    others, heaviest first."""

    weights: tuple[tuple[str, int], ...]
    type: ClassVar[RouteType] = "split"


@dataclass(frozen=True)
class DynamicRoute:
    """Rank by learned success: over `providers` when given, else over every eligible provider."""

    providers: tuple[str, ...] | None = None
    type: ClassVar[RouteType] = "dynamic"


Route = PriorityRoute | SplitRoute | DynamicRoute


def route_providers(route: Route) -> tuple[str, ...] | None:
    """The providers `route` names, in its order; None for a dynamic route over every provider."""
    if isinstance(route, SplitRoute):
        return tuple(provider for provider, _ in route.weights)
    return route.providers


@dataclass(frozen=True)
class AmountRange:
    """Amounts in major units, both bounds inclusive; a bound left out is no bound."""

    min: Decimal | None = None
    max: Decimal | None = None
    # By currency: the bounds in its minor units (min rounded up, max down), worked out on first use.
    _minor_bounds: dict[str, tuple[int | None, int | None]] = field(
        default_factory=dict, init=False, compare=False, repr=False
    )

    def minor_bounds(self, currency: str) -> tuple[int | None, int | None]:
        """The bounds in `currency`'s minor units: the least and the most an amount may hold."""
        bounds = self._minor_bounds.get(currency)
        if bounds is None:
            scale = 10 ** currency_exponent(currency)
            low = None if self.min is None else math.ceil(Fraction(self.min) * scale)
            high = None if self.max is None else math.floor(Fraction(self.max) * scale)
            bounds = self._minor_bounds[currency] = (low, high)
        return bounds

    def contains(self, amount: Money) -> bool:
        low, high = self.minor_bounds(amount.currency)
        return (low is None or amount.minor >= low) and (high is None or amount.minor <= high)


@dataclass(frozen=True)
class Conditions:
    """A rule's `when`: every condition given must hold; a list holds when any of its values does.
    None is a condition left out; no condition at all holds for every session."""

    payment_methods: tuple[str, ...] | None = None
    currencies: tuple[str, ...] | None = None
    amount: AmountRange | None = None
    countries: tuple[str, ...] | None = None  # the customer's billing country (ISO 3166-1 alpha-2)
    _sets: tuple[frozenset[str] | None, ...] = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        lists = (self.payment_methods, self.currencies, self.countries)
        object.__setattr__(self, "_sets", tuple(None if v is None else frozenset(v) for v in lists))

    def matches(self, facts: SessionFacts) -> bool:
        methods, currencies, countries = self._sets
        if methods is not None and facts.payment_method not in methods:
            return False
        if currencies is not None and facts.amount.currency not in currencies:
            return False
        if countries is not None and facts.billing_country not in countries:
            return False
        return self.amount is None or self.amount.contains(facts.amount)


@dataclass(frozen=True)
class Rule:
    name: str
    when: Conditions
    route: Route


# A rule that may match a kind of session, with its amount bounds in the session's minor units.
CandidateRule = tuple[Rule, int | None, int | None]


@dataclass(frozen=True)
class Fee:
    """What a provider charges per payment in one currency: `percent` of the amount plus
    `fixed[currency]` (major units; a currency not listed has no fixed part). A provider's fee may
    hold its fees by payment method in `methods`: for a payment in one of them, that fee replaces
    this one whole (`for_method`)."""

    percent: Decimal = Decimal(0)
    fixed: Mapping[str, Decimal] = field(default_factory=dict)
    methods: Mapping[str, Fee] = field(default_factory=dict)
    # By currency: the fixed part in its minor units, worked out on first use.
    _fixed_minor: dict[str, Fraction] = field(default_factory=dict, init=False, compare=False, repr=False)
    # By currency: the percent as a ratio and the fixed part in minor units, as floats for ranking.
    _ratio_parts: dict[str, tuple[float, float]] = field(
        default_factory=dict, init=False, compare=False, repr=False
    )

    def _fixed_of(self, currency: str) -> Fraction:
        fixed = self._fixed_minor.get(currency)
        if fixed is None:
            major = self.fixed.get(currency, Decimal(0))
            fixed = self._fixed_minor[currency] = Fraction(major) * 10 ** currency_exponent(currency)
        return fixed

    def for_method(self, payment_method: str) -> Fee:
        """The most specific fee of a payment in `payment_method`: the method's own fee when this
        one has it, else this one."""
        return self.methods.get(payment_method, self)

    def of(self, amount: Money) -> Fraction:
        """The fee on `amount`, exactly, in its currency's minor units (it may hold a fraction of one)."""
        return Fraction(self.percent) * amount.minor / 100 + self._fixed_of(amount.currency)

    def share_left(self, amount: Money) -> float:
        """(amount - fee) / amount, for ranking: a ratio, not money, so a float is precise enough.
        Below 0 when the fee exceeds the amount; `amount` must be positive. Always a finite float,
        whatever the fee's numbers (a stored document's were bounded by the rules of its day only):
        each part is taken at most `_LARGEST_FEE_RATIO`, so a fee beyond that ranks as if it were
        that large rather than failing the decision."""
        parts = self._ratio_parts.get(amount.currency)
        if parts is None:
            parts = self._ratio_parts[amount.currency] = (
                _ranking_float(Fraction(self.percent) / 100),
                _ranking_float(self._fixed_of(amount.currency)),
            )
        # At most 1e300 over an amount of at least one minor unit: finite.
        return 1 - parts[0] - parts[1] / amount.minor


def _ranking_float(ratio: Fraction) -> float:
    """`ratio` as a float, at most `_LARGEST_FEE_RATIO` (a `Fraction` beyond float's range would
    raise `OverflowError`)."""
    return float(min(ratio, _LARGEST_FEE_RATIO))


@dataclass(frozen=True)
class RoutingDocument:
    rules: tuple[Rule, ...] = ()
    default: Route = DynamicRoute()
    fees: Mapping[str, Fee] = field(default_factory=dict)  # by provider
    objective: Objective = "approval"
    recovery: RecoveryPolicy | None = None  # None: left out, one attempt (`recovery_policy`)
    # By payment method, currency and billing country: the rules whose lists admit such a session,
    # in order, each with its amount bounds in that currency's minor units, worked out on first use
    # (for at most `_CANDIDATE_KEYS` kinds of session at a time).
    _candidates: dict[tuple[str, str, str | None], tuple[CandidateRule, ...]] = field(
        default_factory=dict, init=False, compare=False, repr=False
    )

    def candidates(
        self, payment_method: str, currency: str, country: str | None
    ) -> tuple[CandidateRule, ...]:
        """The rules whose payment methods, currencies and countries admit such a session, in
        order, with their amount bounds: only those are left to check."""
        key = (payment_method, currency, country)
        found = self._candidates.get(key)
        if found is None:
            if len(self._candidates) >= _CANDIDATE_KEYS:
                self._candidates.clear()
            found = self._candidates[key] = tuple(
                (rule, *(rule.when.amount.minor_bounds(currency) if rule.when.amount else (None, None)))
                for rule in self.rules
                if (rule.when.payment_methods is None or payment_method in rule.when.payment_methods)
                and (rule.when.currencies is None or currency in rule.when.currencies)
                and (rule.when.countries is None or country in rule.when.countries)
            )
        return found

    def fee_of(self, provider: str, payment_method: str) -> Fee | None:
        """What `provider` charges for a payment in `payment_method`: its fee for that method when
        the document writes one, else its fee; None when the document gives it none."""
        fee = self.fees.get(provider)
        return None if fee is None else fee.for_method(payment_method)

    @property
    def recovery_policy(self) -> RecoveryPolicy:
        """The recovery policy in force: the document's, or one attempt when it has none."""
        return DEFAULT_POLICY if self.recovery is None else self.recovery


class SessionDraws(NamedTuple):
    """Numbers drawn from a session's id, the same for the same id every time: `split` uniform over
    [0, 2**64), `exploration` uniform over [0, 1), `pick` uniform over [0, 2**32)."""

    split: int
    exploration: float
    pick: int


def session_draws(session_id: str) -> SessionDraws:
    """The draws of `session_id` (BLAKE2b of it): deterministic, independent of each other."""
    digest = hashlib.blake2b(session_id.encode(), digest_size=16, person=b"payorch routing").digest()
    return SessionDraws(
        split=int.from_bytes(digest[:8], "big"),
        exploration=int.from_bytes(digest[8:12], "big") / 2**32,
        pick=int.from_bytes(digest[12:], "big"),
    )


@dataclass(frozen=True)
class SessionFacts:
    """What routing knows of a session being created. `session_id` is its id as the API writes it
    (the evaluate call, which creates nothing, may pass any text): the split and the exploration
    draw from it, so the same session is always routed the same way."""

    payment_method: str
    amount: Money
    billing_country: str | None
    session_id: str

    @property
    def currency(self) -> str:
        return self.amount.currency

    @functools.cached_property
    def draws(self) -> SessionDraws:
        return session_draws(self.session_id)


def matching_rule(document: RoutingDocument, facts: SessionFacts) -> Rule | None:
    """The first rule of `document` whose conditions all hold for `facts`, or None (then the
    document's `default` route applies)."""
    minor = facts.amount.minor
    for rule, low, high in document.candidates(
        facts.payment_method, facts.amount.currency, facts.billing_country
    ):
        if (low is None or minor >= low) and (high is None or minor <= high):
            return rule
    return None


def split_order(route: SplitRoute, eligible: Collection[str], facts: SessionFacts) -> list[str]:
    """The eligible providers of `route` in the order to try them: first the one the session is
    assigned to, drawn from its id by the weights of the eligible providers (so each provider's share
    of sessions is its weight over theirs), then the others by weight, heaviest first (ties by name).
    The draw walks the providers by name, never in the document's key order, which a JSON object
    does not keep (jsonb reorders it): the same weights in any order assign a session alike."""
    weights = sorted((provider, weight) for provider, weight in route.weights if provider in eligible)
    if not weights:
        return []
    total = sum(weight for _, weight in weights)
    assigned = weights[0][0]
    if total:
        point = facts.draws.split % total
        for provider, weight in weights:
            if point < weight:
                assigned = provider
                break
            point -= weight
    rest = sorted((item for item in weights if item[0] != assigned), key=lambda item: -item[1])
    return [assigned, *(provider for provider, _ in rest)]


# Parsing


def parse_routing_document(
    raw: object,
    known_providers: Collection[str],
    *,
    at: str = "",
    known_methods: Collection[str] | None = None,
) -> RoutingDocument:
    """The document `raw` (parsed JSON) describes, every provider it names one of `known_providers`
    and every payment method one of `known_methods` (the catalogue's; None: any), its currencies
    and countries ISO codes and its decimals bounded (`engine.routing.validation`). Otherwise
    `InvalidInput` (400 in shape A) with a `details` entry per problem found, each naming its place
    (`rules.0.route.weights`, under `at.` when given)."""
    return _parsed(raw, routing_document_problems(raw, known_providers, at, known_methods=known_methods))


def _parsed(raw: object, problems: list[FieldProblem]) -> RoutingDocument:
    """The document `raw`, whose `problems` were found: `InvalidInput` when there are any."""
    if problems or not isinstance(raw, dict):
        count = len(problems)
        raise InvalidInput(f"invalid routing document: {count} problem{'s' if count != 1 else ''}", problems)
    # What follows reads a document found sound: every key present has its expected shape.
    objective: Objective = "net" if raw.get("objective") == "net" else "approval"
    return RoutingDocument(
        rules=tuple(_rule(item) for item in raw.get("rules") or ()),
        default=DynamicRoute() if raw.get("default") is None else _route(raw["default"]),
        fees={name: _fee(item) for name, item in (raw.get("fees") or {}).items()},
        objective=objective,
        recovery=None if raw.get("recovery") is None else _recovery(raw["recovery"]),
    )


def stored_routing_document(raw: Mapping[str, Any]) -> RoutingDocument:
    """The document `raw` stored once `parse_routing_document` found it sound (in `document_json`'s
    form), by the rules of the day it was stored: only its shape is checked again. The providers
    and payment methods it names need not be in the catalogue any more (one that left it is never
    eligible, so routing skips it as any provider not eligible for a session; a method no session
    has matches none), and its numbers are routed by as they are, however large (`Fee.share_left`)."""
    routes = [raw.get("default") or {}, *(rule.get("route") or {} for rule in raw.get("rules") or ())]
    named = set(raw.get("fees") or {})
    for route in routes:
        named.update(route.get("providers") or ())
        named.update(route.get("weights") or {})
    document = dict(raw)
    return _parsed(document, routing_document_problems(document, named, as_stored=True))


def _rule(raw: dict[str, Any]) -> Rule:
    when = raw.get("when") or {}
    conditions = Conditions(
        payment_methods=_texts(when.get("paymentMethods")),
        currencies=_texts(when.get("currencies")),
        amount=_amount(when.get("amount")),
        countries=_texts(when.get("countries")),
    )
    return Rule(name=raw["name"], when=conditions, route=_route(raw["route"]))


def _amount(raw: dict[str, Any] | None) -> AmountRange | None:
    return None if raw is None else AmountRange(_decimal(raw.get("min")), _decimal(raw.get("max")))


def _route(raw: dict[str, Any]) -> Route:
    if raw["type"] == "split":
        return SplitRoute(tuple(raw["weights"].items()))
    if raw["type"] == "priority":
        return PriorityRoute(tuple(raw["providers"]))
    return DynamicRoute(_texts(raw.get("providers")))


def _fee(raw: dict[str, Any]) -> Fee:
    fixed = {currency: Decimal(amount) for currency, amount in (raw.get("fixed") or {}).items()}
    percent = _decimal(raw.get("percent"))
    methods = {method: _fee(item) for method, item in (raw.get("methods") or {}).items()}
    return Fee(percent=Decimal(0) if percent is None else percent, fixed=fixed, methods=methods)


def _recovery(raw: dict[str, Any]) -> RecoveryPolicy:
    retry_on = raw.get("retryOn")
    known = {str(reason) for reason in FailureReason}
    return RecoveryPolicy(
        max_attempts=raw["maxAttempts"],
        # A stored document's reasons were checked when it was stored: one payorch no longer knows
        # retries nothing.
        retry_on=RETRYABLE_REASONS
        if retry_on is None
        else tuple(FailureReason(reason) for reason in retry_on if reason in known),
        never_retry=tuple(raw.get("neverRetry") or ()),
    )


def _texts(raw: list[str] | None) -> tuple[str, ...] | None:
    return None if raw is None else tuple(raw)


def _decimal(raw: str | int | Decimal | None) -> Decimal | None:
    return None if raw is None else Decimal(raw)


# The JSON form


def route_json(route: Route) -> dict[str, Any]:
    """`route` as the document writes it."""
    if isinstance(route, SplitRoute):
        return {"type": "split", "weights": dict(route.weights)}
    if isinstance(route, DynamicRoute) and route.providers is None:
        return {"type": "dynamic"}
    return {"type": route.type, "providers": list(route.providers or ())}


def _conditions_json(when: Conditions) -> dict[str, Any]:
    found: dict[str, Any] = {}
    if when.payment_methods is not None:
        found["paymentMethods"] = list(when.payment_methods)
    if when.currencies is not None:
        found["currencies"] = list(when.currencies)
    if when.amount is not None:
        bounds = (("min", when.amount.min), ("max", when.amount.max))
        found["amount"] = {key: value for key, value in bounds if value is not None}
    if when.countries is not None:
        found["countries"] = list(when.countries)
    return found


def _decimal_text(value: Decimal) -> str:
    return format(value, "f")


def document_json(document: RoutingDocument) -> dict[str, Any]:
    """`document` as JSON values (amounts as `Decimal` numbers, fees as decimal strings): what is
    stored and answered. `parse_routing_document` of it gives `document` back."""
    rules = []
    for rule in document.rules:
        item: dict[str, Any] = {"name": rule.name}
        when = _conditions_json(rule.when)
        if when:
            item["when"] = when
        item["route"] = route_json(rule.route)
        rules.append(item)
    fees = {name: _fee_json(fee) for name, fee in document.fees.items()}
    found = {
        "rules": rules,
        "default": route_json(document.default),
        "fees": fees,
        "objective": document.objective,
    }
    if document.recovery is not None:
        found["recovery"] = recovery_json(document.recovery)
    return found


def _fee_json(fee: Fee) -> dict[str, Any]:
    """`fee` as the document writes it: `methods` only when it has fees by payment method."""
    found: dict[str, Any] = {
        "percent": _decimal_text(fee.percent),
        "fixed": {currency: _decimal_text(amount) for currency, amount in fee.fixed.items()},
    }
    if fee.methods:
        found["methods"] = {method: _fee_json(item) for method, item in fee.methods.items()}
    return found


def recovery_json(policy: RecoveryPolicy) -> dict[str, Any]:
    """`policy` as the document writes it."""
    return {
        "maxAttempts": policy.max_attempts,
        "retryOn": [str(reason) for reason in policy.retry_on],
        "neverRetry": list(policy.never_retry),
    }
