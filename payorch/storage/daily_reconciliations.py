"""Daily reconciliation's claims: which process starts a linked account's run of a settled day.

A row per (application, provider, day). A claim inserts it, or takes it again once its `next_try_at`
has passed and no run of it is running or completed (its run failed, or none could start): one
statement, so of several processes on one database only one starts a given day's run of an account.
Each claim puts `next_try_at` a pause further, doubling per try, so a provider that fails backs off
that account alone."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import date, datetime

from payorch.storage.database import Connection
from payorch.storage.database_thread import on_database_thread
from payorch.values.reconciliation import RunState


@dataclass(frozen=True)
class Claim:
    application_id: uuid.UUID
    provider: str
    day: date
    tries: int


def _claimable_again(row: str) -> str:
    """Whether the day's row `row` may be claimed again: its pause is over, and its run, if any,
    failed."""
    return f"""{row}.next_try_at <= $3
          AND NOT EXISTS (SELECT 1 FROM reconciliation_runs r
                          WHERE r.id = {row}.run_id AND r.state <> '{RunState.FAILED}')"""


# Only the accounts without a row for the day, or whose row may be claimed again, are proposed, so a
# round with nothing due writes and locks nothing; the conflict's condition checks again under the
# row's lock, for another process claiming at the same moment.
_CLAIM = f"""
    INSERT INTO daily_reconciliations AS d (application_id, provider, day, tries, next_try_at)
    SELECT c.application_id, c.provider, $2, 1, $3::timestamptz + make_interval(secs => $4)
    FROM provider_configs c
    LEFT JOIN daily_reconciliations known
        ON known.application_id = c.application_id AND known.provider = c.provider AND known.day = $2
    WHERE c.provider = $1 AND c.is_active AND c.webhook_secret IS NOT NULL
      AND (known.application_id IS NULL OR ({_claimable_again("known")}))
    ON CONFLICT (application_id, provider, day) DO UPDATE
        SET tries = d.tries + 1,
            next_try_at = $3::timestamptz
                + make_interval(secs => least($4 * power(2, d.tries), $5)),
            run_id = NULL
        WHERE {_claimable_again("d")}
    RETURNING d.application_id, d.provider, d.day, d.tries"""


@on_database_thread
async def claim_day(
    conn: Connection,
    provider: str,
    day: date,
    *,
    now: datetime,
    first_pause_s: float,
    longest_pause_s: float,
) -> list[Claim]:
    """Claim `day` for each active account at `provider` that is due (see the module docstring)."""
    rows = await conn.fetch(_CLAIM, provider, day, now, first_pause_s, longest_pause_s)
    return [Claim(**dict(row.items())) for row in rows]


@on_database_thread
async def set_run(conn: Connection, claim: Claim, run_id: uuid.UUID) -> None:
    """Name the run a claim started."""
    await conn.execute(
        """UPDATE daily_reconciliations SET run_id = $4
           WHERE application_id = $1 AND provider = $2 AND day = $3""",
        claim.application_id,
        claim.provider,
        claim.day,
        run_id,
    )
