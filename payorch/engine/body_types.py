"""What the interface's bodies are made of: scalars typed as the builders write them and documented as
the OpenAPI document shows them, and the enumerations more than one floor speaks.

Each response body is a `TypedDict` beside the function that builds it (`engine.payments.records`,
`engine.payments.refund_rules`, `http.representations`): mypy checks every key a builder writes, and the
OpenAPI document (`http.openapi`) is generated from the same types. Builders write JSON-ready values
(text for times and ids, `Decimal` for amounts), so each scalar here is that Python type, annotated
with the JSON Schema a client reads for it.
"""

from __future__ import annotations

import enum
from decimal import Decimal
from typing import Annotated, Any, Literal, TypeVar, get_args

from pydantic import ConfigDict, StringConstraints, WithJsonSchema

from payorch.values.money import smallest_minor_unit

T = TypeVar("T")

CLOSED = ConfigDict(extra="forbid")
"""Every body's `TypedDict` is closed (`additionalProperties: false`), so the schemathesis run of the
test suite notices a key a route answers without documenting it."""

Timestamp = Annotated[str, WithJsonSchema({"type": "string", "format": "date-time"})]
"""A moment as `values.timefmt.iso` writes it: ISO 8601, UTC, milliseconds, `Z`."""
Uuid = Annotated[str, WithJsonSchema({"type": "string", "format": "uuid"})]
"""An id, written as text."""
MONEY_DESCRIPTION = (
    "A decimal number in major units, e.g. 100.00, written as a JSON number (never a string); at most "
    "as many decimals as the currency's minor unit allows (JPY 0, EUR 2, KWD 3). Read and kept exactly."
)
MONEY_SCHEMA: dict[str, Any] = {
    "type": "number",
    "format": "decimal",
    # Whatever the currency, a multiple of the smallest minor unit of all (0.001).
    "multipleOf": float(smallest_minor_unit()),
    "description": MONEY_DESCRIPTION,
}
Money = Annotated[Decimal, WithJsonSchema(MONEY_SCHEMA)]
"""An amount in major currency units, a JSON number (never a string)."""
MajorUnits = Annotated[
    Decimal,
    WithJsonSchema(
        {"type": "number", "format": "decimal", "description": "A decimal number in major units."}
    ),
]
"""A bound on amounts in major units, with any number of decimals (it is not an amount itself)."""
CurrencyCode = Annotated[str, StringConstraints(pattern=r"^[A-Z]{3}$")]

# The events a merchant may subscribe to and receive: the interface's four, and a lost dispute.
EventType = Literal[
    "session.completed",
    "session.expired",
    "refund.completed",
    "refund.failed",
    "session.dispute_lost",
    "reconciliation.completed",
]
EVENT_TYPES: tuple[EventType, ...] = get_args(EventType)
# What a configuration created without `subscribedEvents` subscribes to: the interface's four.
DEFAULT_EVENT_TYPES: tuple[EventType, ...] = EVENT_TYPES[:4]
# Delivered to every active configuration, named in its `subscribedEvents` or not: money the merchant
# was paid has been taken back, and no configuration may miss that. Naming it is accepted.
ALWAYS_DELIVERED: tuple[EventType, ...] = ("session.dispute_lost",)
# The event a test send carries (`POST .../webhooks/{id}/test`): never subscribed to, never a
# delivery, so not one of the interface's event types.
TestEventType = Literal["webhook.test"]
TEST_EVENT_TYPE: TestEventType = get_args(TestEventType)[0]


def one_of(value: object, members: tuple[T, ...]) -> T:
    """The member of an enumeration that `value` (text read back from storage) equals.

    Storage keeps only what was checked on the way in, so a value that is none of them is a broken
    invariant (ValueError), not a bad request: answering it would contradict the document."""
    for member in members:
        if member == value:
            return member
    raise ValueError(f"{value!r} is not one of {', '.join(map(str, members))}")


def listed(kind: type[enum.StrEnum]) -> WithJsonSchema:
    """The JSON Schema of a `StrEnum` field written in place (`{"type": "string", "enum": [...]}`)
    rather than as a component of its own, as the document has always shown its enumerations."""
    return WithJsonSchema({"enum": [member.value for member in kind], "type": "string"})
