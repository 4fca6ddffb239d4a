"""Taking over the claims of nodes that are gone (`storage.nodes`): webhook deliveries, sandbox
event deliveries and refund submissions claimed by a process that died are due again at once,
instead of when their leases end. (Idempotency-Key claims and provider configuration changes are
taken over by the request that meets them: see `storage.idempotency_keys` and `storage.provider_configs`.)

Two statements, so that nothing a live node claims can be released: the first names the owners of
claims it sees that are not alive while it runs; a node holds its lock before it claims anything,
so every owner it names is dead, and node ids are never reused, so it stays dead. The second
releases exactly their claims.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from payorch.storage.database import Connection
from payorch.storage.database_thread import on_database_thread
from payorch.storage.nodes import LIVE_NODES
from payorch.values.statuses import DeliveryStatus, RefundStatus


@dataclass(frozen=True)
class Released:
    """How many claims of gone nodes were released, by kind."""

    webhook_deliveries: int
    sandbox_deliveries: int
    refund_submissions: int


@on_database_thread
async def gone_claim_owners(conn: Connection) -> list[int]:
    """The nodes that still name claims (of deliveries or refund submissions) and are gone."""
    owners = await conn.fetchval(
        f"""SELECT coalesce(array_agg(owner ORDER BY owner), '{{}}') FROM (
                SELECT claimed_by AS owner FROM webhook_deliveries WHERE claimed_by IS NOT NULL
                UNION SELECT claimed_by FROM sandbox_deliveries WHERE claimed_by IS NOT NULL
                UNION SELECT submit_claimed_by FROM refunds WHERE submit_claimed_by IS NOT NULL) claims
            WHERE owner <> ALL({LIVE_NODES})"""
    )
    return list(owners)


_RELEASE_CLAIMS_OF = f"""
    WITH webhooks AS (
        UPDATE webhook_deliveries
           SET claimed_by = NULL, claimed_until = NULL,
               next_attempt_at = CASE WHEN status = '{DeliveryStatus.PENDING}' THEN $2
                                      ELSE next_attempt_at END
         WHERE claimed_by = ANY($1::integer[]) RETURNING 1),
    sandbox AS (
        UPDATE sandbox_deliveries
           SET claimed_by = NULL,
               deliver_at = CASE WHEN delivered_at IS NULL AND given_up_at IS NULL THEN $2 ELSE deliver_at END
         WHERE claimed_by = ANY($1::integer[]) RETURNING 1),
    submissions AS (
        UPDATE refunds
           SET submit_claimed_by = NULL,
               next_submit_at = CASE WHEN provider_reference IS NULL AND status = '{RefundStatus.PENDING}'
                                     THEN $2 ELSE next_submit_at END
         WHERE submit_claimed_by = ANY($1::integer[]) RETURNING 1)
    SELECT (SELECT count(*) FROM webhooks) AS webhook_deliveries,
           (SELECT count(*) FROM sandbox) AS sandbox_deliveries,
           (SELECT count(*) FROM submissions) AS refund_submissions"""


@on_database_thread
async def release_claims_of(conn: Connection, owners: list[int], *, now: datetime) -> Released:
    """End every claim of `owners` (gone nodes): what is still to do is due now. A webhook
    delivery's attempt stays counted, as when a lease ends: its request may have been sent."""
    row = await conn.fetchrow(_RELEASE_CLAIMS_OF, owners, now)
    return Released(
        webhook_deliveries=row["webhook_deliveries"],
        sandbox_deliveries=row["sandbox_deliveries"],
        refund_submissions=row["refund_submissions"],
    )
