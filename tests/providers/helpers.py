"""Building blocks for the sandbox tests: checkout requests, checkouts, and reading back events and
their deliveries."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from payorch.providers.base import CheckoutRequest, Credentials
from payorch.providers.sandbox import SandboxProvider
from payorch.storage import sandbox as store
from payorch.storage.database import Connection, Database
from payorch.values.money import Money

SANDBOX_KEY = "sk_sandbox_test_0123456789"
REFUND_DELAY_MS = 500
DISPUTE_DELAY_MS = 2000


def checkout_request(
    *,
    amount: str = "123.45",
    currency: str = "PLN",
    method: str = "card",
    order_reference: str = "ORDER-42",
    success_url: str | None = None,
    failure_url: str | None = None,
    expires_in: timedelta = timedelta(minutes=30),
) -> CheckoutRequest:
    return CheckoutRequest(
        session_id=uuid.uuid4(),
        application_id=uuid.uuid4(),
        amount=Money.from_major(Decimal(amount), currency),
        payment_method=method,
        order_reference=order_reference,
        customer_email="buyer@example.com",
        locale=None,
        expires_at=datetime.now(UTC) + expires_in,
        requested_at=datetime.now(UTC),
        success_url=success_url,
        failure_url=failure_url,
    )


async def new_checkout(
    provider: SandboxProvider, credentials: Credentials, **request: Any
) -> tuple[CheckoutRequest, str]:
    """A fresh checkout: its request and the sandbox's checkout id."""
    made = checkout_request(**request)
    created = await provider.create_checkout(credentials, made, idempotency_key=f"key-{made.session_id}")
    return made, created.reference


async def events_of(db: Database, checkout_id: str) -> list[store.SandboxEvent]:
    """Every event the sandbox queued about the checkout and its refunds, oldest first."""

    async def read(conn: Connection) -> list[store.SandboxEvent]:
        rows = await conn.fetch(
            """SELECT id, account, type, checkout_id, refund_id, body, created_at, deliver_at
               FROM sandbox_events WHERE checkout_id = $1 ORDER BY created_at, deliver_at, id""",
            checkout_id,
        )
        return [store.SandboxEvent(**dict(row.items())) for row in rows]

    return await db.autocommit(read)


@dataclass(frozen=True)
class Delivery:
    """One sandbox event's delivery to one endpoint, as stored."""

    event_id: str
    endpoint_id: str
    deliver_at: datetime
    attempts: int
    delivered_at: datetime | None
    given_up_at: datetime | None
    last_error: str | None


async def deliveries_of(db: Database, event_id: str) -> list[Delivery]:
    """The event's deliveries, one per endpoint, by endpoint id."""

    async def read(conn: Connection) -> list[Delivery]:
        rows = await conn.fetch(
            """SELECT event_id, endpoint_id, deliver_at, attempts, delivered_at, given_up_at, last_error
               FROM sandbox_deliveries WHERE event_id = $1 ORDER BY endpoint_id""",
            event_id,
        )
        return [Delivery(**dict(row.items())) for row in rows]

    return await db.autocommit(read)


def data_of(event: store.SandboxEvent) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(event.body)["data"]
    return data
