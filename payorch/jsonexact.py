"""JSON as money needs it: numbers with a fraction parse as `Decimal` and `Decimal` prints as a number.

No amount ever passes through `float`. `NaN` and `Infinity` are not JSON and are refused both ways.
Used for HTTP bodies and for the database's jsonb columns alike.
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import simplejson


def _default(value: Any) -> Any:
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


def dumps_exact(value: Any, *, indent: int | None = None) -> str:
    """`value` as JSON text, `Decimal` as numbers; on one line, or indented by `indent` spaces a level
    (for people to read and edit)."""
    return str(
        simplejson.dumps(
            value, use_decimal=True, default=_default, ensure_ascii=False, allow_nan=False, indent=indent
        )
    )
