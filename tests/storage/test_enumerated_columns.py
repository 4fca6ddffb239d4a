"""The database keeps every status and failure-reason column to its enumeration (`values.statuses`):
its CHECK constraint, written from the enumeration by migration 0014, accepts exactly the
enumeration's values and refuses anything else."""

from __future__ import annotations

import re
import uuid
from typing import Any

import asyncpg
import pytest

from payorch.storage.database import Connection, Database
from payorch.storage.enumerated_columns import ENUMERATED_COLUMNS, EnumeratedColumn, sql_literal
from payorch.values import statuses
from payorch.values.statuses import AttemptStatus, DeliveryStatus, RefundStatus, SessionStatus

COLUMN_NAMES = [f"{column.table}.{column.column}" for column in ENUMERATED_COLUMNS]
# A text column with one of these names holds a status, a failure reason, a routing reason or an
# outcome.
_STATUS_LIKE = re.compile(r"(.*_)?status|(.*_)?failure_reason|routing_reason|outcome")
# The enumerated columns a row may leave empty.
_NULLABLE = {"failure_reason", "routing_reason", "last_test_status"}


async def _one_row_each(conn: Connection) -> dict[str, Any]:
    """A row of every table with an enumerated column (and what they need), by table."""
    merchant, application, session, refund, config, delivery = (uuid.uuid4() for _ in range(6))
    await conn.execute(
        """INSERT INTO merchants (id, legal_business_name, company_registration_number, organization)
           VALUES ($1, 'Shop', $2, '{}')""",
        merchant,
        str(merchant),
    )
    await conn.execute(
        "INSERT INTO applications (id, merchant_id, name) VALUES ($1, $2, 'App')", application, merchant
    )
    await conn.execute(
        """INSERT INTO checkout_sessions (id, application_id, order_reference, amount_minor, currency,
                                         status, payment_method, customer)
           VALUES ($1, $2, 'order', 100, 'PLN', $3, 'card', '{}')""",
        session,
        application,
        SessionStatus.SUCCEEDED,
    )
    await conn.execute(
        """INSERT INTO refunds (id, session_id, application_id, amount_minor, currency, status, provider_name)
           VALUES ($1, $2, $3, 100, 'PLN', $4, 'sandbox')""",
        refund,
        session,
        application,
        RefundStatus.PENDING,
    )
    await conn.execute(
        """INSERT INTO webhook_configs (id, application_id, url, subscribed_events, secret, key_fingerprint)
           VALUES ($1, $2, 'https://shop.example/hooks', '{session.completed}', '\\x00', 'sha256:0')""",
        config,
        application,
    )
    seq = await conn.fetchval(
        """INSERT INTO outbox_events (id, application_id, session_id, type, payload)
           VALUES ('evt_1', $1, $2, 'session.completed', '{}') RETURNING seq""",
        application,
        session,
    )
    await conn.execute(
        """INSERT INTO webhook_deliveries (id, config_id, application_id, event_seq, session_id, status)
           VALUES ($1, $2, $3, $4, $5, $6)""",
        delivery,
        config,
        application,
        seq,
        session,
        DeliveryStatus.PENDING,
    )
    outcome = await conn.fetchval(
        """INSERT INTO routing_outcomes (application_id, provider_name, payment_method, currency, outcome,
                                         session_id, recorded_at, session_created_at)
           VALUES ($1, 'sandbox', 'card', 'PLN', 's', $2, now(), now()) RETURNING seq""",
        application,
        session,
    )
    attempt = uuid.uuid4()
    await conn.execute(
        """INSERT INTO payment_attempts (id, session_id, application_id, number, provider_name,
                                         provider_reference, status, created_at, ended_at)
           VALUES ($1, $2, $3, 1, 'sandbox', 'chk_1', $4, now(), now())""",
        attempt,
        session,
        application,
        AttemptStatus.DECLINED,
    )
    run = uuid.uuid4()
    await conn.execute(
        """INSERT INTO reconciliation_runs
               (id, application_id, provider, first_day, last_day, state, created_at)
           VALUES ($1, $2, 'sandbox', current_date, current_date, 'COMPLETED', now())""",
        run,
        application,
    )
    await conn.execute(
        """INSERT INTO reconciliation_items (run_id, seq, outcome, kind, currency)
           VALUES ($1, 1, 'MATCHED', 'PAYMENT', 'PLN')""",
        run,
    )
    return {
        "reconciliation_items": run,
        "checkout_sessions": session,
        "payment_attempts": attempt,
        "refunds": refund,
        "webhook_configs": config,
        "webhook_deliveries": delivery,
        "routing_outcomes": outcome,
    }


async def _set(db: Database, column: EnumeratedColumn, row: Any, value: str | None) -> None:
    async def update(conn: Connection) -> None:
        # The table and column are ENUMERATED_COLUMNS' own names; the value travels as a parameter.
        key = {"routing_outcomes": "seq", "reconciliation_items": "run_id"}.get(column.table, "id")
        statement = f"UPDATE {column.table} SET {column.column} = $1 WHERE {key} = $2"  # noqa: S608
        await conn.execute(statement, value, row)

    await db.transaction(update)


@pytest.mark.parametrize("column", ENUMERATED_COLUMNS, ids=COLUMN_NAMES)
async def test_the_constraint_in_the_database_lists_exactly_the_enumerations_values(
    db: Database, column: EnumeratedColumn
) -> None:
    async def definition(conn: Connection) -> str:
        found: str = await conn.fetchval(
            """SELECT pg_get_constraintdef(oid) FROM pg_constraint
               WHERE conname = $1 AND conrelid = $2::regclass AND contype = 'c'""",
            column.constraint,
            column.table,
        )
        return found

    written = await db.autocommit(definition)
    assert re.findall(r"'([^']*)'::text", written) == [member.value for member in column.enumeration]


@pytest.mark.parametrize("column", ENUMERATED_COLUMNS, ids=COLUMN_NAMES)
async def test_a_column_takes_each_value_of_its_enumeration_and_refuses_another(
    db: Database, column: EnumeratedColumn
) -> None:
    row = (await db.transaction(_one_row_each))[column.table]
    for member in column.enumeration:
        await _set(db, column, row, member)
    for other in ("NOT_A_STATUS", "pending", ""):
        with pytest.raises(asyncpg.CheckViolationError):
            await _set(db, column, row, other)


async def test_a_failure_reason_a_routing_reason_and_a_last_test_status_may_be_null(db: Database) -> None:
    rows = await db.transaction(_one_row_each)
    for column in ENUMERATED_COLUMNS:
        if column.column in _NULLABLE:
            await _set(db, column, rows[column.table], None)


async def test_every_status_and_failure_reason_column_is_enumerated(db: Database) -> None:
    async def text_columns(conn: Connection) -> list[asyncpg.Record]:
        rows: list[asyncpg.Record] = await conn.fetch(
            """SELECT table_name, column_name FROM information_schema.columns
               WHERE table_schema = 'public' AND data_type = 'text' AND table_name NOT LIKE 'sandbox\\_%'"""
        )
        return rows

    found = {
        f"{row['table_name']}.{row['column_name']}"
        for row in await db.autocommit(text_columns)
        if _STATUS_LIKE.fullmatch(row["column_name"])
    }
    assert found == set(COLUMN_NAMES)


def test_every_value_of_every_enumeration_is_its_own_sql_literal() -> None:
    # Statements write the values between single quotes (storage.enumerated_columns): no value may
    # need escaping.
    for enumeration in (
        statuses.SessionStatus,
        statuses.AttemptStatus,
        statuses.RefundStatus,
        statuses.DeliveryStatus,
        statuses.WebhookTestStatus,
        statuses.FailureReason,
        statuses.RoutingReason,
        statuses.Outcome,
    ):
        for member in enumeration:
            assert sql_literal(member) == f"'{member.value}'"
