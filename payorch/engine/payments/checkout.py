"""Creating checkout sessions, run by an application's actor in batches: claim the Idempotency-Keys,
route on the configurations the actor holds, call the providers side by side, store what comes back
together. (A session's later state changes are `engine.payments.events`.)"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import TypeVar

import outcome
import trio

from payorch.engine.actors import ActorCrashed, ApplicationActor, BatchCommand, Reply
from payorch.engine.context import Context
from payorch.engine.idempotency import (
    Answer,
    claim_idempotency_keys,
    in_progress,
)
from payorch.engine.payments.records import SessionCreated
from payorch.engine.routing.decision import Decision
from payorch.engine.routing.sessions import RoutingInputs, plan_session, routing_inputs
from payorch.providers.base import (
    CheckoutCreated,
    CheckoutInDatabase,
    CheckoutRequest,
    CheckoutToStore,
    ProviderError,
)
from payorch.storage import idempotency_keys, sessions
from payorch.storage.failures import StorageFailure, storage_failure
from payorch.storage.idempotency_keys import Claimed
from payorch.storage.provider_configs import ProviderConfig
from payorch.storage.sessions import SessionDraft
from payorch.values.errors import (
    NoProviderAvailable,
    ProviderUnavailable,
    StorageUnavailable,
)
from payorch.values.statuses import RoutingReason, SessionStatus
from payorch.values.timefmt import iso

log = logging.getLogger("payorch.checkout")

T = TypeVar("T")

SESSION_CREATE_SCOPE = "POST /api/v1/sessions"


@dataclass(frozen=True)
class _Routed:
    provider: str
    score: float
    created: CheckoutCreated


@dataclass(frozen=True)
class _Explanation:
    """Why the session went where it did: the matching rule (None: the default route), the reason
    (the decision's, or `cascade` when a provider after the decision's first created the checkout)
    and the version of the routing document."""

    rule: str | None
    reason: RoutingReason
    version: int

    @classmethod
    def of(cls, decision: Decision, version: int, provider: str) -> _Explanation:
        first = decision.order[0] if decision.order else None
        reason = RoutingReason(decision.reason) if provider == first else RoutingReason.CASCADE
        return cls(decision.rule, reason, version)


@dataclass(frozen=True)
class _Planned:
    """A session routed and ready to ask its providers for a checkout."""

    command: CreateSession
    reply: Reply[Answer]
    session_id: uuid.UUID
    expires_at: datetime
    decision: Decision
    version: int
    ranked: list[tuple[str, float]]
    configs: Mapping[str, ProviderConfig]
    request: CheckoutRequest

    def spawn(self, actor: ApplicationActor[Context]) -> None:
        """Ask the providers in a child, cascading down the route; the result comes back as a
        `_StoreSession`."""
        context, command = actor.context, self.command
        actor.in_flight[f"{SESSION_CREATE_SCOPE}:{command.idempotency_key}"] = self.reply

        async def create() -> tuple[_Routed, _Explanation]:
            routed = await _create_with_cascade(context, self.ranked, self.configs, self.request)
            return routed, _Explanation.of(self.decision, self.version, routed.provider)

        session_id, expires_at = self.session_id, self.expires_at
        actor.spawn_command(
            create, lambda routed: _StoreSession(command, session_id, expires_at, routed), self.reply
        )


async def _create_in_database(actor: ApplicationActor[Context], batch: Sequence[_Planned]) -> None:
    """The sessions of `batch`, whose first provider keeps its checkouts in payorch's database (the
    sandbox: `CheckoutInDatabase`), each stored with its checkout and its key's answer in one
    statement: one round trip for the lot, and none of it stored unless all of it is. A session that
    provider refuses (outside its limits), and every session of a batch that fails to store (the
    database refused it, or a checkout's key was used by an attempt that died before storing its
    session), goes the way of any other (`_Planned.spawn`): its providers asked in turn, then stored,
    so a provider's refusal cascades and a session the database refuses fails alone, exactly as
    there."""
    context = actor.context
    created_at = context.clock.now()
    # Each provider's sessions, with the checkout and the answer stored for each.
    by_provider: dict[str, tuple[CheckoutInDatabase, list[_InDatabase]]] = {}
    for planned in batch:
        name = planned.ranked[0][0]
        provider = context.providers.get(name)
        assert isinstance(provider, CheckoutInDatabase)
        request = planned.request
        try:
            checkout = provider.checkout_to_store(
                context.credentials(planned.configs[name]), request, idempotency_key=_provider_key(request)
            )
        except ProviderError:  # refused (its limits): the usual way cascades to the next provider
            planned.spawn(actor)
            continue
        except Exception:
            log.warning(
                "preparing a sandbox checkout failed; asking the session's providers in turn", exc_info=True
            )
            planned.spawn(actor)
            continue
        explanation = _Explanation.of(planned.decision, planned.version, name)
        routed = _Routed(provider=name, score=planned.ranked[0][1], created=checkout.created)
        answered = _answered(
            planned.command, planned.session_id, planned.expires_at, routed, explanation, created_at
        )
        by_provider.setdefault(name, (provider, []))[1].append((planned, checkout, answered))
    for name, (keeper, stored) in by_provider.items():
        started = trio.current_time()
        try:
            await context.db.autocommit(
                keeper.store_with_sessions, [(checkout, answered) for _, checkout, answered in stored]
            )
        except Exception:
            log.warning(
                "storing sandbox checkouts with their sessions failed; asking each session's providers "
                "in turn",
                exc_info=True,
            )
            for planned, _, _ in stored:
                planned.spawn(actor)
            continue
        elapsed = trio.current_time() - started
        for planned, _, answered in stored:
            context.provider_answered(planned.configs[name], "create_checkout", elapsed)
            _created(context, answered, planned.reply)


_InDatabase = tuple["_Planned", CheckoutToStore, sessions.AnsweredSession]


def _provider_key(request: CheckoutRequest) -> str:
    """The idempotency key a session's checkout is created with, at every provider it is asked of."""
    return f"payorch-session-{request.session_id}"


@dataclass(frozen=True)
class CreateSession(BatchCommand[Context, Answer]):
    """Create a checkout session. Runs in batches: the commands that waited together in the mailbox
    claim their Idempotency-Keys in one statement, route on the provider configurations the actor
    holds, and call their providers side by side; what comes back together is stored together
    (`_StoreSession`)."""

    idempotency_key: str
    fingerprint: bytes
    draft: SessionDraft

    @classmethod
    async def run_batch(
        cls,
        actor: ApplicationActor[Context],
        batch: Sequence[tuple[CreateSession, Reply[Answer]]],
    ) -> None:
        context = actor.context
        waiting: dict[str, tuple[CreateSession, Reply[Answer]]] = {}
        for command, reply in batch:
            key = command.idempotency_key
            if key in waiting or f"{SESSION_CREATE_SCOPE}:{key}" in actor.in_flight:
                reply.fail(in_progress())
            else:
                waiting[key] = (command, reply)
        if not waiting:
            return
        inputs = await routing_inputs(actor)
        claimed = await claim_idempotency_keys(
            actor,
            SESSION_CREATE_SCOPE,
            {key: (command.fingerprint, reply) for key, (command, reply) in waiting.items()},
        )
        unclaimed: list[str] = []
        in_database: list[_Planned] = []
        for key, claim in claimed.items():
            command, reply = waiting[key]
            try:
                planned = command._plan(actor, reply, claim, inputs)
            except (NoProviderAvailable, ProviderUnavailable) as error:
                unclaimed.append(key)
                reply.fail(error)
                continue
            if isinstance(context.providers.get(planned.ranked[0][0]), CheckoutInDatabase):
                in_database.append(planned)
            else:
                planned.spawn(actor)
        if unclaimed:
            await context.db.autocommit(
                idempotency_keys.release_idempotency_keys,
                application_id=actor.application_id,
                scope=SESSION_CREATE_SCOPE,
                keys=unclaimed,
            )
        if in_database:
            await _create_in_database(actor, in_database)

    def _plan(
        self,
        actor: ApplicationActor[Context],
        reply: Reply[Answer],
        claim: Claimed,
        inputs: RoutingInputs,
    ) -> _Planned:
        """Route the session: the providers to ask in turn, and what to ask them.
        `NoProviderAvailable` or `ProviderUnavailable` when no route exists.

        The session was requested when its Idempotency-Key was first claimed, and expires a TTL
        after that: a retry that takes over a dead node's claim asks the provider again with the
        same deadline, as the provider's idempotency key requires."""
        context = actor.context
        draft = self.draft
        session_id = claim.resource_id
        decision, ranked = plan_session(context, inputs, draft, session_id)
        version = inputs.routing.version
        requested_at = claim.claimed_at
        expires_at = requested_at + timedelta(seconds=context.settings.sessions.ttl_s)
        request = CheckoutRequest(
            session_id=session_id,
            application_id=draft.application_id,
            amount=draft.amount,
            payment_method=draft.payment_method,
            order_reference=draft.order_reference,
            customer_email=str(draft.customer.get("email", "")),
            locale=draft.locale,
            expires_at=expires_at,
            requested_at=requested_at,
            success_url=(draft.redirect_urls or {}).get("success"),
            failure_url=(draft.redirect_urls or {}).get("failure"),
            order_items=draft.order_items or [],
        )
        return _Planned(
            self, reply, session_id, expires_at, decision, version, ranked, inputs.configs, request
        )

    def new_session(
        self, session_id: uuid.UUID, expires_at: datetime, routed: _Routed, explanation: _Explanation
    ) -> sessions.NewSession:
        return sessions.NewSession(
            id=session_id,
            draft=self.draft,
            expires_at=expires_at,
            provider_name=routed.provider,
            provider_reference=routed.created.reference,
            checkout_url=routed.created.url,
            routing_score=Decimal(str(routed.score)),
            routing_rule=explanation.rule,
            routing_reason=explanation.reason,
            routing_version=explanation.version,
        )


@dataclass(frozen=True)
class _StoreSession(BatchCommand[Context, Answer]):
    """What a session's providers answered, back in the actor. The ones that came back together
    are stored in one round trip (group commit): each session with its Idempotency-Key's answer."""

    command: CreateSession
    session_id: uuid.UUID
    expires_at: datetime
    routed: outcome.Outcome[tuple[_Routed, _Explanation]]

    @classmethod
    async def run_batch(
        cls,
        actor: ApplicationActor[Context],
        batch: Sequence[tuple[_StoreSession, Reply[Answer]]],
    ) -> None:
        stored: list[tuple[sessions.AnsweredSession, Reply[Answer]]] = []
        unavailable: list[str] = []
        now = actor.context.clock.now()
        for store, reply in batch:
            key = store.command.idempotency_key
            actor.in_flight.pop(f"{SESSION_CREATE_SCOPE}:{key}", None)
            try:
                routed, explanation = store.routed.unwrap()
            except (ProviderUnavailable, StorageUnavailable) as error:
                unavailable.append(key)
                reply.fail(error)
                continue
            stored.append((store._answered(routed, explanation, now), reply))
        db = actor.context.db
        if unavailable:
            await db.autocommit(
                idempotency_keys.release_idempotency_keys,
                application_id=actor.application_id,
                scope=SESSION_CREATE_SCOPE,
                keys=unavailable,
            )
        if not stored:
            return
        try:
            await db.autocommit(sessions.insert_answered_sessions, [answered for answered, _ in stored])
        except Exception as error:
            if len(stored) == 1 or storage_failure(error) is not StorageFailure.INTERNAL:
                raise
            # One session the database refused fails the whole group: store each on its own, so
            # that only the requests it refuses fail.
            log.warning("a group of sessions failed to store; storing each alone", exc_info=True)
            await _store_each(actor.context, stored)
            return
        for answered, reply in stored:
            _created(actor.context, answered, reply)

    def _answered(
        self, routed: _Routed, explanation: _Explanation, created_at: datetime
    ) -> sessions.AnsweredSession:
        return _answered(self.command, self.session_id, self.expires_at, routed, explanation, created_at)


def _answered(
    command: CreateSession,
    session_id: uuid.UUID,
    expires_at: datetime,
    routed: _Routed,
    explanation: _Explanation,
    created_at: datetime,
) -> sessions.AnsweredSession:
    """The session to store and the answer its Idempotency-Key replays, built together."""
    new = command.new_session(session_id, expires_at, routed, explanation)
    body: SessionCreated = {
        "sessionId": str(new.id),
        "checkoutUrl": new.checkout_url,
        "status": SessionStatus.PENDING,
        "routing": {
            "selectedProvider": routed.provider,
            "score": new.routing_score,
            "rule": explanation.rule,
            "reason": explanation.reason,
            "version": explanation.version,
        },
        "expiresAt": iso(new.expires_at),
        "createdAt": iso(created_at),
    }
    return sessions.AnsweredSession(
        session=new,
        created_at=created_at,
        scope=SESSION_CREATE_SCOPE,
        key=command.idempotency_key,
        status=201,
        body=body,
    )


def _created(context: Context, answered: sessions.AnsweredSession, reply: Reply[Answer]) -> None:
    """The session is stored: answer its request, and count its routing decision."""
    reply.send(Answer(answered.status, answered.body))
    context.metrics.routing_decision(answered.session.routing_reason)


async def _store_each(context: Context, stored: list[tuple[sessions.AnsweredSession, Reply[Answer]]]) -> None:
    for answered, reply in stored:
        try:
            await context.db.autocommit(sessions.insert_answered_sessions, [answered])
        except Exception as error:
            if storage_failure(error) is not StorageFailure.INTERNAL:
                raise
            log.exception("a session failed to store", extra={"sessionId": str(answered.session.id)})
            reply.fail(ActorCrashed("a database statement failed while storing this session"))
        else:
            _created(context, answered, reply)


async def _create_with_cascade(
    context: Context,
    ranked: list[tuple[str, float]],
    configs: Mapping[str, ProviderConfig],
    request: CheckoutRequest,
) -> _Routed:
    """Try the ranked providers in turn; the first to create the checkout wins."""
    for name, score in ranked:
        provider = context.providers.get(name)
        assert provider is not None
        try:
            timeout_s = context.settings.engine.provider_timeout_s
            with context.provider_call(configs[name], "create_checkout", timeout_s):
                created = await provider.create_checkout(
                    context.credentials(configs[name]),
                    request,
                    idempotency_key=_provider_key(request),
                )
        except (ProviderError, trio.TooSlowError) as error:
            log.warning(
                "provider failed to create a checkout; trying the next",
                extra={"provider": name, "sessionId": str(request.session_id), "error": repr(error)},
            )
            continue
        except Exception as error:
            # payorch's own database, which an in-process provider (the sandbox) keeps its state in,
            # is unavailable: no provider is to blame, and the session could not be stored anyway.
            if storage_failure(error) is not StorageFailure.UNAVAILABLE:
                raise
            raise StorageUnavailable("the database is unavailable: retry shortly") from error
        return _Routed(provider=name, score=score, created=created)
    raise ProviderUnavailable("every eligible provider failed to create the checkout: retry later")
