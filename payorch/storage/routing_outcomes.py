"""Routing outcomes: each session's first outcome at the provider that created its checkout
(migration 0017), what learned routing reads its success rates from (`engine.routing.success_rates`)."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import NamedTuple

from payorch.storage.database import Connection
from payorch.storage.database_thread import on_database_thread
from payorch.values.statuses import Outcome


@on_database_thread
async def record_outcome(
    conn: Connection,
    *,
    application_id: uuid.UUID,
    session_id: uuid.UUID,
    provider: str,
    payment_method: str,
    currency: str,
    outcome: Outcome,
    now: datetime,
) -> bool:
    """Record `outcome` as the session's, at `now`, unless it has one already (the first stays):
    True when recorded. Run it in the transaction that applies the event it comes from."""
    inserted = await conn.fetchval(
        """INSERT INTO routing_outcomes
               (application_id, provider_name, payment_method, currency, outcome, session_id, recorded_at)
           VALUES ($1, $2, $3, $4, $5, $6, $7)
           ON CONFLICT (session_id) DO NOTHING RETURNING 1""",
        application_id,
        provider,
        payment_method,
        currency,
        outcome,
        session_id,
        now,
    )
    return inserted is not None


class SegmentOutcomes(NamedTuple):
    """The newest outcomes of one provider for one payment method and currency: their `Outcome`
    codes, newest first (`engine.routing.success_rates.SegmentFigures` holds the same)."""

    provider: str
    payment_method: str
    currency: str
    outcomes: str


# Each segment of the application, found by skipping from one to the next through the index (one
# probe per segment, not a read of every outcome), then its newest `$2` outcomes, newest first, by a
# backward scan of the same index. So the cost is the segments times the window, however long the
# history: a `row_number()` over the application's outcomes would read all of them at every refresh.
_SEGMENTS = """
    WITH RECURSIVE segments AS (
        (SELECT provider_name, payment_method, currency FROM routing_outcomes
         WHERE application_id = $1
         ORDER BY provider_name, payment_method, currency LIMIT 1)
        UNION ALL
        SELECT next.provider_name, next.payment_method, next.currency
        FROM segments s CROSS JOIN LATERAL (
            SELECT provider_name, payment_method, currency FROM routing_outcomes o
            WHERE o.application_id = $1
              AND (o.provider_name, o.payment_method, o.currency)
                  > (s.provider_name, s.payment_method, s.currency)
            ORDER BY provider_name, payment_method, currency LIMIT 1) next
    )
    SELECT s.provider_name, s.payment_method, s.currency, window_.outcomes
    FROM segments s CROSS JOIN LATERAL (
        SELECT string_agg(newest.outcome, '' ORDER BY newest.seq DESC) AS outcomes
        FROM (SELECT outcome, seq FROM routing_outcomes o
              WHERE o.application_id = $1 AND o.provider_name = s.provider_name
                AND o.payment_method = s.payment_method AND o.currency = s.currency
              ORDER BY o.seq DESC LIMIT $2) newest) window_
    ORDER BY s.provider_name, s.payment_method, s.currency"""


@on_database_thread
async def segment_outcomes(conn: Connection, application_id: uuid.UUID, window: int) -> list[SegmentOutcomes]:
    """Every segment (provider, payment method, currency) of the application with an outcome, each
    with its newest `window` outcomes, newest first."""
    rows = await conn.fetch(_SEGMENTS, application_id, window)
    return [SegmentOutcomes(*row.values()) for row in rows]
