"""JSON as money needs it: numbers with a fraction parse as `Decimal` and `Decimal` prints as a number.

No amount ever passes through `float`. `NaN` and `Infinity` are not JSON and are refused both ways.
Used for HTTP bodies and for the database's jsonb columns alike.
"""

from __future__ import annotations

import datetime
import uuid
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


def loads_exact(data: str | bytes) -> Any:
    return simplejson.loads(data, use_decimal=True, parse_constant=_refuse_constant)


def dumps_exact(value: Any) -> str:
    return str(
        simplejson.dumps(value, use_decimal=True, default=_default, ensure_ascii=False, allow_nan=False)
    )
