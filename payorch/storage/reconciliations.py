"""Reconciliation's rows (migration 0029): runs, their items and payouts, written as a run goes and
read for the API (a run's counts, totals and payouts; its items a page or a batch at a time). What
payorch recorded, which a run matches against, is read in `reconciliation_sources`.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime

import asyncpg

from payorch.storage.array_types import know_array_types
from payorch.storage.database import Connection
from payorch.storage.database_thread import on_database_thread
from payorch.storage.pages import read_page
from payorch.values.pagination import PageRequest
from payorch.values.reconciliation import ItemOutcome, RunState

_RUNNING = f"'{RunState.RUNNING}'"


@dataclass(frozen=True)
class Run:
    id: uuid.UUID
    application_id: uuid.UUID
    provider: str
    first_day: date
    last_day: date
    state: RunState
    error: str | None
    repaired: int
    created_at: datetime
    finished_at: datetime | None


@dataclass(frozen=True)
class StoredItem:
    seq: int
    outcome: ItemOutcome
    kind: str
    item_id: str | None
    currency: str
    gross_minor: int | None
    fee_minor: int | None
    net_minor: int | None
    recorded_minor: int | None
    settled_on: date | None
    payment_reference: str | None
    refund_reference: str | None
    payout_id: str | None
    method: str | None
    session_id: uuid.UUID | None
    refund_id: uuid.UUID | None
    repaired: bool


# The columns of an item as `insert_items` takes them, in order (`seq` first).
ITEM_COLUMNS = (
    "seq, outcome, kind, item_id, currency, gross_minor, fee_minor, net_minor, recorded_minor, settled_on, "
    "payment_reference, refund_reference, payout_id, method, session_id, refund_id"
)
_ITEM_TYPES = (
    "int[], text[], text[], text[], text[], bigint[], bigint[], bigint[], bigint[], date[], "
    "text[], text[], text[], text[], uuid[], uuid[]"
)


@dataclass(frozen=True)
class Totals:
    currency: str
    items: int
    gross_minor: int
    fee_minor: int
    net_minor: int


@dataclass(frozen=True)
class PayoutCheck:
    payout_id: str
    currency: str
    amount_minor: int
    items_minor: int
    arrives_on: date
    reported_as: str


_RUN_COLUMNS = (
    "id, application_id, provider, first_day, last_day, state, error, repaired, created_at, finished_at"
)


def _run(row: asyncpg.Record) -> Run:
    return Run(**{**dict(row), "state": RunState(row["state"])})


def _item(row: asyncpg.Record) -> StoredItem:
    return StoredItem(**{**dict(row), "outcome": ItemOutcome(row["outcome"])})


# Runs


@on_database_thread
async def start_run(
    conn: Connection,
    run_id: uuid.UUID,
    application_id: uuid.UUID,
    provider: str,
    first: date,
    last: date,
    *,
    now: datetime,
    abandoned_before: datetime,
) -> Run | None:
    """A new RUNNING run; None while the application's account at `provider` has one running. A
    run RUNNING since before `abandoned_before` (its process died) is ended FAILED first."""
    await conn.execute(
        f"""UPDATE reconciliation_runs SET state = '{RunState.FAILED}', finished_at = $4,
                   error = 'abandoned: the process running it stopped'
            WHERE application_id = $1 AND provider = $2 AND state = {_RUNNING} AND created_at < $3""",
        application_id,
        provider,
        abandoned_before,
        now,
    )
    row = await conn.fetchrow(
        f"""INSERT INTO reconciliation_runs
                (id, application_id, provider, first_day, last_day, state, created_at)
            VALUES ($1, $2, $3, $4, $5, {_RUNNING}, $6)
            ON CONFLICT (application_id, provider) WHERE state = {_RUNNING} DO NOTHING
            RETURNING {_RUN_COLUMNS}""",
        run_id,
        application_id,
        provider,
        first,
        last,
        now,
    )
    return _run(row) if row is not None else None


@on_database_thread
async def finish_run(
    conn: Connection, run_id: uuid.UUID, state: RunState, *, error: str | None, repaired: int, now: datetime
) -> None:
    await conn.execute(
        """UPDATE reconciliation_runs SET state = $2, error = $3, repaired = $4, finished_at = $5
           WHERE id = $1""",
        run_id,
        state.value,
        error,
        repaired,
        now,
    )


@on_database_thread
async def get_run(conn: Connection, application_id: uuid.UUID, run_id: uuid.UUID) -> Run | None:
    row = await conn.fetchrow(
        f"SELECT {_RUN_COLUMNS} FROM reconciliation_runs WHERE id = $1 AND application_id = $2",
        run_id,
        application_id,
    )
    return _run(row) if row is not None else None


@on_database_thread
async def list_runs(conn: Connection, application_id: uuid.UUID, page: PageRequest) -> tuple[list[Run], int]:
    """A page of the application's runs, newest first."""
    return await read_page(
        conn,
        page,
        columns=_RUN_COLUMNS,
        rows_from="reconciliation_runs WHERE application_id = $1",
        args=[application_id],
        order_by="created_at DESC, id DESC",
        item=_run,
    )


# Items and payouts


@on_database_thread
async def prepare_run_connection(conn: Connection) -> int:
    """Ready a run's own connection (outside the pool) for its statements, as the pool readies its
    own (the array types known without a catalog lookup); answers its backend's process id."""
    await know_array_types(conn)
    pid: int = conn.get_server_pid()
    return pid


@on_database_thread
async def insert_items(conn: Connection, run_id: uuid.UUID, rows: Sequence[tuple[object, ...]]) -> None:
    """Store a batch of the run's items, each a tuple of `ITEM_COLUMNS`' values, in one statement."""
    if not rows:
        return
    columns = list(zip(*rows, strict=True))
    placeholders = ", ".join(f"${n + 2}::{kind.strip()}" for n, kind in enumerate(_ITEM_TYPES.split(",")))
    await conn.execute(
        f"INSERT INTO reconciliation_items (run_id, {ITEM_COLUMNS}) SELECT $1, * FROM unnest({placeholders})",
        run_id,
        *[list(column) for column in columns],
    )


@on_database_thread
async def mark_repaired(conn: Connection, run_id: uuid.UUID, seq: int) -> None:
    await conn.execute(
        "UPDATE reconciliation_items SET repaired = true WHERE run_id = $1 AND seq = $2", run_id, seq
    )


@on_database_thread
async def insert_payout(
    conn: Connection,
    run_id: uuid.UUID,
    *,
    payout_id: str,
    currency: str,
    amount_minor: int,
    arrives_on: date,
    reported_as: str,
    items_minor: int | None = None,
) -> None:
    """Store a payout with the nets of the items it carried: `items_minor` when the provider listed
    them, else the sum of the run's items that name the payout."""
    await conn.execute(
        """INSERT INTO reconciliation_payouts
               (run_id, payout_id, currency, amount_minor, items_minor, arrives_on, reported_as)
           SELECT $1, $2, $3, $4, coalesce($7::bigint, sum(net_minor), 0), $5, $6
           FROM reconciliation_items WHERE run_id = $1 AND payout_id = $2
           ON CONFLICT (run_id, payout_id) DO NOTHING""",
        run_id,
        payout_id,
        currency,
        amount_minor,
        arrives_on,
        reported_as,
        items_minor,
    )


# Reading a run


@dataclass(frozen=True)
class RunSummary:
    counts: dict[ItemOutcome, int]
    totals: list[Totals]
    payouts: list[PayoutCheck]


@on_database_thread
async def summary(conn: Connection, run_id: uuid.UUID) -> RunSummary:
    """How many items of each outcome, the settled totals per currency, and the payouts. The items
    are read once (grouped by outcome and currency together), not once for the counts and again for
    the totals: a run's `GET`, polled while it runs, scans up to the period's items."""
    counts: dict[ItemOutcome, int] = {}
    by_currency: dict[str, list[int]] = {}
    for row in await conn.fetch(
        """SELECT outcome, currency, count(*) AS items, coalesce(sum(gross_minor), 0)::bigint AS gross,
                  coalesce(sum(fee_minor), 0)::bigint AS fee, coalesce(sum(net_minor), 0)::bigint AS net
           FROM reconciliation_items WHERE run_id = $1 GROUP BY outcome, currency""",
        run_id,
    ):
        outcome = ItemOutcome(row["outcome"])
        counts[outcome] = counts.get(outcome, 0) + row["items"]
        sums = by_currency.setdefault(row["currency"].strip(), [0, 0, 0, 0])
        for n, column in enumerate(("items", "gross", "fee", "net")):
            sums[n] += row[column]
    totals = [Totals(currency, *by_currency[currency]) for currency in sorted(by_currency)]
    payouts = [
        PayoutCheck(
            row["payout_id"],
            row["currency"].strip(),
            row["amount_minor"],
            row["items_minor"],
            row["arrives_on"],
            row["reported_as"],
        )
        for row in await conn.fetch(
            """SELECT payout_id, currency, amount_minor, items_minor, arrives_on, reported_as
               FROM reconciliation_payouts WHERE run_id = $1 ORDER BY arrives_on, payout_id""",
            run_id,
        )
    ]
    return RunSummary(counts, totals, payouts)


@on_database_thread
async def list_items(
    conn: Connection, run_id: uuid.UUID, page: PageRequest, outcome: ItemOutcome | None
) -> tuple[list[StoredItem], int]:
    """A page of the run's items in the order the run stored them, of one `outcome` if given."""
    where, args = "reconciliation_items WHERE run_id = $1", list[object]([run_id])
    if outcome is not None:
        where, args = where + " AND outcome = $2", [run_id, outcome.value]
    return await read_page(
        conn,
        page,
        columns=ITEM_COLUMNS + ", repaired",
        rows_from=where,
        args=args,
        order_by="seq",
        item=_item,
    )


@on_database_thread
async def items_after(
    conn: Connection, run_id: uuid.UUID, after_seq: int, outcome: ItemOutcome | None, batch: int
) -> list[StoredItem]:
    """Up to `batch` of the run's items after `after_seq`, in order (for the CSV, a batch at a time)."""
    rows = await conn.fetch(
        f"""SELECT {ITEM_COLUMNS}, repaired FROM reconciliation_items
            WHERE run_id = $1 AND seq > $2 AND ($3::text IS NULL OR outcome = $3)
            ORDER BY seq LIMIT $4""",
        run_id,
        after_seq,
        outcome.value if outcome is not None else None,
        batch,
    )
    return [_item(row) for row in rows]
