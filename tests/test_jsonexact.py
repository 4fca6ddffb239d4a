"""`dumps_exact` writes what simplejson writes with payorch's settings, character for character."""

from __future__ import annotations

import datetime
import json.encoder
import uuid
from decimal import Decimal
from typing import Any

import pytest
import simplejson
import simplejson.encoder

from payorch.jsonexact import _default, dumps_exact


def _simplejson_line(value: Any) -> str:
    return str(
        simplejson.dumps(value, use_decimal=True, default=_default, ensure_ascii=False, allow_nan=False)
    )


def test_every_character_is_escaped_as_simplejson_escapes_it() -> None:
    fast, own = json.encoder.c_encode_basestring, simplejson.encoder.encode_basestring
    assert fast is not None
    differing = [point for point in range(0x110000) if fast(chr(point)) != own(chr(point))]
    assert differing == []


@pytest.mark.parametrize(
    "value",
    [
        {
            "amount": Decimal("12.50"),
            "items": [1, 2.5, None, True, 'é\n"\\\x01\ud800 \u2028'],
            "id": uuid.UUID("12345678-1234-5678-1234-567812345678"),
            "at": datetime.datetime(2026, 11, 28, 18, 0, tzinfo=datetime.UTC),
            "pair": (1, 2),
            "empty": {},
        },
        [],
        "text",
        b"bytes",
        {"nested bytes": b"\xc3\xa9"},
        {1: 2, None: 3, 2.5: 1, False: 0},
        Decimal("2"),
    ],
)
def test_a_value_is_written_as_simplejson_writes_it(value: Any) -> None:
    assert dumps_exact(value) == _simplejson_line(value)


@pytest.mark.parametrize("value", [{"a": float("nan")}, {"a": object()}, {(1,): 2}])
def test_a_value_json_cannot_hold_is_refused_as_simplejson_refuses_it(value: Any) -> None:
    with pytest.raises((TypeError, ValueError)) as ours:
        dumps_exact(value)
    with pytest.raises((TypeError, ValueError)) as theirs:
        _simplejson_line(value)
    assert (type(ours.value), str(ours.value)) == (type(theirs.value), str(theirs.value))


@pytest.mark.parametrize("value", [Decimal(text) for text in ("NaN", "sNaN", "Infinity", "-Infinity")])
@pytest.mark.parametrize("indent", [None, 2])
def test_a_decimal_that_is_not_a_number_is_refused_not_written(value: Decimal, indent: int | None) -> None:
    with pytest.raises(ValueError, match="is not a JSON number"):
        dumps_exact({"amount": value}, indent=indent)
