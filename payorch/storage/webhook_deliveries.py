"""The delivery supervisor's work on webhook deliveries: fan-out of outbox events, claims, attempts.

A claim is a lease held in the database, named by its node: `claimed_until` (and `next_attempt_at`)
move to the end of the lease, `claimed_by` names the node, and the attempt is counted. A process that
dies mid-attempt loses nothing: another node releases its claims as soon as it sees the node gone
(`storage.claim_takeover`), and the lease's end releases them in any case. These rules shape what
is claimed:

- per session, per endpoint, in event order: a delivery is never claimed while an earlier delivery of
  its session to the same configuration is still PENDING;
- a fair share per endpoint: at most `per_endpoint` attempts to one configuration are in flight at
  once, across every process, and each endpoint's oldest due delivery is claimed before any
  endpoint's second one;
- a fair share per merchant: at most `per_merchant` attempts to all the endpoints of one merchant's
  applications are in flight at once, so a merchant cannot take more slots by registering more
  endpoints; nor more of a round's endpoints than it has room for, so a merchant whose many
  endpoints have waited longest cannot fill a round and leave another merchant's out of it.

The configuration rows are locked (`FOR NO KEY UPDATE SKIP LOCKED`) for the claim's transaction, so
two processes never claim for the same endpoint at the same moment and its in-flight count is exact.
Each merchant claimed for is locked too, by a transaction-level advisory lock taken without waiting
(`MERCHANT_CLAIM_LOCK`): a process that finds a merchant being claimed for by another leaves that
merchant's endpoints to its next round, so the per-merchant count, made after the lock is held, sees
every claim made for the merchant and is exact across processes too.

What a claim costs follows what it can claim, never how many deliveries wait (migration 0021): one
index descent per application with a PENDING delivery, one index step per endpoint of a merchant
below its share (at most `limits.webhooks_per_application` per application), and a few steps per
delivery claimed (and per delivery stepped over because an earlier one of its session is still
PENDING: those of the endpoint's own sessions). A merchant's backlog of a million deliveries leaves
everyone's claim as quick as it was without it (docs/webhooks.md shows the plans); the backlog
drains at its merchant's share.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from payorch.storage.database import Connection
from payorch.storage.database_thread import on_database_thread
from payorch.values.statuses import DeliveryStatus

# Each new outbox event (oldest first, those another process is fanning out skipped) gets one
# delivery per active configuration of its application that subscribes to its type (or whose type
# is one of `$4`, which every configuration gets), and is marked fanned out, at `$3` (now). The one row
# of the answer: how many events were fanned out; selecting `set_config` also makes the transaction
# commit without waiting for its WAL to reach the disk (see `fan_out_and_claim`).
_FAN_OUT = f"""WITH events AS (
        SELECT seq, application_id, session_id, type FROM outbox_events
        WHERE fanned_out_at IS NULL ORDER BY seq LIMIT $1 FOR UPDATE SKIP LOCKED),
    deliveries AS (
        INSERT INTO webhook_deliveries (id, config_id, application_id, event_seq, session_id, status,
                                        next_attempt_at)
        SELECT gen_random_uuid(), c.id, c.application_id, e.seq, e.session_id, '{DeliveryStatus.PENDING}',
               $3::timestamptz + make_interval(secs => $2)
        FROM events e JOIN webhook_configs c ON c.application_id = e.application_id
        WHERE c.is_active AND c.deleted_at IS NULL
          AND (e.type = ANY(c.subscribed_events) OR e.type = ANY($4::text[]))
        ORDER BY e.seq
        ON CONFLICT (config_id, event_seq) DO NOTHING),
    marked AS (
        UPDATE outbox_events o SET fanned_out_at = $3 FROM events e WHERE o.seq = e.seq)
    SELECT (SELECT count(*) FROM events), set_config('synchronous_commit', 'off', true)"""


@dataclass(frozen=True)
class ClaimedDelivery:
    id: uuid.UUID
    config_id: uuid.UUID
    application_id: uuid.UUID
    merchant_id: uuid.UUID
    attempts: int  # including this one
    url: str
    secret: bytes
    previous_secret: bytes | None
    previous_secret_expires_at: datetime | None
    key_fingerprint: str
    event_id: str
    payload: dict[str, Any]


# Whether the due delivery `d` may be attempted now: not claimed by an attempt in flight (a claim by
# hand, `retry_delivery`, makes a delivery due without ending a lease), and not preceded by a PENDING
# delivery of its session to the same configuration (one descent of
# `webhook_deliveries_pending_by_session`). `$now` is the statement's parameter holding the time.
_CLAIMABLE = f"""(d.claimed_until IS NULL OR d.claimed_until <= $now)
    AND NOT EXISTS (
        SELECT 1 FROM webhook_deliveries earlier
        WHERE earlier.config_id = d.config_id AND earlier.session_id = d.session_id
          AND earlier.event_seq < d.event_seq AND earlier.status = '{DeliveryStatus.PENDING}')"""

# Every attempt in flight, with the endpoint and merchant it counts against: read from the small
# partial index of claimed deliveries (`webhook_deliveries_in_flight`), so its cost follows the
# attempts in flight (a few slots per process), never the deliveries waiting.
_IN_FLIGHT = f"""in_flight AS (
        SELECT f.config_id, fa.merchant_id FROM webhook_deliveries f
        JOIN applications fa ON fa.id = f.application_id
        WHERE f.claimed_until IS NOT NULL AND f.claimed_until > $now
          AND f.status = '{DeliveryStatus.PENDING}'),
    merchant_in_flight AS (
        SELECT merchant_id, count(*) AS attempts FROM in_flight GROUP BY merchant_id)"""


def _next_due(endpoint: str, after: str = "") -> str:
    """The due delivery of the endpoint `endpoint` that comes next in its order (oldest due first,
    then event order), after the one at `after` (its `next_attempt_at, event_seq`) when given: one
    step of `webhook_deliveries_pending_by_config`, with whether it is claimable."""
    then = f"AND (d.next_attempt_at, d.event_seq) > ({after})" if after else ""
    return f"""SELECT d.id, d.next_attempt_at, d.event_seq, {_CLAIMABLE} AS claimable
        FROM webhook_deliveries d
        WHERE d.config_id = {endpoint} AND d.status = '{DeliveryStatus.PENDING}'
          AND d.next_attempt_at <= $now {then}
        ORDER BY d.next_attempt_at, d.event_seq LIMIT 1"""


def _walk(endpoints: str) -> str:
    """A recursive CTE `walk` that reads each endpoint of `endpoints` (a CTE with `id` and `wanted`)
    one due delivery at a time in order, until it has found `wanted` claimable ones or has no more
    due: its rows are what it read, each with `claimable`. One index step per row read, so an
    endpoint costs what it gives (and the deliveries held back by their session's order that it
    steps over), never its whole backlog; written as steps rather than one ordered scan with a
    filter, which PostgreSQL may plan as reading and sorting every PENDING delivery of the
    endpoint instead (it did, with statistics)."""
    return f"""walk(config_id, id, next_attempt_at, event_seq, claimable, found, wanted) AS (
        SELECT e.id, step.id, step.next_attempt_at, step.event_seq, step.claimable,
               step.claimable::int, e.wanted
        FROM {endpoints} e CROSS JOIN LATERAL ({_next_due("e.id")}) step
        WHERE e.wanted > 0
        UNION ALL
        SELECT w.config_id, step.id, step.next_attempt_at, step.event_seq, step.claimable,
               w.found + step.claimable::int, w.wanted
        FROM walk w CROSS JOIN LATERAL ({_next_due("w.config_id", "w.next_attempt_at, w.event_seq")}) step
        WHERE w.found < w.wanted)"""


# The first key of the advisory lock a claim holds on each merchant it claims for (the second is a
# hash of the merchant's id: two merchants sharing one only take turns): "payw".
MERCHANT_CLAIM_LOCK = 0x70617977


# The attempts each merchant may start this round (`supervisors.attempt_rates`): its allowance where
# the merchants `$<ids>` are given one in `$<tokens>`, `$<default>` for every other merchant.
def _allowances(ids: int, tokens: int) -> str:
    return f"""allowances AS (
        SELECT * FROM unnest(${ids}::uuid[], ${tokens}::int[]) AS t(merchant_id, tokens))"""


def _at(statement: str, parameter: int) -> str:
    """`statement` with its fragments' `$now` as the statement's parameter `$<parameter>`."""
    return statement.replace("$now", f"${parameter}")


# The endpoints to claim for (parameters: $1 limit, $2 per endpoint, $3 per merchant, $4 now, $5 $6
# the merchants' allowances this round, $7 every other merchant's):
# - the applications with a PENDING delivery, by a loose scan of `webhook_deliveries_pending_by_
#   application` (one index descent per application, however deep its backlog);
# - of those, the applications of merchants below their share and with attempts allowed this
#   round (room: the lesser), and their active endpoints below theirs; each endpoint's first
#   claimable delivery (`_walk`) says since when it has waited;
# - per merchant, no more endpoints than it has room for attempts (a merchant with a hundred
#   endpoints waiting since long ago cannot fill the round and leave another merchant's out);
# - the endpoints that have waited longest first, locked (none another process is claiming for).
CLAIM_ENDPOINTS = _at(
    f"""WITH RECURSIVE pending_applications(id) AS (
        (SELECT application_id FROM webhook_deliveries
         WHERE status = '{DeliveryStatus.PENDING}' ORDER BY application_id LIMIT 1)
        UNION ALL
        SELECT (SELECT n.application_id FROM webhook_deliveries n
                WHERE n.status = '{DeliveryStatus.PENDING}' AND n.application_id > p.id
                ORDER BY n.application_id LIMIT 1)
        FROM pending_applications p WHERE p.id IS NOT NULL),
    {_IN_FLIGHT},
    {_allowances(5, 6)},
    below_share AS (
        SELECT * FROM (
            SELECT a.id AS application_id, a.merchant_id,
                   least($3 - coalesce(m.attempts, 0), coalesce(t.tokens, $7)) AS room
            FROM pending_applications p JOIN applications a ON a.id = p.id
            LEFT JOIN merchant_in_flight m ON m.merchant_id = a.merchant_id
            LEFT JOIN allowances t ON t.merchant_id = a.merchant_id) r
        WHERE r.room > 0),
    candidates AS (
        SELECT e.id, b.merchant_id, b.room, 1 AS wanted
        FROM below_share b JOIN webhook_configs e ON e.application_id = b.application_id
        WHERE e.is_active AND e.deleted_at IS NULL
          AND (SELECT count(*) FROM in_flight f WHERE f.config_id = e.id) < $2),
    {_walk("candidates")},
    waiting AS (
        SELECT e.id, e.merchant_id, e.room, w.next_attempt_at AS waiting_since,
               row_number() OVER (PARTITION BY e.merchant_id ORDER BY w.next_attempt_at, e.id)
                   AS merchant_place
        FROM walk w JOIN candidates e ON e.id = w.config_id
        WHERE w.claimable)
    SELECT c.id, w.merchant_id FROM webhook_configs c JOIN waiting w ON w.id = c.id
    WHERE w.merchant_place <= w.room
    ORDER BY w.waiting_since, c.id LIMIT $1
    FOR NO KEY UPDATE OF c SKIP LOCKED""",
    4,
)

# The claim itself, for the endpoints locked (parameters: $1 their ids, $2 per endpoint, $3 limit,
# $4 lease, $5 per merchant, $6 owner, $7 now, $8 $9 the merchants' allowances this round, $10
# every other merchant's): each endpoint's oldest claimable deliveries, no more than its room
# (`_walk`), then every endpoint's first before any endpoint's second, within each merchant's room
# (the lesser of its share and its allowance). Its snapshot is taken once the merchants' locks are
# held: the counts of what is in flight are exact. The deliveries picked are locked without
# waiting (`SKIP LOCKED`): one that another transaction holds (an attempt being recorded, an
# endpoint's deliveries given up when it is deleted or answers 410, a node's claims taken over) is
# left to a later round. Updated
# in place, as before, a multi-row UPDATE would wait for such a row while holding the rows it had
# updated before it, and a transaction updating the same rows in another order deadlocked with it
# (the delivery loop crashed so beside the neighbours bench's `end_backlog`).
CLAIM_DELIVERIES = _at(
    f"""WITH RECURSIVE {_IN_FLIGHT},
    {_allowances(8, 9)},
    endpoints AS (
        SELECT e.id, a.merchant_id,
               $2 - (SELECT count(*) FROM in_flight f WHERE f.config_id = e.id) AS wanted
        FROM webhook_configs e JOIN applications a ON a.id = e.application_id
        WHERE e.id = ANY($1::uuid[])),
    {_walk("endpoints")},
    within_endpoint AS (
        SELECT w.id, w.next_attempt_at, e.merchant_id,
               row_number() OVER (PARTITION BY w.config_id ORDER BY w.next_attempt_at, w.event_seq)
                   AS place
        FROM walk w JOIN endpoints e ON e.id = w.config_id
        WHERE w.claimable),
    picked AS (
        SELECT ranked.id FROM (
            SELECT w.*, row_number() OVER (
                PARTITION BY w.merchant_id ORDER BY w.place, w.next_attempt_at, w.id
            ) AS merchant_place
            FROM within_endpoint w) ranked
        LEFT JOIN merchant_in_flight m ON m.merchant_id = ranked.merchant_id
        LEFT JOIN allowances t ON t.merchant_id = ranked.merchant_id
        WHERE ranked.merchant_place <= least($5 - coalesce(m.attempts, 0), coalesce(t.tokens, $10))
        ORDER BY ranked.place, ranked.next_attempt_at, ranked.id LIMIT $3),
    locked AS (
        SELECT d.id FROM webhook_deliveries d JOIN picked ON picked.id = d.id
        WHERE d.status = '{DeliveryStatus.PENDING}'
        FOR NO KEY UPDATE OF d SKIP LOCKED)
    UPDATE webhook_deliveries d
       SET attempts = d.attempts + 1, last_attempt_at = $now,
           claimed_until = $now::timestamptz + make_interval(secs => $4),
           next_attempt_at = $now::timestamptz + make_interval(secs => $4), claimed_by = $6
      FROM locked, webhook_configs c, outbox_events e, applications a
     WHERE d.id = locked.id AND c.id = d.config_id AND e.seq = d.event_seq AND a.id = d.application_id
       AND d.status = '{DeliveryStatus.PENDING}'
 RETURNING d.id, d.config_id, d.application_id, a.merchant_id, d.attempts, c.url, c.secret, c.previous_secret,
           c.previous_secret_expires_at, c.key_fingerprint, e.id AS event_id, e.payload""",
    7,
)


@on_database_thread
async def claim_due_deliveries(
    conn: Connection,
    *,
    limit: int,
    per_endpoint: int,
    per_merchant: int,
    lease_s: float,
    owner: int | None,
    now: datetime,
    allowances: Mapping[uuid.UUID, int] | None = None,
    default_allowance: int | None = None,
) -> list[ClaimedDelivery]:
    """Up to `limit` claimable deliveries, claimed by the node `owner` for `lease_s` with their
    attempt counted, never
    more than `per_endpoint` in flight to one configuration nor `per_merchant` to one merchant's,
    nor more of a merchant's than its allowance (`allowances`, else `default_allowance`; None: no
    bound but `per_merchant`);
    the endpoints that have waited longest first, and every endpoint's first delivery before any
    endpoint's second, across every process. Run it in a transaction: the configurations and the
    merchants it claims for stay locked until the transaction ends. Its cost follows the
    applications with PENDING deliveries and the endpoints of the merchants below their share, never
    how many deliveries wait (see `CLAIM_ENDPOINTS`)."""
    allowed = dict(allowances or {})
    allowed_ids, allowed_tokens = list(allowed), [max(tokens, 0) for tokens in allowed.values()]
    otherwise = per_merchant if default_allowance is None else default_allowance
    # First the endpoints, locked (SKIP LOCKED): their locks make the per-endpoint count exact.
    endpoints = await conn.fetch(
        CLAIM_ENDPOINTS, limit, per_endpoint, per_merchant, now, allowed_ids, allowed_tokens, otherwise
    )
    if not endpoints:
        return []
    # Then their merchants, those no other process is claiming for: the per-merchant count below,
    # in a snapshot taken once these locks are held, sees every claim made for them.
    merchants = await conn.fetch(
        """SELECT m FROM unnest($1::uuid[]) AS m
           WHERE pg_try_advisory_xact_lock($2, hashtext(m::text))""",
        sorted({row["merchant_id"] for row in endpoints}),
        MERCHANT_CLAIM_LOCK,
    )
    locked = {row["m"] for row in merchants}
    endpoints = [row for row in endpoints if row["merchant_id"] in locked]
    if not endpoints:
        return []
    rows = await conn.fetch(
        CLAIM_DELIVERIES,
        [row["id"] for row in endpoints],
        per_endpoint,
        limit,
        float(lease_s),
        per_merchant,
        owner,
        now,
        allowed_ids,
        allowed_tokens,
        otherwise,
    )
    claimed = []
    for row in rows:
        values = dict(row.items())
        values["secret"] = bytes(values["secret"])
        if values["previous_secret"] is not None:
            values["previous_secret"] = bytes(values["previous_secret"])
        claimed.append(ClaimedDelivery(**values))
    return claimed


@dataclass(frozen=True)
class Round:
    """What one round of the delivery supervisor did: events fanned out, deliveries claimed."""

    fanned_out: int
    claimed: list[ClaimedDelivery]


@on_database_thread
async def fan_out_and_claim(
    conn: Connection,
    *,
    first_wait_s: float,
    fan_out_limit: int,
    limit: int,
    per_endpoint: int,
    per_merchant: int,
    lease_s: float,
    owner: int | None,
    now: datetime,
    always_delivered: Sequence[str] = (),
    allowances: Mapping[uuid.UUID, int] | None = None,
    default_allowance: int | None = None,
) -> Round:
    """One round of the delivery supervisor in one transaction: give each new outbox event one
    delivery per active configuration of its application that subscribes to its type (or to every
    one when its type is in `always_delivered`), then claim up to `limit` due deliveries
    (`claim_due_deliveries`, within each merchant's allowance; none when `limit` is 0). An event
    that commits just before is delivered in this same round when its first attempt is due at
    once, and a round that finds nothing costs one short transaction.

    The round commits without waiting for its WAL to reach the disk (set in the fan-out statement,
    not a round trip of its own): a crash of PostgreSQL may lose the last rounds (never half of one),
    and what they did is then done again: their events are fanned out again, their deliveries due
    again, and delivery is at least once anyway. The attempt recorded after each delivery commits
    durably, and with it every round before."""
    fanned_out: int = await conn.fetchval(
        _FAN_OUT,
        fan_out_limit,
        float(first_wait_s),
        now,
        list(always_delivered),
    )
    claimed: list[ClaimedDelivery] = []
    if limit > 0:
        claimed = await claim_due_deliveries(
            conn,
            limit=limit,
            per_endpoint=per_endpoint,
            per_merchant=per_merchant,
            lease_s=lease_s,
            owner=owner,
            now=now,
            allowances=allowances,
            default_allowance=default_allowance,
        )
    return Round(fanned_out=fanned_out, claimed=claimed)


_RELEASE_CLAIMS = f"""
    UPDATE webhook_deliveries
       SET next_attempt_at = $2, attempts = greatest(attempts - 1, 0), claimed_until = NULL, claimed_by = NULL
     WHERE id = ANY($1::uuid[]) AND status = '{DeliveryStatus.PENDING}' AND claimed_until IS NOT NULL"""


@on_database_thread
async def release_claims(conn: Connection, delivery_ids: list[uuid.UUID], *, now: datetime) -> None:
    """Hand claimed deliveries back unattempted (shutdown): due again now, the claim's attempt not
    counted. A delivery whose attempt was recorded meanwhile is left as it is."""
    await conn.execute(_RELEASE_CLAIMS, delivery_ids, now)


# The attempt logged (its details beside it: `$8` the body excerpt, `$9` `$10` the headers sent and
# received) and the delivery moved on, its claim ended, in one statement: `$2` is its outcome, a
# `DeliveryStatus`.
# A resend asked while the attempt was in flight (`storage.webhooks.retry_delivery`) made the
# delivery due before its claim's end, which the claim had made its due time: it stays PENDING, due
# when the resend asked, whatever this attempt's outcome, so the resend is never lost.
_RESENT_MEANWHILE = "(claimed_until IS NOT NULL AND next_attempt_at < claimed_until)"
_RECORD_ATTEMPT = f"""
    WITH attempt AS (
        INSERT INTO webhook_attempts (delivery_id, status_code, error, latency_ms, response_body,
                                      attempted_at, request_headers, response_headers)
        VALUES ($1, $3, $4, $7, $8, $6, $9, $10))
    UPDATE webhook_deliveries
       SET status = CASE WHEN {_RESENT_MEANWHILE} THEN '{DeliveryStatus.PENDING}' ELSE $2 END,
           last_status_code = $3, last_error = $4, claimed_until = NULL, claimed_by = NULL,
           next_attempt_at = CASE WHEN {_RESENT_MEANWHILE} THEN next_attempt_at
                                  WHEN $2 = '{DeliveryStatus.PENDING}'
                                  THEN $6::timestamptz + make_interval(secs => $5) END,
           delivered_at = CASE WHEN $2 = '{DeliveryStatus.DELIVERED}' THEN $6 END
     WHERE id = $1"""

Headers = Sequence[tuple[str, str]]


@on_database_thread
async def record_attempt(
    conn: Connection,
    delivery_id: uuid.UUID,
    *,
    status_code: int | None,
    error: str | None,
    latency_ms: int,
    response_body: str | None,
    outcome: DeliveryStatus,
    retry_in_s: float | None,
    now: datetime,
    request_headers: Headers | None = None,
    response_headers: Headers | None = None,
) -> None:
    """Log one attempt with its details (the headers sent, the receiver's headers and body
    excerpt) and move the delivery on, its claim ended: DELIVERED, FAILED, or PENDING again in
    `retry_in_s`; one statement. Text must be fit to store (no NUL); see `payorch.outbound.text`."""
    await conn.execute(
        _RECORD_ATTEMPT,
        delivery_id,
        outcome,
        status_code,
        error,
        float(retry_in_s or 0),
        now,
        latency_ms,
        response_body,
        None if request_headers is None else [list(pair) for pair in request_headers],
        None if response_headers is None else [list(pair) for pair in response_headers],
    )
