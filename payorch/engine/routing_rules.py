"""A merchant's routing document: its rules, default route, fees and objective (docs/routing.md).

Pure code. `parse_routing_document` turns the JSON the merchant sent into frozen values, or refuses
it with one `InvalidInput` (400 in shape A) that lists every problem as a `details` entry;
`document_json` gives the same JSON back. `matching_rule` finds the rule a session falls under, and
`split_order` assigns a session to a split route's providers by weight, from its id alone.

The JSON form (numbers arrive as `int` or `Decimal`, never `float`; see `payorch.jsonexact`):

    {"rules": [{"name": "blik-pln",
                "when": {"paymentMethods": ["blik"], "currencies": ["PLN"],
                         "amount": {"min": 0, "max": 5000}, "countries": ["PL"]},
                "route": {"type": "priority", "providers": ["mollie", "stripe"]}}],
     "default": {"type": "dynamic"},
     "fees": {"stripe": {"percent": "1.4", "fixed": {"PLN": "1.00", "EUR": "0.25"}}},
     "objective": "approval"}

Every key may be left out (or be `null`): no rules, a dynamic default, no fees, objective
`approval`. The `version` and `updatedAt` that answers add are ignored, so a document read can be
sent back as it is.
"""

from __future__ import annotations

import functools
import hashlib
import math
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from fractions import Fraction
from typing import Any, ClassVar, Literal, NamedTuple, TypeGuard

from payorch.values.errors import FieldProblem, InvalidInput
from payorch.values.money import Money, currency_exponent

MAX_DOCUMENT_BYTES = 64 * 1024  # the HTTP layer refuses a larger body before parsing it
MAX_RULES = 100
MAX_RULE_NAME_LENGTH = 100
_CANDIDATE_KEYS = 4096  # kinds of session (method, currency, country) whose candidate rules are kept

RouteType = Literal["priority", "split", "dynamic"]
Objective = Literal["approval", "net"]
ROUTE_TYPES: tuple[RouteType, ...] = ("priority", "split", "dynamic")
OBJECTIVES: tuple[Objective, ...] = ("approval", "net")
WHEN_KEYS = ("paymentMethods", "currencies", "amount", "countries")
_DOCUMENT_KEYS = ("rules", "default", "fees", "objective")
_ANSWER_KEYS = frozenset({"version", "updatedAt"})  # what an answer adds: ignored when sent back
_CURRENCY = re.compile(r"[A-Z]{3}")
_COUNTRY = re.compile(r"[A-Z]{2}")
_DECIMAL_TEXT = re.compile(r"-?[0-9]+(?:\.[0-9]+)?")


@dataclass(frozen=True)
class PriorityRoute:
    """Try `providers` in this order (those not eligible for the session are skipped)."""

    providers: tuple[str, ...]
    type: ClassVar[RouteType] = "priority"


@dataclass(frozen=True)
class SplitRoute:
    """Assign each session to one provider by integer `weights` (summing to 100), in the document's
    order; the cascade then tries the others, heaviest first."""

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
    `fixed[currency]` (major units; a currency not listed has no fixed part)."""

    percent: Decimal = Decimal(0)
    fixed: Mapping[str, Decimal] = field(default_factory=dict)
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

    def of(self, amount: Money) -> Fraction:
        """The fee on `amount`, exactly, in its currency's minor units (it may hold a fraction of one)."""
        return Fraction(self.percent) * amount.minor / 100 + self._fixed_of(amount.currency)

    def share_left(self, amount: Money) -> float:
        """(amount - fee) / amount, for ranking: a ratio, not money, so a float is precise enough.
        Below 0 when the fee exceeds the amount; `amount` must be positive."""
        parts = self._ratio_parts.get(amount.currency)
        if parts is None:
            parts = self._ratio_parts[amount.currency] = (
                float(self.percent) / 100,
                float(self._fixed_of(amount.currency)),
            )
        return 1 - parts[0] - parts[1] / amount.minor


@dataclass(frozen=True)
class RoutingDocument:
    rules: tuple[Rule, ...] = ()
    default: Route = DynamicRoute()
    fees: Mapping[str, Fee] = field(default_factory=dict)
    objective: Objective = "approval"
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
    of sessions is its weight over theirs), then the others by weight, heaviest first (ties in the
    document's order)."""
    weights = [(provider, weight) for provider, weight in route.weights if provider in eligible]
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


def parse_routing_document(raw: object, known_providers: Collection[str], *, at: str = "") -> RoutingDocument:
    """The document `raw` (parsed JSON) describes, every provider it names one of `known_providers`
    (the catalogue). `InvalidInput` with a `details` entry per problem found, each naming its place
    (`rules.0.route.weights`, under `at.` when given) otherwise."""
    parser = _Parser(frozenset(known_providers))
    document = parser.document(raw, at)
    if parser.problems or document is None:
        count = len(parser.problems)
        raise InvalidInput(
            f"invalid routing document: {count} problem{'s' if count != 1 else ''}", parser.problems
        )
    return document


def _inside(at: str, key: object) -> str:
    return f"{at}.{key}" if at else str(key)


def _is_number(value: object) -> TypeGuard[int | Decimal]:
    return isinstance(value, int | Decimal) and not isinstance(value, bool)


class _Parser:
    """Reads one document, noting every problem instead of stopping at the first."""

    def __init__(self, known: frozenset[str]) -> None:
        self.known = known
        self.problems: list[FieldProblem] = []

    def problem(self, where: str, message: str) -> None:
        self.problems.append(FieldProblem(where or "body", message))

    def unknown_keys(self, raw: dict[Any, Any], allowed: Collection[str], at: str, what: str) -> None:
        for key in raw:
            if key not in allowed:
                self.problem(_inside(at, key), f"unknown key of {what}: use {_listed(allowed)}")

    def document(self, raw: object, at: str) -> RoutingDocument | None:
        if not isinstance(raw, dict):
            self.problem(at, "must be a JSON object with rules, default, fees and objective")
            return None
        self.unknown_keys(
            {k: v for k, v in raw.items() if k not in _ANSWER_KEYS}, _DOCUMENT_KEYS, at, "a routing document"
        )
        rules = self.rules(raw.get("rules"), _inside(at, "rules"))
        default_raw = raw.get("default")
        default = DynamicRoute() if default_raw is None else self.route(default_raw, _inside(at, "default"))
        fees = self.fees(raw.get("fees"), _inside(at, "fees"))
        objective = self.objective(raw.get("objective"), _inside(at, "objective"))
        if default is None or objective is None:
            return None
        return RoutingDocument(rules=rules, default=default, fees=fees, objective=objective)

    def rules(self, raw: object, at: str) -> tuple[Rule, ...]:
        if raw is None:
            return ()
        if not isinstance(raw, list):
            self.problem(at, "must be a list of rules")
            return ()
        if len(raw) > MAX_RULES:
            self.problem(at, f"at most {MAX_RULES} rules, not {len(raw)}")
        found: list[Rule] = []
        first_of: dict[str, str] = {}  # each rule name, with the place of the rule that has it first
        for index, item in enumerate(raw):
            rule = self.rule(item, _inside(at, index), first_of)
            if rule is not None:
                found.append(rule)
        return tuple(found)

    def rule(self, raw: object, at: str, first_of: dict[str, str]) -> Rule | None:
        if not isinstance(raw, dict):
            self.problem(at, "must be an object with a name, a route and optionally when")
            return None
        self.unknown_keys(raw, ("name", "when", "route"), at, "a rule")
        name = raw.get("name")
        if name is None:
            self.problem(_inside(at, "name"), "required: a name for the rule, 1 to 100 characters")
        elif not isinstance(name, str):
            self.problem(_inside(at, "name"), "must be a string")
        elif not name.strip():
            self.problem(_inside(at, "name"), "must not be empty")
        elif len(name) > MAX_RULE_NAME_LENGTH:
            self.problem(_inside(at, "name"), f"at most {MAX_RULE_NAME_LENGTH} characters")
        elif name in first_of:
            self.problem(
                _inside(at, "name"),
                f"duplicate of {first_of[name]}.name: every rule needs a name of its own",
            )
        else:
            first_of[name] = at
        when = self.conditions(raw.get("when"), _inside(at, "when"))
        route_raw = raw.get("route")
        if route_raw is None:
            self.problem(_inside(at, "route"), "required: the route of the sessions this rule matches")
            return None
        route = self.route(route_raw, _inside(at, "route"))
        if route is None or when is None or not isinstance(name, str):
            return None
        return Rule(name=name, when=when, route=route)

    def conditions(self, raw: object, at: str) -> Conditions | None:
        if raw is None:
            return Conditions()
        if not isinstance(raw, dict):
            self.problem(at, f"must be an object of conditions: {_listed(WHEN_KEYS)}")
            return None
        for key in raw:
            if key not in WHEN_KEYS:
                self.problem(_inside(at, key), f"unknown condition: use {_listed(WHEN_KEYS)}")
        methods = self.texts(raw.get("paymentMethods"), _inside(at, "paymentMethods"), None, "")
        currencies = self.texts(
            raw.get("currencies"), _inside(at, "currencies"), _CURRENCY, "three capital letters, such as EUR"
        )
        countries = self.texts(
            raw.get("countries"),
            _inside(at, "countries"),
            _COUNTRY,
            "two capital letters (ISO 3166-1 alpha-2), such as PL",
        )
        amount = self.amount(raw.get("amount"), _inside(at, "amount"))
        if methods is False or currencies is False or countries is False or amount is False:
            return None
        return Conditions(payment_methods=methods, currencies=currencies, amount=amount, countries=countries)

    def texts(
        self, raw: object, at: str, pattern: re.Pattern[str] | None, shape: str
    ) -> tuple[str, ...] | Literal[False] | None:
        """A list of strings, each of `pattern` when given; None when left out, False when refused."""
        if raw is None:
            return None
        if not isinstance(raw, list):
            self.problem(at, "must be a list of strings")
            return False
        if not raw:
            self.problem(at, "must list at least one value, or be left out")
            return False
        good = True
        for index, item in enumerate(raw):
            if not isinstance(item, str) or not item:
                self.problem(_inside(at, index), "must be a non-empty string")
                good = False
            elif pattern is not None and not pattern.fullmatch(item):
                self.problem(_inside(at, index), f"must be {shape}")
                good = False
        return tuple(raw) if good else False

    def amount(self, raw: object, at: str) -> AmountRange | Literal[False] | None:
        if raw is None:
            return None
        if not isinstance(raw, dict):
            self.problem(at, "must be an object with min, max or both (major units)")
            return False
        self.unknown_keys(raw, ("min", "max"), at, "an amount range")
        bounds: list[Decimal | None] = []
        good = True
        for key in ("min", "max"):
            value = raw.get(key)
            if value is None:
                bounds.append(None)
            elif not _is_number(value) or not Decimal(value).is_finite():
                self.problem(_inside(at, key), "must be a number (an amount in major units)")
                good = False
            elif value < 0:
                self.problem(_inside(at, key), "must not be negative")
                good = False
            else:
                bounds.append(Decimal(value))
        if not good:
            return False
        low, high = bounds
        if low is not None and high is not None and low > high:
            self.problem(at, f"min ({low}) must not be greater than max ({high})")
            return False
        return AmountRange(min=low, max=high)

    def route(self, raw: object, at: str) -> Route | None:
        if not isinstance(raw, dict):
            self.problem(at, f"must be an object with a type: {_listed(ROUTE_TYPES)}")
            return None
        kind = raw.get("type")
        if kind not in ROUTE_TYPES:
            shown = f"{kind!r}" if isinstance(kind, str) and len(kind) <= 40 else "this"
            self.problem(
                _inside(at, "type"),
                f"required: one of {_listed(ROUTE_TYPES)}"
                if kind is None
                else f"unknown route type {shown}: use {_listed(ROUTE_TYPES)}",
            )
            return None
        if kind == "split":
            self.unknown_keys(raw, ("type", "weights"), at, "a split route")
            weights = self.weights(raw.get("weights"), _inside(at, "weights"))
            return None if weights is None else SplitRoute(weights)
        self.unknown_keys(raw, ("type", "providers"), at, f"a {kind} route")
        providers_raw = raw.get("providers")
        if providers_raw is None:
            if kind == "priority":
                self.problem(_inside(at, "providers"), "required: the providers in the order to try them")
                return None
            return DynamicRoute()
        providers = self.providers(providers_raw, _inside(at, "providers"))
        if providers is None:
            return None
        return PriorityRoute(providers) if kind == "priority" else DynamicRoute(providers)

    def provider_name(self, name: object, at: str) -> bool:
        if not isinstance(name, str):
            self.problem(at, "must be a provider's name")
            return False
        if name not in self.known:
            shown = repr(name) if len(name) <= 40 else "this"
            self.problem(at, f"{shown} is not a provider payorch offers: use {_listed(sorted(self.known))}")
            return False
        return True

    def providers(self, raw: object, at: str) -> tuple[str, ...] | None:
        if not isinstance(raw, list) or not raw:
            self.problem(at, "must list at least one provider")
            return None
        good = True
        seen: set[str] = set()
        for index, name in enumerate(raw):
            if not self.provider_name(name, _inside(at, index)):
                good = False
            elif name in seen:
                self.problem(_inside(at, index), f"{name!r} is listed twice")
                good = False
            else:
                seen.add(name)
        return tuple(raw) if good else None

    def weights(self, raw: object, at: str) -> tuple[tuple[str, int], ...] | None:
        if not isinstance(raw, dict) or not raw:
            self.problem(at, "required: an object of whole-number weights by provider, summing to 100")
            return None
        good = True
        for name, weight in raw.items():
            if not self.provider_name(name, _inside(at, name)):
                good = False
            if not isinstance(weight, int) or isinstance(weight, bool) or not 0 <= weight <= 100:
                self.problem(_inside(at, name), "must be a whole number from 0 to 100")
                good = False
        if not good:
            return None
        total = sum(raw.values())
        if total != 100:
            self.problem(at, f"must sum to 100, not {total}")
            return None
        return tuple(raw.items())

    def fees(self, raw: object, at: str) -> Mapping[str, Fee]:
        if raw is None:
            return {}
        if not isinstance(raw, dict):
            self.problem(at, "must be an object of fees by provider")
            return {}
        found: dict[str, Fee] = {}
        for name, item in raw.items():
            where = _inside(at, name)
            if not self.provider_name(name, where):
                continue
            if not isinstance(item, dict):
                self.problem(where, "must be an object with percent, fixed or both")
                continue
            self.unknown_keys(item, ("percent", "fixed"), where, "a fee")
            percent = self.decimal(item.get("percent"), _inside(where, "percent"))
            if percent is not None and percent > 100:
                self.problem(_inside(where, "percent"), "must be a percentage from 0 to 100")
                percent = None
            fixed = self.fixed(item.get("fixed"), _inside(where, "fixed"))
            if percent is not None and fixed is not None:
                found[name] = Fee(percent=percent, fixed=fixed)
        return found

    def fixed(self, raw: object, at: str) -> dict[str, Decimal] | None:
        if raw is None:
            return {}
        if not isinstance(raw, dict):
            self.problem(at, 'must be an object of amounts by currency, such as {"EUR": "0.25"}')
            return None
        found: dict[str, Decimal] = {}
        good = True
        for currency, value in raw.items():
            where = _inside(at, currency)
            if not _CURRENCY.fullmatch(currency):
                self.problem(where, "the currency must be three capital letters, such as EUR")
                good = False
                continue
            amount = self.decimal(value, where)
            if amount is None:
                good = False
            else:
                found[currency] = amount
        return found if good else None

    def decimal(self, raw: object, at: str) -> Decimal | None:
        """A non-negative decimal written as a string ("1.40") or a number; 0 when left out."""
        if raw is None:
            return Decimal(0)
        value: Decimal | None = None
        if isinstance(raw, str):
            value = Decimal(raw) if _DECIMAL_TEXT.fullmatch(raw) else None
        elif _is_number(raw):
            value = Decimal(raw)
        if value is None or not value.is_finite():
            self.problem(at, 'must be a decimal number, such as "1.40"')
            return None
        if value < 0:
            self.problem(at, "must not be negative")
            return None
        return value

    def objective(self, raw: object, at: str) -> Objective | None:
        if raw is None:
            return "approval"
        for objective in OBJECTIVES:
            if raw == objective:
                return objective
        self.problem(at, f"must be {_listed(OBJECTIVES)}")
        return None


def _listed(names: Collection[str]) -> str:
    names = list(names)
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


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
    fees = {
        name: {
            "percent": _decimal_text(fee.percent),
            "fixed": {currency: _decimal_text(amount) for currency, amount in fee.fixed.items()},
        }
        for name, fee in document.fees.items()
    }
    return {
        "rules": rules,
        "default": route_json(document.default),
        "fees": fees,
        "objective": document.objective,
    }
