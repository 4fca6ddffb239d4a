"""What is wrong with a routing document: every problem, each as a `FieldProblem` naming its place.

Pure code over parsed JSON (numbers as `int` or `Decimal`, never `float`). It says nothing about
what a valid document means: `engine.routing.document` builds its values once this found no problem
(`parse_routing_document`), and refuses it with these problems otherwise.

Places are written as the HTTP layer writes pydantic's: keys and list indexes joined by dots
(`rules.0.route.weights.stripe`), under a prefix when given (`routing.rules.0.name`).

A document sent now names only the catalogue's providers and payment methods, ISO 4217 currencies
payorch knows (`values.money.known_currencies`) and ISO 3166-1 alpha-2 countries
(`values.countries`), and every decimal in it (an amount bound, a fixed fee, a percentage) is
bounded: finite, not negative, below `MAX_WHOLE` (at most 15 digits before the point; a percentage
at most 100) and with at most `MAX_DECIMAL_PLACES` after it. A rule's amount bounds are amounts of
each currency its `currencies` names (which it must name: 1000 is not the same amount in JPY and
EUR), so every bound can be met by some session. A provider's fee may hold fees by payment method
(`fees.mollie.methods.blik`), each a fee of its own, bounded alike. A stored document is read back
`as_stored`: it was checked when it was stored, by the rules of that day, so only its shape is
checked again, and the engine routes by whatever numbers it holds without failing
(`engine.routing.document.Fee`).

A `recovery` policy (`engine.routing.recovery`) holds `maxAttempts` (a whole number from 1 to
`MAX_ATTEMPTS`), `retryOn` (failure reasons a decline may carry that another provider may approve,
each once) and `neverRetry` (at most `MAX_NEVER_RETRY` provider decline codes, each once, each a
`DECLINE_CODE`).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Collection
from decimal import Decimal
from typing import Any, TypeGuard

from payorch.engine.routing.recovery import (
    DECLINE_CODE,
    HARD_REASONS,
    MAX_ATTEMPTS,
    MAX_NEVER_RETRY,
    RETRYABLE_REASONS,
)
from payorch.values.countries import is_country, known_countries
from payorch.values.errors import FieldProblem
from payorch.values.money import currency_exponent, known_currencies

MAX_RULES = 100
MAX_RULE_NAME_LENGTH = 100
ROUTE_TYPES = ("priority", "split", "dynamic")
OBJECTIVES = ("approval", "net")
WHEN_KEYS = ("paymentMethods", "currencies", "amount", "countries")
DOCUMENT_KEYS = ("rules", "default", "fees", "objective", "recovery")
RECOVERY_KEYS = ("maxAttempts", "retryOn", "neverRetry")
FEE_KEYS = ("percent", "fixed", "methods")  # a provider's fee; `methods`: its fees by payment method
METHOD_FEE_KEYS = ("percent", "fixed")
MAX_RETRY_ON = 10
ANSWER_KEYS = frozenset({"version", "updatedAt"})  # what an answer adds: ignored when sent back
CURRENCY = re.compile(r"[A-Z]{3}")
COUNTRY = re.compile(r"[A-Z]{2}")
DECIMAL_TEXT = re.compile(r"-?[0-9]+(?:\.[0-9]+)?")
# Every decimal of a document sent now: below MAX_WHOLE (as session amounts are), at most
# MAX_DECIMAL_PLACES after the point, as written; a decimal string longer than MAX_DECIMAL_TEXT is
# refused before it becomes a number.
MAX_WHOLE = Decimal(10) ** 15
MAX_DECIMAL_PLACES = 6
MAX_DECIMAL_TEXT = 40
MAX_PERCENT = Decimal(100)


def routing_document_problems(
    raw: object,
    known_providers: Collection[str],
    at: str = "",
    *,
    known_methods: Collection[str] | None = None,
    as_stored: bool = False,
) -> list[FieldProblem]:
    """Every problem of the document `raw`, in the document's order; none for a valid document.
    A provider it names must be one of `known_providers` (the catalogue), a payment method one of
    `known_methods` (the catalogue's; None: not checked). `as_stored`: a document read back from
    storage, whose names and numbers were checked when it was stored: only its shape is checked."""
    checker = _Checker(
        frozenset(known_providers), None if known_methods is None else frozenset(known_methods), as_stored
    )
    checker.document(raw, at)
    return checker.problems


def is_number(value: object) -> TypeGuard[int | Decimal]:
    """An `int` or a `Decimal` (a JSON number as payorch parses it), not a `bool`."""
    return isinstance(value, int | Decimal) and not isinstance(value, bool)


@functools.cache
def _known_currencies() -> frozenset[str]:
    """`known_currencies` as a set, for a look-up per code."""
    return frozenset(known_currencies())


def _inside(at: str, key: object) -> str:
    return f"{at}.{key}" if at else str(key)


def _listed(names: Collection[str]) -> str:
    names = list(names)
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


def _shown(value: object) -> str:
    """`value` quoted in a message when it is short text, else "this"."""
    return repr(value) if isinstance(value, str) and len(value) <= 40 else "this"


class _Checker:
    """Walks one document, noting every problem instead of stopping at the first. Each method
    checks one part at `at` and says whether it was sound."""

    def __init__(self, known: frozenset[str], methods: frozenset[str] | None, as_stored: bool) -> None:
        self.known = known
        self.methods = None if as_stored else methods
        self.as_stored = as_stored
        self.problems: list[FieldProblem] = []

    def problem(self, where: str, message: str) -> bool:
        self.problems.append(FieldProblem(where or "body", message))
        return False

    def unknown_keys(self, raw: dict[Any, Any], allowed: Collection[str], at: str, what: str) -> bool:
        sound = True
        for key in raw:
            if key not in allowed:
                sound = self.problem(_inside(at, key), f"unknown key of {what}: use {_listed(allowed)}")
        return sound

    def document(self, raw: object, at: str) -> None:
        if not isinstance(raw, dict):
            self.problem(at, "must be a JSON object with rules, default, fees and objective")
            return
        self.unknown_keys(
            {k: v for k, v in raw.items() if k not in ANSWER_KEYS}, DOCUMENT_KEYS, at, "a routing document"
        )
        self.rules(raw.get("rules"), _inside(at, "rules"))
        if raw.get("default") is not None:
            self.route(raw["default"], _inside(at, "default"))
        self.fees(raw.get("fees"), _inside(at, "fees"))
        objective = raw.get("objective")
        if objective is not None and objective not in OBJECTIVES:
            self.problem(_inside(at, "objective"), f"must be {_listed(OBJECTIVES)}")
        self.recovery(raw.get("recovery"), _inside(at, "recovery"))

    def rules(self, raw: object, at: str) -> None:
        if raw is None:
            return
        if not isinstance(raw, list):
            self.problem(at, "must be a list of rules")
            return
        if len(raw) > MAX_RULES:
            self.problem(at, f"at most {MAX_RULES} rules, not {len(raw)}")
        first_of: dict[str, str] = {}  # each rule name, with the place of the rule that has it first
        for index, item in enumerate(raw):
            self.rule(item, _inside(at, index), first_of)

    def rule(self, raw: object, at: str, first_of: dict[str, str]) -> None:
        if not isinstance(raw, dict):
            self.problem(at, "must be an object with a name, a route and optionally when")
            return
        self.unknown_keys(raw, ("name", "when", "route"), at, "a rule")
        name, where = raw.get("name"), _inside(at, "name")
        if name is None:
            self.problem(where, "required: a name for the rule, 1 to 100 characters")
        elif not isinstance(name, str):
            self.problem(where, "must be a string")
        elif not name.strip():
            self.problem(where, "must not be empty")
        elif len(name) > MAX_RULE_NAME_LENGTH:
            self.problem(where, f"at most {MAX_RULE_NAME_LENGTH} characters")
        elif name in first_of:
            self.problem(where, f"duplicate of {first_of[name]}.name: every rule needs a name of its own")
        else:
            first_of[name] = at
        self.conditions(raw.get("when"), _inside(at, "when"))
        if raw.get("route") is None:
            self.problem(_inside(at, "route"), "required: the route of the sessions this rule matches")
        else:
            self.route(raw["route"], _inside(at, "route"))

    def conditions(self, raw: object, at: str) -> None:
        if raw is None:
            return
        if not isinstance(raw, dict):
            self.problem(at, f"must be an object of conditions: {_listed(WHEN_KEYS)}")
            return
        for key in raw:
            if key not in WHEN_KEYS:
                self.problem(_inside(at, key), f"unknown condition: use {_listed(WHEN_KEYS)}")
        for index, method in self.texts(raw.get("paymentMethods"), _inside(at, "paymentMethods")):
            if self.methods is not None and method not in self.methods:
                meant = (
                    f" (names are lower case: {method.lower()!r})" if method.lower() in self.methods else ""
                )
                self.problem(
                    _inside(_inside(at, "paymentMethods"), index),
                    f"{_shown(method)} is not a payment method payorch offers{meant}: "
                    f"use {_listed(sorted(self.methods)) or 'none'}",
                )
        # A known code is sound in either mode: only the others are looked at, and named where they are
        # (a document of 100 rules lists thousands of codes: naming each place would cost most of it).
        currencies_at, currencies = _inside(at, "currencies"), _known_currencies()
        for index, currency in self.texts(raw.get("currencies"), currencies_at):
            if currency not in currencies:
                self.currency(currency, _inside(currencies_at, index))
        countries_at, countries = _inside(at, "countries"), known_countries()
        for index, country in self.texts(raw.get("countries"), countries_at):
            if country not in countries:
                self.country(country, _inside(countries_at, index))
        self.amount(raw.get("amount"), _inside(at, "amount"), raw.get("currencies"))

    def texts(self, raw: object, at: str) -> list[tuple[int, str]]:
        """The non-empty strings of the list `raw`, each with its index (a problem noted for
        anything else)."""
        if raw is None:
            return []
        if not isinstance(raw, list):
            self.problem(at, "must be a list of strings")
            return []
        if not raw:
            self.problem(at, "must list at least one value, or be left out")
        found = []
        for index, item in enumerate(raw):
            if not isinstance(item, str) or not item:
                self.problem(_inside(at, index), "must be a non-empty string")
            else:
                found.append((index, item))
        return found

    def currency(self, code: str, at: str, subject: str = "") -> bool:
        """Whether `code` (at `at`, called `subject` in a message when it is a key) is a currency."""
        if not CURRENCY.fullmatch(code):
            return self.problem(at, f"{subject}must be three capital letters, such as EUR")
        if not self.as_stored and code not in _known_currencies():
            return self.problem(at, f"{_shown(code)} is not an ISO 4217 currency payorch knows")
        return True

    def country(self, code: str, at: str) -> bool:
        if not COUNTRY.fullmatch(code):
            return self.problem(at, "must be two capital letters (ISO 3166-1 alpha-2), such as PL")
        if not self.as_stored and not is_country(code):
            return self.problem(at, f"{_shown(code)} is not an ISO 3166-1 alpha-2 country code")
        return True

    def amount(self, raw: object, at: str, currencies: object) -> None:
        """An amount range of a rule's `when` whose `currencies` are `currencies` (as sent)."""
        if raw is None:
            return
        if not isinstance(raw, dict):
            self.problem(at, "must be an object with min, max or both (major units)")
            return
        sound = self.unknown_keys(raw, ("min", "max"), at, "an amount range")
        for key in ("min", "max"):
            value = raw.get(key)
            if value is None:
                continue
            if not is_number(value) or not Decimal(value).is_finite():
                sound = self.problem(_inside(at, key), "must be a number (an amount in major units)")
            elif self.bounded(Decimal(value), _inside(at, key)) is None:
                sound = False
        low, high = raw.get("min"), raw.get("max")
        if sound and low is not None and high is not None and low > high:
            sound = self.problem(at, f"min ({low}) must not be greater than max ({high})")
        if sound and not self.as_stored:
            self.amount_in_currency(raw, at, currencies)

    def amount_in_currency(self, raw: dict[Any, Any], at: str, currencies: object) -> None:
        """Sound bounds `raw` (at `at`) held to the currencies they are in: a rule with amount
        bounds names its `currencies` (1000 is not the same amount in JPY and in EUR), the bounds
        apply in each one's major units, and each bound must be an amount of every one (no more
        decimals than its minor unit has; a `max` of at least one minor unit, as a session's amount
        is above 0), so that some session of each can match. A bound a currency cannot hold is one
        problem, naming the currency with the fewest decimals."""
        if not isinstance(currencies, list):
            self.problem(
                at,
                "amount bounds are in a currency's major units: name the currencies they apply to "
                "in currencies (1000 JPY is not 1000 EUR)",
            )
            return
        known = [code for code in currencies if isinstance(code, str) and code in _known_currencies()]
        if not known:
            return  # the currencies' own problems are noted
        exponent, currency = min((currency_exponent(code), code) for code in known)
        for key in ("min", "max"):
            value = raw.get(key)
            if value is None:
                continue
            places = max(0, -_exponent(Decimal(value).normalize()))  # 5000.00 is whole
            if places > exponent:
                most = f"at most {exponent} decimal places" if exponent else "a whole number"
                self.problem(_inside(at, key), f"must be an amount of {currency}: {most}, not {value}")
            elif key == "max" and value == 0:
                self.problem(
                    _inside(at, key), "must be above 0: a session's amount is, so max 0 matches none"
                )

    def route(self, raw: object, at: str) -> None:
        if not isinstance(raw, dict):
            self.problem(at, f"must be an object with a type: {_listed(ROUTE_TYPES)}")
            return
        kind = raw.get("type")
        if kind is None:
            self.problem(_inside(at, "type"), f"required: one of {_listed(ROUTE_TYPES)}")
        elif kind not in ROUTE_TYPES:
            self.problem(
                _inside(at, "type"), f"unknown route type {_shown(kind)}: use {_listed(ROUTE_TYPES)}"
            )
        elif kind == "split":
            self.unknown_keys(raw, ("type", "weights"), at, "a split route")
            self.weights(raw.get("weights"), _inside(at, "weights"))
        else:
            self.unknown_keys(raw, ("type", "providers"), at, f"a {kind} route")
            if raw.get("providers") is not None:
                self.providers(raw["providers"], _inside(at, "providers"))
            elif kind == "priority":
                self.problem(_inside(at, "providers"), "required: the providers in the order to try them")

    def provider_name(self, name: object, at: str) -> bool:
        if not isinstance(name, str):
            return self.problem(at, "must be a provider's name")
        if name not in self.known:
            return self.problem(
                at, f"{_shown(name)} is not a provider payorch offers: use {_listed(sorted(self.known))}"
            )
        return True

    def providers(self, raw: object, at: str) -> None:
        if not isinstance(raw, list) or not raw:
            self.problem(at, "must list at least one provider")
            return
        seen: set[str] = set()
        for index, name in enumerate(raw):
            if self.provider_name(name, _inside(at, index)):
                if name in seen:
                    self.problem(_inside(at, index), f"{name!r} is listed twice")
                seen.add(name)

    def weights(self, raw: object, at: str) -> None:
        if not isinstance(raw, dict) or not raw:
            self.problem(at, "required: an object of whole-number weights by provider, summing to 100")
            return
        sound = True
        for name, weight in raw.items():
            sound = self.provider_name(name, _inside(at, name)) and sound
            if not isinstance(weight, int) or isinstance(weight, bool) or not 0 <= weight <= 100:
                sound = self.problem(_inside(at, name), "must be a whole number from 0 to 100")
        if sound and sum(raw.values()) != 100:
            self.problem(at, f"must sum to 100, not {sum(raw.values())}")

    def recovery(self, raw: object, at: str) -> None:
        if raw is None:
            return
        if not isinstance(raw, dict):
            self.problem(at, f"must be an object with {_listed(RECOVERY_KEYS)}")
            return
        self.unknown_keys(raw, RECOVERY_KEYS, at, "a recovery policy")
        attempts, where = raw.get("maxAttempts"), _inside(at, "maxAttempts")
        if attempts is None:
            self.problem(where, f"required: the most attempts a session gets, 1 to {MAX_ATTEMPTS}")
        elif not isinstance(attempts, int) or isinstance(attempts, bool) or not 1 <= attempts <= MAX_ATTEMPTS:
            self.problem(where, f"must be a whole number from 1 to {MAX_ATTEMPTS}")
        reasons = [str(reason) for reason in RETRYABLE_REASONS]
        retry_on = _inside(at, "retryOn")
        for index, reason in self.distinct(raw.get("retryOn"), retry_on, MAX_RETRY_ON):
            if reason in HARD_REASONS:
                self.problem(
                    _inside(retry_on, index), f"{reason} is a hard decline: never retried at another provider"
                )
            elif reason not in reasons and not self.as_stored:
                self.problem(
                    _inside(retry_on, index),
                    f"{_shown(reason)} is not a decline's reason: use {_listed(reasons)}",
                )
        never_retry = _inside(at, "neverRetry")
        for index, code in self.distinct(raw.get("neverRetry"), never_retry, MAX_NEVER_RETRY, empty=True):
            if not DECLINE_CODE.fullmatch(code):
                self.problem(
                    _inside(never_retry, index),
                    "must be a provider's decline code: 1 to 64 letters, digits, _, . or -",
                )

    def distinct(self, raw: object, at: str, most: int, *, empty: bool = False) -> list[tuple[int, str]]:
        """The strings of the list `raw` (at most `most` of them, each once; empty only when `empty`),
        each with its index (a problem noted for anything else)."""
        if raw is None:
            return []
        if isinstance(raw, list) and len(raw) > most:
            self.problem(at, f"at most {most} values, not {len(raw)}")
            return []
        if empty and raw == []:
            return []
        first_at: dict[str, int] = {}
        found = []
        for index, item in self.texts(raw, at):
            if item in first_at:
                self.problem(_inside(at, index), f"{_shown(item)} is listed twice")
            else:
                first_at[item] = index
                found.append((index, item))
        return found

    def fees(self, raw: object, at: str) -> None:
        if raw is None:
            return
        if not isinstance(raw, dict):
            self.problem(at, "must be an object of fees by provider")
            return
        for name, item in raw.items():
            where = _inside(at, name)
            if self.provider_name(name, where):
                self.fee(item, where, FEE_KEYS)

    def fee(self, raw: object, at: str, keys: tuple[str, ...]) -> None:
        """A fee at `at`, of `keys`: a provider's (which may hold its fees by payment method) or
        one payment method's."""
        if not isinstance(raw, dict):
            self.problem(at, f"must be an object with {_listed(keys)}")
            return
        self.unknown_keys(raw, keys, at, "a fee")
        self.decimal(raw.get("percent"), _inside(at, "percent"), percent=True)
        self.fixed(raw.get("fixed"), _inside(at, "fixed"))
        if "methods" in keys:
            self.method_fees(raw.get("methods"), _inside(at, "methods"))

    def method_fees(self, raw: object, at: str) -> None:
        """A provider's fees by payment method, each a fee of `METHOD_FEE_KEYS`."""
        if raw is None:
            return
        if not isinstance(raw, dict):
            self.problem(
                at, 'must be an object of fees by payment method, such as {"blik": {"percent": "0.9"}}'
            )
            return
        for method, item in raw.items():
            where = _inside(at, method)
            if self.methods is not None and method not in self.methods:
                self.problem(
                    where,
                    f"{_shown(method)} is not a payment method payorch offers: "
                    f"use {_listed(sorted(self.methods)) or 'none'}",
                )
            else:
                self.fee(item, where, METHOD_FEE_KEYS)

    def fixed(self, raw: object, at: str) -> None:
        if raw is None:
            return
        if not isinstance(raw, dict):
            self.problem(at, 'must be an object of amounts by currency, such as {"EUR": "0.25"}')
            return
        for currency, value in raw.items():
            where = _inside(at, currency)
            if self.currency(currency, where, "the currency "):
                self.decimal(value, where)

    def decimal(self, raw: object, at: str, *, percent: bool = False) -> Decimal | None:
        """A decimal written as a string ("1.40") or a number, within `bounded`: its value, or None
        when left out or refused."""
        if raw is None:
            return None
        value: Decimal | None = None
        if isinstance(raw, str):
            sound = DECIMAL_TEXT.fullmatch(raw) and (self.as_stored or len(raw) <= MAX_DECIMAL_TEXT)
            value = Decimal(raw) if sound else None
        elif is_number(raw):
            value = Decimal(raw)
        if value is None or not value.is_finite():
            self.problem(at, 'must be a decimal number, such as "1.40"')
            return None
        return self.bounded(value, at, percent=percent)

    def bounded(self, value: Decimal, at: str, *, percent: bool = False) -> Decimal | None:
        """`value` (finite) when it is not negative, at most 100 for a `percent`, and (unless
        `as_stored`) below `MAX_WHOLE` with at most `MAX_DECIMAL_PLACES` places; else None, the
        problem noted."""
        if value < 0:
            self.problem(at, "must not be negative")
            return None
        if percent and value > MAX_PERCENT:
            self.problem(at, "must be a percentage from 0 to 100")
            return None
        if self.as_stored:
            return value
        if value >= MAX_WHOLE or -_exponent(value) > MAX_DECIMAL_PLACES:
            self.problem(at, f"must be {_range(percent)}")
            return None
        return value


def _exponent(value: Decimal) -> int:
    """The exponent of the finite `value` as written: -2 for `1.50`, 0 for `15`."""
    exponent = value.as_tuple().exponent
    assert isinstance(exponent, int)  # a finite number's is
    return exponent


def _range(percent: bool) -> str:
    """The range a document's decimal must be in, as a problem's message says it."""
    places = f"with at most {MAX_DECIMAL_PLACES} decimal places"
    if percent:
        return f"from 0 to 100 {places}"
    return f"from 0 to less than {MAX_WHOLE:,.0f} {places}"
