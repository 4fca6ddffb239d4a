"""Expiring a session: its provider closes the checkout first, then the session changes.

A provider's hosted page can outlive payorch's session (Stripe keeps a Checkout Session open for at
least 30 minutes), so at expiry payorch asks the provider to close it: once it is closed nobody can
pay after the merchant was told `session.expired`. If the customer paid just before, the provider
says so and the payment stands: the session SUCCEEDS instead. If the provider cannot be reached the
session expires all the same, and a payment the provider reports later still succeeds it (a late
payment, see `session_states`), so money taken is never ignored.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Hashable
from dataclasses import dataclass

import outcome
import trio

from payorch.engine.actors import ApplicationActor, Reply, session_lane
from payorch.engine.context import Context
from payorch.engine.payments.events import apply_session_event
from payorch.engine.payments.states import SessionEvent
from payorch.providers.base import CheckoutClosed, Credentials, CredentialsRejected, ProviderError
from payorch.storage import provider_configs, sessions
from payorch.storage.database import Connection
from payorch.storage.database_thread import on_database_thread
from payorch.storage.provider_configs import ProviderConfig
from payorch.values.statuses import SessionStatus

log = logging.getLogger("payorch.expiry")


@dataclass(frozen=True)
class _Closing:
    """The provider checkout to close before the session expires."""

    provider: str
    reference: str
    credentials: Credentials
    config: ProviderConfig  # whose account the call counts for


@dataclass(frozen=True)
class _Due:
    closing: _Closing | None  # None: nothing at a provider to close (unlinked, or switched off)


@dataclass(frozen=True)
class ExpireSession:
    """Expire a PENDING session past `expiresAt`, closing its provider's checkout first. Replies
    whether the session changed (to FAILED/EXPIRED, or to SUCCEEDED when the customer paid first)."""

    session_id: uuid.UUID

    @property
    def lane(self) -> Hashable:
        return session_lane(self.session_id)

    async def run(self, actor: ApplicationActor[Context], reply: Reply[bool]) -> None:
        context: Context = actor.context
        due = await context.db.autocommit(_due, context, actor.application_id, self.session_id)
        if due is None:
            reply.send(False)
            return
        closing = due.closing
        if closing is None:
            reply.send(await self._apply(context, actor.application_id, SessionEvent.EXPIRED))
            return

        async def close() -> CheckoutClosed:
            provider = context.providers.get(closing.provider)
            assert provider is not None  # `_due` found it in the catalogue
            timeout_s = context.settings.engine.provider_timeout_s
            with context.provider_call(closing.config, "close_checkout", timeout_s):
                return await provider.close_checkout(closing.credentials, closing.reference)

        async def then(result: outcome.Outcome[CheckoutClosed]) -> None:
            try:
                closed = result.unwrap()
            except (ProviderError, CredentialsRejected, trio.TooSlowError) as error:
                log.warning(
                    "could not close the checkout at the provider; the session expires all the same, "
                    "and a payment the provider reports later still succeeds it",
                    extra={
                        "applicationId": str(actor.application_id),
                        "sessionId": str(self.session_id),
                        "provider": closing.provider,
                        "error": repr(error),
                    },
                )
                closed = CheckoutClosed.CLOSED
            if closed is CheckoutClosed.PAID:
                log.info(
                    "the customer paid just before the session expired; the payment stands",
                    extra={"applicationId": str(actor.application_id), "sessionId": str(self.session_id)},
                )
                event = SessionEvent.PAYMENT_SUCCEEDED
            else:
                event = SessionEvent.EXPIRED
            reply.send(await self._apply(context, actor.application_id, event))

        actor.spawn(close, then, reply)

    async def _apply(self, context: Context, application_id: uuid.UUID, event: SessionEvent) -> bool:
        return await context.db.transaction(
            apply_session_event,
            application_id=application_id,
            session_id=self.session_id,
            event=event,
            metrics=context.metrics,
            now=context.clock.now(),
        )


@on_database_thread
async def _due(
    conn: Connection, context: Context, application_id: uuid.UUID, session_id: uuid.UUID
) -> _Due | None:
    """What expiring the session involves; None when it is not a PENDING session of the application
    past its expiry (any more)."""
    session = await sessions.get_session(conn, session_id)
    if session is None or session.application_id != application_id:
        return None
    if (
        session.status != SessionStatus.PENDING
        or session.expires_at is None
        or session.expires_at > context.clock.now()
    ):
        return None
    if session.provider_name is None or session.provider_reference is None:
        return _Due(closing=None)
    if context.providers.get(session.provider_name) is None:
        return _Due(closing=None)
    config = await provider_configs.get_provider_config(conn, application_id, session.provider_name)
    if config is None:
        return _Due(closing=None)
    return _Due(
        _Closing(session.provider_name, session.provider_reference, context.credentials(config), config)
    )
