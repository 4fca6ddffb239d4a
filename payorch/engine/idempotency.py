"""Idempotency keys: what makes two requests "the same", how an application's actor claims a key
(session creates claim theirs in batches, refund creates one at a time: both through here, each
claim in one unit of work with what its request stores under it, or commits before asking a
provider) and releases it when its request changed nothing, and what a request whose key was seen
before is answered.

"Same body" means the same parsed JSON, not the same bytes: key order, white space and the way a
number is written (`10.5` or `10.50`) do not matter.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any, Generic, TypedDict, TypeVar

from payorch.config import Settings
from payorch.engine.actors import ApplicationActor, Reply
from payorch.engine.context import Context
from payorch.storage import idempotency_keys as keys_store
from payorch.storage.database import Connection
from payorch.storage.database_thread import on_database_thread
from payorch.values.errors import IdempotencyKeyInProgress, IdempotencyKeyMismatch

T = TypeVar("T")

MAX_KEY_LENGTH = 255


def _canonical(value: Any) -> Any:
    if isinstance(value, Decimal):
        normalized = value.normalize()
        # An integral decimal is the same value as the integer: 10.0 == 10.
        return int(normalized) if normalized == normalized.to_integral_value() else str(normalized)
    if isinstance(value, float):
        return _canonical(Decimal(repr(value)))
    if isinstance(value, dict):
        return {str(key): _canonical(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_canonical(item) for item in value]
    return value


def request_fingerprint(body: Any, *scope: str) -> bytes:
    """SHA-256 over the canonical JSON of `body` and the `scope` (endpoint, path ids)."""
    canonical = json.dumps([list(scope), _canonical(body)], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).digest()


# An in-progress claim is taken over by a retry as soon as the node that made it is gone
# (`storage.nodes`). The lease is the last resort, for a node alive but wedged: it outlasts the
# longest a live request holds its claim (its provider call, cut off after `engine.provider_timeout_s`
# or a refund's `refunds.submit_timeout_s`) by this margin for storing the answer, so a live owner's
# claim is never taken: 60 s with the default timeouts.
CLAIM_LEASE_MARGIN_S = 50.0


def claim_lease_s(settings: Settings) -> float:
    """How long an Idempotency-Key claim lasts if its node lives on but never finishes."""
    return max(settings.engine.provider_timeout_s, settings.refunds.submit_timeout_s) + CLAIM_LEASE_MARGIN_S


@dataclass(frozen=True)
class Answer:
    """An HTTP answer to give (and, for idempotent requests, to replay)."""

    status: int
    body: Mapping[str, object]
    replayed: bool = False


@dataclass(frozen=True)
class Fresh(Generic[T]):
    """A fresh claim of an Idempotency-Key, and what was done under it in the same transaction."""

    claim: keys_store.Claimed
    value: T


class _ClaimTerms(TypedDict):
    """The arguments every claim of one application's keys in one scope takes, beside the key."""

    application_id: uuid.UUID
    scope: str
    lease_s: float
    retention_s: float
    owner: int | None
    now: datetime


def _claim_terms(actor: ApplicationActor[Context], scope: str) -> _ClaimTerms:
    """Claims made now by this node for the actor's application in `scope`, with the lease and the
    retention the settings give."""
    context = actor.context
    return _ClaimTerms(
        application_id=actor.application_id,
        scope=scope,
        lease_s=claim_lease_s(context.settings),
        retention_s=context.settings.idempotency.retention_s,
        owner=context.node.id,
        now=context.clock.now(),
    )


def in_flight_key(scope: str, key: str) -> str:
    """How `actor.in_flight` names the request of `key` in `scope` while this process runs it."""
    return f"{scope}:{key}"


async def claim_idempotency_key(
    actor: ApplicationActor[Context],
    reply: Reply[Answer],
    *,
    scope: str,
    key: str,
    fingerprint: bytes,
    then: Callable[[Connection, keys_store.Claimed], Awaitable[T]],
) -> Fresh[T] | None:
    """Claim `key` (in `scope`) for this request, in the database so other processes see it too,
    and for a fresh claim run `then(conn, claim)` in the same transaction: one round trip, and if
    `then` raises, the claim is undone with it (the key stays free for a retry).

    None when the key was seen before, and `reply` has its answer: the first request's answer
    again, `IdempotencyKeyMismatch` when the key came with other parameters, or
    `IdempotencyKeyInProgress` while its first request is still running, here or in another
    process."""
    if in_flight_key(scope, key) in actor.in_flight:
        reply.fail(in_progress())
        return None

    @on_database_thread
    async def claim_then(
        conn: Connection,
    ) -> keys_store.Replay | keys_store.Mismatch | keys_store.InProgress | Fresh[T]:
        claim = await keys_store.claim_idempotency_key(
            conn, key=key, fingerprint=fingerprint, **_claim_terms(actor, scope)
        )
        if isinstance(claim, keys_store.Claimed):
            return Fresh(claim, await then(conn, claim))
        return claim

    claimed = await actor.context.db.transaction(claim_then)
    if isinstance(claimed, Fresh):
        return claimed
    answer_seen_key(claimed, reply)
    return None


def answer_seen_key(
    result: keys_store.Replay | keys_store.Mismatch | keys_store.InProgress, reply: Reply[Answer]
) -> None:
    """Answer a request whose Idempotency-Key was seen before: the first request's answer again,
    or why it cannot be (used with other parameters, or still in progress)."""
    if isinstance(result, keys_store.Replay):
        reply.send(Answer(result.status, result.body, replayed=True))
    elif isinstance(result, keys_store.Mismatch):
        reply.fail(IdempotencyKeyMismatch("this Idempotency-Key was used with different parameters"))
    else:
        reply.fail(in_progress())


def in_progress() -> IdempotencyKeyInProgress:
    return IdempotencyKeyInProgress("a request with this Idempotency-Key is in progress", retry_after=1)


@dataclass(frozen=True)
class KeyClaims:
    """A batch of Idempotency-Keys about to be claimed in one scope, by key: each key's `NewClaim`
    (its request's fingerprint, and the resource id a fresh claim gives it), and the terms of the
    claims. What a fresh claim of a key will be is known before it is made (`fresh`), so what the
    request does under it can be prepared first and stored in the claim's own transaction."""

    scope: str
    claims: Mapping[str, keys_store.NewClaim]
    terms: _ClaimTerms

    def fresh(self, key: str) -> keys_store.Claimed:
        """The claim of `key`, should it be new (or expired): its resource id, claimed now."""
        return keys_store.Claimed(self.claims[key].resource_id, self.terms["now"])

    def only(self, key: str) -> KeyClaims:
        """The claim of `key` alone, on the same terms."""
        return KeyClaims(self.scope, {key: self.claims[key]}, self.terms)

    def is_fresh(self, key: str, claim: keys_store.Claimed | None) -> bool:
        """Whether `claim` (of `key`) is fresh, not a claim of a request before taken over."""
        return claim is not None and claim.resource_id == self.claims[key].resource_id

    @property
    def claim_terms(self) -> keys_store.ClaimTerms:
        """The terms of the claims, for a statement that claims keys itself."""
        terms = self.terms
        return keys_store.ClaimTerms(terms["lease_s"], terms["retention_s"], terms["owner"], terms["now"])


def key_claims(actor: ApplicationActor[Context], scope: str, fingerprints: Mapping[str, bytes]) -> KeyClaims:
    """The claims this node is about to make now for the actor's application in `scope`, of the
    keys of `fingerprints` (key: its request's fingerprint)."""
    claims = {key: keys_store.NewClaim(key, fingerprint) for key, fingerprint in fingerprints.items()}
    return KeyClaims(scope, claims, _claim_terms(actor, scope))


async def claim_idempotency_keys(
    actor: ApplicationActor[Context],
    claims: KeyClaims,
    replies: Mapping[str, Reply[Answer]],
    then: Callable[[Connection, Mapping[str, keys_store.Claimed]], Awaitable[None]] | None = None,
    at_once: Callable[[Connection], Awaitable[bool]] | None = None,
) -> dict[str, keys_store.Claimed]:
    """Claim the Idempotency-Keys of `claims` in one unit of work, one transaction: new keys in one
    statement, then each of the few seen before looked at (replay, mismatch, in progress) or its
    abandoned claim taken over; then `then(conn, claimed)`, in the same transaction. The claim of
    each key claimed (`claims.is_fresh` tells a fresh one from one taken over).

    `at_once(conn)`, when given, is tried first in the same unit: a statement that claims every key
    fresh and does what `then` would, all or none, in a transaction of its own; False (having done
    nothing) when a key was seen before, and the keys are then claimed as above.

    Each key seen before has its reply (in `replies`, by key) answered once the transaction
    committed. Should anything raise, nothing of the unit remains (no key claimed, nothing `then`
    or `at_once` wrote) and no reply was answered."""
    terms = claims.terms
    Seen = dict[str, keys_store.Replay | keys_store.Mismatch | keys_store.InProgress]

    @on_database_thread
    async def claim_each(conn: Connection) -> tuple[dict[str, keys_store.Claimed], Seen]:
        claimed = await keys_store.claim_new_idempotency_keys(
            conn, claims=list(claims.claims.values()), **terms
        )
        seen: Seen = {}
        for key, new in claims.claims.items():
            if key in claimed:
                continue
            result = await keys_store.claim_seen_idempotency_key(
                conn, terms["application_id"], terms["scope"], key, new.fingerprint, claims.claim_terms
            )
            if isinstance(result, keys_store.Claimed):
                claimed[key] = result
            else:
                seen[key] = result
        if then is not None:
            await then(conn, claimed)
        return claimed, seen

    @on_database_thread
    async def claim(conn: Connection) -> tuple[dict[str, keys_store.Claimed], Seen]:
        if at_once is not None and await at_once(conn):
            return {key: claims.fresh(key) for key in claims.claims}, {}
        async with conn.transaction():
            return await claim_each(conn)

    claimed, seen = await actor.context.db.autocommit(claim)
    for key, result in seen.items():
        answer_seen_key(result, replies[key])
    return claimed


async def release_idempotency_keys(actor: ApplicationActor[Context], scope: str, keys: Sequence[str]) -> None:
    """Free the claims of `keys` (in `scope`) whose requests changed nothing, so their callers may
    retry: one statement, none when `keys` is empty."""
    if keys:
        await actor.context.db.autocommit(
            keys_store.release_idempotency_keys, application_id=actor.application_id, scope=scope, keys=keys
        )
