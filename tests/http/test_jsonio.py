"""Request JSON is bounded as it is read: nesting found without parsing, numbers checked on their text,
text PostgreSQL cannot store found with where it is. The database's own JSON is read without bounds."""

from __future__ import annotations

from decimal import Decimal

import pytest

from payorch.http.jsonio import (
    MAX_NESTING_DEPTH,
    MAX_NUMBER_DIGITS,
    MAX_NUMBER_EXPONENT,
    loads_request_json,
    nests_deeper_than,
)
from payorch.jsonexact import loads_exact
from payorch.values.errors import FieldProblem, InvalidInput


def refusal(text: str) -> FieldProblem:
    """The one problem `loads_request_json` names for `text`."""
    with pytest.raises(InvalidInput) as raised:
        loads_request_json(text)
    [problem] = raised.value.details
    return problem


@pytest.mark.parametrize(
    ("text", "deeper_than_2"),
    [
        ("[[1]]", False),
        ("[[[1]]]", True),
        ('{"a": {"b": {}}}', True),
        ('{"a": {"b": 1}, "c": {"d": 2}}', False),  # wide is not deep
        ('["[[[[", "{{{{"]', False),  # brackets inside strings do not count
        ('["]]]]", [[[1]]]]', True),  # closing ones neither: they hide no depth
        ('["\\"[[[[", "\\\\", [1]]', False),  # nor after an escaped quote; an escaped backslash ends
        ('["\\\\"[[[[1]]]]]', True),  # ... so these brackets are outside any string
    ],
)
def test_nesting_is_measured_outside_strings(text: str, deeper_than_2: bool) -> None:
    assert nests_deeper_than(text, 2) is deeper_than_2


def test_deeply_nested_json_is_refused_before_parsing() -> None:
    problem = refusal("[" * 100_000 + "]" * 100_000)  # would be a RecursionError in the parser
    assert problem.field == "body"
    assert str(MAX_NESTING_DEPTH) in problem.message


def test_nesting_at_the_limit_parses() -> None:
    text = "[" * MAX_NESTING_DEPTH + "]" * MAX_NESTING_DEPTH
    assert loads_request_json(text) is not None
    refusal("[" + text + "]")


@pytest.mark.parametrize(
    "number",
    [
        "1e999999",
        "1e-16384",
        "0e-99999",
        f"-1E+{MAX_NUMBER_EXPONENT + 1}",
        f"1e-{MAX_NUMBER_EXPONENT + 1}",
        "1e+0000000001",  # an exponent written longer than any allowed one
        "1" * (MAX_NUMBER_DIGITS + 1),
        "-" + "1" * (MAX_NUMBER_DIGITS + 1),
        "0." + "1" * MAX_NUMBER_DIGITS,
        "1" * 5000,  # beyond Python's own limit for int(): refused before it is tried
    ],
)
def test_number_beyond_the_bounds_is_refused(number: str) -> None:
    problem = refusal(f'{{"x": [{number}]}}')
    assert problem.field == "body"
    assert problem.message.startswith("number ")
    assert len(problem.message) < 200  # a long number is shown shortened


@pytest.mark.parametrize(
    "number",
    [
        f"1e{MAX_NUMBER_EXPONENT}",
        f"-1.5e-{MAX_NUMBER_EXPONENT}",
        "9" * MAX_NUMBER_DIGITS,
        "0." + "1" * (MAX_NUMBER_DIGITS - 1),
        "6.02214076e23",
        "-0.0",
    ],
)
def test_number_within_the_bounds_is_exact(number: str) -> None:
    assert Decimal(loads_request_json(f"[{number}]")[0]) == Decimal(number)


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ('"\\u0000"', "body"),
        ('{"name": "a\\u0000b"}', "name"),
        ('{"name": "\\ud800"}', "name"),
        ('{"name": "\\uDBFF"}', "name"),
        ('{"name": "\\udc00 after no high half"}', "name"),
        ('{"name": "\\ud83d then no low half"}', "name"),
        ('{"a": {"b": ["ok", "\\ude00"]}}', "a.b[1]"),
        ('[{"k": 1}, {"x\\u0000": 1}]', "body[1].x\\u0000"),
        ('{"a": {"\\ud800": 1}}', "a.\\ud800"),
    ],
)
def test_text_postgresql_cannot_store_is_refused_naming_where(text: str, field: str) -> None:
    problem = refusal(text)
    assert problem.field == field
    assert "U+" in problem.message


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ('"\\ud83d\\ude00"', "\U0001f600"),  # a surrogate pair is one character
        ('"\\\\ud800"', "\\ud800"),  # an escaped backslash, then plain letters
        ('"\\\\u0000"', "\\u0000"),
        ('"\\u00e9\\u0001"', "é\x01"),
    ],
)
def test_storable_text_is_accepted(text: str, value: str) -> None:
    assert loads_request_json(text) == value


@pytest.mark.parametrize("text", ['{"email": ', "", "[1,]", "NaN", '{"a": -Infinity}'])
def test_malformed_json_is_refused_with_where_it_breaks(text: str) -> None:
    problem = refusal(text)
    assert problem.field == "body"
    assert problem.message


def test_database_json_is_read_without_the_request_bounds() -> None:
    deep = "[" * (MAX_NESTING_DEPTH + 5) + "]" * (MAX_NESTING_DEPTH + 5)
    value = loads_exact(f'{{"x": 1e2000, "y": {deep}, "z": "{"1" * 200}"}}')
    assert value["x"] == Decimal("1e2000")
