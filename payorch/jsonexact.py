"""JSON as money needs it: numbers with a fraction parse as `Decimal` and `Decimal` prints as a number.

No amount ever passes through `float`. `NaN` and `Infinity` are not JSON and are refused both ways.
Used for HTTP bodies and for the database's jsonb columns alike.
"""

from __future__ import annotations

import datetime
import json.encoder
import uuid
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import simplejson
import simplejson.encoder


def _default(value: Any) -> Any:
    if isinstance(value, Decimal):
        # Written here, not by simplejson's `use_decimal`, which writes `NaN` and `Infinity` as they are.
        if not value.is_finite():
            raise ValueError(f"{value} is not a JSON number")
        return simplejson.RawJSON(str(value))
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, datetime.datetime):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def loads_exact(
    data: str | bytes,
    *,
    parse_int: Callable[[str], int] | None = None,
    parse_float: Callable[[str], Decimal] = Decimal,
) -> Any:
    """The JSON `data` as values: whole numbers as `int`, others as `Decimal`, never `float`.

    `parse_int` and `parse_float` receive each number's text, so a caller can bound numbers before
    they are built (request bodies do, see `payorch.http.jsonio`); by default every number is kept."""
    return simplejson.loads(
        data, parse_int=parse_int, parse_float=parse_float, parse_constant=_refuse_constant
    )


# simplejson's own encoder, but for one part: with `ensure_ascii=False` simplejson escapes each string
# in a Python function (a regular expression and a call per string), a tenth of a read's encoding;
# the standard library's C function escapes exactly the same characters the same way (every code
# point compared in tests/test_jsonexact.py), six times faster. Built as `JSONEncoder.iterencode`
# builds it, from this encoder's own settings.
_ENCODER = simplejson.JSONEncoder(use_decimal=False, default=_default, ensure_ascii=False, allow_nan=False)
_make_c_encoder = simplejson.encoder.c_make_encoder
_c_encode_string = getattr(json.encoder, "c_encode_basestring", None)  # None without its C part


def _dumps_line(value: Any) -> str:
    """`value` on one line, as `simplejson.dumps` with `_ENCODER`'s settings writes it."""
    if _make_c_encoder is None or _c_encode_string is None or isinstance(value, (str, bytes)):
        return str(_ENCODER.encode(value))
    e = _ENCODER
    encode = _make_c_encoder(
        {},
        e.default,
        _c_encode_string,
        None,
        e.key_separator,
        e.item_separator,
        e.sort_keys,
        e.skipkeys,
        e.allow_nan,
        {},
        e.use_decimal,
        e.namedtuple_as_object,
        e.tuple_as_array,
        e.int_as_string_bitcount,
        e.item_sort_key,
        e.encoding,
        e.for_json,
        e.ignore_nan,
        Decimal,
        e.iterable_as_array,
    )
    try:
        return "".join(encode(value, 0))
    except TypeError:
        # bytes inside `value` (which simplejson's own escaping decodes), or a value JSON cannot hold:
        # simplejson answers or raises exactly as it always has.
        return str(_ENCODER.encode(value))


def dumps_exact(value: Any, *, indent: int | None = None) -> str:
    """`value` as JSON text, `Decimal` as numbers; on one line, or indented by `indent` spaces a level
    (for people to read and edit)."""
    if indent is None:
        return _dumps_line(value)
    return str(
        simplejson.dumps(
            value, use_decimal=False, default=_default, ensure_ascii=False, allow_nan=False, indent=indent
        )
    )
