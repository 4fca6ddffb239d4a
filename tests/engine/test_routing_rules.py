"""Routing documents: every refusal of a bad document, the JSON round trip, rule matching and split
assignment."""

from __future__ import annotations

import copy
import random
from collections import Counter
from decimal import Decimal
from typing import Any

import pytest

from payorch.engine.routing.decision import decide
from payorch.engine.routing.document import (
    MAX_DOCUMENT_BYTES,
    AmountRange,
    Conditions,
    DynamicRoute,
    Fee,
    PriorityRoute,
    RoutingDocument,
    Rule,
    SessionFacts,
    SplitRoute,
    document_json,
    matching_rule,
    parse_routing_document,
    session_draws,
    split_order,
    stored_routing_document,
)
from payorch.engine.routing.success_rates import RoutingSettings, SegmentFigures, SuccessRates
from payorch.engine.routing.validation import MAX_RULES
from payorch.jsonexact import dumps_exact, loads_exact
from payorch.values.errors import FieldProblem, InvalidInput
from payorch.values.money import Money

CATALOGUE = frozenset({"mollie", "sandbox", "stripe"})
EUR_10 = Money(1000, "EUR")

# A document with rules of every kind, as the HTTP layer parses it (numbers as int or Decimal).
EXAMPLE = loads_exact(
    """{"rules": [
        {"name": "blik-pln", "when": {"paymentMethods": ["blik"], "currencies": ["PLN"],
                                      "amount": {"min": 0, "max": 5000}, "countries": ["PL"]},
         "route": {"type": "priority", "providers": ["mollie", "stripe"]}},
        {"name": "eur-split", "when": {"currencies": ["EUR"]},
         "route": {"type": "split", "weights": {"stripe": 70, "mollie": 30}}}],
       "default": {"type": "dynamic"},
       "fees": {"stripe": {"percent": "1.4", "fixed": {"PLN": "1.00", "EUR": "0.25"}}},
       "objective": "approval"}"""
)


def parse(raw: object) -> RoutingDocument:
    return parse_routing_document(raw, CATALOGUE)


def problems_of(raw: object) -> list[FieldProblem]:
    with pytest.raises(InvalidInput) as refused:
        parse(raw)
    assert refused.value.details, "a refusal names each problem"
    return refused.value.details


def with_rule(**rule: Any) -> dict[str, Any]:
    """A document of one rule: `rule` over a valid rule's keys (None removes a key)."""
    base: dict[str, Any] = {"name": "only", "route": {"type": "dynamic"}}
    base.update(rule)
    return {"rules": [{key: value for key, value in base.items() if value is not None}]}


def facts(
    method: str = "card",
    amount: Money = EUR_10,
    country: str | None = "DE",
    session_id: str = "session-1",
) -> SessionFacts:
    return SessionFacts(method, amount, country, session_id)


# Refusals: one `details` entry per problem, naming its place


@pytest.mark.parametrize(
    ("raw", "field", "message"),
    [
        pytest.param(
            with_rule(route={"type": "cheapest"}),
            "rules.0.route.type",
            "unknown route type 'cheapest': use priority, split or dynamic",
            id="unknown-route-type",
        ),
        pytest.param(
            with_rule(route={"providers": ["stripe"]}),
            "rules.0.route.type",
            "required: one of priority, split or dynamic",
            id="route-without-type",
        ),
        pytest.param(
            with_rule(route={"type": "split", "weights": {"stripe": 70, "mollie": 20}}),
            "rules.0.route.weights",
            "must sum to 100, not 90",
            id="weights-not-summing-to-100",
        ),
        pytest.param(
            with_rule(
                route={"type": "split", "weights": {"stripe": Decimal("70.5"), "mollie": Decimal("29.5")}}
            ),
            "rules.0.route.weights.stripe",
            "must be a whole number from 0 to 100",
            id="weight-with-a-fraction",
        ),
        pytest.param(
            with_rule(route={"type": "split", "weights": {"stripe": "70", "mollie": 30}}),
            "rules.0.route.weights.stripe",
            "must be a whole number from 0 to 100",
            id="weight-as-text",
        ),
        pytest.param(
            with_rule(route={"type": "split", "weights": {"stripe": 130, "mollie": -30}}),
            "rules.0.route.weights.stripe",
            "must be a whole number from 0 to 100",
            id="weight-out-of-range",
        ),
        pytest.param(
            with_rule(route={"type": "split", "weights": {}}),
            "rules.0.route.weights",
            "required: an object of whole-number weights by provider, summing to 100",
            id="split-without-weights",
        ),
        pytest.param(
            with_rule(route={"type": "priority", "providers": ["stripe", "adyen"]}),
            "rules.0.route.providers.1",
            "'adyen' is not a provider payorch offers: use mollie, sandbox or stripe",
            id="unknown-provider-in-priority",
        ),
        pytest.param(
            with_rule(route={"type": "split", "weights": {"adyen": 100}}),
            "rules.0.route.weights.adyen",
            "'adyen' is not a provider payorch offers: use mollie, sandbox or stripe",
            id="unknown-provider-in-split",
        ),
        pytest.param(
            with_rule(route={"type": "dynamic", "providers": ["adyen"]}),
            "rules.0.route.providers.0",
            "'adyen' is not a provider payorch offers: use mollie, sandbox or stripe",
            id="unknown-provider-in-dynamic",
        ),
        pytest.param(
            {"default": {"type": "priority", "providers": ["adyen"]}},
            "default.providers.0",
            "'adyen' is not a provider payorch offers: use mollie, sandbox or stripe",
            id="unknown-provider-in-default",
        ),
        pytest.param(
            {"fees": {"adyen": {"percent": "1.0"}}},
            "fees.adyen",
            "'adyen' is not a provider payorch offers: use mollie, sandbox or stripe",
            id="unknown-provider-in-fees",
        ),
        pytest.param(
            with_rule(route={"type": "priority", "providers": ["stripe", "stripe"]}),
            "rules.0.route.providers.1",
            "'stripe' is listed twice",
            id="provider-listed-twice",
        ),
        pytest.param(
            with_rule(route={"type": "priority"}),
            "rules.0.route.providers",
            "required: the providers in the order to try them",
            id="priority-without-providers",
        ),
        pytest.param(
            with_rule(route={"type": "dynamic", "providers": []}),
            "rules.0.route.providers",
            "must list at least one provider",
            id="dynamic-with-an-empty-list",
        ),
        pytest.param(
            with_rule(route={"type": "priority", "providers": ["stripe"], "weights": {"stripe": 100}}),
            "rules.0.route.weights",
            "unknown key of a priority route: use type or providers",
            id="key-of-another-route-type",
        ),
        pytest.param(with_rule(name=""), "rules.0.name", "must not be empty", id="empty-rule-name"),
        pytest.param(with_rule(name="   "), "rules.0.name", "must not be empty", id="blank-rule-name"),
        pytest.param(
            with_rule(name=None),
            "rules.0.name",
            "required: a name for the rule, 1 to 100 characters",
            id="rule-without-name",
        ),
        pytest.param(with_rule(name=7), "rules.0.name", "must be a string", id="rule-name-not-text"),
        pytest.param(
            with_rule(name="x" * 101), "rules.0.name", "at most 100 characters", id="long-rule-name"
        ),
        pytest.param(
            with_rule(route=None),
            "rules.0.route",
            "required: the route of the sessions this rule matches",
            id="rule-without-route",
        ),
        pytest.param(
            with_rule(when={"paymentMethod": ["card"]}),
            "rules.0.when.paymentMethod",
            "unknown condition: use paymentMethods, currencies, amount or countries",
            id="unknown-when-key",
        ),
        pytest.param(
            with_rule(when={"amount": {"min": -1}}),
            "rules.0.when.amount.min",
            "must not be negative",
            id="negative-minimum",
        ),
        pytest.param(
            with_rule(when={"amount": {"max": Decimal("-0.01")}}),
            "rules.0.when.amount.max",
            "must not be negative",
            id="negative-maximum",
        ),
        pytest.param(
            with_rule(when={"amount": {"min": 100, "max": Decimal("99.99")}}),
            "rules.0.when.amount",
            "min (100) must not be greater than max (99.99)",
            id="inverted-amount-range",
        ),
        pytest.param(
            with_rule(when={"amount": {"min": 1.5}}),
            "rules.0.when.amount.min",
            "must be a number (an amount in major units)",
            id="amount-as-float",
        ),
        pytest.param(
            with_rule(when={"amount": {"min": "10"}}),
            "rules.0.when.amount.min",
            "must be a number (an amount in major units)",
            id="amount-as-text",
        ),
        pytest.param(
            with_rule(when={"amount": {"least": 10}}),
            "rules.0.when.amount.least",
            "unknown key of an amount range: use min or max",
            id="unknown-amount-key",
        ),
        pytest.param(
            with_rule(when={"amount": {"min": 1000}}),
            "rules.0.when.amount",
            "amount bounds are in a currency's major units: name the currencies they apply to in "
            "currencies (1000 JPY is not 1000 EUR)",
            id="amount-without-a-currency",
        ),
        pytest.param(
            with_rule(when={"currencies": ["EUR", "JPY"], "amount": {"min": Decimal("10.50")}}),
            "rules.0.when.amount.min",
            "must be an amount of JPY: a whole number, not 10.50",
            id="amount-that-one-of-its-currencies-cannot-hold",
        ),
        pytest.param(
            with_rule(when={"currencies": ["EUR"], "amount": {"max": Decimal("0.005")}}),
            "rules.0.when.amount.max",
            "must be an amount of EUR: at most 2 decimal places, not 0.005",
            id="amount-below-the-minor-unit",
        ),
        pytest.param(
            with_rule(when={"currencies": ["JPY"], "amount": {"min": Decimal("10.5")}}),
            "rules.0.when.amount.min",
            "must be an amount of JPY: a whole number, not 10.5",
            id="amount-with-more-decimals-than-the-currency",
        ),
        pytest.param(
            with_rule(when={"currencies": ["EUR"], "amount": {"max": 0}}),
            "rules.0.when.amount.max",
            "must be above 0: a session's amount is, so max 0 matches none",
            id="amount-up-to-0",
        ),
        pytest.param(
            with_rule(when={"currencies": ["EUR", "eur"]}),
            "rules.0.when.currencies.1",
            "must be three capital letters, such as EUR",
            id="lower-case-currency",
        ),
        pytest.param(
            with_rule(when={"currencies": ["EURO"]}),
            "rules.0.when.currencies.0",
            "must be three capital letters, such as EUR",
            id="four-letter-currency",
        ),
        pytest.param(
            {"fees": {"stripe": {"fixed": {"eur": "0.25"}}}},
            "fees.stripe.fixed.eur",
            "the currency must be three capital letters, such as EUR",
            id="fee-currency-not-capital-letters",
        ),
        pytest.param(
            with_rule(when={"countries": ["Poland"]}),
            "rules.0.when.countries.0",
            "must be two capital letters (ISO 3166-1 alpha-2), such as PL",
            id="country-not-two-letters",
        ),
        pytest.param(
            with_rule(when={"paymentMethods": []}),
            "rules.0.when.paymentMethods",
            "must list at least one value, or be left out",
            id="empty-condition-list",
        ),
        pytest.param(
            with_rule(when={"paymentMethods": "card"}),
            "rules.0.when.paymentMethods",
            "must be a list of strings",
            id="condition-not-a-list",
        ),
        pytest.param(
            {"rules": [{"name": f"rule-{n}", "route": {"type": "dynamic"}} for n in range(MAX_RULES + 1)]},
            "rules",
            "at most 100 rules, not 101",
            id="more-than-100-rules",
        ),
        pytest.param({"rules": {"name": "x"}}, "rules", "must be a list of rules", id="rules-not-a-list"),
        pytest.param(
            {"fees": {"stripe": {"percent": "-1"}}},
            "fees.stripe.percent",
            "must not be negative",
            id="negative-fee",
        ),
        pytest.param(
            {"fees": {"stripe": {"percent": "101"}}},
            "fees.stripe.percent",
            "must be a percentage from 0 to 100",
            id="percent-over-100",
        ),
        pytest.param(
            {"fees": {"stripe": {"percent": "1,4"}}},
            "fees.stripe.percent",
            'must be a decimal number, such as "1.40"',
            id="fee-not-a-decimal",
        ),
        pytest.param(
            {"fees": {"stripe": {"percent": 1.4}}},
            "fees.stripe.percent",
            'must be a decimal number, such as "1.40"',
            id="fee-as-float",
        ),
        pytest.param(
            {"objective": "cheapest"}, "objective", "must be approval or net", id="unknown-objective"
        ),
        pytest.param(
            {"rules": [], "priority": []},
            "priority",
            "unknown key of a routing document: use rules, default, fees, objective or recovery",
            id="unknown-document-key",
        ),
        pytest.param(
            ["rules"],
            "body",
            "must be a JSON object with rules, default, fees and objective",
            id="not-an-object",
        ),
    ],
)
def test_bad_document_is_refused_with_its_problem(raw: object, field: str, message: str) -> None:
    assert FieldProblem(field, message) in problems_of(raw)


def test_duplicate_rule_names_are_refused_at_the_second() -> None:
    raw = {
        "rules": [
            {"name": "eur", "route": {"type": "dynamic"}},
            {"name": "pln", "route": {"type": "dynamic"}},
            {"name": "eur", "route": {"type": "dynamic"}},
        ]
    }
    assert problems_of(raw) == [
        FieldProblem("rules.2.name", "duplicate of rules.0.name: every rule needs a name of its own")
    ]


def test_every_problem_of_a_document_is_reported_at_once() -> None:
    raw = {
        "rules": [
            {"name": "", "when": {"currency": ["EUR"]}, "route": {"type": "random"}},
            {"name": "split", "route": {"type": "split", "weights": {"stripe": 50, "adyen": 40}}},
            {"name": "split", "when": {"amount": {"min": 10, "max": 5}}, "route": {"type": "dynamic"}},
        ],
        "fees": {"stripe": {"fixed": {"EURO": "0.25"}}},
        "objective": "profit",
    }
    assert [problem.field for problem in problems_of(raw)] == [
        "rules.0.name",
        "rules.0.when.currency",
        "rules.0.route.type",
        "rules.1.route.weights.adyen",
        "rules.2.name",
        "rules.2.when.amount",
        "fees.stripe.fixed.EURO",
        "objective",
    ]


def test_refusal_is_the_validation_error_the_http_layer_answers_400() -> None:
    with pytest.raises(InvalidInput) as refused:
        parse(with_rule(name=""))
    assert refused.value.message == "invalid routing document: 1 problem"


def test_problems_are_placed_under_the_given_field() -> None:
    with pytest.raises(InvalidInput) as refused:
        parse_routing_document(with_rule(name=""), CATALOGUE, at="routing")
    assert refused.value.details == [FieldProblem("routing.rules.0.name", "must not be empty")]


def test_document_size_limit_is_64_kib() -> None:
    assert MAX_DOCUMENT_BYTES == 65536


# What a valid document means


def test_the_example_document_parses_to_its_values() -> None:
    document = parse(EXAMPLE)
    assert document.rules[0] == Rule(
        name="blik-pln",
        when=Conditions(
            payment_methods=("blik",),
            currencies=("PLN",),
            amount=AmountRange(Decimal(0), Decimal(5000)),
            countries=("PL",),
        ),
        route=PriorityRoute(("mollie", "stripe")),
    )
    assert document.rules[1].route == SplitRoute((("stripe", 70), ("mollie", 30)))
    assert document.default == DynamicRoute()
    assert document.fees == {"stripe": Fee(Decimal("1.4"), {"PLN": Decimal("1.00"), "EUR": Decimal("0.25")})}
    assert document.objective == "approval"


def test_document_json_gives_the_document_back() -> None:
    assert document_json(parse(EXAMPLE)) == EXAMPLE
    assert parse(document_json(parse(EXAMPLE))) == parse(EXAMPLE)


def test_a_stored_document_reads_back_though_its_providers_left_the_catalogue() -> None:
    stored = document_json(parse(EXAMPLE))
    assert stored_routing_document(stored) == parse(EXAMPLE)
    with pytest.raises(InvalidInput):  # as a new document, naming Mollie and Stripe is refused
        parse_routing_document(stored, {"sandbox"})


def test_empty_document_routes_every_session_dynamically() -> None:
    document = parse({})
    assert document == RoutingDocument(rules=(), default=DynamicRoute(), fees={}, objective="approval")
    assert document_json(document) == {
        "rules": [],
        "default": {"type": "dynamic"},
        "fees": {},
        "objective": "approval",
    }


def test_null_values_count_as_left_out() -> None:
    raw = {"rules": None, "default": None, "fees": None, "objective": None}
    assert parse(raw) == parse({})


def test_a_document_read_can_be_sent_back_with_its_version() -> None:
    answered = {**document_json(parse(EXAMPLE)), "version": 3, "updatedAt": "2025-01-01T00:00:00Z"}
    assert parse(answered) == parse(EXAMPLE)


def test_amounts_are_decimals_and_fees_keep_their_digits() -> None:
    raw = copy.deepcopy(EXAMPLE)
    raw["rules"][0]["when"]["amount"] = {"min": Decimal("10.50")}
    raw["fees"]["stripe"]["percent"] = Decimal("1.25")
    document = parse(raw)
    assert document.rules[0].when.amount == AmountRange(Decimal("10.50"), None)
    assert document_json(document)["rules"][0]["when"]["amount"] == {"min": Decimal("10.50")}
    assert document_json(document)["fees"]["stripe"]["percent"] == "1.25"
    assert document_json(document)["fees"]["stripe"]["fixed"] == {"PLN": "1.00", "EUR": "0.25"}


def test_fee_is_the_percent_of_the_amount_plus_the_fixed_part_of_its_currency() -> None:
    fee = Fee(Decimal("1.4"), {"EUR": Decimal("0.25")})
    assert fee.of(Money(10_000, "EUR")) == 140 + 25  # minor units
    assert fee.of(Money(10_000, "PLN")) == 140  # no fixed part in PLN
    assert fee.share_left(Money(10_000, "EUR")) == pytest.approx(1 - 165 / 10_000)


def test_a_fee_beyond_a_floats_range_leaves_a_finite_share_instead_of_failing() -> None:
    # A fee an earlier payorch stored (1e400 EUR): its share is the least there is, not OverflowError.
    fee = Fee(Decimal(0), {"EUR": Decimal("1e400")})
    assert fee.share_left(Money(1, "EUR")) == 1 - 1e300  # the part taken at most 10**300
    assert Fee(Decimal(0), {"EUR": Decimal("1e-400")}).share_left(Money(1, "EUR")) == 1.0


# Matching


def rule(name: str, **when: Any) -> dict[str, Any]:
    raw: dict[str, Any] = {"name": name, "route": {"type": "dynamic"}}
    if when:
        raw["when"] = when
    return raw


def matched(rules: list[dict[str, Any]], session: SessionFacts) -> str | None:
    found = matching_rule(parse({"rules": rules}), session)
    return None if found is None else found.name


def test_rule_without_conditions_matches_every_session() -> None:
    assert matched([rule("all")], facts(method="blik", amount=Money(1, "JPY"), country=None)) == "all"


def test_every_condition_given_must_hold() -> None:
    rules = [rule("blik-pln", paymentMethods=["blik"], currencies=["PLN"], countries=["PL"])]
    assert matched(rules, facts("blik", Money(1000, "PLN"), "PL")) == "blik-pln"
    assert matched(rules, facts("card", Money(1000, "PLN"), "PL")) is None
    assert matched(rules, facts("blik", Money(1000, "EUR"), "PL")) is None
    assert matched(rules, facts("blik", Money(1000, "PLN"), "CZ")) is None


def test_a_list_holds_when_any_of_its_values_does() -> None:
    rules = [rule("cee", currencies=["PLN", "CZK"], countries=["PL", "CZ", "SK"])]
    assert matched(rules, facts(amount=Money(1000, "CZK"), country="SK")) == "cee"
    assert matched(rules, facts(amount=Money(1000, "PLN"), country="PL")) == "cee"
    assert matched(rules, facts(amount=Money(1000, "HUF"), country="PL")) is None


def test_countries_never_match_a_session_without_a_billing_country() -> None:
    assert matched([rule("pl", countries=["PL"])], facts(country=None)) is None


@pytest.mark.parametrize(
    ("minor", "inside"),
    [(999, False), (1000, True), (2500, True), (5000, True), (5001, False)],
)
def test_amount_bounds_are_inclusive_in_major_units(minor: int, inside: bool) -> None:
    rules = [rule("10-to-50", currencies=["EUR"], amount={"min": 10, "max": 50})]
    assert (matched(rules, facts(amount=Money(minor, "EUR"))) == "10-to-50") is inside


def test_either_amount_bound_may_be_left_out() -> None:
    from_10 = rule("from-10", currencies=["EUR"], amount={"min": 10})
    to_10 = rule("to-10", currencies=["EUR"], amount={"max": 10})
    assert matched([from_10], facts(amount=Money(10**12, "EUR"))) == "from-10"
    assert matched([to_10], facts(amount=Money(1, "EUR"))) == "to-10"
    assert matched([to_10], facts(amount=Money(1001, "EUR"))) is None


def test_amount_bounds_are_amounts_of_the_rules_currency() -> None:
    rules = [rule("range", currencies=["KWD"], amount={"min": Decimal("10.5"), "max": Decimal("20.5")})]
    assert matched(rules, facts(amount=Money(10_500, "KWD"))) == "range"  # 10.500 KWD
    assert matched(rules, facts(amount=Money(10_499, "KWD"))) is None
    assert matched(rules, facts(amount=Money(20_500, "KWD"))) == "range"
    assert matched(rules, facts(amount=Money(20_501, "KWD"))) is None
    assert (
        matched(
            [rule("whole", currencies=["JPY"], amount={"min": Decimal("5000.00")})],
            facts(amount=Money(5000, "JPY")),
        )
        == "whole"
    )


def test_amount_bounds_apply_in_each_of_the_rules_currencies() -> None:
    rules = [rule("10-to-50", currencies=["EUR", "JPY"], amount={"min": 10, "max": 50})]
    assert matched(rules, facts(amount=Money(1000, "EUR"))) == "10-to-50"  # 10.00 EUR
    assert matched(rules, facts(amount=Money(10, "JPY"))) == "10-to-50"
    assert matched(rules, facts(amount=Money(51, "JPY"))) is None
    assert matched(rules, facts(amount=Money(1000, "PLN"))) is None


def test_a_stored_document_with_bounds_of_no_currency_still_routes_by_each_minor_unit() -> None:
    # Stored before bounds were held to one currency: read back, it routes as it did.
    stored = stored_routing_document(
        {"rules": [rule("range", amount={"min": Decimal("10.5"), "max": Decimal("20.5")})]}
    )
    assert matching_rule(stored, facts(amount=Money(10, "JPY"))) is None  # 10 JPY < 10.5
    assert matching_rule(stored, facts(amount=Money(11, "JPY"))) is not None
    assert matching_rule(stored, facts(amount=Money(21, "JPY"))) is None
    assert matching_rule(stored, facts(amount=Money(10_500, "KWD"))) is not None


def test_first_matching_rule_wins() -> None:
    rules = [rule("pln", currencies=["PLN"]), rule("eur", currencies=["EUR"]), rule("all"), rule("eur-2")]
    assert matched(rules, facts(amount=Money(1000, "EUR"))) == "eur"
    assert matched(rules, facts(amount=Money(1000, "USD"))) == "all"


def test_no_rule_matching_leaves_the_default() -> None:
    assert matched([rule("pln", currencies=["PLN"])], facts(amount=Money(1000, "EUR"))) is None
    assert matched([], facts()) is None


# Split assignment

SPLIT = SplitRoute((("stripe", 70), ("mollie", 30)))
SESSION_IDS = [f"00000000-0000-4000-8000-{n:012d}" for n in range(10_000)]


def firsts(route: SplitRoute, eligible: set[str]) -> Counter[str]:
    return Counter(split_order(route, eligible, facts(session_id=sid))[0] for sid in SESSION_IDS)


def test_split_assigns_sessions_in_proportion_to_the_weights() -> None:
    shares = firsts(SPLIT, {"stripe", "mollie"})
    assert 6_700 <= shares["stripe"] <= 7_300
    assert shares["stripe"] + shares["mollie"] == len(SESSION_IDS)


def test_same_session_is_always_assigned_to_the_same_provider() -> None:
    for sid in SESSION_IDS[:100]:
        once = split_order(SPLIT, {"stripe", "mollie"}, facts(session_id=sid))
        assert split_order(SPLIT, {"mollie", "stripe"}, facts(session_id=sid)) == once


def test_the_same_weights_in_another_key_order_route_every_session_alike() -> None:
    written = '{"type": "split", "weights": {%s}}'
    one_order = parse({"default": loads_exact(written % '"stripe": 60, "sandbox": 10, "mollie": 30')})
    other_order = parse({"default": loads_exact(written % '"mollie": 30, "stripe": 60, "sandbox": 10')})
    assert isinstance(one_order.default, SplitRoute) and isinstance(other_order.default, SplitRoute)
    eligible = {"stripe", "mollie", "sandbox"}
    for sid in SESSION_IDS[:1_000]:
        session = facts(session_id=sid)
        assert split_order(one_order.default, eligible, session) == split_order(
            other_order.default, eligible, session
        )


def test_cascade_after_the_assigned_provider_goes_heaviest_first() -> None:
    route = SplitRoute((("sandbox", 20), ("stripe", 50), ("mollie", 30)))
    for sid in SESSION_IDS[:200]:
        order = split_order(route, {"stripe", "mollie", "sandbox"}, facts(session_id=sid))
        rest = [name for name in ("stripe", "mollie", "sandbox") if name != order[0]]
        assert order == [order[0], *rest]


def test_provider_not_eligible_is_skipped_and_the_others_share_its_sessions() -> None:
    route = SplitRoute((("stripe", 50), ("mollie", 25), ("sandbox", 25)))
    shares = firsts(route, {"mollie", "sandbox"})
    assert set(shares) == {"mollie", "sandbox"}
    assert 4_700 <= shares["mollie"] <= 5_300
    assert split_order(route, {"mollie"}, facts()) == ["mollie"]
    assert split_order(route, set(), facts()) == []


def test_provider_weighing_zero_is_only_tried_in_the_cascade() -> None:
    route = SplitRoute((("stripe", 100), ("mollie", 0)))
    assert firsts(route, {"stripe", "mollie"}) == {"stripe": len(SESSION_IDS)}
    assert split_order(route, {"stripe", "mollie"}, facts()) == ["stripe", "mollie"]


def test_session_draws_are_uniform_and_fixed_by_the_id() -> None:
    draws = [session_draws(sid) for sid in SESSION_IDS]
    assert session_draws(SESSION_IDS[0]) == draws[0]
    assert all(0 <= draw.exploration < 1 for draw in draws)
    assert 0.45 <= sum(draw.exploration < 0.5 for draw in draws) / len(draws) <= 0.55
    assert 0.45 <= sum(draw.split % 2 for draw in draws) / len(draws) <= 0.55


def test_matching_rule_is_the_first_rule_whose_conditions_hold() -> None:
    rng = random.Random(26)
    methods, currencies, countries = ["card", "blik"], ["EUR", "PLN", "JPY"], ["PL", "DE", None]
    for _ in range(200):
        rules = []
        for number in range(rng.randint(0, 8)):
            when: dict[str, Any] = {}
            if rng.random() < 0.5:
                when["paymentMethods"] = rng.sample(methods, rng.randint(1, 2))
            if rng.random() < 0.5:
                when["currencies"] = rng.sample(currencies, rng.randint(1, 3))
            if rng.random() < 0.5:
                when["countries"] = rng.sample(["PL", "DE"], rng.randint(1, 2))
            if rng.random() < 0.5:
                low = rng.randint(0, 50)
                when["amount"] = {"min": low, "max": low + rng.randint(1, 50)}
                when["currencies"] = [rng.choice(currencies)]  # bounds are in one currency
            rules.append(rule(f"rule-{number}", **when))
        document = parse({"rules": rules})
        for _ in range(20):
            amount = Money(rng.randint(1, 10_000), rng.choice(currencies))
            session = facts(rng.choice(methods), amount, rng.choice(countries))
            expected = next((found for found in document.rules if found.when.matches(session)), None)
            assert matching_rule(document, session) == expected


def test_fees_keep_their_digits_even_when_zero() -> None:
    raw = {"fees": {"stripe": {"percent": "0.00", "fixed": {"EUR": "0.00"}}}}
    assert document_json(parse(raw))["fees"] == {"stripe": {"percent": "0.00", "fixed": {"EUR": "0.00"}}}


# Fees by payment method

MOLLIE_BLIK_CHEAPER = {
    "stripe": {"percent": "1.4", "fixed": {"PLN": "1.00"}},
    "mollie": {"percent": "1.8", "methods": {"blik": {"percent": "0.5"}}},
}


def test_a_providers_fee_for_a_payment_method_replaces_its_fee_for_those_payments() -> None:
    document = parse({"fees": MOLLIE_BLIK_CHEAPER})
    assert document.fee_of("mollie", "blik") == Fee(Decimal("0.5"))
    assert document.fee_of("mollie", "card") == Fee(Decimal("1.8"), methods={"blik": Fee(Decimal("0.5"))})
    assert document.fee_of("stripe", "blik") == Fee(Decimal("1.4"), {"PLN": Decimal("1.00")})
    assert document.fee_of("sandbox", "blik") is None
    fee = document.fee_of("mollie", "blik")
    assert fee is not None and fee.of(Money(10_000, "PLN")) == 50  # 0.5% of 100 PLN, no fixed part


def test_objective_net_ranks_each_payment_by_its_most_specific_fee() -> None:
    rows = [
        SegmentFigures(provider, method, "PLN", "s" * 150 + "f" * 50)
        for provider in ("mollie", "stripe")
        for method in ("blik", "card")
    ]
    rates = SuccessRates.from_rows(rows, RoutingSettings())
    document = parse({"fees": MOLLIE_BLIK_CHEAPER, "objective": "net"})
    no_exploration = RoutingSettings(exploration=0.0)

    def first(method: str) -> str:
        session = facts(method=method, amount=Money(100_000, "PLN"))  # 1,000 PLN
        return decide(document, session, ["mollie", "stripe"], rates, no_exploration).order[0]

    assert first("blik") == "mollie"  # 0.5% against stripe's 1.4% + 1.00 PLN (1.5%)
    assert first("card") == "stripe"  # 1.5% against mollie's own 1.8%


def test_fees_by_payment_method_are_written_back_and_read_back_from_storage() -> None:
    written = document_json(parse({"fees": MOLLIE_BLIK_CHEAPER}))
    assert written["fees"]["mollie"] == {
        "percent": "1.8",
        "fixed": {},
        "methods": {"blik": {"percent": "0.5", "fixed": {}}},
    }
    assert "methods" not in written["fees"]["stripe"]  # a fee without them is written as before
    stored = stored_routing_document(loads_exact(dumps_exact(written)))
    assert stored.fee_of("mollie", "blik") == Fee(Decimal("0.5"))


@pytest.mark.parametrize(
    ("fees", "field", "message"),
    [
        (
            {"mollie": {"methods": {"cheque": {"percent": "1"}}}},
            "fees.mollie.methods.cheque",
            "'cheque' is not a payment method payorch offers: use blik or card",
        ),
        (
            {"mollie": {"methods": {"blik": {"percent": "100.5"}}}},
            "fees.mollie.methods.blik.percent",
            "must be a percentage from 0 to 100",
        ),
        (
            {"mollie": {"methods": {"blik": {"fixed": {"PLN": "0.0000001"}}}}},
            "fees.mollie.methods.blik.fixed.PLN",
            "must be from 0 to less than 1,000,000,000,000,000 with at most 6 decimal places",
        ),
        (
            {"mollie": {"methods": {"blik": {"methods": {}}}}},
            "fees.mollie.methods.blik.methods",
            "unknown key of a fee: use percent or fixed",
        ),
        (
            {"mollie": {"methods": ["blik"]}},
            "fees.mollie.methods",
            'must be an object of fees by payment method, such as {"blik": {"percent": "0.9"}}',
        ),
        (
            {"mollie": {"methods": {"blik": "0.9"}}},
            "fees.mollie.methods.blik",
            "must be an object with percent or fixed",
        ),
    ],
    ids=[
        "unknown method",
        "percent over 100",
        "fixed 7 places",
        "nested methods",
        "not an object",
        "not a fee",
    ],
)
def test_a_bad_fee_by_payment_method_is_refused_naming_its_place(
    fees: dict[str, Any], field: str, message: str
) -> None:
    with pytest.raises(InvalidInput) as refused:
        parse_routing_document({"fees": fees}, CATALOGUE, known_methods=["blik", "card"])
    assert refused.value.details == [FieldProblem(field, message)]
