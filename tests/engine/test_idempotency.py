"""Request fingerprints: the same parsed JSON is the same request."""

from __future__ import annotations

from decimal import Decimal

from payorch.engine.idempotency import request_fingerprint
from payorch.jsonexact import loads_exact


def fingerprint(text: str) -> bytes:
    return request_fingerprint(loads_exact(text), "POST /api/v1/sessions")


def test_key_order_and_white_space_do_not_matter() -> None:
    assert fingerprint('{"a": 1, "b": {"c": 2}}') == fingerprint('{"b":{"c":2},"a":1}')


def test_how_a_number_is_written_does_not_matter() -> None:
    assert fingerprint('{"total": 10.5}') == fingerprint('{"total": 10.50}')
    assert fingerprint('{"total": 10}') == fingerprint('{"total": 10.0}')


def test_a_different_value_is_a_different_request() -> None:
    assert fingerprint('{"total": 10.5}') != fingerprint('{"total": 10.51}')
    assert fingerprint('{"total": 10}') != fingerprint('{"total": "10"}')


def test_scope_is_part_of_the_fingerprint() -> None:
    body = {"amount": Decimal("1.00")}
    assert request_fingerprint(body, "a") != request_fingerprint(body, "b")
