"""Checkout commands, run by an application's actor: create a session, apply a session event.
Each state change commits with the event it emits (transactional outbox)."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any, Generic, TypeVar

import outcome
import trio

from payorch.config import Settings
from payorch.engine.actors import ApplicationActor, Reply
from payorch.engine.errors import (
    IdempotencyKeyInProgress,
    IdempotencyKeyMismatch,
    NoProviderAvailable,
    ProviderUnavailable,
)
from payorch.engine.money import Money
from payorch.engine.records import event_body, new_event_id, session_record
from payorch.engine.routing import ProviderHealth, eligible_providers, plan_route
from payorch.engine.secretbox import SecretBox
from payorch.engine.session_states import SessionEvent, SessionStatus, TransitionRefused, transition
from payorch.engine.timefmt import iso, utcnow
from payorch.metrics import Metrics
from payorch.providers.base import (
    CheckoutCreated,
    CheckoutRequest,
    Credentials,
    CredentialsRejected,
    ProviderError,
    RefundRefused,
)
from payorch.providers.catalogue import ProviderCatalogue
from payorch.storage import idempotency, outbox, provider_configs, sessions
from payorch.storage.database import Connection, Database
from payorch.storage.provider_configs import ProviderConfig

log = logging.getLogger("payorch.checkout")

T = TypeVar("T")

SESSION_CREATE_SCOPE = "POST /api/v1/sessions"
# An in-progress claim older than this was abandoned by a process that died; a retry takes it over.
CLAIM_LEASE_S = 60.0


@dataclass(frozen=True)
class PaymentsContext:
    """What checkout commands need; one per service, shared by every actor."""

    settings: Settings
    db: Database
    secrets: SecretBox
    providers: ProviderCatalogue
    health: ProviderHealth
    metrics: Metrics

    @contextmanager
    def provider_call(self, provider: str, operation: str, timeout_s: float) -> Iterator[None]:
        """One call to `provider`, cut off after `timeout_s` (`trio.TooSlowError`), counted in the
        metrics and in routing health by how it ended. A refused refund is an answer, not a
        failure: counted as `refused`, health untouched."""
        started = trio.current_time()
        try:
            with trio.fail_after(timeout_s):
                yield
        except RefundRefused:
            self.metrics.provider_call(provider, operation, "refused", trio.current_time() - started)
            raise
        except (ProviderError, CredentialsRejected, trio.TooSlowError) as error:
            elapsed = trio.current_time() - started
            self.health.record_failure(provider, elapsed, trio.current_time())
            failure = "timeout" if isinstance(error, trio.TooSlowError) else "error"
            self.metrics.provider_call(provider, operation, failure, elapsed)
            raise
        elapsed = trio.current_time() - started
        self.health.record_success(provider, elapsed, trio.current_time())
        self.metrics.provider_call(provider, operation, "ok", elapsed)


@dataclass(frozen=True)
class Answer:
    """An HTTP answer to give (and, for idempotent requests, to replay)."""

    status: int
    body: dict[str, Any]
    replayed: bool = False


@dataclass(frozen=True)
class SessionDraft:
    """A validated request to create a checkout session."""

    application_id: uuid.UUID
    order_reference: str
    amount: Money
    shipping_minor: int
    tax_minor: int
    payment_method: str
    locale: str | None
    customer: dict[str, Any]
    order_items: list[dict[str, Any]] | None
    shipping: dict[str, Any] | None
    additional_information: dict[str, Any] | None
    redirect_urls: dict[str, Any] | None


@dataclass(frozen=True)
class _Routed:
    provider: str
    score: float
    created: CheckoutCreated


@dataclass(frozen=True)
class Fresh(Generic[T]):
    """A fresh claim of an Idempotency-Key, and what was done under it in the same transaction."""

    claim: idempotency.Claimed
    value: T


async def claim_idempotency_key(
    actor: ApplicationActor,
    reply: Reply[Answer],
    *,
    scope: str,
    key: str,
    fingerprint: bytes,
    then: Callable[[Connection, idempotency.Claimed], Awaitable[T]],
) -> Fresh[T] | None:
    """Claim `key` (in `scope`) for this request, in the database so other processes see it too,
    and for a fresh claim run `then(conn, claim)` in the same transaction: one round trip, and if
    `then` raises, the claim is undone with it (the key stays free for a retry).

    None when the key's first request already answered: that answer was replayed to `reply`.
    `IdempotencyKeyMismatch` when the key came with other parameters; `IdempotencyKeyInProgress`
    while its first request is still running, here or in another process."""
    context: PaymentsContext = actor.context
    if f"{scope}:{key}" in actor.in_flight:
        raise IdempotencyKeyInProgress("a request with this Idempotency-Key is in progress", retry_after=1)

    async def claim_then(
        conn: Connection,
    ) -> idempotency.Replay | idempotency.Mismatch | idempotency.InProgress | Fresh[T]:
        claim = await idempotency.claim_idempotency_key(
            conn,
            application_id=actor.application_id,
            scope=scope,
            key=key,
            fingerprint=fingerprint,
            lease_s=CLAIM_LEASE_S,
            retention_s=context.settings.idempotency.retention_s,
        )
        if isinstance(claim, idempotency.Claimed):
            return Fresh(claim, await then(conn, claim))
        return claim

    claimed = await context.db.transaction(claim_then)
    if isinstance(claimed, idempotency.Replay):
        reply.send(Answer(claimed.status, claimed.body, replayed=True))
        return None
    if isinstance(claimed, idempotency.Mismatch):
        raise IdempotencyKeyMismatch("this Idempotency-Key was used with different parameters")
    if isinstance(claimed, idempotency.InProgress):
        raise IdempotencyKeyInProgress("a request with this Idempotency-Key is in progress", retry_after=1)
    return claimed


def credentials_of(secrets: SecretBox, config: ProviderConfig) -> Credentials:
    return Credentials(api_key=secrets.open(config.credentials))


@dataclass(frozen=True)
class CreateSession:
    idempotency_key: str
    fingerprint: bytes
    draft: SessionDraft

    async def run(self, actor: ApplicationActor, reply: Reply[Answer]) -> None:
        context: PaymentsContext = actor.context
        draft = self.draft

        async def active_configs(conn: Connection, _: idempotency.Claimed) -> list[ProviderConfig]:
            return await provider_configs.active_provider_configs(conn, draft.application_id)

        fresh = await claim_idempotency_key(
            actor,
            reply,
            scope=SESSION_CREATE_SCOPE,
            key=self.idempotency_key,
            fingerprint=self.fingerprint,
            then=active_configs,
        )
        if fresh is None:
            return

        configs = {
            config.provider: config
            for config in fresh.value
            if context.providers.get(config.provider) is not None
        }
        candidates = eligible_providers(
            configs.values(),
            _accepts(context.providers),
            draft.payment_method,
            draft.amount,
        )
        try:
            ranked = plan_route(candidates, context.health, trio.current_time())
        except (NoProviderAvailable, ProviderUnavailable):
            await self._release(context)
            raise

        session_id = fresh.claim.resource_id
        expires_at = utcnow() + timedelta(seconds=context.settings.sessions.ttl_s)
        request = CheckoutRequest(
            session_id=session_id,
            application_id=draft.application_id,
            amount=draft.amount,
            payment_method=draft.payment_method,
            order_reference=draft.order_reference,
            customer_email=str(draft.customer.get("email", "")),
            locale=draft.locale,
            expires_at=expires_at,
            success_url=(draft.redirect_urls or {}).get("success"),
            failure_url=(draft.redirect_urls or {}).get("failure"),
            order_items=draft.order_items or [],
        )
        actor.in_flight[f"{SESSION_CREATE_SCOPE}:{self.idempotency_key}"] = reply

        async def create() -> _Routed:
            return await _create_with_cascade(context, ranked, configs, request)

        async def persist(result: outcome.Outcome[_Routed]) -> None:
            actor.in_flight.pop(f"{SESSION_CREATE_SCOPE}:{self.idempotency_key}", None)
            try:
                routed = result.unwrap()
            except ProviderUnavailable:
                await self._release(context)
                raise
            answer = await context.db.transaction(self._store, routed, session_id, expires_at)
            reply.send(answer)

        actor.spawn(create, persist, reply)

    async def _release(self, context: PaymentsContext) -> None:
        await context.db.transaction(
            idempotency.release_idempotency_key,
            application_id=self.draft.application_id,
            scope=SESSION_CREATE_SCOPE,
            key=self.idempotency_key,
        )

    async def _store(
        self, conn: Connection, routed: _Routed, session_id: uuid.UUID, expires_at: datetime
    ) -> Answer:
        draft = self.draft
        stored = await sessions.insert_session(
            conn,
            sessions.NewSession(
                id=session_id,
                application_id=draft.application_id,
                order_reference=draft.order_reference,
                amount_minor=draft.amount.minor,
                shipping_minor=draft.shipping_minor,
                tax_minor=draft.tax_minor,
                currency=draft.amount.currency,
                payment_method=draft.payment_method,
                locale=draft.locale,
                customer=draft.customer,
                order_items=draft.order_items,
                shipping=draft.shipping,
                additional_information=draft.additional_information,
                redirect_urls=draft.redirect_urls,
                expires_at=expires_at,
                provider_name=routed.provider,
                provider_reference=routed.created.reference,
                checkout_url=routed.created.url,
                routing_score=Decimal(str(routed.score)),
            ),
        )
        body = {
            "sessionId": str(stored.id),
            "checkoutUrl": stored.checkout_url,
            "status": stored.status,
            "routing": {"selectedProvider": routed.provider, "score": Decimal(str(routed.score))},
            "expiresAt": iso(stored.expires_at),
            "createdAt": iso(stored.created_at),
        }
        await idempotency.complete_idempotency_key(
            conn,
            application_id=draft.application_id,
            scope=SESSION_CREATE_SCOPE,
            key=self.idempotency_key,
            status=201,
            body=body,
        )
        return Answer(201, body)


def _accepts(providers: ProviderCatalogue) -> Callable[[str, str, Money], bool]:
    def accepts(name: str, method: str, amount: Money) -> bool:
        provider = providers.get(name)
        if provider is None or method not in provider.payment_methods:
            return False
        limits = provider.limits(amount.currency, method)
        return limits is not None and limits.min_minor <= amount.minor <= limits.max_minor

    return accepts


async def _create_with_cascade(
    context: PaymentsContext,
    ranked: list[tuple[str, float]],
    configs: dict[str, ProviderConfig],
    request: CheckoutRequest,
) -> _Routed:
    """Try the ranked providers in turn; the first to create the checkout wins."""
    for name, score in ranked:
        provider = context.providers.get(name)
        assert provider is not None
        try:
            with context.provider_call(name, "create_checkout", context.settings.engine.provider_timeout_s):
                created = await provider.create_checkout(
                    credentials_of(context.secrets, configs[name]),
                    request,
                    idempotency_key=f"payorch-session-{request.session_id}",
                )
        except (ProviderError, trio.TooSlowError) as error:
            log.warning(
                "provider failed to create a checkout; trying the next",
                extra={"provider": name, "sessionId": str(request.session_id), "error": repr(error)},
            )
            continue
        return _Routed(provider=name, score=score, created=created)
    raise ProviderUnavailable("every eligible provider failed to create the checkout: retry later")


async def apply_session_event(
    conn: Connection,
    *,
    application_id: uuid.UUID,
    session_id: uuid.UUID,
    event: SessionEvent,
    metrics: Metrics,
) -> bool:
    """Apply `event` to the session in this transaction, with the webhook event it emits, counted
    in `metrics` when given. False when it does not apply (unknown session, or a state the event
    does not move)."""
    session = await sessions.lock_session(conn, session_id)
    if session is None or session.application_id != application_id:
        return False
    if event is SessionEvent.EXPIRED and (session.expires_at is None or session.expires_at > utcnow()):
        return False
    try:
        change = transition(SessionStatus(session.status), event)
    except TransitionRefused:
        return False
    if change.status == session.status and change.failure_reason == session.failure_reason:
        return False
    updated = await sessions.set_session_status(conn, session_id, change.status, change.failure_reason)
    metrics.session_transition(session.status, updated.status)
    log.info(
        "session state changed",
        extra={
            "applicationId": str(application_id),
            "sessionId": str(session_id),
            "from": session.status,
            "to": updated.status,
        },
    )
    if change.emits:
        event_id = new_event_id()
        await outbox.add_event(
            conn,
            event_id=event_id,
            application_id=application_id,
            session_id=session_id,
            event_type=change.emits,
            payload=event_body(
                event_id, change.emits, updated.updated_at, application_id, session_record(updated)
            ),
        )
    return True
