"""The customer's way back from an attempt's checkout, and the next attempt it may open.

A provider that returns through payorch (the sandbox when the merchant gave `redirectUrls`,
Stripe and Mollie always) sends the customer to `GET /checkout/<sessionId>/return?attempt=<n>`
(`http/routes/checkout_return.py`), which asks the session's application actor
`ReturnFromCheckout`, in the session's lane. The answer
is where to send the customer (303); the URL's query names the attempt, never its outcome:

- the session is paid (or the provider says the attempt's checkout is): `redirectUrls.success`, or
  payorch's result page;
- the provider says the attempt's payment is still processing (`CheckoutState.processing`):
  recovery ends there, and the customer goes to payorch's result page, which says the payment is
  being confirmed and refreshes itself while the session is PENDING;
- the attempt was declined, the provider reported the decline and its code when asked
  (`providers.base.ReportsCheckoutState`), the application's recovery policy retries it
  (`engine.routing.recovery.retry_verdict`) and the routing decision has a provider not tried in
  this session (`planned_attempts`): the attempt's checkout is closed at its provider, the next
  provider creates its checkout (the providers planned in turn), and the session moves to it
  (`storage.next_attempt.open_next_attempt`, under the session's row lock); the customer goes to
  the new checkout;
- an attempt that has already ended (a reload, a second tab): the checkout now open;
- otherwise: `redirectUrls.failure`, or payorch's result page; the session stays PENDING.

The provider calls run in a child task (`actor.spawn`): the lane is free meanwhile, so two returns
of one attempt may both get that far. Both close the same checkout and create the next with the
same idempotency key (one checkout at the provider), and the database lets one of them open it;
the other finds the session moved on and sends its customer to the same checkout. Two processes
meet the same way. A checkout that cannot be confirmed closed is never followed by another.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Hashable
from dataclasses import dataclass, replace
from datetime import datetime
from decimal import Decimal

import outcome
import trio

from payorch.engine.actors import ApplicationActor, Reply, session_lane
from payorch.engine.context import Context, account_of
from payorch.engine.payments.checkout import checkout_request
from payorch.engine.payments.states import PAID
from payorch.engine.routing.recovery import PlannedAttempt, RetryVerdict, planned_attempts, retry_verdict
from payorch.engine.routing.sessions import RoutingInputs, decide_session, routing_inputs
from payorch.providers.base import (
    CheckoutClosed,
    CheckoutCreated,
    CheckoutRequest,
    CheckoutState,
    CredentialsRejected,
    ProviderError,
    ReportsCheckoutState,
    result_page_url,
    return_url,
)
from payorch.storage.next_attempt import (
    AttemptEnding,
    NextAttempt,
    ReturningSession,
    next_attempt_asked,
    next_attempt_asked_at,
    open_next_attempt,
    returning_session,
)
from payorch.storage.provider_configs import ProviderConfig
from payorch.values.statuses import AttemptStatus, SessionStatus

log = logging.getLogger("payorch.recovery")

_PROVIDER_FAILURES = (ProviderError, CredentialsRejected, trio.TooSlowError)
# A return that could not make the next checkout while another return, which asked first, makes it
# looks at the session this often, and at most the provider timeout and this margin long.
MOVED_ON_POLL_S = 0.05
MOVED_ON_MARGIN_S = 1.0


@dataclass(frozen=True)
class ReturnFromCheckout:
    """The customer came back from the session's `attempt`-th attempt's checkout (1: the first).
    Answers where to send them (the module's docstring says which), or None when the session is
    not the application's."""

    session_id: uuid.UUID
    attempt: int

    @property
    def lane(self) -> Hashable:
        return session_lane(self.session_id)

    async def run(self, actor: ApplicationActor[Context], reply: Reply[str | None]) -> None:
        context = actor.context
        found = await context.db.autocommit(returning_session, self.session_id)
        if found is None or found.session.application_id != actor.application_id:
            reply.send(None)
            return
        ways = _ways(context, found)
        session = found.session
        current = len(found.ended) + 1
        if session.status in PAID:
            reply.send(ways.success)
            return
        if session.status is not SessionStatus.PENDING or self.attempt > current:
            reply.send(ways.failure)
            return
        if self.attempt < current:  # ended already: on to the attempt now open
            reply.send(session.checkout_url or ways.failure)
            return
        expired = session.expires_at is not None and session.expires_at <= context.clock.now()
        name, reference = session.provider_name, session.provider_reference
        provider = context.providers.get(name) if name else None
        inputs = await routing_inputs(actor)
        config = inputs.configs.get(name) if name else None
        if expired or not isinstance(provider, ReportsCheckoutState) or config is None or reference is None:
            reply.send(ways.failure)
            return
        policy = inputs.routing.document.recovery_policy
        tried = [attempt.provider_name for attempt in found.ended] + [name]
        planned, routing = _plan_next(context, inputs, found, tried)
        recovery = _Recovery(
            context=context,
            found=found,
            ways=ways,
            config=config,
            configs={attempt.provider: inputs.configs[attempt.provider] for attempt in planned},
            planned=planned,
            routing=routing,
        )

        async def way_on() -> _Outcome:
            try:
                state = await recovery.checkout_state()
            except _PROVIDER_FAILURES:
                await recovery.after_another_return()
                raise
            if state.paid:
                return _Outcome(ways.success)
            if state.processing:  # may still be paid: recovery ends, the result page waits for it
                return _Outcome(ways.confirming)
            if state.decline_code is None:
                return _Outcome(ways.failure)
            verdict = retry_verdict(policy, current, state.decline_reason, name, state.decline_code)
            if verdict is not RetryVerdict.RETRY or not planned:
                return _Outcome(ways.failure)
            ending = AttemptEnding(
                provider_name=name,
                provider_reference=reference,
                status=AttemptStatus.DECLINED,
                failure_reason=state.decline_reason,
                provider_code=state.decline_code,
            )
            return await recovery.close_and_open(ending)

        async def then(result: outcome.Outcome[_Outcome]) -> None:
            reply.send(await recovery.settle(actor.application_id, result))

        actor.spawn(way_on, then, reply)


def _plan_next(
    context: Context, inputs: RoutingInputs, found: ReturningSession, tried: list[str]
) -> tuple[tuple[PlannedAttempt, ...], tuple[NextAttempt, ...]]:
    """The attempts the session may still get after those at the providers `tried`, in order, by
    the routing decision it gets now (the same session id: the same split or exploration draw),
    without providers whose circuit is open; and each one's routing, its checkout not made yet."""
    document = inputs.routing.document
    decision, _ = decide_session(context, inputs, found.draft, str(found.session.id), document)
    now = trio.current_time()
    unavailable = {
        name
        for name in decision.order
        if name not in inputs.configs or not context.health.admits(account_of(inputs.configs[name]), now)
    }
    planned = planned_attempts(decision, document.recovery_policy, tried=tried, unavailable=unavailable)
    scores = {place.provider: place.score for place in decision.ranking}
    routing = tuple(
        NextAttempt(
            provider_name=attempt.provider,
            provider_reference="",
            checkout_url="",
            routing_score=Decimal(str(scores.get(attempt.provider, 0.0))),
            routing_rule=decision.rule,
            routing_reason=attempt.reason,
            routing_version=inputs.routing.version,
        )
        for attempt in planned
    )
    return planned, routing


@dataclass(frozen=True)
class _Ways:
    """Where the session's customer goes when payorch sends them back to the merchant."""

    success: str
    failure: str
    confirming: str  # payorch's result page, which waits for the provider's confirmation


def _ways(context: Context, found: ReturningSession) -> _Ways:
    """The merchant's `redirectUrls`, or payorch's result page for those it did not give."""
    urls = found.draft.redirect_urls or {}
    base, session_id = context.settings.server.public_base_url, found.session.id
    return _Ways(
        success=urls.get("success") or result_page_url(base, session_id),
        failure=urls.get("failure") or result_page_url(base, session_id, cancelled=True),
        confirming=result_page_url(base, session_id),
    )


@dataclass(frozen=True)
class _Outcome:
    """What the child found: where to send the customer, or the next attempt to open (then to its
    checkout) once the ended one is stored as `ending`."""

    url: str
    ending: AttemptEnding | None = None
    next_attempt: NextAttempt | None = None


@dataclass(frozen=True)
class _Recovery:
    """One return's provider calls, in the actor's child task, and what the lane stores of them."""

    context: Context
    found: ReturningSession
    ways: _Ways
    config: ProviderConfig  # of the attempt's provider
    configs: dict[str, ProviderConfig]  # of the providers planned next
    planned: tuple[PlannedAttempt, ...]
    routing: tuple[NextAttempt, ...]  # each planned attempt's routing, its checkout not made yet

    async def checkout_state(self) -> CheckoutState:
        session = self.found.session
        provider = self.context.providers.get(self.config.provider)
        assert isinstance(provider, ReportsCheckoutState) and session.provider_reference is not None
        with self.context.provider_call(self.config, "checkout_state", self._timeout_s):
            return await provider.checkout_state(
                self.context.credentials(self.config), session.provider_reference
            )

    async def close_and_open(self, ending: AttemptEnding) -> _Outcome:
        """Close the ended attempt's checkout, then create the next provider's (the planned ones in
        turn): the attempt to open, or where to send the customer when none can be."""
        provider = self.context.providers.get(ending.provider_name)
        assert provider is not None
        try:
            with self.context.provider_call(self.config, "close_checkout", self._timeout_s):
                closed = await provider.close_checkout(
                    self.context.credentials(self.config), ending.provider_reference
                )
        except _PROVIDER_FAILURES as error:
            self._log("could not close the attempt's checkout; no next attempt opens", error)
            await self.after_another_return()
            return _Outcome(self.ways.failure)
        if closed is CheckoutClosed.PAID:
            return _Outcome(self.ways.success)
        now = self.context.clock.now()
        asked_at = await self.context.db.autocommit(
            next_attempt_asked_at, self.found.session.id, ending.provider_reference, now
        )
        if asked_at is None:  # another return has opened the next attempt meanwhile
            return _Outcome(self.ways.failure)
        for planned, routing in zip(self.planned, self.routing, strict=True):
            try:
                created = await self._create(planned.provider, asked_at)
            except _PROVIDER_FAILURES as error:
                self._log("the next provider failed to create a checkout; trying the one after", error)
                continue
            next_attempt = replace(routing, provider_reference=created.reference, checkout_url=created.url)
            return _Outcome(created.url, ending, next_attempt)
        if asked_at != now:
            # Another return asked first and is making the same checkout (a provider refuses a
            # request whose idempotency key is in flight): wait for it to open the attempt.
            await self._until_moved_on()
        return _Outcome(self.ways.failure)

    async def after_another_return(self) -> None:
        """When another return (here or in another process) has asked for the next attempt, and so
        may be making it now: return once it is open (`_until_moved_on`). This return's own call
        failed, but the customer goes where the other one sends them, not back to the merchant."""
        session = self.found.session
        assert session.provider_reference is not None
        asked = await self.context.db.autocommit(next_attempt_asked, session.id, session.provider_reference)
        if asked is not None:
            await self._until_moved_on()

    async def _until_moved_on(self) -> None:
        """Return once the session has moved on from the attempt this return came back from (the
        next attempt opened, or the session ended), or after the other return's provider calls
        could have ended (`_timeout_s` and a second)."""
        with trio.move_on_after(self._timeout_s + MOVED_ON_MARGIN_S):
            while True:
                now = await self.context.db.autocommit(returning_session, self.found.session.id)
                if now is None or now.session.status is not SessionStatus.PENDING:
                    return
                if len(now.ended) > len(self.found.ended):
                    return
                await trio.sleep(MOVED_ON_POLL_S)

    async def _create(self, name: str, asked_at: datetime) -> CheckoutCreated:
        provider = self.context.providers.get(name)
        assert provider is not None
        config = self.configs[name]
        with self.context.provider_call(config, "create_checkout", self._timeout_s):
            return await provider.create_checkout(
                self.context.credentials(config),
                self._request(asked_at),
                idempotency_key=f"payorch-session-{self.found.session.id}-attempt-{self._number}",
            )

    def _request(self, asked_at: datetime) -> CheckoutRequest:
        """What the next provider is asked for: the session's own request, for the next attempt,
        the customer coming back through payorch when the merchant gave somewhere to go back to."""
        session, draft = self.found.session, self.found.draft
        urls = draft.redirect_urls or {}
        base = self.context.settings.server.public_base_url
        back = return_url(base, session.id, self._number) if urls else None
        assert session.expires_at is not None
        return checkout_request(
            draft,
            session.id,
            expires_at=session.expires_at,
            # The first return's moment, for every return of the attempt on any process
            # (`next_attempt_asked_at`): a provider's idempotency key then meets the same request.
            requested_at=asked_at,
            success_url=urls.get("success") or back,
            failure_url=back,
            attempt=self._number,
        )

    @property
    def _number(self) -> int:
        return len(self.found.ended) + 2

    @property
    def _timeout_s(self) -> float:
        return self.context.settings.engine.provider_timeout_s

    async def settle(self, application_id: uuid.UUID, result: outcome.Outcome[_Outcome]) -> str:
        """Back in the session's lane: open the next attempt the child found, if any; where the
        customer goes."""
        try:
            found = result.unwrap()
        except _PROVIDER_FAILURES as error:
            self._log("could not read the attempt's state at its provider", error)
            return await self._where_now()
        if found.ending is None or found.next_attempt is None:
            return found.url if found.url != self.ways.failure else await self._where_now()
        opened = await self.context.db.transaction(
            open_next_attempt,
            application_id=application_id,
            session_id=self.found.session.id,
            ending=found.ending,
            next_attempt=found.next_attempt,
            now=self.context.clock.now(),
            metrics=self.context.metrics,
        )
        if opened is None:  # another return (here, or in another process) moved the session on
            return await self._where_now()
        self.context.metrics.routing_decision(found.next_attempt.routing_reason)
        return found.url

    async def _where_now(self) -> str:
        """Where the customer goes by the session as it is now: to the attempt another return
        opened meanwhile, else back to the merchant."""
        now = await self.context.db.autocommit(returning_session, self.found.session.id)
        if now is None:
            return self.ways.failure
        if now.session.status in PAID:
            return self.ways.success
        moved_on = len(now.ended) > len(self.found.ended)
        if now.session.status is SessionStatus.PENDING and moved_on and now.session.checkout_url:
            return now.session.checkout_url
        return self.ways.failure

    def _log(self, message: str, error: BaseException) -> None:
        session = self.found.session
        log.warning(
            message,
            extra={
                "applicationId": str(session.application_id),
                "sessionId": str(session.id),
                "error": repr(error),
            },
        )


__all__ = ["ReturnFromCheckout"]
