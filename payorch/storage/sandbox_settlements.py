"""The sandbox's settlements, read from its own tables (`sandbox_checkouts`, `sandbox_refunds`): its
paid checkouts and succeeded refunds of an account, in the order they settle, a batch at a time
(keyset pages, so a reader's memory follows a batch, however long the period)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal

from payorch.storage.database import Connection
from payorch.storage.database_thread import on_database_thread


@dataclass(frozen=True)
class SandboxMovement:
    """A paid checkout (`refund_id` None) or a succeeded refund of one, as the sandbox settles it."""

    checkout_id: str
    refund_id: str | None
    amount_minor: int  # as paid or refunded: positive
    currency: str
    payment_method: str
    moved_at: datetime  # the payment's `paid_at`, the refund's `completes_at`
    settlement_quirk: str | None  # the payment's (migration 0029); None for a refund


@on_database_thread
async def paid_checkouts(
    conn: Connection,
    account: str,
    since: datetime,
    until: datetime,
    after: tuple[datetime, str] | None,
    batch: int,
) -> list[SandboxMovement]:
    """Up to `batch` of the account's checkouts paid in [`since`, `until`) that settle (all but the
    `unsettled` test data), in (`paid_at`, id) order, after the key `after` (the last one of the
    previous batch)."""
    after_at, after_id = after if after is not None else (since, "")
    rows = await conn.fetch(
        """SELECT id, amount_minor, currency, payment_method, paid_at, settlement_quirk
           FROM sandbox_checkouts
           WHERE account = $1 AND status = 'paid' AND paid_at >= $2 AND paid_at < $3
             AND settlement_quirk IS DISTINCT FROM 'unsettled'
             AND (paid_at, id) > ($4, $5)
           ORDER BY paid_at, id LIMIT $6""",
        account,
        since,
        until,
        after_at,
        after_id,
        batch,
    )
    return [
        SandboxMovement(
            checkout_id=row["id"],
            refund_id=None,
            amount_minor=row["amount_minor"],
            currency=row["currency"],
            payment_method=row["payment_method"],
            moved_at=row["paid_at"],
            settlement_quirk=row["settlement_quirk"],
        )
        for row in rows
    ]


@on_database_thread
async def succeeded_refunds(
    conn: Connection,
    account: str,
    since: datetime,
    until: datetime,
    after: tuple[datetime, str] | None,
    batch: int,
) -> list[SandboxMovement]:
    """Up to `batch` of the account's succeeded refunds completing in [`since`, `until`), in
    (`completes_at`, id) order, after the key `after`."""
    after_at, after_id = after if after is not None else (since, "")
    rows = await conn.fetch(
        """SELECT r.id, r.checkout_id, r.amount_minor, r.currency, c.payment_method, r.completes_at
           FROM sandbox_refunds r JOIN sandbox_checkouts c ON c.id = r.checkout_id
           WHERE r.account = $1 AND r.outcome = 'succeeded' AND r.completes_at >= $2 AND r.completes_at < $3
             AND (r.completes_at, r.id) > ($4, $5)
           ORDER BY r.completes_at, r.id LIMIT $6""",
        account,
        since,
        until,
        after_at,
        after_id,
        batch,
    )
    return [
        SandboxMovement(
            checkout_id=row["checkout_id"],
            refund_id=row["id"],
            amount_minor=row["amount_minor"],
            currency=row["currency"],
            payment_method=row["payment_method"],
            moved_at=row["completes_at"],
            settlement_quirk=None,
        )
        for row in rows
    ]


@on_database_thread
async def set_settlement_quirk(conn: Connection, checkout_id: str, quirk: str) -> None:
    """Mark a paid checkout to settle otherwise than it was paid (migration 0029 lists the quirks)."""
    await conn.execute("UPDATE sandbox_checkouts SET settlement_quirk = $2 WHERE id = $1", checkout_id, quirk)


@dataclass(frozen=True)
class PayoutSum:
    """What the sandbox pays out to an account on one settlement day in one currency."""

    settled_on: date
    currency: str
    amount_minor: int


@on_database_thread
async def payout_sums(
    conn: Connection,
    account: str,
    since: datetime,
    until: datetime,
    lag_days: int,
    fees: dict[str, tuple[Decimal, int]],
    short: str,
    payout_short: str,
) -> list[PayoutSum]:
    """The nets of the account's movements in [`since`, `until`) (those `paid_checkouts` and
    `succeeded_refunds` read) summed per settlement day (the movement's UTC day + `lag_days`) and
    currency, as the sandbox settles them: a payment's gross less 1% (at least one minor unit) when
    its quirk is `short`, less its method's fee (`fees`: percent, fixed minor units; rounded half
    up, never more than the gross), less one minor unit when its quirk is `payout_short`; a refund
    its amount, negative. In PostgreSQL, in one statement: a few rows come back, not the period."""
    methods = list(fees)
    rows = await conn.fetch(
        """WITH payments AS (
             SELECT (c.paid_at AT TIME ZONE 'UTC')::date + $4::int AS settled_on, c.currency,
                    c.amount_minor - CASE WHEN c.settlement_quirk = $8 THEN greatest(1, c.amount_minor / 100)
                                          ELSE 0 END AS gross,
                    f.percent, f.fixed, c.settlement_quirk
             FROM sandbox_checkouts c
             LEFT JOIN unnest($5::text[], $6::numeric[], $7::bigint[]) AS f(method, percent, fixed)
               ON f.method = c.payment_method
             WHERE c.account = $1 AND c.status = 'paid' AND c.paid_at >= $2 AND c.paid_at < $3
               AND c.settlement_quirk IS DISTINCT FROM 'unsettled'
           ), nets AS (
             SELECT settled_on, currency,
                    gross - coalesce(least(gross, round(gross * percent / 100)::bigint + fixed), 0)
                      - CASE WHEN settlement_quirk = $9 THEN 1 ELSE 0 END AS net
             FROM payments
             UNION ALL
             SELECT (r.completes_at AT TIME ZONE 'UTC')::date + $4::int, r.currency, -r.amount_minor
             FROM sandbox_refunds r JOIN sandbox_checkouts c ON c.id = r.checkout_id
             WHERE r.account = $1 AND r.outcome = 'succeeded' AND r.completes_at >= $2 AND r.completes_at < $3
           )
           SELECT settled_on, currency, sum(net)::bigint AS amount_minor
           FROM nets GROUP BY settled_on, currency ORDER BY settled_on, currency""",
        account,
        since,
        until,
        lag_days,
        methods,
        [fees[m][0] for m in methods],
        [fees[m][1] for m in methods],
        short,
        payout_short,
    )
    return [PayoutSum(row["settled_on"], row["currency"], row["amount_minor"]) for row in rows]
