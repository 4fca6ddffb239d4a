"""Checkout sessions."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime

import asyncpg

from payorch.engine.pagination import PageRequest
from payorch.storage.database import Connection


@dataclass(frozen=True)
class CheckoutSession:
    id: uuid.UUID
    application_id: uuid.UUID
    order_reference: str
    amount_minor: int
    currency: str
    status: str
    failure_reason: str | None
    provider_name: str | None
    payment_method: str
    expires_at: datetime | None
    created_at: datetime
    updated_at: datetime


_COLUMNS = ", ".join(CheckoutSession.__dataclass_fields__)


def _session(row: asyncpg.Record) -> CheckoutSession:
    return CheckoutSession(**dict(row.items()))


async def list_sessions(
    conn: Connection, application_id: uuid.UUID, page: PageRequest
) -> tuple[list[CheckoutSession], int]:
    total = await conn.fetchval(
        "SELECT count(*) FROM checkout_sessions WHERE application_id = $1", application_id
    )
    rows = await conn.fetch(
        f"""SELECT {_COLUMNS} FROM checkout_sessions WHERE application_id = $1
            ORDER BY created_at DESC, id DESC LIMIT $2 OFFSET $3""",
        application_id,
        page.limit,
        page.offset,
    )
    return [_session(row) for row in rows], int(total)
