"""The figures a merchant looks at (docs/console.md, "Figures per day"): per UTC day, application,
provider and currency, the sessions created, approved (and their amount), the declines and the
completed refunds (and their amount), kept as counters by the transactions that write those
outcomes (`storage.daily_counters`), so a chart reads a few rows per day instead of the sessions.

Each (application, day, provider, currency) is spread over `SHARDS` rows, summed when read: a
transaction adds to one of them only, so concurrent creates and outcomes of one application rarely
wait on one another's row lock.

The backfill counts what the rows already stored say of the last 30 UTC days (today included, by
the database's clock: it runs once, before any node serves), in shard 0: sessions by their
creation; approvals by the first payment of each paid session (`routing_outcomes`); declines as
one per declined attempt (history keeps each attempt's final outcome only, so an attempt declined
and then paid counts as paid alone); completed refunds by the time of their verdict, a duplicate
payment's refund left out as the live count leaves it out.
"""

from __future__ import annotations

from payorch.storage.enumerated_columns import sql_literal
from payorch.values.statuses import Outcome, RefundStatus, SessionStatus

_PAID = ", ".join(
    sql_literal(status)
    for status in (
        SessionStatus.SUCCEEDED,
        SessionStatus.PARTIALLY_REFUNDED,
        SessionStatus.REFUNDED,
        SessionStatus.REVERSED,
    )
)
_KEY = "application_id, day, provider_name, currency, shard"


def sql() -> str:
    since = "((now() AT TIME ZONE 'UTC')::date - 29)"
    return f"""
CREATE TABLE daily_counters (
    application_id    uuid NOT NULL REFERENCES applications (id),
    day               date NOT NULL,
    provider_name     text NOT NULL,
    currency          char(3) NOT NULL,
    shard             smallint NOT NULL,
    sessions_created  bigint NOT NULL DEFAULT 0,
    sessions_approved bigint NOT NULL DEFAULT 0,
    approved_minor    bigint NOT NULL DEFAULT 0,
    declines          bigint NOT NULL DEFAULT 0,
    refunds           bigint NOT NULL DEFAULT 0,
    refunded_minor    bigint NOT NULL DEFAULT 0,
    PRIMARY KEY ({_KEY})
);

INSERT INTO daily_counters ({_KEY}, sessions_created)
SELECT application_id, (created_at AT TIME ZONE 'UTC')::date, provider_name, currency, 0, count(*)
FROM checkout_sessions
WHERE created_at >= {since} AND provider_name IS NOT NULL
GROUP BY 1, 2, 3, 4;

INSERT INTO daily_counters AS c ({_KEY}, sessions_approved, approved_minor)
SELECT paid.application_id, paid.day, paid.provider_name, paid.currency, 0, count(*), sum(paid.amount_minor)
FROM (
    SELECT DISTINCT ON (o.session_id) o.application_id, (o.recorded_at AT TIME ZONE 'UTC')::date AS day,
           o.provider_name, s.currency, s.amount_minor
    FROM routing_outcomes o JOIN checkout_sessions s ON s.id = o.session_id
    WHERE o.outcome = {sql_literal(Outcome.SUCCESS)} AND s.status IN ({_PAID})
    ORDER BY o.session_id, o.recorded_at, o.attempt_number
) paid
WHERE paid.day >= {since}
GROUP BY 1, 2, 3, 4
ON CONFLICT ({_KEY}) DO UPDATE
    SET sessions_approved = excluded.sessions_approved, approved_minor = excluded.approved_minor;

INSERT INTO daily_counters AS c ({_KEY}, declines)
SELECT application_id, (recorded_at AT TIME ZONE 'UTC')::date, provider_name, currency, 0, count(*)
FROM routing_outcomes
WHERE outcome = {sql_literal(Outcome.FAILURE)} AND recorded_at >= {since}
GROUP BY 1, 2, 3, 4
ON CONFLICT ({_KEY}) DO UPDATE SET declines = excluded.declines;

INSERT INTO daily_counters AS c ({_KEY}, refunds, refunded_minor)
SELECT application_id, (updated_at AT TIME ZONE 'UTC')::date, provider_name, currency, 0, count(*),
       sum(amount_minor)
FROM refunds
WHERE status = {sql_literal(RefundStatus.COMPLETED)} AND updated_at >= {since}
  AND NOT EXISTS (SELECT 1 FROM payment_attempts p WHERE p.refund_id = refunds.id)
GROUP BY 1, 2, 3, 4
ON CONFLICT ({_KEY}) DO UPDATE SET refunds = excluded.refunds, refunded_minor = excluded.refunded_minor;
"""
