"""Creating checkout sessions, run by an application's actor in batches. One path, for every
provider:

1. route each session on the configurations the actor holds (`engine.routing.sessions`), as its
   Idempotency-Key's fresh claim will have it: the claim's session id is drawn before the claim is
   made (`engine.idempotency.KeyClaims`);
2. prepare each session's checkout when its first provider keeps its checkouts in payorch's database
   (`providers.base.CheckoutInDatabase`, the sandbox): no call of its own, nothing stored yet;
3. claim the batch's keys and store the prepared sessions whose keys were claimed fresh, each with
   its checkout and its key's answer, in one unit of work on the database's thread, one
   transaction: so a sandbox create hands that thread one unit, not a claim and then a store. When
   the batch is all prepared sessions, the unit is one statement each, one round trip
   (`CheckoutInDatabase.claim_and_store_with_sessions`), unless a key was seen before; such a key
   is answered from the same unit (replay, mismatch, in progress). Such units of several
   applications' actors at the same moment are one statement for them all, each stored alone
   should it fail (`storage.together`);
4. once that unit committed, ask the providers of every other fresh session in turn in a child task
   (`actor.spawn_command`), cascading down the route, and store what they answer when it comes back
   through the mailbox (`_StoreSession`, the ones that came back together in one round trip).

So a provider asked over the network (Stripe, Mollie, PayU) is asked only once the key's claim is
committed, with the claim's deadline and its session id as the provider's idempotency key, and a
retry on another node sees the claim; a session whose checkout is made in payorch's own database
has nothing between the claim and the store that another node or a crash could see, and is claimed
and stored at once, all or none. A session whose first provider refuses to prepare it (outside its
limits) is asked of its providers in turn, so a refusal cascades, possibly to a remote provider:
its key is claimed in the unit and committed before anyone is asked.

Should the database refuse the unit of a batch, nothing of it remains, and each session goes
through a unit of its own: only a request whose session the database refuses again fails, its key
left free. A key whose abandoned claim (a dead node's) is taken over goes the claim-first way: its
first request may have asked a provider, so it is routed again with that request's session id and
deadline, then prepared and stored, or asked (should storing its prepared checkout fail, because
the first request made the checkout with its key, it is asked in turn too). (A session's later
state changes are `engine.payments.events`.)"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Container, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

import outcome
import trio

from payorch.engine.actors import ActorCrashed, ApplicationActor, BatchCommand, Reply
from payorch.engine.context import Context
from payorch.engine.idempotency import (
    Answer,
    KeyClaims,
    claim_idempotency_keys,
    in_flight_key,
    in_progress,
    key_claims,
    release_idempotency_keys,
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
    keeps_checkouts_in_database,
)
from payorch.storage import idempotency_keys as keys_store
from payorch.storage import sessions
from payorch.storage.database import Connection
from payorch.storage.database_thread import on_database_thread
from payorch.storage.failures import StorageFailure, storage_failure
from payorch.storage.idempotency_keys import Claimed
from payorch.storage.provider_configs import ProviderConfig
from payorch.storage.sessions import AnsweredSession, SessionDraft, claim_was_not_fresh
from payorch.values.errors import (
    NoProviderAvailable,
    ProviderUnavailable,
    StorageUnavailable,
)
from payorch.values.statuses import RoutingReason, SessionStatus
from payorch.values.timefmt import iso

log = logging.getLogger("payorch.checkout")

SESSION_CREATE_SCOPE = "POST /api/v1/sessions"

# The sessions whose checkouts one provider prepared, by that provider's name: the provider, and
# each session with its checkout and what to store.
_Prepared = dict[str, tuple[CheckoutInDatabase, list[tuple["_Planned", CheckoutToStore, AnsweredSession]]]]


def checkout_request(
    draft: SessionDraft,
    session_id: uuid.UUID,
    *,
    expires_at: datetime,
    requested_at: datetime,
    success_url: str | None,
    failure_url: str | None,
    attempt: int = 1,
) -> CheckoutRequest:
    """What a provider is asked for a session's checkout: the first attempt's (the create's) or a
    later one's (`engine.payments.recovery`)."""
    return CheckoutRequest(
        session_id=session_id,
        application_id=draft.application_id,
        amount=draft.amount,
        payment_method=draft.payment_method,
        order_reference=draft.order_reference,
        customer_email=str(draft.customer.get("email", "")),
        locale=draft.locale,
        expires_at=expires_at,
        requested_at=requested_at,
        success_url=success_url,
        failure_url=failure_url,
        order_items=draft.order_items or [],
        attempt=attempt,
    )


@dataclass(frozen=True)
class CreateSession(BatchCommand[Context, Answer]):
    """Create a checkout session. Runs in batches: the commands that waited together in the mailbox
    route on the provider configurations the actor holds, claim their Idempotency-Keys in one
    statement, in the unit that stores the sessions whose checkouts are made in payorch's database,
    and get the others' checkouts from their providers side by side; what is ready together is
    stored together (the module's docstring says how)."""

    idempotency_key: str
    fingerprint: bytes
    draft: SessionDraft

    @classmethod
    async def run_batch(
        cls,
        actor: ApplicationActor[Context],
        batch: Sequence[tuple[CreateSession, Reply[Answer]]],
    ) -> None:
        waiting: dict[str, tuple[CreateSession, Reply[Answer]]] = {}
        for command, reply in batch:
            key = command.idempotency_key
            if key in waiting or in_flight_key(SESSION_CREATE_SCOPE, key) in actor.in_flight:
                reply.fail(in_progress())
            else:
                waiting[key] = (command, reply)
        if not waiting:
            return
        inputs = await routing_inputs(actor)
        claims = key_claims(
            actor, SESSION_CREATE_SCOPE, {key: command.fingerprint for key, (command, _) in waiting.items()}
        )
        # Each session routed, and its checkout prepared, as its key's fresh claim will have it.
        routed: list[_Planned] = []
        unrouted: dict[str, NoProviderAvailable | ProviderUnavailable] = {}
        for key, (command, reply) in waiting.items():
            try:
                routed.append(command._plan(actor, reply, claims.fresh(key), inputs))
            except (NoProviderAvailable, ProviderUnavailable) as error:
                unrouted[key] = error
        prepared, to_ask = _prepare(actor, routed)
        claimed = await _claim_storing_prepared(actor, claims, waiting, prepared, list(unrouted))

        def fresh(key: str) -> bool:
            return claims.is_fresh(key, claimed.get(key))

        for planned in to_ask:
            if fresh(planned.key):
                planned.ask(actor)
        for key, refused in unrouted.items():
            if fresh(key):
                waiting[key][1].fail(refused)
        taken_over = {key: (waiting[key], claim) for key, claim in claimed.items() if not fresh(key)}
        if taken_over:
            await _create_taken_over(actor, inputs, taken_over)

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
        requested_at = claim.claimed_at
        expires_at = requested_at + timedelta(seconds=context.settings.sessions.ttl_s)
        urls = draft.redirect_urls or {}
        request = checkout_request(
            draft,
            session_id,
            expires_at=expires_at,
            requested_at=requested_at,
            success_url=urls.get("success"),
            failure_url=urls.get("failure"),
        )
        return _Planned(self, reply, decision, inputs.routing.version, ranked, inputs.configs, request)

    def new_session(self, planned: _Planned, provider: str, created: CheckoutCreated) -> sessions.NewSession:
        """The session to store, routed as `planned` to `provider`, which created its checkout. The
        routing reason is the decision's, or `cascade` when a provider after the decision's first
        created the checkout."""
        decision = planned.decision
        first = decision.order[0] if decision.order else None
        return sessions.NewSession(
            id=planned.request.session_id,
            draft=self.draft,
            expires_at=planned.request.expires_at,
            provider_name=provider,
            provider_reference=created.reference,
            checkout_url=created.url,
            routing_score=Decimal(str(dict(planned.ranked)[provider])),
            routing_rule=decision.rule,
            routing_reason=RoutingReason(decision.reason) if provider == first else RoutingReason.CASCADE,
            routing_version=planned.version,
        )


@dataclass(frozen=True)
class _Planned:
    """A session routed and ready to get its checkout: the providers to ask in turn (`ranked`, with
    their scores) and what to ask them."""

    command: CreateSession
    reply: Reply[Answer]
    decision: Decision
    version: int  # of the routing document
    ranked: list[tuple[str, float]]
    configs: Mapping[str, ProviderConfig]
    request: CheckoutRequest

    @property
    def key(self) -> str:
        """The session's Idempotency-Key."""
        return self.command.idempotency_key

    @property
    def provider_key(self) -> str:
        """The idempotency key the session's checkout is created with, at every provider asked."""
        return f"payorch-session-{self.request.session_id}"

    def ask(self, actor: ApplicationActor[Context]) -> None:
        """Ask the providers in a child, cascading down the route; what the first to create the
        checkout answers comes back as a `_StoreSession`."""
        actor.in_flight[in_flight_key(SESSION_CREATE_SCOPE, self.command.idempotency_key)] = self.reply
        context = actor.context

        async def create() -> tuple[str, CheckoutCreated]:
            return await _create_with_cascade(context, self)

        actor.spawn_command(create, lambda created: _StoreSession(self, created), self.reply)

    def answered(self, provider: str, created: CheckoutCreated, created_at: datetime) -> AnsweredSession:
        """The session to store, its checkout `created` by `provider`, and the answer its
        Idempotency-Key replays, built together."""
        new = self.command.new_session(self, provider, created)
        body: SessionCreated = {
            "sessionId": str(new.id),
            "checkoutUrl": new.checkout_url,
            "status": SessionStatus.PENDING,
            "routing": {
                "selectedProvider": provider,
                "score": new.routing_score,
                "rule": new.routing_rule,
                "reason": new.routing_reason,
                "version": new.routing_version,
            },
            "expiresAt": iso(new.expires_at),
            "createdAt": iso(created_at),
        }
        return AnsweredSession(
            session=new,
            created_at=created_at,
            scope=SESSION_CREATE_SCOPE,
            key=self.command.idempotency_key,
            status=201,
            body=body,
        )


def _prepare(
    actor: ApplicationActor[Context], routed: Sequence[_Planned]
) -> tuple[_Prepared, list[_Planned]]:
    """Step 2 of the module's path: the checkouts the sessions' first providers prepare, to store
    with their sessions; and the sessions whose providers are to be asked in turn, once their keys
    are claimed."""
    context = actor.context
    created_at = context.clock.now()
    prepared: _Prepared = {}
    to_ask: list[_Planned] = []
    for planned in routed:
        name = planned.ranked[0][0]
        provider = context.providers.get(name)
        if not keeps_checkouts_in_database(provider):
            to_ask.append(planned)
            continue
        try:
            checkout = provider.checkout_to_store(
                context.credentials(planned.configs[name]),
                planned.request,
                idempotency_key=planned.provider_key,
            )
        except ProviderError:  # refused (its limits): asking cascades to the next provider
            to_ask.append(planned)
            continue
        except Exception:
            log.warning("preparing a checkout failed; asking the session's providers in turn", exc_info=True)
            to_ask.append(planned)
            continue
        answered = planned.answered(name, checkout.created, created_at)
        prepared.setdefault(name, (provider, []))[1].append((planned, checkout, answered))
    return prepared, to_ask


def _fresh_only(prepared: _Prepared, claims: KeyClaims, claimed: Mapping[str, Claimed]) -> _Prepared:
    """The sessions of `prepared` whose keys (of `claims`) were claimed fresh, as they were prepared
    for."""
    return _of_keys(prepared, {key for key, claim in claimed.items() if claims.is_fresh(key, claim)})


def _of_keys(prepared: _Prepared, keys: Container[str]) -> _Prepared:
    """The sessions of `prepared` whose Idempotency-Keys are among `keys`."""
    kept: _Prepared = {}
    for name, (keeper, items) in prepared.items():
        if of_keys := [item for item in items if item[0].key in keys]:
            kept[name] = (keeper, of_keys)
    return kept


async def _claim_storing_prepared(
    actor: ApplicationActor[Context],
    claims: KeyClaims,
    waiting: Mapping[str, tuple[CreateSession, Reply[Answer]]],
    prepared: _Prepared,
    unrouted: Sequence[str],
) -> dict[str, Claimed]:
    """Step 3 of the module's path, in one unit of work, one transaction: the batch's keys
    claimed, each prepared session whose key is claimed fresh stored with its checkout and answered,
    and the fresh claims of `unrouted` keys released. The claims.

    Should the database refuse the unit, nothing of it remains, and each key goes through a unit of
    its own, so that only a request whose session the database refuses again fails (its key left
    free for a retry). A database unavailable fails them all, as it does any request."""
    try:
        return await _claim_and_store(actor, claims, prepared, unrouted, waiting)
    except Exception as error:
        if storage_failure(error) is not StorageFailure.INTERNAL:
            raise
        log.warning("a batch of sessions failed to store with their keys; storing each alone", exc_info=True)
    claimed: dict[str, Claimed] = {}
    for key in claims.claims:
        try:
            claimed |= await _claim_and_store(actor, claims.only(key), prepared, unrouted, waiting)
        except Exception as error:
            failure = storage_failure(error)
            if failure is None:
                raise
            log.exception("a session failed to store with its key", extra={"idempotencyKey": key})
            waiting[key][1].fail(
                StorageUnavailable("the database is unavailable: retry shortly")
                if failure is StorageFailure.UNAVAILABLE
                else ActorCrashed("a database statement failed while storing this session")
            )
    return claimed


async def _claim_and_store(
    actor: ApplicationActor[Context],
    claims: KeyClaims,
    prepared: _Prepared,
    unrouted: Sequence[str],
    waiting: Mapping[str, tuple[CreateSession, Reply[Answer]]],
) -> dict[str, Claimed]:
    """The unit of `_claim_storing_prepared`, for the keys of `claims`; raises, leaving nothing, when
    the database refuses it."""

    @on_database_thread
    async def store_fresh(conn: Connection, claimed: Mapping[str, Claimed]) -> None:
        for keeper, items in _fresh_only(prepared, claims, claimed).values():
            await keeper.store_with_sessions(conn, [(checkout, answered) for _, checkout, answered in items])
        released = [key for key in unrouted if claims.is_fresh(key, claimed.get(key))]
        if released:
            await keys_store.release_idempotency_keys(
                conn, application_id=actor.application_id, scope=claims.scope, keys=released
            )

    # The common batch, every session prepared by one provider, is claimed and stored by one
    # statement per session, in one round trip, unless a key was seen before.
    mine = _of_keys(prepared, claims.claims)
    at_once = None
    if len(mine) == 1 and sum(len(items) for _, items in mine.values()) == len(claims.claims):
        ((keeper, items),) = mine.values()
        stored = [
            (checkout, answered, claims.claims[planned.key].fingerprint)
            for planned, checkout, answered in items
        ]

        @on_database_thread
        async def at_once(conn: Connection) -> bool:
            try:
                await keeper.claim_and_store_with_sessions(conn, stored, claims.claim_terms)
            except Exception as error:
                if claim_was_not_fresh(error):
                    return False
                raise
            return True

    replies = {key: reply for key, (_, reply) in waiting.items()}
    started = trio.current_time()
    claimed: dict[str, Claimed]
    if at_once is None:
        claimed = await claim_idempotency_keys(actor, claims, replies, then=store_fresh)
    else:
        # With other applications' actors storing theirs at the same moment, in one statement
        # for them all; alone (this unit) else, or should that statement fail.
        db = actor.context.db
        claimed = await db.together.run(
            db,
            keeper.claim_and_store_together,
            (stored, claims.claim_terms),
            len(stored),
            stored={key: claims.fresh(key) for key in claims.claims},
            alone=lambda: claim_idempotency_keys(actor, claims, replies, then=store_fresh, at_once=at_once),
        )
    _answer_stored(actor, _fresh_only(prepared, claims, claimed), trio.current_time() - started)
    return claimed


async def _create_taken_over(
    actor: ApplicationActor[Context],
    inputs: RoutingInputs,
    taken_over: Mapping[str, tuple[tuple[CreateSession, Reply[Answer]], Claimed]],
) -> None:
    """Create the sessions whose keys' abandoned claims were taken over, claim first: routed again
    with their first request's session id and deadline, each prepared and stored or its providers
    asked in turn, as that first request may have asked them."""
    routed: list[_Planned] = []
    unrouted: list[str] = []
    for key, ((command, reply), claim) in taken_over.items():
        try:
            routed.append(command._plan(actor, reply, claim, inputs))
        except (NoProviderAvailable, ProviderUnavailable) as error:
            unrouted.append(key)
            reply.fail(error)
    prepared, to_ask = _prepare(actor, routed)
    for planned in to_ask:
        planned.ask(actor)
    await release_idempotency_keys(actor, SESSION_CREATE_SCOPE, unrouted)
    await _store_prepared(actor, prepared)


async def _store_prepared(actor: ApplicationActor[Context], prepared: _Prepared) -> None:
    """Prepared checkouts stored after their keys were claimed (taken over): each provider's, with
    their sessions and answers, in one round trip, all or none; should it fail, those sessions'
    providers are asked in turn."""
    context = actor.context
    for name, (keeper, stored) in prepared.items():
        started = trio.current_time()
        try:
            await context.db.autocommit(
                keeper.store_with_sessions, [(checkout, answered) for _, checkout, answered in stored]
            )
        except Exception:
            log.warning(
                "storing checkouts with their sessions failed; asking each session's providers in turn",
                exc_info=True,
            )
            for planned, _, _ in stored:
                planned.ask(actor)
            continue
        _answer_stored(actor, {name: (keeper, stored)}, trio.current_time() - started)


def _answer_stored(actor: ApplicationActor[Context], stored: _Prepared, elapsed: float) -> None:
    """Answer the sessions stored with their prepared checkouts, which took their providers
    `elapsed` seconds to create and store."""
    for name, (_, items) in stored.items():
        for planned, _, answered in items:
            actor.context.provider_answered(planned.configs[name], "create_checkout", elapsed)
            _created(actor.context, answered, planned.reply)


@dataclass(frozen=True)
class _StoreSession(BatchCommand[Context, Answer]):
    """What a session's providers answered, back in the actor. The ones that came back together
    are stored in one round trip (group commit): each session with its Idempotency-Key's answer."""

    planned: _Planned
    created: outcome.Outcome[tuple[str, CheckoutCreated]]  # by which provider

    @classmethod
    async def run_batch(
        cls,
        actor: ApplicationActor[Context],
        batch: Sequence[tuple[_StoreSession, Reply[Answer]]],
    ) -> None:
        stored: list[tuple[AnsweredSession, Reply[Answer]]] = []
        unavailable: list[str] = []
        now = actor.context.clock.now()
        for store, reply in batch:
            key = store.planned.command.idempotency_key
            actor.in_flight.pop(in_flight_key(SESSION_CREATE_SCOPE, key), None)
            try:
                provider, created = store.created.unwrap()
            except (ProviderUnavailable, StorageUnavailable) as error:
                unavailable.append(key)
                reply.fail(error)
                continue
            stored.append((store.planned.answered(provider, created, now), reply))
        await release_idempotency_keys(actor, SESSION_CREATE_SCOPE, unavailable)
        if not stored:
            return
        db = actor.context.db
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


def _created(context: Context, answered: AnsweredSession, reply: Reply[Answer]) -> None:
    """The session is stored: answer its request, and count its routing decision."""
    reply.send(Answer(answered.status, answered.body))
    context.metrics.routing_decision(answered.session.routing_reason)


async def _store_each(context: Context, stored: list[tuple[AnsweredSession, Reply[Answer]]]) -> None:
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


async def _create_with_cascade(context: Context, planned: _Planned) -> tuple[str, CheckoutCreated]:
    """Try the ranked providers in turn; the first to create the checkout wins: its name, and what
    it created."""
    for name, _ in planned.ranked:
        provider = context.providers.get(name)
        assert provider is not None
        config = planned.configs[name]
        try:
            with context.provider_call(config, "create_checkout", context.settings.engine.provider_timeout_s):
                created = await provider.create_checkout(
                    context.credentials(config), planned.request, idempotency_key=planned.provider_key
                )
        except (ProviderError, trio.TooSlowError) as error:
            log.warning(
                "provider failed to create a checkout; trying the next",
                extra={"provider": name, "sessionId": str(planned.request.session_id), "error": repr(error)},
            )
            continue
        except Exception as error:
            # payorch's own database, which an in-process provider keeps its state in, is
            # unavailable: no provider is to blame, and the session could not be stored anyway.
            if storage_failure(error) is not StorageFailure.UNAVAILABLE:
                raise
            raise StorageUnavailable("the database is unavailable: retry shortly") from error
        return name, created
    raise ProviderUnavailable("every eligible provider failed to create the checkout: retry later")


__all__ = ["SESSION_CREATE_SCOPE", "CreateSession"]
