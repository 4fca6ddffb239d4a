"""No routing document that validation accepts can fail the code that routes by it.

Documents are generated near the edges of what validation accepts (decimals at their bounds in
digits and magnitude, amount bounds in their rules' currencies, fees in many currencies, by provider
and by payment method, every route type), checked as a PUT checks them, stored and read back as the
application's actor reads them (`document_json`, the jsonb round trip, `stored_routing_document`),
and then decided for sessions of many currencies and
amounts by the code the actor's create and evaluate run (`decide`, then the circuit filter
`plan_decided_route`): nothing but the documented domain errors may come out, and every score is a
number in [0, 1]. So do documents stored before the bounds (huge fees and amount bounds), as the
actor reads them. A last property feeds validation arbitrary JSON: it answers problems, never an
exception."""

from __future__ import annotations

import contextlib
from decimal import Decimal
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from payorch.engine.provider_health import ProviderAccount, ProviderHealth
from payorch.engine.routing.decision import decide, plan_decided_route
from payorch.engine.routing.document import (
    SessionFacts,
    document_json,
    parse_routing_document,
    stored_routing_document,
)
from payorch.engine.routing.success_rates import RoutingSettings, SegmentFigures, SuccessRates
from payorch.engine.routing.validation import (
    MAX_DECIMAL_PLACES,
    MAX_WHOLE,
    routing_document_problems,
)
from payorch.jsonexact import dumps_exact, loads_exact
from payorch.values.countries import known_countries
from payorch.values.errors import NoProviderAvailable, ProviderUnavailable
from payorch.values.money import Money, currency_exponent, known_currencies

PROVIDERS = ["mollie", "sandbox", "stripe"]
METHODS = ["apple_pay", "blik", "card"]
CURRENCIES = sorted(known_currencies())
COUNTRIES = sorted(known_countries())
# The edges of the bounds, and ordinary values between them.
LARGEST = MAX_WHOLE - Decimal(1).scaleb(-MAX_DECIMAL_PLACES)
SMALLEST = Decimal(1).scaleb(-MAX_DECIMAL_PLACES)
EXAMPLES = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _decimals(most: Decimal, fewest: Decimal = SMALLEST) -> st.SearchStrategy[Decimal]:
    """Decimals from 0 to `most` in steps of `fewest` (at most `MAX_DECIMAL_PLACES` places), the
    edges often."""
    places = st.integers(0, -_exponent(fewest))
    return st.one_of(
        st.sampled_from([Decimal(0), fewest, most, max(fewest, Decimal("0.01")), Decimal(1)]),
        places.flatmap(
            lambda n: st.integers(0, int(most.scaleb(n))).map(lambda units: Decimal(units).scaleb(-n))
        ),
    )


def _exponent(value: Decimal) -> int:
    exponent = value.as_tuple().exponent
    assert isinstance(exponent, int)
    return exponent


AMOUNTS = _decimals(LARGEST)
PERCENTS = _decimals(Decimal(100))


def _written(value: Decimal) -> st.SearchStrategy[Any]:
    """`value` as a document may write it: a JSON number, or a decimal string for a fee."""
    return st.sampled_from([value, format(value, "f")])


@st.composite
def _fee(draw: st.DrawFn, by_method: bool = True) -> dict[str, Any]:
    """A provider's fee, with fees by payment method when `by_method` (and the draw) says so."""
    fee: dict[str, Any] = {}
    if draw(st.booleans()):
        fee["percent"] = draw(PERCENTS.flatmap(_written))
    if draw(st.booleans()):
        currencies = draw(st.lists(st.sampled_from(CURRENCIES), max_size=6, unique=True))
        fee["fixed"] = {currency: draw(AMOUNTS.flatmap(_written)) for currency in currencies}
    if by_method and draw(st.booleans()):
        methods = draw(st.lists(st.sampled_from(METHODS), max_size=3, unique=True))
        fee["methods"] = {method: draw(_fee(by_method=False)) for method in methods}
    return fee


@st.composite
def _route(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(st.sampled_from(["priority", "split", "dynamic"]))
    named = draw(st.lists(st.sampled_from(PROVIDERS), min_size=1, unique=True))
    if kind == "priority":
        return {"type": "priority", "providers": named}
    if kind == "dynamic":
        return {"type": "dynamic", "providers": named} if draw(st.booleans()) else {"type": "dynamic"}
    cuts = sorted(draw(st.lists(st.integers(0, 100), min_size=len(named) - 1, max_size=len(named) - 1)))
    weights = [high - low for low, high in zip([0, *cuts], [*cuts, 100], strict=True)]
    return {"type": "split", "weights": dict(zip(named, weights, strict=True))}


@st.composite
def _amount_range(draw: st.DrawFn, currencies: list[str]) -> dict[str, Any]:
    """Bounds that are amounts of each of `currencies` (the fewest decimals among them), a `max`
    above 0."""
    unit = Decimal(1).scaleb(-min(currency_exponent(currency) for currency in currencies))
    low, high = sorted(draw(st.lists(_decimals(MAX_WHOLE - unit, unit), min_size=2, max_size=2)))
    keys = draw(st.sampled_from([("min",), ("max",), ("min", "max")]))
    return {key: {"min": low, "max": max(high, unit)}[key] for key in keys}


@st.composite
def _conditions(draw: st.DrawFn) -> dict[str, Any]:
    when: dict[str, Any] = {}
    if draw(st.booleans()):
        when["paymentMethods"] = draw(st.lists(st.sampled_from(METHODS), min_size=1, max_size=3))
    if draw(st.booleans()):
        when["currencies"] = draw(st.lists(st.sampled_from(CURRENCIES), min_size=1, max_size=5))
    if draw(st.booleans()):
        when["countries"] = draw(st.lists(st.sampled_from(COUNTRIES), min_size=1, max_size=5))
    if draw(st.booleans()):  # amount bounds are in the rule's currencies
        some = st.sampled_from(["PLN", "EUR", "JPY", "KWD", *CURRENCIES])
        when["currencies"] = draw(st.lists(some, min_size=1, max_size=3))
        when["amount"] = draw(_amount_range(when["currencies"]))
    return when


@st.composite
def documents(draw: st.DrawFn) -> dict[str, Any]:
    """A routing document validation accepts, its numbers often at their bounds."""
    count = draw(st.integers(0, 6))
    rules = [
        {"name": f"rule-{n}", "when": draw(_conditions()), "route": draw(_route())} for n in range(count)
    ]
    document: dict[str, Any] = {"rules": rules, "objective": draw(st.sampled_from(["approval", "net"]))}
    if draw(st.booleans()):
        document["default"] = draw(_route())
    providers = draw(st.lists(st.sampled_from(PROVIDERS), unique=True))
    document["fees"] = {provider: draw(_fee()) for provider in providers}
    return document


@st.composite
def sessions(draw: st.DrawFn) -> SessionFacts:
    """A session as a create admits it: a positive amount below 10^15 major units in a known
    currency, often at the edges, in any method and billing country (or none)."""
    currency = draw(st.sampled_from(["PLN", "EUR", "JPY", "KWD", *CURRENCIES]))
    most = 10**15 * 10 ** currency_exponent(currency) - 1
    minor = draw(st.one_of(st.sampled_from([1, 2, 100, most]), st.integers(1, most)))
    country = draw(st.one_of(st.none(), st.sampled_from(["PL", "DE", *COUNTRIES])))
    return SessionFacts(draw(st.sampled_from(METHODS)), Money(minor, currency), country, draw(st.uuids()).hex)


@st.composite
def learned_rates(draw: st.DrawFn) -> SuccessRates:
    """Rates learned from any outcomes (success, failure, abandonment) of each provider."""
    outcomes = st.text(alphabet="sfa", max_size=60)
    rows = [
        SegmentFigures(provider, method, currency, draw(outcomes))
        for provider in PROVIDERS
        for method, currency in [("card", "PLN"), ("blik", "PLN"), ("card", "EUR")]
    ]
    return SuccessRates.from_rows(rows, RoutingSettings())


def _stored(raw: dict[str, Any]) -> dict[str, Any]:
    """`raw` stored as a PUT stores it, then read as the actor reads it (through jsonb's codec)."""
    document = parse_routing_document(raw, PROVIDERS, known_methods=METHODS)
    stored: dict[str, Any] = loads_exact(dumps_exact(document_json(document)))
    return stored


# What an earlier payorch stored: any finite fee (a string of digits, however many) and any amount.
HUGE_FEES = st.sampled_from(["1" + "0" * 5000, "9" * 400 + ".5", format(Decimal("1E+400"), "f")])


@st.composite
def documents_stored_before_the_bounds(draw: st.DrawFn) -> dict[str, Any]:
    """A document as stored before its decimals were bounded: some fees and amount bounds huge."""
    stored = _stored(draw(documents()))
    fees = [*stored["fees"].values()]
    fees += [item for fee in fees for item in fee.get("methods", {}).values()]
    for fee in fees:
        for currency in fee["fixed"]:
            if draw(st.booleans()):
                fee["fixed"][currency] = draw(HUGE_FEES)
        if draw(st.booleans()):
            fee["fixed"][draw(st.sampled_from(["PLN", "EUR", "JPY", "KWD"]))] = draw(HUGE_FEES)
    for rule in stored["rules"]:
        amount = rule.get("when", {}).get("amount")
        if amount is not None and "max" in amount and draw(st.booleans()):
            amount["max"] = Decimal("1E+999")
        if amount is not None and draw(st.booleans()):  # bounds of no currency, finer than its unit
            del rule["when"]["currencies"]
            low = draw(st.sampled_from([Decimal("0.000001"), Decimal("10.5"), Decimal(0)]))
            amount["min"] = min(low, amount.get("max", low))
    return stored


def _route_every_session(stored: dict[str, Any], facts: list[SessionFacts], data: st.DataObject) -> None:
    """Route each session of `facts` by the stored document as the actor's create and evaluate do:
    nothing but the documented refusals may come out, and every score is a number in [0, 1]."""
    document = stored_routing_document(stored)
    rates = data.draw(learned_rates())
    routing = RoutingSettings(exploration=data.draw(st.sampled_from([0.0, 0.5, 1.0])))
    health = ProviderHealth()
    for session in facts:
        eligible = data.draw(st.lists(st.sampled_from(PROVIDERS), unique=True))
        decision = decide(document, session, eligible, rates, routing)
        for place in decision.ranking:
            assert 0 <= place.score <= 1
            assert Decimal(str(place.score)).is_finite()  # as evaluate's answer writes it
        accounts = {name: ProviderAccount(name, "shop") for name in decision.order}
        with contextlib.suppress(NoProviderAvailable, ProviderUnavailable):  # 422, 502: documented
            plan_decided_route(decision, accounts, health, 0.0)


@EXAMPLES
@given(raw=documents(), facts=st.lists(sessions(), min_size=1, max_size=4), data=st.data())
def test_a_document_validation_accepts_routes_every_session_without_failing(
    raw: dict[str, Any], facts: list[SessionFacts], data: st.DataObject
) -> None:
    assert routing_document_problems(raw, PROVIDERS, known_methods=METHODS) == []
    _route_every_session(_stored(raw), facts, data)


@EXAMPLES
@given(
    stored=documents_stored_before_the_bounds(),
    facts=st.lists(sessions(), min_size=1, max_size=4),
    data=st.data(),
)
def test_a_document_stored_before_the_bounds_routes_every_session_without_failing(
    stored: dict[str, Any], facts: list[SessionFacts], data: st.DataObject
) -> None:
    _route_every_session(stored, facts, data)


KEYS = [
    *("rules", "default", "fees", "objective", "name", "when", "route", "type", "providers", "weights"),
    *("percent", "fixed", "methods", "amount", "min", "max", "paymentMethods", "currencies", "countries"),
    *("sandbox", "stripe", "PLN", "card", "blik", "x"),
]
JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.decimals(allow_nan=True, allow_infinity=True)
    | st.text(max_size=12)
    | st.sampled_from(["1e400", "1" + "0" * 5000, "NaN", "-0", "card", "PLN", "PL", "sandbox", "split"]),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(
            st.sampled_from(KEYS),
            children,
            max_size=5,
        )
    ),
    max_leaves=30,
)


@EXAMPLES
@given(raw=JSON)
def test_validation_answers_problems_for_any_json_and_never_fails(raw: Any) -> None:
    for as_stored in (False, True):
        problems = routing_document_problems(raw, PROVIDERS, known_methods=METHODS, as_stored=as_stored)
        assert all(problem.field and problem.message for problem in problems)
