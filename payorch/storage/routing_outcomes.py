"""Routing outcomes: each payment attempt's outcome at its own provider, one per attempt (migrations
0017, 0024 and 0026; docs/routing.md, "One outcome"), what learned routing reads its success rates
from (`engine.routing.success_rates`).

An attempt's outcome is its final one, whatever the order its verdicts are applied in: paid at any
time, a success; else declined at any time, a failure; else (it ended with no verdict: a cancel,
an expiry) an abandonment. Recording keeps the highest of what it held and what it is given
(`OUTCOME_PRECEDENCE`), so the same verdicts in any order leave the same row. A segment's outcomes
are read in the order their sessions were created, not the order they arrived in."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import NamedTuple

from payorch.storage.database import Connection
from payorch.storage.database_thread import on_database_thread
from payorch.storage.enumerated_columns import sql_literal
from payorch.values.statuses import Outcome


class AttemptOutcome(NamedTuple):
    """An attempt's outcome as it stands after `record_outcome`."""

    number: int  # the attempt's, in its session: 1 for the attempt the session was created with
    outcome: Outcome
    written: bool  # this call recorded it, or changed a decline into a payment


# An attempt's outcome is the highest verdict it was ever given, in this order: a payment is final
# (the customer paid, whatever was said before or after), a decline says more than no verdict.
OUTCOME_PRECEDENCE = (Outcome.ABANDONMENT, Outcome.FAILURE, Outcome.SUCCESS)


def _rank(column: str) -> str:
    cases = " ".join(f"WHEN {sql_literal(o)} THEN {rank}" for rank, o in enumerate(OUTCOME_PRECEDENCE))
    return f"(CASE {column} {cases} END)"


# $6 the session, $8 the attempt's number (NULL: the session's open attempt, one after its last
# ended one). An attempt has one row, holding the highest outcome it was given
# (`OUTCOME_PRECEDENCE`), and its session's creation time, by which a segment's window is ordered.
# The statement answers the row as it stands, written or not (the CTE's snapshot holds the row it
# did not change).
_RECORD = f"""
    WITH attempt AS (
        SELECT coalesce($8::integer,
                        (SELECT coalesce(max(number), 0) + 1 FROM payment_attempts WHERE session_id = $6))
               AS number,
               (SELECT created_at FROM checkout_sessions WHERE id = $6) AS session_created_at
    ), written AS (
        INSERT INTO routing_outcomes (application_id, provider_name, payment_method, currency, outcome,
                                      session_id, attempt_number, recorded_at, session_created_at)
        SELECT $1, $2, $3, $4, $5, $6, attempt.number, $7, attempt.session_created_at FROM attempt
        ON CONFLICT (session_id, attempt_number) DO UPDATE
            SET outcome = excluded.outcome, recorded_at = excluded.recorded_at
            WHERE {_rank("excluded.outcome")} > {_rank("routing_outcomes.outcome")}
        RETURNING attempt_number, outcome
    )
    SELECT attempt_number, outcome, true FROM written
    UNION ALL
    SELECT o.attempt_number, o.outcome, false FROM routing_outcomes o JOIN attempt
        ON o.session_id = $6 AND o.attempt_number = attempt.number
    WHERE NOT EXISTS (SELECT 1 FROM written)"""


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
    attempt_number: int | None = None,
) -> AttemptOutcome:
    """Record `outcome` at `now` as a verdict of the session's attempt `attempt_number` (None: the
    attempt now open) at `provider`: the attempt's outcome becomes the higher of the one it had and
    `outcome` (`OUTCOME_PRECEDENCE`), so the order verdicts arrive in never matters. Answers the
    attempt's outcome as it now stands. Run it in the transaction that applies the verdict, under
    the session's row lock."""
    row = await conn.fetchrow(
        _RECORD,
        application_id,
        provider,
        payment_method,
        currency,
        outcome,
        session_id,
        now,
        attempt_number,
    )
    assert row is not None  # the row is written, or was there
    return AttemptOutcome(row[0], Outcome(row[1]), row[2])


class SegmentOutcomes(NamedTuple):
    """The newest outcomes of one provider for one payment method and currency: their `Outcome`
    codes, newest first (`engine.routing.success_rates.SegmentFigures` holds the same)."""

    provider: str
    payment_method: str
    currency: str
    outcomes: str


# Each segment of the application, found by skipping from one to the next through the index (one
# probe per segment, not a read of every outcome), then the outcomes of its `$2` newest sessions
# (by creation, however late an outcome arrived), newest first, by a backward scan of the same
# index. So the cost is the segments times the window, however long the history: a `row_number()`
# over the application's outcomes would read all of them at every refresh.
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
        SELECT string_agg(newest.outcome, '' ORDER BY newest.session_created_at DESC, newest.seq DESC)
               AS outcomes
        FROM (SELECT outcome, session_created_at, seq FROM routing_outcomes o
              WHERE o.application_id = $1 AND o.provider_name = s.provider_name
                AND o.payment_method = s.payment_method AND o.currency = s.currency
              ORDER BY o.session_created_at DESC, o.seq DESC LIMIT $2) newest) window_
    ORDER BY s.provider_name, s.payment_method, s.currency"""


@on_database_thread
async def segment_outcomes(conn: Connection, application_id: uuid.UUID, window: int) -> list[SegmentOutcomes]:
    """Every segment (provider, payment method, currency) of the application with an outcome, each
    with the outcomes of its newest `window` attempts by session creation, newest first."""
    rows = await conn.fetch(_SEGMENTS, application_id, window)
    return [SegmentOutcomes(*row.values()) for row in rows]
