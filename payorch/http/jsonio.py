"""Request bodies as JSON: exact (through `payorch.jsonexact`), and bounded before they cost anything.

Quart parses every request body with the app's JSON provider, so `ExactJsonProvider.loads` is where
a body becomes values, and where it is refused (`InvalidInput`, 400 in shape A, naming the place) when:
- it nests deeper than `MAX_NESTING_DEPTH` arrays and objects: checked by a linear scan of the text
  before the (recursive) parser sees it, so no depth reaches a `RecursionError`;
- a number has more than `MAX_NUMBER_DIGITS` digits or a decimal exponent (`1.5e3` has 3) beyond
  `MAX_NUMBER_EXPONENT` either way: checked on the number's text as the parser meets it, before it
  becomes a value; PostgreSQL's numeric (jsonb) could not hold `1e999999` or `1e-16384` at all;
- a string, or an object key, holds a character PostgreSQL text and jsonb cannot store: NUL (U+0000)
  or a lone surrogate (U+D800-U+DFFF, which only a `\\u` escape without its pair can produce).

Reading the database's jsonb goes through `payorch.jsonexact` directly: none of these request limits
apply to what is already stored.
"""

from __future__ import annotations

import itertools
import re
from decimal import Decimal
from typing import Any

from flask.json.provider import JSONProvider

from payorch.jsonexact import dumps_exact, loads_exact
from payorch.values.errors import FieldProblem, InvalidInput

__all__ = [
    "MAX_NESTING_DEPTH",
    "MAX_NUMBER_DIGITS",
    "MAX_NUMBER_EXPONENT",
    "ExactJsonProvider",
    "dumps_exact",
    "loads_request_json",
    "nests_deeper_than",
    "unstorable_text_problem",
]

MAX_NESTING_DEPTH = 32  # arrays and objects inside each other; no payorch body needs more than 5
MAX_NUMBER_DIGITS = 100
MAX_NUMBER_EXPONENT = 1000  # far inside numeric's 131072 digits before the point and 16383 after

# A JSON string, escapes included (the unrolled form: linear, no backtracking).
_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_A_BRACKET = bytes(byte for byte in range(256) if byte not in b"[]{}")
_DEPTH_STEP = {ord("["): 1, ord("{"): 1, ord("]"): -1, ord("}"): -1}
# What could put NUL or a lone surrogate into a parsed string (an escape, or the character itself);
# a match only means "look closer". Two expressions, not one with an alternative: each skips fast to
# the characters it can start with, and a 35 KB body is scanned in half the time.
_MAYBE_UNSTORABLE_ESCAPE = re.compile(r"\\u(?:0000|[dD][89a-fA-F][0-9a-fA-F]{2})")
_UNSTORABLE_CHARACTER = re.compile(r"[\x00\ud800-\udfff]")
# Where neither occurs, no number can be out of bounds (at most 100 digits, and an exponent of two
# digits moves the point by less than 1000): the parser may then build numbers without asking.
_LONG_NUMBER = re.compile(rf"[0-9.]{{{MAX_NUMBER_DIGITS + 1}}}")
_LONG_EXPONENT = re.compile(r"[eE][+-]?[0-9]{3}")


def nests_deeper_than(text: str, limit: int) -> bool:
    """Whether arrays and objects nest more than `limit` levels deep in the JSON `text`, found
    without parsing it (brackets inside strings do not count). On text that is not JSON the answer
    may be yes where a parser would have stopped earlier: either way the body is refused."""
    if text.count("[") + text.count("{") <= limit:
        return False  # the common case, at the cost of two counts
    # Without an escaped quote every quote opens or closes a string: what lies outside them is every
    # other piece (a fast split); else each string is found where it ends.
    escaped_quote = '\\"' in text
    outside = _JSON_STRING.sub("", text) if escaped_quote else "".join(text.split('"')[::2])
    brackets = outside.encode("utf-8", "surrogatepass").translate(None, _NOT_A_BRACKET)
    return max(itertools.accumulate(map(_DEPTH_STEP.__getitem__, brackets)), default=0) > limit


def _might_hold_unstorable_text(text: str) -> bool:
    """Whether the JSON `text` may hold, once parsed, a string PostgreSQL cannot store."""
    return ("\\u" in text and _MAYBE_UNSTORABLE_ESCAPE.search(text) is not None) or (
        _UNSTORABLE_CHARACTER.search(text) is not None
    )


def unstorable_text_problem(text: str) -> str | None:
    """Why PostgreSQL text and jsonb cannot store `text`, or None when they can."""
    found = _UNSTORABLE_CHARACTER.search(text)
    if found is None:
        return None
    if found.group() == "\x00":
        return "must not contain the NUL character (U+0000)"
    return f"must not contain a lone surrogate (U+{ord(found.group()):04X}), which is no Unicode character"


def _inside(field: str, key: str) -> str:
    # A key is named with what cannot be stored written as its escape: the answer must be storable too.
    shown = _UNSTORABLE_CHARACTER.sub(lambda found: f"\\u{ord(found.group()):04x}", key)
    return f"{field}.{shown}" if field else shown


def first_unstorable_text(value: Any, field: str = "") -> FieldProblem | None:
    """The first string or object key inside the JSON `value` that PostgreSQL cannot store, with where
    it is (`description.notes[2]`; `body` for the whole), or None."""
    if isinstance(value, str):
        problem = unstorable_text_problem(value)
        return FieldProblem(field or "body", problem) if problem else None
    if isinstance(value, dict):
        for key, item in value.items():
            problem = unstorable_text_problem(key)
            if problem:
                return FieldProblem(_inside(field, key), f"key {problem}")
            found = first_unstorable_text(item, _inside(field, key))
            if found:
                return found
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            found = first_unstorable_text(item, f"{field or 'body'}[{index}]")
            if found:
                return found
    return None


def _number_refused(text: str, why: str) -> InvalidInput:
    shown = text if len(text) <= 40 else f"{text[:20]}...{text[-10:]}"
    return InvalidInput(
        "request body holds a number outside what payorch accepts",
        [FieldProblem("body", f"number {shown} {why}")],
    )


def _bounded_integer(text: str) -> int:
    if len(text.lstrip("-")) > MAX_NUMBER_DIGITS:
        raise _number_refused(text, f"has more than {MAX_NUMBER_DIGITS} digits")
    return int(text)


def _bounded_decimal(text: str) -> Decimal:
    mantissa = text.lower().partition("e")[0]
    digits = len(mantissa) - mantissa.count("-") - mantissa.count(".")
    if digits > MAX_NUMBER_DIGITS:
        raise _number_refused(text, f"has more than {MAX_NUMBER_DIGITS} digits")
    if len(text) > len(mantissa) + 7:  # "e", a sign and five digits: more is out of range anyway
        raise _number_refused(text, f"is out of range: its exponent must lie within ±{MAX_NUMBER_EXPONENT}")
    number = Decimal(text)
    if abs(number.adjusted()) > MAX_NUMBER_EXPONENT:
        raise _number_refused(text, f"is out of range: its exponent must lie within ±{MAX_NUMBER_EXPONENT}")
    return number


def loads_request_json(data: str | bytes) -> Any:
    """The JSON request body `data` as values (fractions as `Decimal`), or `InvalidInput` naming the
    problem when it is malformed, nests too deep, or holds a number or text outside the limits above."""
    text = data.decode("utf-8") if isinstance(data, bytes) else data
    if nests_deeper_than(text, MAX_NESTING_DEPTH):
        raise InvalidInput(
            "request body nests too deeply",
            [FieldProblem("body", f"arrays and objects nest more than {MAX_NESTING_DEPTH} levels deep")],
        )
    try:
        if _LONG_NUMBER.search(text) or _LONG_EXPONENT.search(text):
            value = loads_exact(text, parse_int=_bounded_integer, parse_float=_bounded_decimal)
        else:
            value = loads_exact(text)
    except ValueError as error:  # JSONDecodeError, NaN or Infinity
        # Where the JSON breaks (positions only, never the body's content) helps whoever integrates.
        raise InvalidInput(
            "malformed request: the body must be valid JSON", [FieldProblem("body", str(error))]
        ) from None
    if _might_hold_unstorable_text(text):  # rare: walk the values only when the text hints at it
        problem = first_unstorable_text(value)
        if problem is not None:
            raise InvalidInput("request body holds text that cannot be stored", [problem])
    return value


class ExactJsonProvider(JSONProvider):
    """The app's JSON: responses through `dumps_exact`; request bodies through `loads_request_json`."""

    def dumps(self, obj: Any, **kwargs: Any) -> str:
        return dumps_exact(obj)

    def loads(self, s: str | bytes, **kwargs: Any) -> Any:
        return loads_request_json(s)
